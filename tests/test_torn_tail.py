"""What a torn tail is: the loader, `lint`, `repair` and appending agree, through one function
(`sakura_http._format.torn_tail`), and `repair` fixes whatever appending refuses.

Regressions: a file holding only a blank line loaded as empty but got an exchange without a
header on the next append; whitespace after the last newline loaded, linted clean, had nothing
to repair, and jammed every append.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sakura_http import CassetteFormatError
from sakura_http._cassette import append_lines, load_cassette
from sakura_http._format import Exchange, encode_exchange, encode_header, torn_tail
from sakura_http.cli._lint import lint_bytes
from sakura_http.cli._repair import repair_cassette

LINE = encode_exchange(Exchange("GET", "https://api.example.test/a"))
MORE = encode_exchange(Exchange("GET", "https://api.example.test/b"))

BLANK_FILES = [b"\n", b"  \n\n", b" ", b"\t\r\n ", b"\n" * 70000 + b" "]
BLANK_TAILS = [b" ", b"  \t", b"\r", b"\n  "]
TORN_TAILS = [b'{"method"', b"  x", LINE[:-1], b"\x00", b" " * 70000 + b"{"]


def torn(data: bytes) -> bool:
    return bool(torn_tail(data))


@pytest.mark.parametrize("data", BLANK_FILES, ids=repr)
def test_a_whitespace_only_file_is_an_empty_cassette(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "c.jsonl"
    path.write_bytes(data)
    assert load_cassette(path).exchanges == []
    assert lint_bytes(data, path) == []
    assert repair_cassette(path).action == "none"
    append_lines(path, LINE, {})
    content = load_cassette(path)  # the header was written: the file loads again
    assert [e.url for e in content.exchanges] == ["https://api.example.test/a"]
    assert path.read_bytes().count(encode_header()) == 1


@pytest.mark.parametrize("tail", BLANK_TAILS, ids=repr)
def test_blank_space_after_the_last_newline_does_not_jam_appends(
    tmp_path: Path, tail: bytes
) -> None:
    path = tmp_path / "c.jsonl"
    data = encode_header() + LINE + tail
    path.write_bytes(data)
    assert len(load_cassette(path).exchanges) == 1
    assert lint_bytes(data, path) == []
    assert repair_cassette(path).action == "none"
    append_lines(path, MORE, {})
    assert [e.url for e in load_cassette(path).exchanges] == [
        "https://api.example.test/a",
        "https://api.example.test/b",
    ]


@pytest.mark.parametrize("tail", TORN_TAILS, ids=lambda t: repr(t[:20]))
def test_repair_fixes_whatever_append_refuses(tmp_path: Path, tail: bytes) -> None:
    path = tmp_path / "c.jsonl"
    data = encode_header() + LINE + tail
    path.write_bytes(data)
    with pytest.raises(CassetteFormatError, match="incomplete"):
        load_cassette(path)
    assert [f.check for f in lint_bytes(data, path)] == ["torn-line"]
    with pytest.raises(CassetteFormatError, match="incomplete line"):
        append_lines(path, MORE, {})
    assert path.read_bytes() == data
    assert repair_cassette(path).action in ("removed", "completed")
    append_lines(path, MORE, {})
    assert load_cassette(path).exchanges[-1].url == "https://api.example.test/b"


@pytest.mark.parametrize("tail", [b"", *BLANK_TAILS, *TORN_TAILS], ids=lambda t: repr(t[:20]))
def test_loader_lint_repair_and_append_agree(tmp_path: Path, tail: bytes) -> None:
    data = encode_header() + LINE + tail
    path = tmp_path / "c.jsonl"
    path.write_bytes(data)
    try:
        load_cassette(path)
        loads = True
    except CassetteFormatError:
        loads = False
    lint_torn = any(f.check == "torn-line" for f in lint_bytes(data, path))
    try:
        append_lines(path, MORE, {})
        appends = True
    except CassetteFormatError:
        appends = False
    path.write_bytes(data)
    repaired = repair_cassette(path).action != "none"
    assert {loads, appends, not lint_torn, not repaired, not torn(data)} == {not torn(data)}
