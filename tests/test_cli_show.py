"""`sakura-http show --json`, `--textconv` and `--html`: cassettes for scripts, for git and for
reviewers."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from sakura_http._format import Exchange
from tests.cli_support import JSON, items, message, outage, run, write_cassette

PNG = b"\x89PNG\r\n\x1a\n\xff\xfe"


def _binary() -> Exchange:
    return Exchange(
        method="GET",
        url="https://api.example.test/logo.png",
        response_headers=(("content-type", "image/png"),),
        response_body=PNG,
    )


def _stream() -> Exchange:
    events = (
        b'event: delta\ndata: {"text":"Hel","i":1}\n\n',
        b'event: delta\ndata: {"text":"lo"}\n\n',
    )
    return message(
        response_body=b"".join(events),
        chunks=tuple(len(event) for event in events),
        timings_ms=(12.5, 40.0),
    )


# --- json ------------------------------------------------------------------------------------


def test_json_lists_the_exchanges_with_text_or_base64_bodies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_cassette(tmp_path / "c.jsonl", [items(), _binary(), outage()])
    result = run(capsys, "show", "--json", path)
    assert (result.code, result.err) == (0, "")
    first, binary, fault = json.loads(result.out)
    assert first == {
        "index": 1,
        "line": 2,
        "method": "GET",
        "url": "https://api.example.test/v1/items",
        "headers": [["accept", "application/json"]],
        "body": "",
        "status": 200,
        "response_headers": [["content-type", "application/json"]],
        "response_body": '{"items":[1,2],"next":null}',
        "id": "list-items",
    }
    assert base64.b64decode(binary["response_body_b64"]) == PNG
    assert "response_body" not in binary
    assert fault["error"] == {"type": "ConnectError", "message": "connection refused"}
    assert (fault["index"], fault["line"]) == (3, 4)


def test_json_of_an_empty_cassette_is_an_empty_array(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    assert json.loads(run(capsys, "show", "--json", path).out) == []


# --- textconv --------------------------------------------------------------------------------


def test_textconv_prints_one_field_per_line_with_pretty_bodies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_cassette(tmp_path / "c.jsonl", [items(), _binary(), outage()])
    result = run(capsys, "show", "--textconv", path)
    assert (result.code, result.err) == (0, "")
    assert result.out.splitlines() == [
        "# sakura-http cassette, schema 1.0",
        "=" * 72,
        "id: list-items",
        "request: GET https://api.example.test/v1/items",
        "request header accept: application/json",
        "status: 200",
        "response header content-type: application/json",
        "response body:",
        "    {",
        '      "items": [',
        "        1,",
        "        2",
        "      ],",
        '      "next": null',
        "    }",
        "=" * 72,
        "request: GET https://api.example.test/logo.png",
        "status: 200",
        "response header content-type: image/png",
        "response body:",
        "    <10 B of binary data, sha256 608b46bb11fb>",
        "=" * 72,
        "request: GET https://api.example.test/health",
        "error: ConnectError: connection refused",
    ]


def test_textconv_never_fails_so_git_diff_never_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes(b'{"schema_version":"1.0"}\n{"method":"GE')
    result = run(capsys, "show", "--textconv", torn)
    assert result.code == 0
    assert result.out.splitlines() == [
        "# sakura-http: not a readable cassette (the last line is incomplete (no trailing "
        "newline): a recording was interrupted mid-write. Run `sakura-http repair` on the file "
        "to drop it (a backup is kept), then record again); its lines as they are, credential "
        "values hidden:",
        '{"schema_version":"1.0"}',
        '{"method":"GE',
    ]
    empty = tmp_path / "empty.jsonl"  # git hands textconv an empty file for an added file
    empty.write_bytes(b"")
    assert run(capsys, "show", "--textconv", empty).out == "# sakura-http cassette, schema 1.0\n"


# --- html ------------------------------------------------------------------------------------


class _Page(HTMLParser):
    """Collects what a reviewer's browser would load and show."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.external: list[str] = []
        self.summaries: list[str] = []
        self.text: list[str] = []
        self._in_summary = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href", "action", "srcset") or (value or "").find("url(") >= 0:
                self.external.append(f"{tag} {name}={value}")
        if tag == "summary":
            self._in_summary += 1
            self.summaries.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "summary":
            self._in_summary -= 1

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._in_summary:
            self.summaries[-1] += data


def test_html_is_one_self_contained_page_with_collapsible_exchanges(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile = items(
        id=None,
        url="https://api.example.test/v1/<script>alert(1)</script>",
        response_headers=(("content-type", "text/html"),),
        response_body=b'<img src="https://tracker.example.test/x.png"><script>alert(2)</script>',
    )
    path = write_cassette(tmp_path / "c.jsonl", [items(), _stream(), _binary(), outage(), hostile])
    out = tmp_path / "review.html"
    result = run(capsys, "show", "--html", out, path)
    assert (result.code, result.out, result.err) == (0, f"wrote {out}: 5 exchanges\n", "")
    page = _Page()
    page.feed(out.read_text(encoding="utf-8"))
    page.close()
    # Self-contained and inert: no script, no external asset, recorded markup escaped.
    assert "script" not in page.tags
    assert "img" not in page.tags
    assert page.external == []
    assert page.tags.count("details") == 5 + 2  # the exchanges, and the stream's two events
    assert page.summaries[:5] == [
        "#1 GET https://api.example.test/v1/items → 200 [id=list-items]",
        "#2 POST https://api.example.test/v1/messages → 200 [chunked:2]",
        "event 1: delta",
        "event 2: delta",
        "#3 GET https://api.example.test/logo.png → 200",
    ]
    text = "".join(page.text)
    assert '"items": [' in text  # pretty-printed JSON
    assert '"text": "Hel"' in text  # each event's data pretty-printed
    assert "12.5 ms" in text and "40 ms" in text  # chunk arrival times
    assert "<10 B of binary data, sha256 608b46bb11fb>" in text
    assert "ConnectError: connection refused" in text
    assert "<script>alert(2)</script>" in text  # shown as text, never run


def test_html_to_an_unwritable_path_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_cassette(tmp_path / "c.jsonl", [items()])
    result = run(capsys, "show", "--html", tmp_path / "missing" / "x.html", path)
    assert result.code == 2
    assert "cannot write it" in result.err


def _headless_browser() -> list[str] | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return [found, "--headless", "--disable-gpu", "--no-sandbox", "--dump-dom"]
    return None


def test_html_renders_in_a_real_headless_browser(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    browser = _headless_browser()
    if browser is None:
        pytest.skip("no headless browser (chromium or google-chrome) on this machine")
    path = write_cassette(tmp_path / "c.jsonl", [items(), _stream(), outage()])
    out = tmp_path / "review.html"
    assert run(capsys, "show", "--html", out, path).code == 0
    done = subprocess.run(
        [*browser, out.as_uri()], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "#1 GET https://api.example.test/v1/items" in done.stdout
    assert "event 2: delta" in done.stdout
    assert "<script" not in done.stdout


def test_show_forms_are_mutually_exclusive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_cassette(tmp_path / "c.jsonl", [items(response_headers=JSON)])
    result = run(capsys, "show", "--json", "--textconv", path)
    assert result.code == 2
    assert "not allowed with argument" in result.err


def test_textconv_and_html_never_print_a_credential_header_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    leaked = items(headers=(("authorization", "Bearer fake-test-token-0123"),))
    path = write_cassette(tmp_path / "c.jsonl", [leaked])
    text = run(capsys, "show", "--textconv", path).out
    assert "request header authorization: <hidden, 27 chars>" in text.splitlines()
    page = tmp_path / "review.html"
    run(capsys, "show", "--html", page, path)
    for shown in (text, page.read_text()):
        assert "fake-test-token" not in shown


@pytest.mark.parametrize("how", ["--textconv", "--html", "--json", ""])
def test_a_url_in_a_header_value_is_shown_without_its_secret_query_values(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, how: str
) -> None:
    # A location, link or referer holding a URL (one the server made, or a converted cassette)
    # was printed whole, its ?api_key=... included, into git diff's output and CI logs.
    secret = "sk-show-0123456789abcdefXYZ"
    headers = (
        ("location", f"https://cb.example.test/next?api_key={secret}&n=1"),
        ("link", f"<https://api.example.test/p2?access_token={secret}>; rel=next"),
    )
    path = write_cassette(
        tmp_path / "c.jsonl",
        [
            Exchange(
                "GET",
                "https://api.example.test/v1",
                (("referer", f"https://app.example.test/?password={secret}"),),
                status=302,
                response_headers=headers,
            )
        ],
    )
    page = tmp_path / "c.html"
    result = run(capsys, "show", *{"--html": [how, page], "": []}.get(how, [how]), path)
    assert result.code == 0, result
    printed = result.out + result.err + (page.read_text() if how == "--html" else "")
    assert secret not in printed
    assert ("api_key=" in printed) == bool(how)  # (the list prints no header)
