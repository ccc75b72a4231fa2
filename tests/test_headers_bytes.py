"""Response header values are bytes: recorded losslessly, replayed byte for byte.

A real server on 127.0.0.1 sends header values that are not ASCII (UTF-8, and Latin-1 bytes that
are not UTF-8); recording them and replaying them, sync and async, httpx and httpx2, must give
the caller the very bytes the server sent.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from types import SimpleNamespace

import httpx
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sakura_http import RecordingTransport
from sakura_http._format import header_bytes, header_text
from sakura_http._libraries import _headers_of, library_of
from tests.drive import Driver
from tests.servers import LocalServer, _QuietServer, _serving

UTF8_DISPOSITION = 'attachment; filename="café.txt"'.encode()
LATIN1_TITLE = "Grüße".encode("latin-1")  # not valid UTF-8


class _RawHeaderHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        # send_header() encodes with Latin-1 (strict), so the head is written as raw bytes.
        # /utf8 sends UTF-8 values only; any other path adds a Latin-1 value that is not UTF-8.
        body = b"ok"
        title = b"" if self.path == "/utf8" else b"x-title: " + LATIN1_TITLE + b"\r\n"
        self.wfile.write(
            b"HTTP/1.1 200 OK\r\n"
            b"content-type: text/plain\r\n"
            b"content-disposition: "
            + UTF8_DISPOSITION
            + b"\r\n"
            + title
            + b"content-length: %d\r\n\r\n" % len(body)
            + body
        )

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(_QuietServer):
    daemon_threads = True


@contextlib.contextmanager
def raw_header_server() -> Iterator[LocalServer]:
    server = _Server(("127.0.0.1", 0), _RawHeaderHandler)
    with _serving(server):
        yield LocalServer(url=f"http://127.0.0.1:{server.server_address[1]}")


def raw_headers(response: object) -> dict[bytes, bytes]:
    return {k.lower(): v for k, v in response.headers.raw}  # type: ignore[attr-defined]


@pytest.mark.parametrize("stream_through", [False, True])
def test_non_ascii_header_bytes_record_and_replay_unchanged(
    drive: Driver, tmp_path: Path, stream_through: bool
) -> None:
    cassette = tmp_path / "headers.jsonl"
    with raw_header_server() as server:
        recording = drive.transport(
            cassette, outer=drive.real_outer(), mode="new_episodes", stream_through=stream_through
        )
        live = drive.send(recording, "GET", f"{server.url}/download")
        drive.close(recording)
    assert raw_headers(live)[b"content-disposition"] == UTF8_DISPOSITION
    assert raw_headers(live)[b"x-title"] == LATIN1_TITLE
    assert live.text == "ok"

    replay = drive.transport(cassette)
    again = drive.send(replay, "GET", f"{server.url}/download")
    assert raw_headers(again)[b"content-disposition"] == UTF8_DISPOSITION
    assert raw_headers(again)[b"x-title"] == LATIN1_TITLE
    assert again.headers["content-disposition"] == live.headers["content-disposition"]
    assert again.text == "ok"


def record_one(cassette: Path, url: str) -> None:
    with httpx.Client(
        transport=RecordingTransport(cassette, outer=httpx.HTTPTransport(), mode="new_episodes")
    ) as client:
        client.get(url)


def test_utf8_header_values_stay_readable_on_disk(tmp_path: Path) -> None:
    cassette = tmp_path / "readable.jsonl"
    with raw_header_server() as server:
        record_one(cassette, f"{server.url}/utf8")
    line = orjson.loads(cassette.read_bytes().splitlines()[1])
    assert "response_header_charset" not in line  # spelled as 1.0 always spelled them
    assert (
        dict(line["response_headers"])["content-disposition"] == 'attachment; filename="café.txt"'
    )


def test_values_that_are_not_utf8_are_written_as_latin1_text(tmp_path: Path) -> None:
    cassette = tmp_path / "latin1.jsonl"
    with raw_header_server() as server:
        record_one(cassette, f"{server.url}/mixed")
    line = orjson.loads(cassette.read_bytes().splitlines()[1])
    headers = dict(line["response_headers"])
    # Not every value is UTF-8 here, so the exchange says how its values are spelled.
    assert line["response_header_charset"] == "latin-1"
    assert headers["content-disposition"].encode("latin-1") == UTF8_DISPOSITION
    assert headers["x-title"].encode("latin-1") == LATIN1_TITLE


@pytest.mark.parametrize("stream_through", [False, True])
def test_the_proxy_records_and_answers_the_same_header_bytes(
    tmp_path: Path, stream_through: bool
) -> None:
    from sakura_http.proxy import serve

    cassette = tmp_path / "proxied.jsonl"

    def fetch(proxy_url: str) -> httpx.Response:
        return httpx.get(f"{proxy_url}/latin1", timeout=60)

    with (
        raw_header_server() as server,
        serve(
            cassette, upstream=server.url, mode="new_episodes", stream_through=stream_through
        ) as proxy,
    ):
        live = fetch(proxy.url)
    with serve(cassette, upstream=server.url) as proxy:
        replayed = fetch(proxy.url)
    for response in (live, replayed):
        raw = dict(response.headers.raw)
        assert raw[b"content-disposition"] == UTF8_DISPOSITION
        assert raw[b"x-title"] == LATIN1_TITLE
    assert orjson.loads(cassette.read_bytes().splitlines()[1])["response_header_charset"] == (
        "latin-1"
    )


# --- how a replay hands a library its headers ---------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    raw=st.lists(
        st.tuples(
            st.sampled_from([b"content-type", b"X-Trace", b"x-trace", b"set-cookie", b"\xe9tag"]),
            st.binary(max_size=8).filter(lambda v: b"\r" not in v and b"\n" not in v),
        ),
        max_size=5,
    ),
    library=st.sampled_from(["httpx", "httpx2"]),
)
def test_replayed_headers_are_the_bytes_header_bytes_spells(
    raw: list[tuple[bytes, bytes]], library: str
) -> None:
    # A replay builds the library's Headers straight from its entries; it must hold what the
    # library makes of the list `header_bytes` gives, whatever the names' case and the bytes.
    module = importlib.import_module(library)
    text, charset = header_text(raw)
    built = library_of(module.Request("GET", "http://h.test/")).headers(text, charset)
    expected = module.Headers(header_bytes(text, charset))
    replayed = module.Response(200, headers=built).headers
    assert replayed.raw == expected.raw
    assert replayed.multi_items() == expected.multi_items()
    assert replayed.encoding == expected.encoding


def test_a_headers_class_keeping_other_entries_is_given_the_list() -> None:
    class Headers:  # a library whose Headers keeps its entries its own way
        def __init__(self, pairs: list[tuple[bytes, bytes]]) -> None:
            self.entries = pairs

    assert _headers_of(SimpleNamespace(Headers=Headers)) is header_bytes  # type: ignore[arg-type]
