"""`sakura-http diff`: pairing by id or by match key and ordinal, which parts changed, the text
and JSON output, exit codes."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sakura_http._format import CassetteContent, Exchange, FaultInfo
from sakura_http.cli._diff import diff_cassettes, unified_diff
from tests.cli_support import (
    JSON,
    assert_one_line_error,
    items,
    message,
    outage,
    run,
    write_cassette,
)


def _diff(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    old: list[Exchange],
    new: list[Exchange],
    *options: str,
) -> tuple[int, str]:
    old_path = write_cassette(tmp_path / "old.jsonl", old)
    new_path = write_cassette(tmp_path / "new.jsonl", new)
    result = run(capsys, "diff", *options, old_path, new_path)
    assert result.err == ""
    return result.code, result.out


def test_equal_cassettes_exit_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cassette = [items(), message(), outage()]
    assert _diff(tmp_path, capsys, cassette, cassette) == (
        0,
        "no differences (0 added, 0 removed, 0 changed, 3 unchanged)\n",
    )


def test_verbose_lists_the_unchanged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cassette = [items(), outage()]
    code, out = _diff(tmp_path, capsys, cassette, cassette, "--verbose")
    assert code == 0
    assert out.splitlines() == [
        "same    #1 id=list-items GET https://api.example.test/v1/items -> 200",
        "same    #2 GET https://api.example.test/health -> error ConnectError",
        "no differences (0 added, 0 removed, 0 changed, 2 unchanged)",
    ]


def test_added_removed_and_changed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = [items(), message(), outage()]
    new = [
        items(status=500, response_headers=(("content-type", "text/plain"),)),
        outage(),
        items(id="new-one", url="https://api.example.test/v1/other"),
    ]
    code, out = _diff(tmp_path, capsys, old, new)
    assert code == 1
    assert out.splitlines() == [
        "removed #2 POST https://api.example.test/v1/messages -> 200",
        "added   #3 id=new-one GET https://api.example.test/v1/other -> 200",
        "changed #1 id=list-items GET https://api.example.test/v1/items -> 500",
        "    status: 200 -> 500",
        "    response header content-type: 'application/json' -> 'text/plain'",
        "1 added, 1 removed, 1 changed, 1 unchanged",
    ]


def test_a_changed_json_body_shows_a_pretty_unified_diff(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    new = items(response_body=b'{"items":[1,2,3],"next":"page-2"}')
    code, out = _diff(tmp_path, capsys, [items()], [new])
    assert code == 1
    assert out.splitlines() == [
        "changed #1 id=list-items GET https://api.example.test/v1/items -> 200",
        "    response_body: 27 B -> 33 B",
        "        --- old",
        "        +++ new",
        "        @@ -3,5 +3,6 @@",
        "             1,",
        "        -    2",
        "        +    2,",
        "        +    3",
        "           ],",
        '        -  "next": null',
        '        +  "next": "page-2"',
        "         }",
        "0 added, 0 removed, 1 changed, 0 unchanged",
    ]


def test_json_bodies_equal_but_for_key_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    new = items(response_body=b'{"next": null, "items": [1, 2]}')
    code, out = _diff(tmp_path, capsys, [items()], [new])
    assert code == 1
    assert "        same JSON value: only key order or whitespace differs" in out.splitlines()


def test_binary_bodies_are_compared_by_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = items(response_headers=(), response_body=b"\xff\x00\x01")
    new = items(response_headers=(), response_body=b"\xff\x00\x01\x02")
    code, out = _diff(tmp_path, capsys, [old], [new])
    assert code == 1
    assert "    response_body: 3 B -> 4 B" in out.splitlines()
    assert (
        "        binary body: 3 -> 4 bytes (sha256 942e1e2a66a4 -> 0c252d844a81)"
        in out.splitlines()
    )


def test_without_ids_exchanges_pair_by_match_key_and_ordinal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A polling sequence: the same request three times, pending, pending, done.
    def poll(state: str) -> Exchange:
        return items(id=None, response_body=f'{{"state":"{state}"}}'.encode())

    old = [poll("pending"), poll("pending"), poll("done")]
    new = [poll("pending"), poll("done")]
    code, out = _diff(tmp_path, capsys, old, new)
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == "removed #3 GET https://api.example.test/v1/items -> 200"
    assert lines[1] == "changed #2 GET https://api.example.test/v1/items -> 200"
    assert '        -  "state": "pending"' in lines
    assert lines[-1] == "0 added, 1 removed, 1 changed, 1 unchanged"


def test_volatile_request_headers_keep_the_pairing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = message(headers=(("user-agent", "python-httpx/0.27.0"), *message().headers))
    new = message(headers=(("user-agent", "python-httpx/0.28.1"), *message().headers))
    code, out = _diff(tmp_path, capsys, [old], [new])
    assert code == 1
    assert out.splitlines() == [
        "changed #1 POST https://api.example.test/v1/messages -> 200",
        "    request header user-agent: 'python-httpx/0.27.0' -> 'python-httpx/0.28.1'",
        "0 added, 0 removed, 1 changed, 0 unchanged",
    ]


def test_a_changed_request_pairs_by_method_and_url_with_a_body_diff(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An LLM prompt edited by one word: replay would not find the old recording, but for the
    # reviewer it is the same call, so it is one changed exchange showing both body diffs.
    def ask(prompt: str, answer: str) -> Exchange:
        return message(
            body=f'{{"model":"test-model","messages":[{{"role":"user","content":"{prompt}"}}]}}'.encode(),
            response_headers=JSON,
            response_body=f'{{"content":[{{"text":"{answer}"}}],"id":"msg_1"}}'.encode(),
            chunks=None,
        )

    old = [ask("Name a red fruit", "Apple"), items()]
    new = [items(), ask("Name a yellow fruit", "Banana")]
    code, out = _diff(tmp_path, capsys, old, new)
    assert code == 1
    assert out.splitlines() == [
        "changed #2 POST https://api.example.test/v1/messages -> 200 (was #1) "
        "(the request changed)",
        "    body: 80 B -> 83 B",
        "        --- old",
        "        +++ new",
        "        @@ -3,3 +3,3 @@",
        "             {",
        '        -      "content": "Name a red fruit",',
        '        +      "content": "Name a yellow fruit",',
        '               "role": "user"',
        "    response_body: 43 B -> 44 B",
        "        --- old",
        "        +++ new",
        "        @@ -3,3 +3,3 @@",
        "             {",
        '        -      "text": "Apple"',
        '        +      "text": "Banana"',
        "             }",
        "0 added, 0 removed, 1 changed, 1 unchanged",
    ]
    _, out = _diff(tmp_path, capsys, old, new, "--json")
    (changed,) = json.loads(out)["changed"]
    assert changed["pairing"] == "method and url"
    assert [change["field"] for change in changed["changes"]] == ["body", "response_body"]


def test_ignore_header_hides_noise(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def dated(day: str, request_id: str) -> Exchange:
        return items(
            response_headers=(*JSON, ("date", day), ("x-request-id", request_id)),
            headers=(("accept", "application/json"), ("x-trace", request_id)),
        )

    old, new = dated("Mon, 30 Nov 2026", "r-1"), dated("Tue, 01 Dec 2026", "r-2")
    code, out = _diff(tmp_path, capsys, [old], [new], "--ignore-header", "Date")
    assert code == 1
    assert "date" not in out
    assert "    response header x-request-id: 'r-1' -> 'r-2'" in out.splitlines()
    options = ["--ignore-header", "date", "--ignore-header", "x-request-id"]
    code, out = _diff(tmp_path, capsys, [old], [new], *options, "--ignore-header", "x-trace")
    assert (code, out) == (0, "no differences (0 added, 0 removed, 0 changed, 1 unchanged)\n")


def test_a_moved_exchange_says_where_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _diff(tmp_path, capsys, [outage(), items()], [items(status=201)])
    assert code == 1
    assert "changed #1 id=list-items GET https://api.example.test/v1/items -> 201 (was #2)" in out


def test_every_other_part_is_compared_but_timings() -> None:
    old = message(
        id="m",
        error=None,
        timings_ms=(1.0, 2.0),
        extra={"note": "a"},
    )
    new = message(
        id="m",
        method="PUT",
        url="https://api.example.test/v2/messages",
        chunks=(18,),
        truncated=True,
        timings_ms=(5.0,),
        extra={"note": "b"},
        error=FaultInfo("ReadError", "reset"),
    )
    result = diff_cassettes(CassetteContent({}, [old], [2]), CassetteContent({}, [new], [2]))
    changes = [(c.field, c.name, c.old, c.new) for c in result.changed[0].changes]
    assert changes == [
        ("method", None, "POST", "PUT"),
        (
            "url",
            None,
            "https://api.example.test/v1/messages",
            "https://api.example.test/v2/messages",
        ),
        ("error", None, None, {"type": "ReadError", "message": "reset"}),
        ("chunks", None, [9, 9], [18]),
        ("truncated", None, False, True),
        ("extra", "note", "a", "b"),
    ]
    same_but_timings = diff_cassettes(
        CassetteContent({}, [old], [2]),
        CassetteContent({}, [message(id="m", timings_ms=(7.0, 8.0), extra={"note": "a"})], [2]),
    )
    assert not same_but_timings


def test_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = [items(), message(), outage()]
    new = [items(status=500), outage(), items(id="new-one")]
    code, out = _diff(tmp_path, capsys, old, new, "--json")
    assert code == 1
    summary = {
        "index": 1,
        "line": 2,
        "id": "list-items",
        "method": "GET",
        "url": "https://api.example.test/v1/items",
        "status": 200,
        "error": None,
    }
    assert json.loads(out) == {
        "added": [{**summary, "index": 3, "line": 4, "id": "new-one"}],
        "removed": [
            {
                "index": 2,
                "line": 3,
                "id": None,
                "method": "POST",
                "url": "https://api.example.test/v1/messages",
                "status": 200,
                "error": None,
            }
        ],
        "changed": [
            {
                "old": summary,
                "new": {**summary, "status": 500},
                "pairing": "id",
                "changes": [{"field": "status", "old": 200, "new": 500}],
            }
        ],
    }


def test_json_output_with_verbose_and_body_and_header_changes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    new = items(
        response_headers=(("content-type", "application/json"), ("x-request-id", "r-2")),
        response_body=b'{"items":[],"next":null}',
    )
    code, out = _diff(tmp_path, capsys, [items(), outage()], [new, outage()], "--json", "--verbose")
    assert code == 1
    data = json.loads(out)
    assert set(data) == {"added", "removed", "changed", "unchanged"}
    assert data["unchanged"][0]["old"]["url"] == "https://api.example.test/health"
    assert data["unchanged"][0]["new"]["error"] == "ConnectError"
    header, body = data["changed"][0]["changes"]
    assert header == {
        "field": "response_headers",
        "name": "x-request-id",
        "old": None,
        "new": ["r-2"],
    }
    assert body["field"] == "response_body"
    assert (body["old"], body["new"]) == (27, 24)
    assert body["diff"][:2] == ["--- old", "+++ new"]


def test_equal_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _diff(tmp_path, capsys, [items()], [items()], "--json")
    assert (code, json.loads(out)) == (0, {"added": [], "removed": [], "changed": []})


def test_unreadable_inputs_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write_cassette(tmp_path / "good.jsonl", [items()])
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes(good.read_bytes() + b'{"method"')
    for argv in ([good, tmp_path / "missing.jsonl"], [torn, good]):
        result = run(capsys, "diff", *argv)
        assert_one_line_error(result)
        assert result.err.startswith("sakura-http diff: error: ")
        assert result.out == ""


def test_a_multipart_boundary_outside_latin_1_neither_crashes_loading_nor_diff(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Found by fuzzing: the boundary was encoded as Latin-1, so "☃" raised UnicodeEncodeError
    # from _matching.py both when a transport indexed the cassette and in `sakura-http diff`.
    boundary = "b☃undary"
    upload = Exchange(
        method="POST",
        url="https://api.example.test/v1/files",
        headers=(("content-type", f"multipart/form-data; boundary={boundary}"),),
        body=f'--{boundary}\r\ncontent-disposition: form-data; name="a"\r\n\r\n1\r\n'
        f"--{boundary}--\r\n".encode(),
        status=201,
    )
    path = write_cassette(tmp_path / "upload.jsonl", [upload])
    from sakura_http import RecordingTransport

    with RecordingTransport(path) as transport:
        assert transport.unplayed() == [upload]
    code, out = _diff(tmp_path, capsys, [upload], [upload])
    assert (code, out) == (0, "no differences (0 added, 0 removed, 0 changed, 1 unchanged)\n")


# --- large cassettes: a diff that stays near-linear ----------------------------------------------


def _apply(old: list[str], diff: list[str]) -> list[str]:
    """`old` with a unified diff applied, checking every context and removed line against it."""
    assert diff[:2] == ["--- old", "+++ new"]
    out: list[str] = []
    at = 0
    for line in diff[2:]:
        hunk = re.fullmatch(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", line)
        if hunk is not None:
            start, length = int(hunk[1]), int(hunk[2] or 1)
            begin = start - 1 if length else start  # an empty range names the line before it
            assert begin >= at, line
            out += old[at:begin]
            at = begin
            continue
        mark, text = line[0], line[1:]
        if mark in " -":
            assert old[at] == text, (at, line)
            at += 1
        if mark in " +":
            out.append(text)
    return out + old[at:]


def _pretty_lines(body: bytes) -> list[str]:
    return json.dumps(json.loads(body), indent=2, sort_keys=True).splitlines()


@settings(max_examples=300)
@given(
    old=st.lists(st.sampled_from("abcdefgh"), max_size=40),
    new=st.lists(st.sampled_from("abcdefghij"), max_size=40),
)
def test_the_line_diff_turns_old_into_new(old: list[str], new: list[str]) -> None:
    # Both ways: difflib's (small inputs) and the anchored one (large inputs).
    # (`sakura_http.cli._diff` as an attribute is the command's handler, hence the import.)
    with mock.patch.object(importlib.import_module("sakura_http.cli._diff"), "_SMALL", 0):
        anchored = unified_diff(old, new)
    for diff in (unified_diff(old, new), anchored):
        assert (diff == []) == (old == new)
        if diff:
            assert _apply(old, diff) == new
            # One line of context: no hunk starts or ends with two unchanged lines.
            hunks = re.split(r"@@ [^@]* @@\n?", "\n".join(diff[2:]))[1:]
            for hunk in hunks:
                marks = [line[0] for line in hunk.splitlines()]
                assert marks[:2] != [" ", " "] and marks[-2:] != [" ", " "], hunk


def test_the_line_diff_of_small_inputs_is_difflib_s() -> None:
    # Small bodies keep the exact output they had (and docs/cli.md shows).
    import difflib

    old = ["{", '  "a": 1,', '  "b": [', "    1,", "    2", "  ]", "}"]
    new = ["{", '  "a": 2,', '  "b": [', "    1,", "    2,", "    3", "  ]", "}"]
    expected = list(difflib.unified_diff(old, new, "old", "new", n=1, lineterm=""))
    assert unified_diff(old, new) == expected


def _rows(count: int, changed: dict[int, int]) -> bytes:
    # Values from a small vocabulary repeat thousands of times: the shape that made difflib
    # quadratic (a 3.9 MB cassette took two minutes).
    return json.dumps(
        {
            "rows": [
                {"name": f"row-{i % 300}", "value": changed.get(i, i % 250)} for i in range(count)
            ]
        }
    ).encode()


def test_two_4_mb_cassettes_diff_correctly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    count = 110_000  # about 4 MB a cassette
    edits = {i: 1000 + i for i in range(5_000, count, 9_000)}  # 12 rows changed
    old_body, new_body = _rows(count, {}), _rows(count, edits)
    old = [items(response_body=old_body), message(), outage()]
    new = [items(response_body=new_body), outage(), items(id="new-one")]
    old_path = write_cassette(tmp_path / "old.jsonl", old)
    new_path = write_cassette(tmp_path / "new.jsonl", new)
    assert old_path.stat().st_size > 4_000_000
    result = run(capsys, "diff", "--json", old_path, new_path)
    assert (result.code, result.err) == (1, "")
    data = json.loads(result.out)
    assert [ref["index"] for ref in data["removed"]] == [2]
    assert [ref["id"] for ref in data["added"]] == ["new-one"]
    ((body,),) = [changed["changes"] for changed in data["changed"]]
    assert (body["field"], body["old"]) == ("response_body", len(old_body))
    assert body["new"] == len(new_body)
    old_lines, new_lines = _pretty_lines(old_body), _pretty_lines(new_body)
    assert _apply(old_lines, body["diff"]) == new_lines
    removed = [line for line in body["diff"] if line.startswith("-") and line != "--- old"]
    assert removed == [f'-      "value": {i % 250}' for i in sorted(edits)]


# --- two folders ---------------------------------------------------------------------------------


def test_two_folders_pair_their_cassettes_by_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    for folder in (old / "sub", new / "sub"):
        folder.mkdir(parents=True)
    write_cassette(old / "a.jsonl", [items()])
    write_cassette(new / "a.jsonl", [items(status=500)])
    write_cassette(old / "sub" / "same.jsonl", [outage()])
    write_cassette(new / "sub" / "same.jsonl", [outage()])
    write_cassette(old / "only-old.jsonl", [message()])
    write_cassette(new / "sub" / "only-new.jsonl", [items(id="fresh")])
    (new / "readme.txt").write_text("not a cassette: not compared\n")
    result = run(capsys, "diff", old, new)
    assert (result.code, result.err) == (1, "")
    assert result.out.splitlines() == [
        "=== a.jsonl",
        "changed #1 id=list-items GET https://api.example.test/v1/items -> 500",
        "    status: 200 -> 500",
        "0 added, 0 removed, 1 changed, 0 unchanged",
        "=== only-old.jsonl (removed)",
        "removed #1 POST https://api.example.test/v1/messages -> 200",
        "0 added, 1 removed, 0 changed, 0 unchanged",
        "=== sub/only-new.jsonl (added)",
        "added   #1 id=fresh GET https://api.example.test/v1/items -> 200",
        "1 added, 0 removed, 0 changed, 0 unchanged",
        "cassettes: 1 added, 1 removed, 1 changed, 1 unchanged",
    ]
    same = run(capsys, "diff", new / "sub", new / "sub")
    assert (same.code, same.out) == (
        0,
        "no differences (cassettes: 0 added, 0 removed, 0 changed, 2 unchanged)\n",
    )


def test_a_folder_and_a_file_or_a_file_that_is_no_cassette_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cassette = write_cassette(tmp_path / "c.jsonl", [items()])
    folder = tmp_path / "folder"
    folder.mkdir()
    result = run(capsys, "diff", folder, cassette)
    assert_one_line_error(result)
    assert result.err == (
        f"sakura-http diff: error: {folder} is a directory and {cassette} a file: name two "
        "directories (their *.jsonl files are paired by their path below each) or two "
        "cassettes\n"
    )
    other = tmp_path / "data.jsonl"
    other.write_text('{"event": "click"}\n{"event": "scroll"}\n')
    result = run(capsys, "diff", cassette, other)
    assert result.err == (
        f"sakura-http diff: error: {other}: this is not a sakura-http cassette: its first line "
        "is not a cassette header (a JSON object with a schema_version)\n"
    )
    assert "record" not in result.err  # re-recording would overwrite what the file holds
