"""`sakura-http repair`: removes a torn last line after a backup, refuses everything else."""

from __future__ import annotations

from pathlib import Path

import pytest

from sakura_http._cassette import append_lines, load_cassette
from sakura_http._format import encode_exchange, encode_header
from tests.cli_support import assert_one_line_error, cassette_bytes, items, message, run

TORN = b'{"method":"POST","url":"https://api.example.test/v1/mess'


def test_a_healthy_cassette_has_nothing_to_repair(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.jsonl"
    for data in (b"", encode_header(), cassette_bytes([items(), message()])):
        path.write_bytes(data)
        result = run(capsys, "repair", path)
        assert (result.code, result.out, result.err) == (0, f"{path}: nothing to repair\n", "")
        assert path.read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonl"]  # no backup


def test_a_torn_last_line_is_removed_after_a_backup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.jsonl"
    healthy = cassette_bytes([items(), message()])
    path.write_bytes(healthy + TORN)
    result = run(capsys, "repair", path)
    assert result.code == 0
    assert result.out == (
        f"{path}: removed the torn last line 4 ({len(TORN)} B); backup at {path}.bak\n"
    )
    assert path.read_bytes() == healthy
    assert (tmp_path / "c.jsonl.bak").read_bytes() == healthy + TORN
    assert len(load_cassette(path).exchanges) == 2
    # The file takes appends again.
    append_lines(path, encode_exchange(items(id="again")), {})
    assert len(load_cassette(path).exchanges) == 3


def test_a_complete_last_exchange_keeps_it_and_gets_its_newline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.jsonl"
    data = cassette_bytes([items(), message()])
    path.write_bytes(data[:-1])  # the crash hit between the line and its newline
    result = run(capsys, "repair", path)
    assert result.code == 0
    assert result.out == (
        f"{path}: line 3 was a complete exchange without its newline: added the newline, "
        f"kept the exchange; backup at {path}.bak\n"
    )
    assert path.read_bytes() == data
    assert load_cassette(path).exchanges[-1] == message()


def test_a_torn_header_leaves_an_empty_cassette(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"schema_vers')
    assert run(capsys, "repair", path).code == 0
    assert path.read_bytes() == b""
    assert load_cassette(path).exchanges == []


def test_existing_backups_are_never_overwritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.jsonl"
    (tmp_path / "c.jsonl.bak").write_bytes(b"older backup")
    path.write_bytes(cassette_bytes([items()]) + TORN)
    assert f"backup at {path}.bak.1" in run(capsys, "repair", path).out
    assert (tmp_path / "c.jsonl.bak").read_bytes() == b"older backup"
    assert (tmp_path / "c.jsonl.bak.1").read_bytes().endswith(TORN)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (encode_header() + b"{bad json\n" + encode_exchange(items()) + TORN, ":2: not valid JSON"),
        (b'{"schema_version":"2.0","kind":"cassette"}\n' + TORN, ":1: schema_version '2.0'"),
        (encode_header() + b"{bad json\n", ":2: not valid JSON"),
    ],
)
def test_anything_else_wrong_is_refused_and_nothing_changes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data: bytes, problem: str
) -> None:
    path = tmp_path / "c.jsonl"
    path.write_bytes(data)
    result = run(capsys, "repair", path)
    assert result.code == 1
    assert result.out == ""
    assert result.err.startswith(f"sakura-http repair: refused: {path}{problem}")
    assert "only removes a torn last line, so nothing was changed" in result.err
    assert path.read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonl"]


def test_a_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run(capsys, "repair", tmp_path / "missing.jsonl")
    assert_one_line_error(result)
    assert result.err == f"sakura-http repair: error: {tmp_path / 'missing.jsonl'}: no such file\n"
    assert not (tmp_path / "missing.jsonl").exists()


def test_a_file_with_cr_only_line_endings_is_refused_not_emptied(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Found by adversarial testing: with no "\n" at all, the whole file looked like one torn
    # last line, and repair cut every complete exchange (keeping only the backup).
    path = tmp_path / "c.jsonl"
    original = cassette_bytes([items(), message()]).replace(b"\n", b"\r")
    path.write_bytes(original)
    result = run(capsys, "repair", path)
    assert result.code == 1
    assert "CR-only line endings" in result.err
    assert "nothing was changed" in result.err
    assert path.read_bytes() == original
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonl"]


def test_repair_holds_the_append_lock(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Repair reads, cuts and truncates under the lock recorders append under, so an append
    # racing a repair waits for it instead of landing before a truncate that would cut it.
    import threading

    from sakura_http._cassette import locked
    from sakura_http.cli._repair import repair_cassette

    path = tmp_path / "c.jsonl"
    healthy = cassette_bytes([items()])
    path.write_bytes(healthy + TORN)
    done = threading.Event()
    worker = threading.Thread(target=lambda: (repair_cassette(path), done.set()))
    with locked(path):
        worker.start()
        # Cannot pass while the lock is held; a missing lock shows up as a repaired file here.
        assert not done.wait(0.5)
        assert path.read_bytes() == healthy + TORN
    worker.join(timeout=60)
    assert done.is_set()
    assert path.read_bytes() == healthy
