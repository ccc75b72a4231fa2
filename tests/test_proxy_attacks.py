"""The proxy as a network service under attack: request smuggling and slowloris.

* Smuggling: random requests whose body's end is ambiguous (both ``Content-Length`` and
  ``Transfer-Encoding`` in any spelling h11 reads, folded or not, either order, bare LF line
  ends, chunk extensions; ``Transfer-Encoding`` in HTTP/1.0; two different lengths; codings
  other than chunked), each followed on the same connection by a request for ``/v1/smuggled``.
  Every one must get exactly one refusal (400 or 501) with ``connection: close``, the proxy
  must close the connection, and nothing may reach the upstream or the cassette.
* Slowloris: many connections that each stall a different way (silent, a head trickled byte by
  byte, a body that stops, an idle keep-alive connection) against short timeouts; every one
  must be closed by the proxy while a well-behaved client is served as usual.

The default run is small (a few seconds); ``SAKURA_HTTP_LONG_TESTS=1`` runs `LONG_FRAMINGS`
framings and `LONG_SLOWLORIS` connections.  Timeouts are hang guards only.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sakura_http.proxy import serve
from tests.proxy_support import HANG_GUARD, Upstream, start_upstream

LONG = os.environ.get("SAKURA_HTTP_LONG_TESTS") == "1"
FRAMINGS = 60
LONG_FRAMINGS = 3000
SLOWLORIS = 40
LONG_SLOWLORIS = 600

SMUGGLED = b"GET /v1/smuggled HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with start_upstream() as running:
        yield running


def recorded_urls(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [json.loads(line)["url"] for line in path.read_text().splitlines()[1:]]


def read_until_closed(sock: socket.socket) -> bytes:
    chunks = []
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


# --- smuggling ---------------------------------------------------------------------------------


@st.composite
def _any_case(draw: st.DrawFn, word: bytes) -> bytes:
    upper = draw(st.lists(st.booleans(), min_size=len(word), max_size=len(word)))
    return b"".join(
        bytes([c]).upper() if up else bytes([c]) for c, up in zip(word, upper, strict=True)
    )


_OWS = st.sampled_from([b"", b" ", b"\t", b"  ", b" \t"])
_CHUNKED_BODIES = [
    b"0\r\n\r\n",
    b"00\r\n\r\n",
    b"0;ext=1\r\n\r\n",
    b"5\r\nhello\r\n0\r\n\r\n",
    b"a\r\n0123456789\r\n0\r\n\r\n",
    b'A;x="y"\r\n0123456789\r\n0\r\nTrailer: t\r\n\r\n',
]
_OTHER_CODINGS = [
    b"gzip, chunked",
    b"chunked, identity",
    b"identity",
    b"x-custom",
    b"chunked, chunked",
]


@st.composite
def ambiguous_requests(draw: st.DrawFn) -> tuple[str, bytes]:
    """(kind, bytes): a request whose body's end is ambiguous, then a smuggled request."""
    kind = draw(st.sampled_from(["te+cl", "te-in-1.0", "two-lengths", "other-coding"]))
    eol = draw(st.sampled_from([b"\r\n", b"\n"]))
    version = b"1.0" if kind == "te-in-1.0" else draw(st.sampled_from([b"1.1", b"1.0"]))
    body = draw(st.sampled_from(_CHUNKED_BODIES))

    def length(value: int) -> bytes:
        return b"0" * draw(st.integers(0, 2)) + str(value).encode()

    def field(name: bytes, value: bytes) -> bytes:
        spelled = draw(_any_case(name))
        if draw(st.booleans()) and draw(st.booleans()):  # obsolete line folding
            return spelled + b":" + eol + b" " + value + draw(_OWS)
        return spelled + b":" + draw(_OWS) + value + draw(_OWS)

    lengths = [0, 5, len(body), len(body + SMUGGLED)]
    fields = [b"Host: x"]
    fields += [field(b"x-filler", b"%d" % n) for n in range(draw(st.integers(0, 3)))]
    if kind in ("te+cl", "te-in-1.0", "other-coding"):
        if kind == "other-coding":
            coding = draw(st.sampled_from(_OTHER_CODINGS))
        else:
            coding = draw(_any_case(b"chunked"))
        fields.append(field(b"transfer-encoding", coding))
    if kind == "te+cl" or (kind == "other-coding" and draw(st.booleans())):
        n = draw(st.sampled_from(lengths))
        if draw(st.booleans()):
            fields.append(field(b"content-length", length(n) + b", " + length(n)))
        else:
            for _ in range(draw(st.integers(1, 2))):
                fields.append(field(b"content-length", length(n)))
    if kind == "two-lengths":
        first, second = draw(
            st.lists(st.sampled_from(lengths), min_size=2, max_size=2, unique=True)
        )
        if draw(st.booleans()):
            fields.append(field(b"content-length", length(first) + b"," + length(second)))
        else:
            fields += [
                field(b"content-length", length(first)),
                field(b"content-length", length(second)),
            ]
    head, *rest = fields
    rest = draw(st.permutations(rest))
    request = b"POST /v1/framed HTTP/" + version + eol
    request += b"".join(line + eol for line in [head, *rest]) + eol
    return kind, request + body + SMUGGLED


FUZZ = settings(
    max_examples=LONG_FRAMINGS if LONG else FRAMINGS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    derandomize=not LONG,  # the default run is the same on every machine; the long one explores
)


def test_no_ambiguous_framing_smuggles_a_request(tmp_path: Path, upstream: Upstream) -> None:
    cassette = tmp_path / "smuggling.jsonl"
    with serve(cassette, upstream=upstream.url, mode="new_episodes") as proxy:

        @FUZZ
        @given(case=ambiguous_requests())
        def one(case: tuple[str, bytes]) -> None:
            kind, data = case
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=HANG_GUARD) as sock:
                sock.sendall(data)  # not shut for writing: the proxy must close by itself
                answer = read_until_closed(sock)
            head = answer.split(b"\r\n\r\n", 1)[0].lower()
            assert head.startswith((b"http/1.1 400 ", b"http/1.1 501 ")), (kind, data, answer)
            assert answer.count(b"HTTP/1.1 ") == 1, (kind, data, answer)
            assert b"\r\nconnection: close" in head, (kind, data, answer)
            assert upstream.requests == [], (kind, data)

        one()
        with httpx.Client(base_url=proxy.url, timeout=HANG_GUARD) as http:
            assert http.get("/v1/after").status_code == 200  # the proxy serves on
    assert recorded_urls(cassette) == [f"{upstream.url}/v1/after"]


# --- slowloris ---------------------------------------------------------------------------------

STALLS = {
    "silent": b"",
    "trickled-head": b"GET /v1/slow HTTP/1.1\r\nHost: x\r\n",
    "stalled-body": b"POST /v1/slow HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc",
    "idle-keep-alive": b"GET /v1/kept HTTP/1.1\r\nHost: x\r\n\r\n",
}


def test_slowloris_connections_are_all_closed(tmp_path: Path, upstream: Upstream) -> None:
    count = LONG_SLOWLORIS if LONG else SLOWLORIS
    cassette = tmp_path / "slowloris.jsonl"
    kinds = list(STALLS)
    with (
        serve(
            cassette, upstream=upstream.url, mode="new_episodes",
            header_timeout=0.5, idle_timeout=0.5,
        ) as proxy,
        selectors.DefaultSelector() as selector,
    ):  # fmt: skip
        sockets: dict[socket.socket, str] = {}
        received: dict[socket.socket, bytes] = {}
        try:
            for n in range(count):
                sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=HANG_GUARD)
                sock.sendall(STALLS[kinds[n % len(kinds)]])
                sock.setblocking(False)
                sockets[sock] = kinds[n % len(kinds)]
                received[sock] = b""
                selector.register(sock, selectors.EVENT_READ)
            # A client that behaves is served while every other connection stalls.
            with httpx.Client(base_url=proxy.url, timeout=HANG_GUARD) as http:
                assert http.get("/v1/served").status_code == 200
            open_ = set(sockets)
            give_up = time.monotonic() + HANG_GUARD * 2  # a hang guard, not a measure
            trickle = b"X-a: b\r\n"
            while open_:
                assert time.monotonic() < give_up, f"{len(open_)} connections still open"
                for sock in open_:  # the trickling ones send one more byte each round
                    if sockets[sock] == "trickled-head":
                        with contextlib.suppress(OSError):
                            sock.send(trickle[:1])
                for key, _ in selector.select(timeout=0.05):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    try:
                        data = sock.recv(65536)
                    except BlockingIOError:
                        continue
                    except ConnectionResetError:
                        data = b""
                    received[sock] += data
                    if not data:
                        selector.unregister(sock)
                        open_.discard(sock)
        finally:
            for sock in sockets:
                sock.close()
    for sock, kind in sockets.items():
        answer = received[sock]
        if kind == "silent":
            assert answer == b""
        elif kind == "idle-keep-alive":
            assert answer.startswith(b"HTTP/1.1 200 ") and answer.count(b"HTTP/1.1 ") == 1
        else:
            assert answer.startswith(b"HTTP/1.1 408 "), (kind, answer)
    kept = sum(1 for kind in sockets.values() if kind == "idle-keep-alive")
    assert sorted(set(recorded_urls(cassette))) == sorted(
        {f"{upstream.url}/v1/served"} | ({f"{upstream.url}/v1/kept"} if kept else set())
    )
