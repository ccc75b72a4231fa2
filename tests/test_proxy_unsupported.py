"""What the proxy does not speak, it refuses so the client shows why: a WebSocket upgrade and an
HTTP/2 prior-knowledge client get ``501`` with ``x-sakura-http-error: unsupported`` (the latter
in HTTP/2 frames, `sakura_http.proxy._h2`), the refusal is logged, and nothing is recorded."""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sakura_http.proxy import serve
from sakura_http.proxy._h2 import first_stream, refusal
from tests.proxy_support import HANG_GUARD, Upstream, start_upstream

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
WEBSOCKET = (
    b"GET /v1/socket HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
    b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
)


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with start_upstream() as running:
        yield running


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload
    )


def frames(data: bytes) -> list[tuple[int, int, int, bytes]]:
    """(type, flags, stream, payload) of each HTTP/2 frame in `data`."""
    out = []
    while data:
        length = int.from_bytes(data[:3], "big")
        kind, flags, stream = data[3], data[4], int.from_bytes(data[5:9], "big")
        out.append((kind, flags, stream, data[9 : 9 + length]))
        data = data[9 + length :]
    return out


def hpack_literals(block: bytes) -> list[tuple[bytes, bytes]]:
    """Decode a block of HPACK literals without indexing, new names, no Huffman (what the proxy
    writes); an HPACK integer of 7 bits or more is decoded too."""

    def integer(at: int) -> tuple[int, int]:
        value = block[at] & 0x7F
        at += 1
        if value < 0x7F:
            return value, at
        shift = 0
        while True:
            byte = block[at]
            at += 1
            value += (byte & 0x7F) << shift
            shift += 7
            if byte < 128:
                return value, at

    out, at = [], 0
    while at < len(block):
        assert block[at] == 0x00
        size, at = integer(at + 1)
        name, at = block[at : at + size], at + size
        size, at = integer(at)
        out.append((name, block[at : at + size]))
        at += size
    return out


def read_until_closed(sock: socket.socket) -> bytes:
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    return b"".join(chunks)


# --- the HTTP/2 answer, sans I/O ------------------------------------------------------------


def test_first_stream_waits_for_a_headers_frame() -> None:
    settings = frame(0x4, 0, 0, b"\x00\x03\x00\x00\x00\x64")
    headers = frame(0x1, 0x5, 3, b"\x82\x86\x84")
    assert first_stream(b"SM\r\n") is None
    assert first_stream(b"SM\r\n\r\n" + settings) is None
    assert first_stream(b"SM\r\n\r\n" + settings + headers[:5]) is None
    assert first_stream(b"SM\r\n\r\n" + settings + headers) == 3
    assert first_stream(b"XX\r\n\r\n" + headers) is None


def test_the_refusal_is_a_whole_http2_answer() -> None:
    body = b"x" * 20_000  # more than one DATA frame, and a long header value
    sent = frames(refusal(1, 501, [(b"X-Long", b"v" * 300)], body))
    kinds = [(kind, flags, stream) for kind, flags, stream, _ in sent]
    assert kinds == [(4, 0, 0), (4, 1, 0), (1, 4, 1), (0, 0, 1), (0, 1, 1), (7, 0, 0)]
    assert hpack_literals(sent[2][3]) == [
        (b":status", b"501"),
        (b"content-length", b"20000"),
        (b"x-long", b"v" * 300),
    ]
    assert sent[3][3] + sent[4][3] == body
    assert sent[5][3][:8] == b"\x00\x00\x00\x01\x00\x00\x00\x00"  # last stream 1, NO_ERROR


def test_without_a_stream_only_goaway_carries_the_text() -> None:
    sent = frames(refusal(None, 501, [], b"why"))
    assert [kind for kind, *_ in sent] == [4, 4, 7]
    assert sent[2][3] == b"\x00\x00\x00\x00\x00\x00\x00\x00why"


# --- through the proxy ------------------------------------------------------------------------


def test_http2_prior_knowledge_is_answered_501_in_http2(
    tmp_path: Path, upstream: Upstream, caplog: pytest.LogCaptureFixture
) -> None:
    cassette = tmp_path / "h2.jsonl"
    caplog.set_level(logging.WARNING, "sakura_http.proxy")
    with serve(cassette, upstream=upstream.url, mode="new_episodes") as proxy:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=HANG_GUARD) as sock:
            sock.sendall(PREFACE + frame(0x4, 0, 0))
            sock.sendall(frame(0x1, 0x5, 1, b"\x82\x86\x84"))  # GET http /
            got = frames(read_until_closed(sock))
        with httpx.Client(base_url=proxy.url, timeout=HANG_GUARD) as http:
            assert http.get("/v1/after").status_code == 200  # the proxy serves on
    [headers] = [payload for kind, _, stream, payload in got if kind == 1 and stream == 1]
    fields = dict(hpack_literals(headers))
    assert fields[b":status"] == b"501"
    assert fields[b"x-sakura-http-error"] == b"unsupported"
    body = b"".join(payload for kind, _, stream, payload in got if kind == 0 and stream == 1)
    assert body.startswith(b"HTTP/2 is not supported: the recording proxy speaks HTTP/1.1 only")
    assert b"drop --http2-prior-knowledge" in body
    assert got[-1][0] == 7  # GOAWAY
    assert "501 unsupported" in caplog.text and "HTTP/2 is not supported" in caplog.text
    assert [path for _, path, _ in upstream.requests] == ["/v1/after"]


@pytest.mark.skipif(
    shutil.which("curl") is None
    or "HTTP2" not in subprocess.run(["curl", "-V"], capture_output=True, text=True).stdout,
    reason="needs curl built with HTTP/2",
)
def test_curl_with_http2_prior_knowledge_shows_the_refusal(
    tmp_path: Path, upstream: Upstream
) -> None:
    with serve(tmp_path / "h2.jsonl", upstream=upstream.url, mode="new_episodes") as proxy:
        result = subprocess.run(
            ["curl", "-sS", "--http2-prior-knowledge", "-D", "-", f"{proxy.url}/v1/items"],
            capture_output=True,
            text=True,
            timeout=HANG_GUARD,
        )
    assert result.stdout.startswith("HTTP/2 501"), result.stderr
    assert "x-sakura-http-error: unsupported" in result.stdout
    assert "HTTP/2 is not supported" in result.stdout
    assert upstream.requests == []


def test_a_websocket_upgrade_is_answered_501_and_not_forwarded(
    tmp_path: Path, upstream: Upstream, caplog: pytest.LogCaptureFixture
) -> None:
    cassette = tmp_path / "ws.jsonl"
    caplog.set_level(logging.WARNING, "sakura_http.proxy")
    with (
        serve(cassette, upstream=upstream.url, mode="new_episodes") as proxy,
        socket.create_connection(("127.0.0.1", proxy.port), timeout=HANG_GUARD) as sock,
    ):
        sock.sendall(WEBSOCKET + b"GET /v1/next HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        got = read_until_closed(sock)
    head, _, rest = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 501 ")
    assert b"x-sakura-http-error: unsupported" in head
    assert rest.startswith(
        f"GET {upstream.url}/v1/socket: WebSocket is not supported: the recording proxy "
        "records HTTP exchanges only".encode()
    )
    assert b"add its host to NO_PROXY" in rest
    # Refused, not closed: the next request on the connection is served.
    assert b"HTTP/1.1 200 " in rest
    assert "501 unsupported" in caplog.text
    assert [path for _, path, _ in upstream.requests] == ["/v1/next"]


def test_an_h2c_upgrade_is_ignored_as_http11_allows(tmp_path: Path, upstream: Upstream) -> None:
    with (
        serve(tmp_path / "h2c.jsonl", upstream=upstream.url, mode="new_episodes") as proxy,
        httpx.Client(base_url=proxy.url, timeout=HANG_GUARD) as http,
    ):
        response = http.get(
            "/v1/h2c",
            headers={"connection": "Upgrade, HTTP2-Settings", "upgrade": "h2c"},
        )
    assert response.status_code == 200
    assert [path for _, path, _ in upstream.requests] == ["/v1/h2c"]
