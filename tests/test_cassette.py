"""Cassette files: locked appends from many processes, torn tails, atomic re-recording."""

from __future__ import annotations

import gc
import multiprocessing
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from sakura_http import (
    CassetteFormatError,
    RecordingForbidden,
    RecordingTransport,
    RerecordingInProgress,
)
from sakura_http._cassette import (
    AtomicRecording,
    append_lines,
    cassette_stem,
    default_fixtures_folder,
    load_cassette,
    remove_stray_recording,
)
from sakura_http._format import Exchange, encode_exchange

WORKERS = 4
PER_WORKER = 60


def _record_many(path: str, worker: int) -> None:
    # One xdist-like process: its own transport recording distinct exchanges into one cassette.
    body = b"w%d-" % worker + b"x" * 3000  # lines far longer than a pipe buffer
    outer = httpx.MockTransport(lambda request: httpx.Response(200, content=body))
    transport = RecordingTransport(path, outer=outer, mode="new_episodes")
    client = httpx.Client(transport=transport)
    for i in range(PER_WORKER):
        client.get(f"https://api.example.test/{worker}/{i}")
    transport.close()


def test_processes_appending_concurrently_never_interleave(tmp_path: Path) -> None:
    path = tmp_path / "shared.jsonl"
    context = multiprocessing.get_context("spawn")  # fork in a threaded pytest is unsafe
    processes = [context.Process(target=_record_many, args=(str(path), w)) for w in range(WORKERS)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    data = path.read_bytes()
    raw_lines = data.splitlines()
    assert raw_lines[0] == b'{"schema_version":"1.0","kind":"cassette"}'
    assert data.count(b'"schema_version"') == 1
    urls = sorted(orjson.loads(line)["url"] for line in raw_lines[1:])
    expected = sorted(
        f"https://api.example.test/{w}/{i}" for w in range(WORKERS) for i in range(PER_WORKER)
    )
    assert urls == expected
    assert len(load_cassette(path).exchanges) == WORKERS * PER_WORKER


def test_append_refuses_a_file_with_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    line = encode_exchange(Exchange("GET", "https://api.example.test/"))
    append_lines(path, line, {})
    path.write_bytes(path.read_bytes() + b'{"method"')
    before = path.read_bytes()
    with pytest.raises(CassetteFormatError, match="incomplete line"):
        append_lines(path, line, {})
    assert path.read_bytes() == before


def test_load_reports_a_directory(tmp_path: Path) -> None:
    with pytest.raises(CassetteFormatError, match="is a directory"):
        load_cassette(tmp_path)


def test_atomic_recording_is_exclusive_and_keeps_the_old_file_until_commit(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.jsonl"
    path.write_bytes(b"old\n")
    recording = AtomicRecording(path, {"note": "kept"})
    with pytest.raises(RecordingForbidden, match="another process is re-recording"):
        AtomicRecording(path, {})
    recording.append(encode_exchange(Exchange("GET", "https://api.example.test/")))
    assert path.read_bytes() == b"old\n"
    recording.replace_cassette()
    assert path.read_bytes().startswith(b'{"schema_version":"1.0","kind":"cassette","note":"kept"}')
    AtomicRecording(path, {}).replace_cassette()  # the lock was released


def test_loading_waits_for_an_append_in_progress(tmp_path: Path) -> None:
    # Another process mid-append holds the lock with half a line written: a reader that did not
    # wait would see a torn tail and refuse the cassette.
    import threading

    from sakura_http._cassette import locked

    line = encode_exchange(Exchange("GET", "https://api.example.test/x"))
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"schema_version":"1.0","kind":"cassette"}\n' + line[:20])
    loaded: list[object] = []
    with locked(path) as fd:
        reader = threading.Thread(target=lambda: loaded.append(_load_or_error(path)))
        reader.start()
        reader.join(0.2)  # give it the chance to read too early; it must be waiting instead
        os.lseek(fd, 0, os.SEEK_END)
        os.write(fd, line[20:])
    reader.join(60)
    assert len(loaded) == 1
    content = loaded[0]
    assert not isinstance(content, Exception), content
    assert [e.url for e in content.exchanges] == ["https://api.example.test/x"]  # type: ignore[attr-defined]


def _load_or_error(path: Path) -> object:
    try:
        return load_cassette(path)
    except CassetteFormatError as exc:
        return exc


# --- loading parses as it reads, a block at a time -----------------------------------------

_BIG = Exchange(
    "GET",
    "https://api.example.test/big",
    response_body=b"0123456789abcdef" * 200_000,  # longer than a read block: spans several
    chunks=(1_600_000, 1_600_000),
)
_SMALL = Exchange("GET", "https://api.example.test/small", headers=(("accept", "*/*"),))


@pytest.mark.parametrize("block", [1, 7, 4096, None], ids=lambda b: f"block={b}")
def test_loading_block_by_block_reads_what_parsing_the_whole_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int | None
) -> None:
    from sakura_http import _cassette
    from sakura_http._format import encode_header, parse_cassette

    if block is not None:
        monkeypatch.setattr(_cassette, "_READ_BLOCK", block)
    big = _BIG if block != 1 else _SMALL  # one byte at a time: keep it small
    data = encode_header() + encode_exchange(_SMALL) + b"\n  \n" + encode_exchange(big) + b" \n"
    path = tmp_path / "c.jsonl"
    path.write_bytes(data)
    content = load_cassette(path)
    assert content == parse_cassette(data, path)
    assert content.exchanges == [_SMALL, big]
    assert content.line_numbers == [2, 5]


@pytest.mark.parametrize(
    ("tail", "line", "problem"),
    [
        (b'{"method":"GET"}\n', 4, "missing field 'status'"),
        (b"{bad\n", 4, "not valid JSON"),
        (b'{"method":"GET","url":"u"', 4, "the last line is incomplete"),
        (encode_exchange(_BIG)[:-1], 4, "the last line is incomplete"),
        (b"\n" + encode_exchange(_BIG).replace(b'"chunks":[', b'"chunks":[1,'), 5, "adds up to"),
    ],
)
def test_a_bad_line_after_a_long_one_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tail: bytes, line: int, problem: str
) -> None:
    from sakura_http import _cassette
    from sakura_http._format import encode_header

    monkeypatch.setattr(_cassette, "_READ_BLOCK", 65536)
    path = tmp_path / "c.jsonl"
    path.write_bytes(encode_header() + encode_exchange(_BIG) + encode_exchange(_SMALL) + tail)
    with pytest.raises(CassetteFormatError, match=re.escape(problem)) as caught:
        load_cassette(path)
    assert caught.value.line == line
    assert caught.value.path == str(path)


_FULL_DISK = """
import resource, signal, sys
from pathlib import Path
from sakura_http._cassette import AtomicRecording, append_lines
from sakura_http._format import Exchange, encode_exchange

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
path, mode = Path(sys.argv[1]), sys.argv[2]
if mode == "all":
    recording = AtomicRecording(path, {})
    append, written = recording.append, recording.temp_path
else:
    append, written = (lambda line: append_lines(path, line, {})), path
append(encode_exchange(Exchange("GET", "https://api.example.test/1")))
size = written.stat().st_size
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 40, hard))  # room for part of a line
try:
    append(encode_exchange(Exchange("GET", "https://api.example.test/" + "2" * 200)))
except OSError:
    print("refused")
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
append(encode_exchange(Exchange("GET", "https://api.example.test/3")))
if mode == "all":
    recording.replace_cassette()
"""


@pytest.mark.parametrize("mode", ["all", "new_episodes"])
def test_a_write_cut_short_leaves_no_partial_line(tmp_path: Path, mode: str) -> None:
    # A full disk (here a file-size limit, which the kernel enforces the same way) cuts a write
    # short: the exchange is refused, and the line already half-written is taken back, so the
    # next exchange is neither glued to it (re-recording) nor refused for a torn tail
    # (appending), and the cassette stays readable.
    path = tmp_path / "c.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", _FULL_DISK, str(path), mode],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["refused"]
    urls = [e.url for e in load_cassette(path).exchanges]
    assert urls == ["https://api.example.test/1", "https://api.example.test/3"]


# --- a re-recording owns the cassette until it ends ---------------------------------------------


def _line(n: object) -> bytes:
    return encode_exchange(Exchange("GET", f"https://api.example.test/{n}"))


def test_an_append_during_a_re_recording_is_refused_with_who_and_since(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    append_lines(path, _line("old"), {})
    before = path.read_bytes()
    recording = AtomicRecording(path, {})  # (another open file: as another process has)
    recording.append(_line("new"))
    with pytest.raises(RerecordingInProgress, match="another process is re-recording") as caught:
        append_lines(path, _line("appended"), {})
    refusal = caught.value
    assert isinstance(refusal, RecordingForbidden)
    assert (refusal.path, refusal.pid, refusal.since) == (str(path), os.getpid(), recording.since)
    assert f"process {os.getpid()}, since " in str(refusal)
    assert "nothing was written" in str(refusal)
    assert path.read_bytes() == before
    # The line naming the process is on the file being written, never on the cassette.
    assert recording.temp_path.read_bytes().splitlines()[-1].startswith(b'{"rerecording":')
    recording.replace_cassette()
    assert b"rerecording" not in path.read_bytes()
    assert [e.url for e in load_cassette(path).exchanges] == ["https://api.example.test/new"]
    append_lines(path, _line("after"), {})  # the re-recording is over: appends land in the new file
    assert [e.url for e in load_cassette(path).exchanges][-1] == "https://api.example.test/after"


def test_a_second_re_recording_is_refused_with_who_and_since(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    first = AtomicRecording(path, {})
    with pytest.raises(RerecordingInProgress, match="would lose each other's exchanges") as caught:
        AtomicRecording(path, {})
    assert (caught.value.pid, caught.value.since) == (os.getpid(), first.since)
    first.append(_line(1))  # the refused claim did not disturb the file being written
    first.replace_cassette()
    assert [e.url for e in load_cassette(path).exchanges] == ["https://api.example.test/1"]


def test_a_refusal_without_a_readable_owner_still_refuses(tmp_path: Path) -> None:
    # The owner line is rewritten with every exchange: read at the wrong moment it may be
    # missing.  The refusal does not depend on it, only its wording does.
    path = tmp_path / "c.jsonl"
    recording = AtomicRecording(path, {})
    os.truncate(recording.temp_path, 0)
    with pytest.raises(RerecordingInProgress, match="a process whose id could not be read") as c:
        append_lines(path, _line(1), {})
    assert (c.value.pid, c.value.since) == (None, None)
    recording.discard()


def test_a_stray_recording_is_removed_only_when_its_writer_is_gone(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    stray = tmp_path / "c.jsonl.recording"
    live = AtomicRecording(path, {})
    live.append(_line(1))
    assert remove_stray_recording(path) is False  # its writer holds the lock: alive
    assert stray.exists()
    live.replace_cassette()
    assert remove_stray_recording(path) is False  # nothing there
    stray.write_bytes(b"left by a writer that was killed\n")  # no one holds its lock
    assert remove_stray_recording(path) is True
    assert not stray.exists()
    stray.write_bytes(b"a stray does not block appends or re-recordings either\n")
    append_lines(path, _line(2), {})
    AtomicRecording(path, {}).discard()
    assert not stray.exists()


def test_a_re_recording_dropped_unclosed_frees_the_cassette(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    recording = AtomicRecording(path, {})
    recording.append(_line(1))
    del recording
    gc.collect()
    append_lines(path, _line(2), {})  # the lock went with the object
    assert remove_stray_recording(path) is True


def test_a_re_recording_takes_back_the_folders_it_made_when_it_keeps_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "not" / "there" / "c.jsonl"
    AtomicRecording(path, {}).replace_cassette()  # nothing recorded
    assert list(tmp_path.iterdir()) == []
    recording = AtomicRecording(path, {})
    recording.append(_line(1))
    recording.discard()
    assert list(tmp_path.iterdir()) == []
    recording = AtomicRecording(path, {})
    recording.append(_line(1))
    recording.replace_cassette()
    assert sorted(p.name for p in path.parent.iterdir()) == ["c.jsonl"]


@pytest.mark.skipif(sys.platform == "win32", reason="folder locks are POSIX")
def test_appends_commits_and_claims_hold_the_folder_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Deterministic, like the append-lock probe in test_crash: at the moment an append writes,
    # the folder lock is held shared (another look may share it, a claim or commit may not);
    # at the moment a commit moves the file, or a claim writes its owner line, it is held
    # exclusively.  Without the folder lock these probes would get it and the test fails.
    import fcntl

    from sakura_http import _cassette

    path = tmp_path / "c.jsonl"
    probes: list[tuple[str, bool, bool]] = []

    def probe(what: str) -> None:
        fd = os.open(tmp_path, os.O_RDONLY)
        try:
            got = {}
            for name, flag in (("shared", fcntl.LOCK_SH), ("exclusive", fcntl.LOCK_EX)):
                try:
                    fcntl.flock(fd, flag | fcntl.LOCK_NB)
                except BlockingIOError:
                    got[name] = False
                else:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    got[name] = True
            probes.append((what, got["shared"], got["exclusive"]))
        finally:
            os.close(fd)

    real_append_locked, real_replace = _cassette._append_locked, os.replace
    real_write_all = _cassette._write_all

    def probing_append_locked(*args: Any) -> None:
        probe("append")
        real_append_locked(*args)

    def probing_replace(*args: Any) -> None:
        probe("commit")
        real_replace(*args)

    def probing_write_all(fd: int, data: bytes) -> None:
        if data.startswith(b'{"rerecording":') and os.fstat(fd).st_size == 0:
            probe("claim")
        real_write_all(fd, data)

    monkeypatch.setattr(_cassette, "_append_locked", probing_append_locked)
    monkeypatch.setattr(_cassette, "_write_all", probing_write_all)
    monkeypatch.setattr(os, "replace", probing_replace)
    append_lines(path, _line(1), {})
    recording = AtomicRecording(path, {})
    recording.append(_line(2))
    recording.replace_cassette()
    assert probes == [
        ("append", True, False),
        ("claim", False, False),
        ("commit", False, False),
    ]


@pytest.mark.skipif(sys.platform == "win32", reason="folder locks are POSIX")
def test_an_append_makes_the_folder_again_if_it_goes_before_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A re-recording that kept nothing takes back the folders it made; an append that made the
    # same folder a moment before must not fail for it.
    from sakura_http import _cassette

    path = tmp_path / "new" / "c.jsonl"
    real_enter = _cassette._enter_folder
    removed: list[Path] = []

    def enter_after_removal(folder: Path, **kwargs: Any) -> int | None:
        if not removed:
            folder.rmdir()
            removed.append(folder)
        return real_enter(folder, **kwargs)

    monkeypatch.setattr(_cassette, "_enter_folder", enter_after_removal)
    append_lines(path, _line(1), {})
    assert removed == [path.parent]
    assert [e.url for e in load_cassette(path).exchanges] == ["https://api.example.test/1"]


def test_a_rerecording_through_a_symlink_replaces_the_file_it_points_to(tmp_path: Path) -> None:
    # Re-recording moved its fresh file over the link itself: the link became a file of its own
    # and the cassette it pointed to (shared, or kept elsewhere) was never updated, while
    # appends through the link went on reaching it.
    real, link = tmp_path / "shared" / "real.jsonl", tmp_path / "link.jsonl"
    real.parent.mkdir()
    outer = httpx.MockTransport(lambda request: httpx.Response(200, text=request.url.path))
    with RecordingTransport(real, outer=outer, mode="new_episodes") as transport:
        httpx.Client(transport=transport).get("https://api.example.test/old")
    link.symlink_to(real)
    with RecordingTransport(link, outer=outer, mode="all") as transport:
        httpx.Client(transport=transport).get("https://api.example.test/new")
    assert link.is_symlink()
    assert [e.url for e in load_cassette(real).exchanges] == ["https://api.example.test/new"]
    assert sorted(p.name for p in real.parent.iterdir()) == ["real.jsonl"]


# --- a test's cassette name ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "stem"),
    [
        ("test_chat[gpt:4o/mini]", "test_chat[gpt-4o-mini]"),
        ("TestGroup.test_method", "TestGroup.test_method"),
        ("test_a[two  words]", "test_a[two-words]"),  # a run of other characters: one "-"
        ("test_a[naïve 日本語]", "test_a[na-ve-]"),
        ("test_a[http://x.test]", "test_a[http---x.test]"),  # pytest-recording's: one each
        ("test_a[[nested]]", "test_a[[nested]]"),
    ],
)
def test_cassette_stem_keeps_file_safe_characters(name: str, stem: str) -> None:
    assert cassette_stem(name) == stem


def test_a_long_cassette_stem_is_cut_and_stays_unique() -> None:
    first, second = (
        cassette_stem("test_a[" + "x" * 200 + "1]"),
        cassette_stem("test_a[" + "x" * 200 + "2]"),
    )
    assert len(first) == len(second) == 143 and first[:130] == second[:130] and first != second
    # The digest is of pytest-recording's name: its cassette's file name gives the same stem.
    assert cassette_stem("test_a[" + "/" * 200 + "]") == cassette_stem("test_a[" + "-" * 200 + "]")


def test_the_default_fixtures_folder_is_beside_the_nearest_tests_folder(tmp_path: Path) -> None:
    root = tmp_path / "project"
    nested = root / "tests" / "unit" / "test_x.py"
    assert default_fixtures_folder(nested, root) == root / "tests" / "fixtures"
    inner = root / "pkg" / "tests" / "test_y.py"
    assert default_fixtures_folder(inner, root) == root / "pkg" / "tests" / "fixtures"
    # A "tests" folder above the root does not count.
    outside = tmp_path / "tests" / "project" / "src" / "test_z.py"
    assert default_fixtures_folder(outside, tmp_path / "tests" / "project") == (
        tmp_path / "tests" / "project" / "tests" / "fixtures"
    )
