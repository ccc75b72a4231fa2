"""The `sakura-http` command as a whole: wiring, exit codes, `show`, the entry points, and
cassettes written by the transport.  Each other subcommand has its own tests/test_cli_*.py."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from sakura_http._format import Exchange, encode_header
from sakura_http.cli import main
from tests.cli_support import (
    assert_one_line_error,
    cassette_bytes,
    items,
    message,
    outage,
    run,
    write_cassette,
)

SUBCOMMANDS = ["show", "diff", "lint", "convert", "repair"]


# --- wiring and exit codes -------------------------------------------------------------------


@pytest.mark.parametrize("command", [[], *([name] for name in SUBCOMMANDS)])
def test_help_on_the_command_and_every_subcommand(
    capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    result = run(capsys, *command, "--help")
    assert result.code == 0
    assert result.out.startswith(f"usage: sakura-http {' '.join(command)}".rstrip())
    assert result.err == ""


def test_the_top_level_help_lists_subcommands_and_exit_codes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = run(capsys, "--help").out
    for name in SUBCOMMANDS:
        assert name in out
    assert "Exit codes: 0 ok, 1 the check found something, 2" in out


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["frobnicate"],
        ["show"],
        ["show", "a.jsonl", "--no-such-option"],
        ["diff", "only-one.jsonl"],
        ["lint"],
        ["convert", "in.yaml"],
    ],
)
def test_usage_errors_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    result = run(capsys, *argv)
    assert_one_line_error(result)
    assert result.err.startswith("sakura-http")
    assert "--help" in result.err
    assert result.out == ""


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "a\0b.jsonl"],
        ["lint", "ok.jsonl", "a\0b.jsonl"],
        ["repair", "a\0b.jsonl"],
        ["diff", "a\0b.jsonl", "b.jsonl"],
        ["diff", "HEAD", "--", "a\0b.jsonl"],
        ["convert", "a\0b.yaml", "out.jsonl"],
        ["git-setup", "--pattern", "a\0b"],
        ["proxy", "a\0b.jsonl"],
    ],
)
def test_an_argument_holding_a_nul_character_exits_2_naming_it(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    # A process's arguments cannot hold NUL; main() called from Python can, and `lint` crashed
    # with a bare ValueError from the file system.
    result = run(capsys, *argv)
    assert_one_line_error(result)
    assert result.err.startswith(f"sakura-http {argv[0]}: error: the argument 'a\\x00b")
    assert "holds a NUL character" in result.err


def test_main_defaults_to_the_process_arguments(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["sakura-http", "--help"])
    assert main() == 0
    assert "usage: sakura-http" in capsys.readouterr().out


# --- show ------------------------------------------------------------------------------------


def test_show_prints_one_line_per_exchange_then_totals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_cassette(tmp_path / "c.jsonl", [items(), message(), outage()])
    result = run(capsys, "show", path)
    assert result.code == 0
    assert result.err == ""
    assert result.out.splitlines() == [
        "#1  list-items  GET   200   0 B -> 27 B  https://api.example.test/v1/items",
        "#2  -           POST  200  37 B -> 18 B  https://api.example.test/v1/messages"
        "  [chunked:2]",
        "#3  -           GET   ERR   0 B -> 0 B   https://api.example.test/health"
        "  [error:ConnectError]",
        "3 exchanges (1 with id); 2 x 200; 1 error; 1 chunked; bodies 37 B sent, 45 B received",
    ]


def test_show_marks_truncated_streams(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_cassette(tmp_path / "c.jsonl", [message(truncated=True)])
    out = run(capsys, "show", path).out
    assert "[chunked:2, truncated]" in out
    assert out.splitlines()[-1].startswith("1 exchange; 1 x 200; 1 chunked; 1 truncated;")


def test_show_bodies_pretty_prints_json_and_summarises_binary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binary = Exchange(
        method="GET",
        url="https://api.example.test/logo.png",
        response_headers=(("content-type", "image/png"),),
        response_body=b"\x89PNG\r\n\x1a\n\xff\xfe",
    )
    path = write_cassette(tmp_path / "c.jsonl", [items(), binary, outage()])
    out = run(capsys, "show", "--bodies", path).out
    assert (
        "    response body:\n"
        "      {\n"
        '        "items": [\n'
        "          1,\n"
        "          2\n"
        "        ],\n"
        '        "next": null\n'
        "      }\n"
    ) in out
    digest = hashlib.sha256(binary.response_body).hexdigest()[:12]
    assert f"      <10 B of binary data, sha256 {digest}>" in out
    assert "    error: ConnectError: connection refused" in out
    assert all(line == line.rstrip() for line in out.splitlines())


def test_show_an_empty_cassette(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for data in (b"", encode_header()):
        path = tmp_path / "empty.jsonl"
        path.write_bytes(data)
        result = run(capsys, "show", path)
        assert (result.code, result.out) == (0, "0 exchanges\n")


def test_show_a_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run(capsys, "show", tmp_path / "missing.jsonl")
    assert_one_line_error(result)
    assert "missing.jsonl: no such file" in result.err


def test_show_a_directory_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run(capsys, "show", tmp_path)
    assert_one_line_error(result)
    assert "is a directory" in result.err


def test_show_a_torn_cassette_exits_2_naming_the_line_and_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "torn.jsonl"
    path.write_bytes(cassette_bytes([items()]) + b'{"method":"GE')
    result = run(capsys, "show", path)
    assert_one_line_error(result)
    assert f"{path}:3:" in result.err
    assert "sakura-http repair" in result.err


def test_show_an_unsupported_version_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "v2.jsonl"
    path.write_bytes(b'{"schema_version":"2.0","kind":"cassette"}\n')
    result = run(capsys, "show", path)
    assert_one_line_error(result)
    assert "schema_version '2.0' is not supported" in result.err


def test_show_stays_readable_and_fast_for_10000_exchanges(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exchanges = [
        items(id=None, url=f"https://api.example.test/v1/items/{i}", status=200 + (i % 2) * 204)
        for i in range(10_000)
    ]
    path = write_cassette(tmp_path / "big.jsonl", exchanges)
    started = time.perf_counter()
    result = run(capsys, "show", path)
    assert time.perf_counter() - started < 10
    lines = result.out.splitlines()
    assert len(lines) == 10_001
    assert lines[0] == "#1      GET  200  0 B -> 27 B  https://api.example.test/v1/items/0"
    assert lines[9999] == "#10000  GET  404  0 B -> 27 B  https://api.example.test/v1/items/9999"
    # Columns line up: every URL starts at the same offset.
    assert len({line.index("https://") for line in lines[:-1]}) == 1
    assert lines[-1] == (
        "10000 exchanges; 5000 x 200, 5000 x 404; bodies 0 B sent, 263.7 KiB received"
    )


# --- entry points ----------------------------------------------------------------------------


def test_python_dash_m_runs_the_command(tmp_path: Path) -> None:
    path = write_cassette(tmp_path / "c.jsonl", [items()])
    done = subprocess.run(
        [sys.executable, "-m", "sakura_http", "show", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].startswith("#1  list-items  GET")


def test_the_console_script_reports_exit_codes_without_a_traceback(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("sakura-http" + (".exe" if os.name == "nt" else ""))
    if not script.exists():
        pytest.skip("the sakura-http console script is not installed in this environment")
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes(cassette_bytes([items()]) + b'{"method":')
    done = subprocess.run(
        [str(script), "lint", str(torn)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    assert "error: the last line is incomplete" in done.stdout
    done = subprocess.run(
        [str(script), "show", str(tmp_path / "missing.jsonl")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().endswith("missing.jsonl: no such file")
    assert "Traceback" not in done.stderr


# --- cassettes written by the transport ------------------------------------------------------


def _record(path: Path, total: int) -> None:
    from sakura_http import RecordingTransport

    def handler(request: httpx.Request) -> httpx.Response:
        headers = {"x-request-id": f"req-{total}"}
        if request.method == "POST":  # the last request: the client's cookie jar stays unused
            headers["set-cookie"] = "session=fake-test-cookie"
        return httpx.Response(200, json={"total": total, "path": request.url.path}, headers=headers)

    transport = RecordingTransport(
        path, outer=httpx.MockTransport(handler), mode="all", secret_headers=["authorization"]
    )
    with httpx.Client(transport=transport) as client:
        client.get(
            "https://api.example.test/v1/invoices", headers={"authorization": "Bearer fake-test"}
        )
        client.post("https://api.example.test/v1/invoices", json={"amount": 3})


def test_a_recorded_cassette_shows_lints_clean_and_diffs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    _record(old, total=10)
    _record(new, total=12)

    shown = run(capsys, "show", old)
    assert shown.code == 0
    assert "GET   200" in shown.out and "POST  200" in shown.out
    assert shown.out.splitlines()[-1].startswith("2 exchanges; 2 x 200;")

    linted = run(capsys, "lint", "--strict", old, new)
    assert (linted.code, linted.out) == (0, "2 files checked: 0 errors, 0 warnings\n")

    assert run(capsys, "diff", old, old).code == 0
    diffed = run(capsys, "diff", old, new)
    assert diffed.code == 1
    assert "response header x-request-id: 'req-10' -> 'req-12'" in diffed.out
    assert '-  "total": 10' in diffed.out and '+  "total": 12' in diffed.out
    assert diffed.out.splitlines()[-1] == "0 added, 0 removed, 2 changed, 0 unchanged"


def test_proxy_rules_naming_a_module_whose_own_import_fails_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--rules MODULE:NAME where MODULE is found but imports something missing: the advice
    names the missing dependency, not the import path (which is right)."""
    from sakura_http.cli._proxy import load_rules
    from sakura_http.cli._usage import UsageError

    (tmp_path / "rules_needing_a_dep.py").write_text("import no_such_dep_of_rules\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(UsageError) as raised:
        load_rules("rules_needing_a_dep:RULES")
    message = str(raised.value)
    assert "no_such_dep_of_rules" in message
    assert "run the proxy from the folder" not in message
