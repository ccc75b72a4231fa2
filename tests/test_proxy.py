"""The recording proxy in reverse mode (`--upstream`): record, replay, stream, refuse, survive.

Real clients talk to `sakura_http.proxy.serve()` on 127.0.0.1, which talks to the deterministic
upstream of `tests.proxy_support`.  Cassettes recorded through the proxy and in-process with
`RecordingTransport` are compared byte for byte.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio.abc
import h11
import httpx
import httpx_sse
import pytest
from anyio.streams.stapled import MultiListener

from sakura_http import CassetteMiss, ConfigurationError, RecordingTransport
from sakura_http.proxy import HEALTH_PATH, RecordingIncomplete, serve, start
from sakura_http.proxy._exchanges import Exchanges
from sakura_http.proxy._server import ProxyServer
from sakura_http.proxy._wire import (
    Timeouts,
    Wire,
    client_headers,
    forwarded_headers,
    framing_problem,
    recorded_headers,
)
from tests.proxy_support import HANG_GUARD, Upstream, sse_events, start_upstream


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with start_upstream() as running:
        yield running


def exchanges(path: Path) -> list[dict[str, Any]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines[1:]]


def client(proxy_url: str, **options: Any) -> httpx.Client:
    return httpx.Client(base_url=proxy_url, timeout=HANG_GUARD, **options)


def raw_exchange(port: int, data: bytes, *, shut: bool = True) -> bytes:
    """Send raw bytes to the proxy and read until it closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=HANG_GUARD) as sock:
        sock.sendall(data)
        if shut:
            sock.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


# --- the header rules --------------------------------------------------------------------


def test_recorded_headers_drop_what_is_addressed_to_the_proxy_and_set_host() -> None:
    raw = [
        (b"Host", b"127.0.0.1:9"),
        (b"Proxy-Connection", b"keep-alive"),
        (b"Proxy-Authorization", b"Basic eDp5"),
        (b"Expect", b"100-continue"),
        (b"Connection", b"keep-alive"),
        (b"Accept", b"*/*"),
    ]
    assert recorded_headers(raw, b"api.example") == [
        (b"Host", b"api.example"),
        (b"Connection", b"keep-alive"),
        (b"Accept", b"*/*"),
    ]
    assert recorded_headers([(b"Accept", b"*/*")], b"api.example")[0] == (b"Host", b"api.example")


def test_forwarded_headers_drop_hop_by_hop_ones() -> None:
    raw = [
        (b"Host", b"api.example"),
        (b"Connection", b"keep-alive, X-Hop"),
        (b"X-Hop", b"1"),
        (b"Keep-Alive", b"timeout=5"),
        (b"Transfer-Encoding", b"chunked"),
        (b"Content-Length", b"3"),
        (b"TE", b"trailers"),
        (b"X-Kept", b"yes"),
    ]
    assert forwarded_headers(raw) == [(b"Host", b"api.example"), (b"X-Kept", b"yes")]


def test_client_headers_keep_a_true_content_length_only() -> None:
    stored = (("content-length", "5"), ("transfer-encoding", "chunked"), ("x-a", "1"))
    assert client_headers(stored, bodiless=False, body_length=5) == [
        (b"content-length", b"5"),
        (b"x-a", b"1"),
    ]
    assert client_headers(stored, bodiless=False, body_length=7) == [(b"x-a", b"1")]
    # HEAD, 204 and 304 keep the content-length of the body they do not carry.
    assert client_headers(stored, bodiless=True, body_length=0)[0] == (b"content-length", b"5")


# --- record, replay, interchange -----------------------------------------------------------


def test_records_under_the_upstream_url_and_replays_offline(
    tmp_path: Path, upstream: Upstream
) -> None:
    cassette = tmp_path / "api.jsonl"
    with (
        serve(cassette, upstream=upstream.url, mode="new_episodes") as proxy,
        client(proxy.url) as http,
    ):
        recorded = http.post("/v1/items?page=2", json={"name": "café"})
    assert recorded.status_code == 200
    (line,) = exchanges(cassette)
    assert line["url"] == f"{upstream.url}/v1/items?page=2"
    assert ["host", f"127.0.0.1:{upstream.port}"] in line["headers"]
    seen = len(upstream.requests)

    with serve(cassette, upstream=upstream.url) as proxy, client(proxy.url) as http:
        replayed = http.post("/v1/items?page=2", json={"name": "café"})
    assert len(upstream.requests) == seen  # offline
    assert replayed.status_code == 200
    assert replayed.json() == recorded.json()
    assert replayed.headers["content-length"] == recorded.headers["content-length"]


def test_upstream_with_a_path_prefix(tmp_path: Path, upstream: Upstream) -> None:
    cassette = tmp_path / "prefix.jsonl"
    with (
        serve(cassette, upstream=upstream.url + "/api/", mode="new_episodes") as proxy,
        client(proxy.url) as http,
    ):
        assert http.get("/v1/x").json()["path"] == "/api/v1/x"
    assert exchanges(cassette)[0]["url"] == f"{upstream.url}/api/v1/x"


REQUESTS = [
    ("GET", "/v1/items?b=2&a=1", None, {}),
    ("POST", "/v1/items", {"name": "café", "tags": ["x"]}, {"x-test": "one"}),
    ("PUT", "/v1/items/1", {"n": 1}, {}),
    ("DELETE", "/v1/items/1", None, {}),
    ("GET", "/sse?n=4", None, {"accept": "text/event-stream"}),
    ("GET", "/gzip", None, {}),
    ("GET", "/status/204", None, {}),
]


def _send_all(http: httpx.Client) -> list[tuple[int, bytes]]:
    out = []
    for method, path, body, headers in REQUESTS:
        response = http.request(method, path, json=body, headers=headers)
        out.append((response.status_code, response.content))
    return out


def test_a_cassette_recorded_through_the_proxy_is_the_in_process_cassette(
    tmp_path: Path, upstream: Upstream
) -> None:
    through_proxy = tmp_path / "proxy.jsonl"
    in_process = tmp_path / "in-process.jsonl"
    with (
        serve(through_proxy, upstream=upstream.url, mode="new_episodes") as proxy,
        client(proxy.url) as http,
    ):
        proxied = _send_all(http)
    transport = RecordingTransport(in_process, mode="new_episodes", outer=httpx.HTTPTransport())
    with httpx.Client(base_url=upstream.url, transport=transport) as http:
        direct = _send_all(http)
    assert proxied == direct
    assert through_proxy.read_bytes() == in_process.read_bytes()


def test_each_replays_the_other(tmp_path: Path, upstream: Upstream) -> None:
    through_proxy = tmp_path / "proxy.jsonl"
    in_process = tmp_path / "in-process.jsonl"
    with (
        serve(through_proxy, upstream=upstream.url, mode="new_episodes") as proxy,
        client(proxy.url) as http,
    ):
        expected = _send_all(http)
    transport = RecordingTransport(in_process, mode="new_episodes", outer=httpx.HTTPTransport())
    with httpx.Client(base_url=upstream.url, transport=transport) as http:
        _send_all(http)
    seen = len(upstream.requests)

    # In-process replay of the proxy's cassette, and proxy replay of the in-process one.
    with httpx.Client(base_url=upstream.url, transport=RecordingTransport(through_proxy)) as http:
        assert _send_all(http) == expected
    with serve(in_process, upstream=upstream.url) as proxy, client(proxy.url) as http:
        assert _send_all(http) == expected
    assert len(upstream.requests) == seen
    assert through_proxy.read_bytes() == in_process.read_bytes()  # replay wrote nothing


def test_sse_keeps_its_recorded_chunks(tmp_path: Path, upstream: Upstream) -> None:
    cassette = tmp_path / "sse.jsonl"
    with (
        serve(cassette, upstream=upstream.url, mode="new_episodes") as proxy,
        client(proxy.url) as http,
        httpx_sse.connect_sse(http, "GET", "/sse?n=5") as source,
    ):
        live = [event.data for event in source.iter_sse()]
    (line,) = exchanges(cassette)
    assert line["chunks"] == [len(e) for e in sse_events(5)]

    with serve(cassette, upstream=upstream.url) as proxy, client(proxy.url) as http:
        with http.stream(
            "GET", "/sse?n=5", headers={"accept": "text/event-stream", "cache-control": "no-store"}
        ) as response:
            chunks = list(response.iter_raw())
        with httpx_sse.connect_sse(http, "GET", "/sse?n=5") as source:
            replayed = [event.data for event in source.iter_sse()]
    assert response.headers["transfer-encoding"] == "chunked"
    assert chunks == sse_events(5)  # one chunk per recorded chunk
    assert replayed == live == [json.dumps({"n": i}) for i in range(1, 6)]


@pytest.mark.anyio
async def test_stream_through_hands_chunks_on_while_recording(
    tmp_path: Path, upstream: Upstream
) -> None:
    cassette = tmp_path / "tee.jsonl"
    with serve(cassette, upstream=upstream.url, mode="new_episodes", stream_through=True) as proxy:
        async with (
            httpx.AsyncClient(base_url=proxy.url, timeout=HANG_GUARD) as http,
            http.stream("GET", "/sse?n=3") as response,
        ):
            chunks = [chunk async for chunk in response.aiter_raw()]
    assert chunks == sse_events(3)
    (line,) = exchanges(cassette)
    assert line["chunks"] == [len(e) for e in sse_events(3)]
    assert not line.get("truncated")


def test_gzip_is_stored_decoded_and_replayed_plain(tmp_path: Path, upstream: Upstream) -> None:
    cassette = tmp_path / "gzip.jsonl"
    with (
        serve(cassette, upstream=upstream.url, mode="new_episodes") as proxy,
        client(proxy.url) as http,
    ):
        assert http.get("/gzip").text == "hello " * 100
    (line,) = exchanges(cassette)
    assert line["response_body"] == "hello " * 100
    with serve(cassette, upstream=upstream.url) as proxy, client(proxy.url) as http:
        response = http.get("/gzip")
    assert "content-encoding" not in response.headers
    assert response.text == "hello " * 100


# --- HTTP/1.1 semantics ----------------------------------------------------------------------


def test_head_204_and_304_carry_no_body(tmp_path: Path, upstream: Upstream) -> None:
    cassette = tmp_path / "bodiless.jsonl"
    for mode in ("new_episodes", "none"):
        with serve(cassette, upstream=upstream.url, mode=mode) as proxy:
            for path, method, status in (
                ("/status/204", "GET", 204),
                ("/status/304", "GET", 304),
                ("/v1/x", "HEAD", 200),
            ):
                request = f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                # No half-close: while recording, a client that shuts its side is gone.
                answer = raw_exchange(proxy.port, request.encode(), shut=False)
                head, _, body = answer.partition(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 %d" % status)
                assert body == b""
            # HEAD keeps the length of the body a GET would get.
            with client(proxy.url) as http:
                assert int(http.head("/v1/x").headers["content-length"]) > 0


def test_keep_alive_serves_many_requests_on_one_connection(
    tmp_path: Path, upstream: Upstream
) -> None:
    cassette = tmp_path / "keepalive.jsonl"
    with serve(cassette, upstream=upstream.url, mode="new_episodes") as proxy:
        request = b"GET /v1/%d HTTP/1.1\r\nHost: x\r\n\r\n"
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=HANG_GUARD) as sock:
            stream = sock.makefile("rb")
            for n in range(3):
                sock.sendall(request % n)
                status = stream.readline()
                assert status.startswith(b"HTTP/1.1 200")
                length = 0
                while (line := stream.readline()) != b"\r\n":
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                assert json.loads(stream.read(length))["path"] == f"/v1/{n}"
    assert len(exchanges(cassette)) == 3


def test_chunked_request_body_and_expect_100_continue(tmp_path: Path, upstream: Upstream) -> None:
    cassette = tmp_path / "upload.jsonl"
    with (
        serve(cassette, upstream=upstream.url, mode="new_episodes") as proxy,
        socket.create_connection(("127.0.0.1", proxy.port), timeout=HANG_GUARD) as sock,
    ):
        sock.sendall(
            b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
            b"Expect: 100-continue\r\nConnection: close\r\n\r\n"
        )
        assert sock.recv(1024).startswith(b"HTTP/1.1 100 ")
        sock.sendall(b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200")
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["body"] == "hello world"
    (line,) = exchanges(cassette)
    assert line["body"] == "hello world"
    names = [name for name, _ in line["headers"]]
    assert "expect" not in names and "transfer-encoding" in names


def test_dozens_of_simultaneous_clients(tmp_path: Path, upstream: Upstream) -> None:
    cassette = tmp_path / "many.jsonl"
    count = 48

    def one(n: int) -> Any:
        with client(proxy.url) as http:
            return http.get(f"/v1/{n}").json()["path"]

    with (
        serve(cassette, upstream=upstream.url, mode="new_episodes") as proxy,
        ThreadPoolExecutor(max_workers=count) as pool,
    ):
        assert sorted(pool.map(one, range(count))) == sorted(f"/v1/{n}" for n in range(count))
    assert len(exchanges(cassette)) == count
    with serve(cassette, upstream=upstream.url) as proxy, ThreadPoolExecutor(count) as pool:
        assert len(list(pool.map(one, range(count)))) == count
    assert len(upstream.requests) == count


def test_as_many_upstream_connections_as_requests_in_flight(
    tmp_path: Path, upstream: Upstream
) -> None:
    # A proxy sends each client's request on at once, however many are in flight: httpx's
    # default pool (100 connections) left one of 101 without its answer, and a stream being
    # recorded may hold a connection for minutes.  (That each connection is kept for the next
    # request, where the default kept 20, shows in benchmark measure 10, not here: whether an
    # idle connection outlives its 5 s depends on the machine's speed.)
    cassette = tmp_path / "wide.jsonl"
    count = 101

    def one(path: str) -> int:
        with client(proxy.url) as http:
            return http.get(path).status_code

    with (
        serve(cassette, upstream=upstream.url, mode="new_episodes") as proxy,
        ThreadPoolExecutor(max_workers=count) as pool,
    ):
        answers = pool.map(one, [f"/wait?n={n}" for n in range(count)])
        for _ in range(int(HANG_GUARD / 0.05)):  # a hang guard: all arrive at once
            if len(upstream.requests) == count:
                break
            time.sleep(0.05)
        assert len(upstream.requests) == count, "requests held back by the proxy"
        upstream.release.set()
        assert list(answers) == [200] * count
    assert len(upstream.connections) == count


# --- errors answer 502 with their name ---------------------------------------------------------


def _assert_error(response: httpx.Response, name: str, *texts: str) -> None:
    assert response.status_code == 502
    assert response.headers["x-sakura-http-error"] == name
    assert response.headers["x-should-retry"] == "false"
    assert response.headers["content-type"].startswith("text/plain")
    for text in texts:
        assert text in response.text


def test_a_miss_answers_502_with_the_cassette_miss_text(
    tmp_path: Path, upstream: Upstream, caplog: pytest.LogCaptureFixture
) -> None:
    cassette = tmp_path / "miss.jsonl"
    with (
        serve(cassette, upstream=upstream.url, mode="new_episodes") as proxy,
        client(proxy.url) as http,
    ):
        http.get("/v1/recorded")
    with serve(cassette, upstream=upstream.url) as proxy, client(proxy.url) as http:
        assert [e.url for e in proxy.unplayed()] == [f"{upstream.url}/v1/recorded"]
        response = http.get("/v1/other")
        assert http.get("/v1/recorded").status_code == 200  # the connection still serves
        assert proxy.unplayed() == [] and proxy.appended == 0
        (miss,) = proxy.raised
    assert isinstance(miss, CassetteMiss) and miss.url == f"{upstream.url}/v1/other"
    _assert_error(
        response,
        "miss",
        f"GET {upstream.url}/v1/other is not in the cassette",
        f"#1 GET {upstream.url}/v1/recorded",
        'pass mode="new_episodes" to serve()',  # advice worded for serve()
    )
    assert "is not in the cassette" in caplog.text
    assert len(upstream.requests) == 1


def test_credentials_are_refused_before_anything_is_sent(
    tmp_path: Path, upstream: Upstream
) -> None:
    cassette = tmp_path / "secret.jsonl"
    with (
        serve(cassette, upstream=upstream.url, mode="new_episodes") as proxy,
        client(proxy.url) as http,
    ):
        response = http.get("/v1/me", headers={"authorization": "Bearer sk-live-123456"})
    _assert_error(
        response,
        "credential",
        "header authorization belongs in secret_headers",
        'serve(..., secret_headers=["authorization"])',
    )
    assert upstream.requests == []
    assert not cassette.exists()

    with (
        serve(
            cassette, upstream=upstream.url, mode="new_episodes", secret_headers=["authorization"]
        ) as proxy,
        client(proxy.url) as http,
    ):
        assert http.get("/v1/me", headers={"authorization": "Bearer sk-live-123456"}).is_success
    assert upstream.requests[0][2]["authorization"] == "Bearer sk-live-123456"
    assert "sk-live" not in cassette.read_text()


def test_over_size_bodies_answer_502(tmp_path: Path, upstream: Upstream) -> None:
    cassette = tmp_path / "big.jsonl"
    with (
        serve(cassette, upstream=upstream.url, mode="new_episodes", max_body_bytes=1000) as proxy,
        client(proxy.url) as http,
    ):
        request_side = http.post("/v1/upload", content=b"x" * 5000)
        response_side = http.get("/big?size=5000")
    _assert_error(request_side, "body-too-large", "request body over 1,000 bytes")
    # Answered before the body was read, the connection closes and says so: a client that
    # sent its next request on it first would have that request dropped unanswered.
    assert request_side.headers["connection"] == "close"
    _assert_error(response_side, "body-too-large", "response body over 1,000 bytes")
    assert not cassette.exists() or exchanges(cassette) == []


def test_a_long_running_proxy_keeps_only_its_latest_errors(
    tmp_path: Path, upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Exchanges, "RAISED_KEPT", 3)
    with serve(tmp_path / "empty.jsonl", upstream=upstream.url) as proxy, client(proxy.url) as http:
        for page in range(5):
            assert http.get(f"/v1/items?page={page}").status_code == 502  # misses: mode none
        kept = list(proxy.raised)
    assert [str(exc).split()[1] for exc in kept] == [
        f"{upstream.url}/v1/items?page={page}" for page in (2, 3, 4)
    ]


class _ShortOfFiles(anyio.abc.Listener[anyio.abc.SocketStream]):
    """A real listening socket whose first accepts fail as they do when the process has run
    out of file descriptors (EMFILE); the connections wait in the backlog meanwhile."""

    def __init__(self, inner: Any, failures: int) -> None:
        self.inner = inner
        self.failures = failures

    async def serve(self, handler: Any, task_group: Any = None) -> None:
        raise AssertionError("the proxy runs its own accept loop")

    async def accept(self) -> anyio.abc.SocketStream:
        if self.failures:
            self.failures -= 1
            raise OSError(errno.EMFILE, "Too many open files")
        return await self.inner.accept()

    async def aclose(self) -> None:
        await self.inner.aclose()

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        return self.inner.extra_attributes


def test_running_out_of_file_descriptors_delays_connections_but_never_stops_the_proxy(
    tmp_path: Path, upstream: Upstream, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    real_listen = ProxyServer.listen

    async def listen(host: str, port: int) -> anyio.abc.Listener[Any]:
        listener = await real_listen(host, port)
        assert isinstance(listener, MultiListener)
        return MultiListener([_ShortOfFiles(one, failures=3) for one in listener.listeners])

    monkeypatch.setattr(ProxyServer, "listen", staticmethod(listen))
    cassette = tmp_path / "short.jsonl"
    with (
        caplog.at_level(logging.WARNING, logger="sakura_http.proxy"),
        serve(cassette, upstream=upstream.url, mode="new_episodes") as proxy,
    ):
        with client(proxy.url) as http:
            assert http.get("/v1/items?page=1").status_code == 200
        with client(proxy.url) as http:  # a new connection, accepted as usual
            assert http.get("/v1/items?page=2").status_code == 200
    assert len(exchanges(cassette)) == 2
    shortages = [r for r in caplog.records if "cannot accept a connection" in r.getMessage()]
    assert len(shortages) == 1  # one warning for the shortage, not one per retry


def test_a_forbidden_recording_answers_502(tmp_path: Path, upstream: Upstream) -> None:
    cassette = tmp_path / "forbidden.jsonl"
    with (
        serve(
            cassette, upstream=upstream.url, mode="new_episodes", record_hosts=["api.example"]
        ) as proxy,
        client(proxy.url) as http,
    ):
        response = http.get("/v1/x")
    _assert_error(response, "recording-forbidden", "not in record_hosts")
    assert upstream.requests == []


def test_an_unreachable_upstream_answers_502(tmp_path: Path) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # bound, never listening: connections are refused
        with (
            serve(
                tmp_path / "down.jsonl", upstream=f"http://127.0.0.1:{port}", mode="new_episodes"
            ) as proxy,
            client(proxy.url) as http,
        ):
            response = http.get("/v1/x")
    _assert_error(response, "upstream", "the upstream request failed: ConnectError")


# --- bad input never crashes it ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"THIS IS NOT HTTP\r\n\r\n", b"400"),
        (b"GET / HTTP/1.1\r\nHost: x\r\n" + b"X-Big: " + b"a" * 200_000 + b"\r\n\r\n", b"431"),
        (b"GET http://elsewhere.example/ HTTP/1.1\r\nHost: x\r\n\r\n", b"400"),
        (b"CONNECT api.example:443 HTTP/1.1\r\nHost: api.example:443\r\n\r\n", b"400"),
        (b"POST /v1 HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly-part", b"400"),
        (b"GET /v1 HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n", b"400"),
    ],
    ids=[
        "garbage",
        "huge-headers",
        "absolute-form",
        "connect",
        "disconnect-mid-body",
        "bad-length",
    ],
)
def test_bad_input_closes_that_connection_only(
    tmp_path: Path, upstream: Upstream, data: bytes, status: bytes
) -> None:
    cassette = tmp_path / "bad.jsonl"
    with serve(cassette, upstream=upstream.url, mode="new_episodes") as proxy:
        with client(proxy.url) as http:
            http.get("/v1/before")
        answer = raw_exchange(proxy.port, data)
        assert answer.startswith(b"HTTP/1.1 " + status)
        assert b"x-sakura-http-error: bad-request" in answer
        with client(proxy.url) as http:
            assert http.get("/v1/after").status_code == 200
    assert [line["url"].rsplit("/", 1)[1] for line in exchanges(cassette)] == ["before", "after"]


# --- request smuggling ------------------------------------------------------------------------

SMUGGLED = b"GET /v1/smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
LAST_CHUNK = b"0\r\n\r\n"


@pytest.mark.parametrize(
    ("version", "headers", "ambiguous"),
    [
        (b"1.1", [("Content-Length", "5")], False),
        (b"1.1", [("Transfer-Encoding", "chunked")], False),
        (b"1.0", [("Content-Length", "5")], False),
        (b"1.1", [("Transfer-Encoding", "chunked"), ("Content-Length", "5")], True),
        (b"1.1", [("content-length", "5"), ("TRANSFER-ENCODING", "Chunked")], True),
        (b"1.0", [("Transfer-Encoding", "chunked")], True),
    ],
)
def test_framing_problem(version: bytes, headers: list[tuple[str, str]], ambiguous: bool) -> None:
    request = h11.Request(
        method="POST", target="/", headers=[("Host", "x"), *headers], http_version=version
    )
    assert (framing_problem(request) is not None) is ambiguous


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (
            b"POST /v1/a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + LAST_CHUNK + SMUGGLED,
            b"400",
        ),
        (
            b"POST /v1/a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
            b"Content-Length: %d\r\n\r\n" % len(LAST_CHUNK + SMUGGLED) + LAST_CHUNK + SMUGGLED,
            b"400",
        ),
        (
            b"POST /v1/a HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            + LAST_CHUNK
            + SMUGGLED,
            b"400",
        ),
        (
            b"POST /v1/a HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: %d\r\n"
            b"\r\n" % len(SMUGGLED) + SMUGGLED,
            b"400",
        ),
        (
            b"POST /v1/a HTTP/1.1\r\nHost: x\r\nContent-Length: 0, %d\r\n\r\n" % len(SMUGGLED)
            + SMUGGLED,
            b"400",
        ),
        (
            b"POST /v1/a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
            + LAST_CHUNK
            + SMUGGLED,
            b"501",
        ),
    ],
    ids=["cl-then-te", "te-then-cl", "te-in-http-1.0", "two-lengths", "length-list", "te-gzip"],
)
def test_ambiguous_framing_is_refused_and_the_connection_closed(
    tmp_path: Path, upstream: Upstream, data: bytes, status: bytes
) -> None:
    cassette = tmp_path / "smuggled.jsonl"
    with serve(cassette, upstream=upstream.url, mode="new_episodes") as proxy:
        # Not shut for writing: the proxy itself must close, not read on.
        answer = raw_exchange(proxy.port, data, shut=False)
    assert answer.startswith(b"HTTP/1.1 " + status + b" ")
    assert answer.count(b"HTTP/1.1 ") == 1  # one answer: the bytes after it were never read
    assert b"\r\nconnection: close\r\n" in answer.lower()
    assert b"x-sakura-http-error: bad-request" in answer
    assert upstream.requests == []
    assert not cassette.exists() or exchanges(cassette) == []


def test_the_refusal_says_why(tmp_path: Path, upstream: Upstream) -> None:
    data = (
        b"POST /v1/a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" + LAST_CHUNK
    )
    with serve(tmp_path / "why.jsonl", upstream=upstream.url) as proxy:
        answer = raw_exchange(proxy.port, data, shut=False)
    body = answer.split(b"\r\n\r\n", 1)[1].decode()
    assert body == (
        "bad request: both Content-Length and Transfer-Encoding: the body's end is ambiguous, "
        "which is how requests are smuggled (RFC 9112, section 6.3); send one of them\n"
    )


def test_equal_duplicate_lengths_are_one_length(tmp_path: Path, upstream: Upstream) -> None:
    # RFC 9110 section 8.6 lets a recipient take `5, 5` as 5: there is nothing to disagree on.
    data = (
        b"POST /v1/a HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\nContent-Length: 5\r\n"
        b"Connection: close\r\n\r\nhello"
    )
    with serve(tmp_path / "same.jsonl", upstream=upstream.url, mode="new_episodes") as proxy:
        answer = raw_exchange(proxy.port, data, shut=False)
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert [e["body"] for e in exchanges(tmp_path / "same.jsonl")] == ["hello"]


# --- timeouts: a stuck or hostile client cannot hold a connection -----------------------------


def read_until_closed(sock: socket.socket) -> bytes:
    """What the proxy sends until it closes the connection (a reset counts as closed)."""
    chunks = []
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


SHORT = {"header_timeout": 0.3, "idle_timeout": 0.3}


@pytest.mark.parametrize(
    ("sent", "answer"),
    [
        (b"", b""),  # a connection that never sends a byte is closed silently
        (b"GET /v1/slow HTTP/1.1\r\nHost: x\r\n", b"HTTP/1.1 408 "),
    ],
    ids=["nothing", "part-of-a-head"],
)
def test_a_client_that_never_finishes_its_head_is_closed(
    tmp_path: Path, upstream: Upstream, sent: bytes, answer: bytes
) -> None:
    with serve(tmp_path / "a.jsonl", upstream=upstream.url, mode="new_episodes", **SHORT) as proxy:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=HANG_GUARD) as sock:
            sock.sendall(sent)
            got = read_until_closed(sock)
        with client(proxy.url) as http:  # the others are served as ever
            assert http.get("/v1/after").status_code == 200
    assert got.startswith(answer) and (answer or got == b"")
    if answer:
        assert b"\r\nconnection: close\r\n" in got
        assert b"x-sakura-http-error: request-timeout" in got
    assert [path for _, path, _ in upstream.requests] == ["/v1/after"]


def test_a_slowloris_head_is_closed_although_bytes_keep_coming(
    tmp_path: Path, upstream: Upstream
) -> None:
    head = itertools.chain(b"GET /v1/slow HTTP/1.1\r\nHost: x\r\n", itertools.cycle(b"X-a: b\r\n"))
    with (
        serve(tmp_path / "a.jsonl", upstream=upstream.url, header_timeout=0.3) as proxy,
        socket.create_connection(("127.0.0.1", proxy.port), timeout=HANG_GUARD) as sock,
    ):
        got = b""
        sock.settimeout(0.02)
        give_up = time.monotonic() + HANG_GUARD  # a hang guard, not a measure
        for byte in head:  # one byte at a time, never the blank line that ends the head
            assert time.monotonic() < give_up, "the proxy never closed the connection"
            try:
                sock.sendall(bytes([byte]))
                got = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:  # the proxy closed while a byte was on its way
                break
            break  # an answer, or the close
        sock.settimeout(HANG_GUARD)
        with contextlib.suppress(OSError):
            got += read_until_closed(sock)
    assert got.startswith(b"HTTP/1.1 408 ")


def test_an_idle_keep_alive_connection_is_closed(tmp_path: Path, upstream: Upstream) -> None:
    with (
        serve(tmp_path / "a.jsonl", upstream=upstream.url, mode="new_episodes", **SHORT) as proxy,
        socket.create_connection(("127.0.0.1", proxy.port), timeout=HANG_GUARD) as sock,
    ):
        sock.sendall(b"GET /v1/a HTTP/1.1\r\nHost: x\r\n\r\n")
        got = read_until_closed(sock)
    assert got.startswith(b"HTTP/1.1 200 ")
    assert got.count(b"HTTP/1.1 ") == 1  # closed without another word


def test_a_keep_alive_connection_in_use_is_not_closed(tmp_path: Path, upstream: Upstream) -> None:
    # Each request on a connection gets its own header_timeout, counted from its first byte:
    # a connection used for longer than the timeouts is served as long as it is used.
    with (
        serve(tmp_path / "a.jsonl", upstream=upstream.url, mode="new_episodes", **SHORT) as proxy,
        client(proxy.url) as http,
    ):
        for n in range(5):
            assert http.get(f"/v1/{n}").status_code == 200
            threading.Event().wait(0.1)
    assert len(upstream.requests) == 5


def test_a_client_that_stops_mid_body_is_answered_408_and_closed(
    tmp_path: Path, upstream: Upstream
) -> None:
    cassette = tmp_path / "a.jsonl"
    with (
        serve(cassette, upstream=upstream.url, mode="new_episodes", **SHORT) as proxy,
        socket.create_connection(("127.0.0.1", proxy.port), timeout=HANG_GUARD) as sock,
    ):
        sock.sendall(b"POST /v1/a HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
        got = read_until_closed(sock)
    assert got.startswith(b"HTTP/1.1 408 ")
    assert b"\r\nconnection: close\r\n" in got
    assert upstream.requests == []
    assert not cassette.exists() or exchanges(cassette) == []


def test_a_client_that_does_not_read_its_answer_is_closed(
    tmp_path: Path, upstream: Upstream, caplog: pytest.LogCaptureFixture
) -> None:
    size = 15 * 1024 * 1024  # more than the socket buffers hold, less than the body limit
    with (
        caplog.at_level(logging.WARNING, logger="sakura_http.proxy"),
        serve(tmp_path / "a.jsonl", upstream=upstream.url, mode="new_episodes", **SHORT) as proxy,
        socket.create_connection(("127.0.0.1", proxy.port), timeout=HANG_GUARD) as sock,
    ):
        sock.sendall(b"GET /big?size=%d HTTP/1.1\r\nHost: x\r\n\r\n" % size)
        waited = 0.0
        while "left its answer unread" not in caplog.text:
            assert waited < HANG_GUARD, "the proxy never gave up on the client"
            threading.Event().wait(0.05)
            waited += 0.05
        got = read_until_closed(sock)
    assert got.startswith(b"HTTP/1.1 200 ")
    assert len(got) < size  # cut off: the proxy closed the connection


def test_timeouts_must_be_positive(tmp_path: Path) -> None:
    for name in ("header_timeout", "idle_timeout"):
        for bad in (0, -1.0, float("nan"), "1"):
            with pytest.raises(ConfigurationError, match=f"{name}=.* more than 0"):
                start(tmp_path / "x.jsonl", upstream="http://127.0.0.1:9", **{name: bad})


# --- shutdown --------------------------------------------------------------------------------


def test_shutdown_lets_exchanges_in_flight_finish(tmp_path: Path, upstream: Upstream) -> None:
    cassette = tmp_path / "inflight.jsonl"
    results: list[httpx.Response] = []
    started = threading.Event()

    def slow_client(url: str) -> None:
        with client(url) as http:
            started.set()
            results.append(http.get("/wait"))

    with serve(
        cassette, upstream=upstream.url, mode="new_episodes", shutdown_timeout=HANG_GUARD
    ) as proxy:
        thread = threading.Thread(target=slow_client, args=(proxy.url,))
        thread.start()
        started.wait(HANG_GUARD)
        while not upstream.requests:  # the request reached the upstream
            threading.Event().wait(0.01)
        threading.Timer(0.2, upstream.release.set).start()
    thread.join(HANG_GUARD)
    assert results[0].text == "released"
    assert [line["url"] for line in exchanges(cassette)] == [f"{upstream.url}/wait"]


def test_mode_all_replaces_the_cassette_on_a_clean_shutdown(
    tmp_path: Path, upstream: Upstream
) -> None:
    cassette = tmp_path / "rerecord.jsonl"
    with (
        serve(cassette, upstream=upstream.url, mode="new_episodes") as proxy,
        client(proxy.url) as http,
    ):
        http.get("/v1/old")
    with serve(cassette, upstream=upstream.url, mode="all") as proxy, client(proxy.url) as http:
        http.get("/v1/new")
        assert [e["url"] for e in exchanges(cassette)] == [f"{upstream.url}/v1/old"]
    assert [e["url"] for e in exchanges(cassette)] == [f"{upstream.url}/v1/new"]


def test_mode_all_keeps_the_old_cassette_when_the_block_fails(
    tmp_path: Path, upstream: Upstream
) -> None:
    cassette = tmp_path / "failed.jsonl"
    with (
        serve(cassette, upstream=upstream.url, mode="new_episodes") as proxy,
        client(proxy.url) as http,
    ):
        http.get("/v1/old")
    old = cassette.read_bytes()
    with (
        pytest.raises(RuntimeError, match="the test failed"),
        serve(cassette, upstream=upstream.url, mode="all") as proxy,
        client(proxy.url) as http,
    ):
        http.get("/v1/new")
        raise RuntimeError("the test failed")
    assert cassette.read_bytes() == old
    assert not (tmp_path / "failed.jsonl.recording").exists()


def test_a_non_loopback_listen_address_warns(caplog: pytest.LogCaptureFixture) -> None:
    from sakura_http.proxy import _listen_address

    with caplog.at_level(logging.WARNING, "sakura_http.proxy"):
        assert _listen_address("[::1]:0", "a.jsonl") == ("::1", 0)
        assert _listen_address("localhost:8080", "a.jsonl") == ("localhost", 8080)
        assert _listen_address("127.0.0.2", "a.jsonl") == ("127.0.0.2", 0)
        assert caplog.text == ""
        # Nothing is bound here: the address is only checked.
        assert _listen_address("0.0.0.0:0", "a.jsonl") == ("0.0.0.0", 0)
    assert "anyone who can reach it can replay the cassette a.jsonl" in caplog.text


# --- options shared with RecordingTransport ---------------------------------------------------


def test_record_timings_and_replay_latency(tmp_path: Path, upstream: Upstream) -> None:
    cassette = tmp_path / "timed.jsonl"
    with (
        serve(cassette, upstream=upstream.url, mode="new_episodes", record_timings=True) as proxy,
        client(proxy.url) as http,
    ):
        http.get("/sse?n=3")
    (line,) = exchanges(cassette)
    assert len(line["timings_ms"]) == 3
    with (
        serve(cassette, upstream=upstream.url, replay_latency=0.5) as proxy,
        client(proxy.url) as http,
        http.stream("GET", "/sse?n=3") as response,
    ):
        assert list(response.iter_raw()) == sse_events(3)


def test_record_errors_replays_the_recorded_failure(tmp_path: Path) -> None:
    cassette = tmp_path / "fault.jsonl"
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{unused.getsockname()[1]}"
        with (
            serve(cassette, upstream=down, mode="new_episodes", record_errors=True) as proxy,
            client(proxy.url) as http,
        ):
            live = http.get("/v1/x")
        with serve(cassette, upstream=down) as proxy, client(proxy.url) as http:
            replayed = http.get("/v1/x")
    (line,) = exchanges(cassette)
    assert line["error"]["type"] == "ConnectError"
    _assert_error(live, "upstream", "ConnectError")
    _assert_error(replayed, "upstream", "the recorded upstream request failed: ConnectError")


def test_upstream_tls_is_verified(tmp_path: Path) -> None:
    with start_upstream(tls=True, folder=tmp_path) as upstream:
        with (
            serve(tmp_path / "a.jsonl", upstream=upstream.url, mode="new_episodes") as proxy,
            client(proxy.url) as http,
        ):
            refused = http.get("/v1/x")  # the trustme CA is not one of the system's
        with (
            serve(
                tmp_path / "a.jsonl",
                upstream=upstream.url,
                mode="new_episodes",
                verify=upstream.ca_file,
            ) as proxy,
            client(proxy.url) as http,
        ):
            assert http.get("/v1/x").json()["path"] == "/v1/x"
    _assert_error(refused, "upstream", "CERTIFICATE_VERIFY_FAILED")
    assert len(exchanges(tmp_path / "a.jsonl")) == 1


def test_a_client_leaving_a_stream_through_records_it_truncated(tmp_path: Path) -> None:
    from tests.servers import sse_event, start_stream_server

    cassette = tmp_path / "left.jsonl"
    with start_stream_server() as server:
        with (
            serve(cassette, upstream=server.url, mode="new_episodes", stream_through=True) as proxy,
            client(proxy.url) as http,
            http.stream("GET", "/sse/endless?gap_ms=20") as response,
        ):
            stream = response.iter_raw()
            first = [next(stream), next(stream)]
        assert first == [sse_event(1), sse_event(2)]
    (line,) = exchanges(cassette)
    assert line["truncated"] is True
    assert line["response_body"].startswith((sse_event(1) + sse_event(2)).decode())


@pytest.mark.parametrize("stream_through", [False, True])
def test_an_upstream_breaking_mid_body_records_nothing(
    tmp_path: Path, upstream: Upstream, stream_through: bool
) -> None:
    cassette = tmp_path / "broken.jsonl"
    with (
        serve(
            cassette, upstream=upstream.url, mode="new_episodes", stream_through=stream_through
        ) as proxy,
        client(proxy.url) as http,
    ):
        if stream_through:  # the head was sent: the client sees the body end too early
            with pytest.raises(httpx.RemoteProtocolError):
                http.get("/broken")
        else:
            _assert_error(http.get("/broken"), "upstream", "RemoteProtocolError")
        assert http.get("/v1/after").status_code == 200  # the proxy serves on
    assert [line["url"] for line in exchanges(cassette)] == [f"{upstream.url}/v1/after"]


def test_shutdown_waits_a_bounded_time(tmp_path: Path, upstream: Upstream) -> None:
    cassette = tmp_path / "stuck.jsonl"
    failures: list[BaseException] = []

    def stuck_client(url: str) -> None:
        with client(url) as http:
            try:
                http.get("/wait")
            except httpx.HTTPError as exc:
                failures.append(exc)

    with serve(cassette, upstream=upstream.url, mode="new_episodes", shutdown_timeout=0.2) as proxy:
        thread = threading.Thread(target=stuck_client, args=(proxy.url,))
        thread.start()
        while not upstream.requests:
            threading.Event().wait(0.01)
    # The block ended although the upstream never answered: the exchange was cancelled.
    upstream.release.set()
    thread.join(HANG_GUARD)
    assert isinstance(failures[0], httpx.RemoteProtocolError)
    assert not cassette.exists() or exchanges(cassette) == []


def test_mode_all_keeps_the_old_cassette_when_shutdown_cancels_a_request(
    tmp_path: Path, upstream: Upstream
) -> None:
    cassette = tmp_path / "cut.jsonl"
    upstream.release.set()
    with (
        serve(cassette, upstream=upstream.url, mode="new_episodes") as proxy,
        client(proxy.url) as http,
    ):
        http.get("/v1/fast")
        http.get("/wait")
    old = cassette.read_bytes()
    upstream.release.clear()
    failures: list[BaseException] = []

    def stuck_client(url: str) -> None:
        with client(url) as http:
            try:
                http.get("/wait")
            except httpx.HTTPError as exc:
                failures.append(exc)

    with (
        pytest.raises(RecordingIncomplete) as caught,
        serve(cassette, upstream=upstream.url, mode="all", shutdown_timeout=0.2) as proxy,
    ):
        with client(proxy.url) as http:
            http.get("/v1/fast")
        thread = threading.Thread(target=stuck_client, args=(proxy.url,))
        thread.start()
        while len(upstream.requests) < 4:
            threading.Event().wait(0.01)
    upstream.release.set()
    thread.join(HANG_GUARD)
    assert isinstance(failures[0], httpx.RemoteProtocolError)
    assert cassette.read_bytes() == old
    assert caught.value.cancelled == 1 and caught.value.path == str(cassette)
    assert "give them more time with serve(..., shutdown_timeout=...)" in str(caught.value)


def test_a_timeout_must_be_a_number_of_seconds(tmp_path: Path) -> None:
    for bad in (-1, float("nan"), "10", True):
        with pytest.raises(ConfigurationError, match="must be a number of seconds"):
            start(tmp_path / "x.jsonl", upstream="http://127.0.0.1:9", shutdown_timeout=bad)


def test_the_public_surface_is_sorted_and_documented() -> None:
    import sakura_http.proxy as proxy

    assert proxy.__all__ == sorted(proxy.__all__, key=lambda n: (not n.isupper(), n))
    for name in ("serve", "start", "run", "Proxy", "CertificateAuthority", "default_ca_dir"):
        assert name in proxy.__all__
    for name in proxy.__all__:
        member = getattr(proxy, name)
        if callable(member):
            assert member.__doc__, name


# --- the health check -------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_the_health_check_is_answered_by_the_proxy_itself(
    tmp_path: Path, upstream: Upstream, method: str
) -> None:
    cassette = tmp_path / "health.jsonl"
    with serve(cassette, upstream=upstream.url) as proxy, client(proxy.url) as http:  # mode none
        answer = http.request(method, HEALTH_PATH)
        with_query = http.get(HEALTH_PATH + "?probe=compose")
        after = http.get("/v1/missed")  # the connection, and the proxy, serve on
    assert answer.status_code == with_query.status_code == 200
    assert answer.headers["content-type"] == "application/json"
    if method == "GET":
        assert answer.json() == {"status": "ready", "mode": "none"}
    else:
        assert answer.content == b""
    assert after.status_code == 502 and after.headers["x-sakura-http-error"] == "miss"
    assert upstream.requests == []  # never forwarded
    assert len(proxy.raised) == 1  # the miss; the health checks are no misses


def test_only_the_exact_health_path_is_the_proxys_own(tmp_path: Path, upstream: Upstream) -> None:
    cassette = tmp_path / "health.jsonl"
    with (
        serve(cassette, upstream=upstream.url, mode="new_episodes") as proxy,
        client(proxy.url) as http,
    ):
        assert http.post(HEALTH_PATH, content=b"{}").status_code == 200  # forwarded
        assert http.get(HEALTH_PATH + "/more").status_code == 200  # forwarded
    assert [(m, p) for m, p, _ in upstream.requests] == [
        ("POST", HEALTH_PATH),
        ("GET", HEALTH_PATH + "/more"),
    ]


# --- several upstreams, one path prefix each ---------------------------------------------------


def test_named_upstreams_are_served_under_their_prefixes(tmp_path: Path) -> None:
    cassette = tmp_path / "two.jsonl"
    paths = ["/api/v1/items?page=2", "/auth/token", "/api", "/api?x=1"]
    with start_upstream() as api, start_upstream() as auth:
        upstreams = {"api": api.url, "auth": f"{auth.url}/v2"}
        with (
            serve(cassette, upstream=upstreams, mode="new_episodes") as proxy,
            client(proxy.url) as http,
        ):
            assert proxy.upstreams == upstreams and proxy.upstream is None
            assert proxy.env() == {"NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
            live = [http.get(path) for path in paths]
            unknown = http.get("/billing/v1/x")
        assert [p for _, p, _ in api.requests] == ["/v1/items?page=2", "/", "/?x=1"]
        assert [p for _, p, _ in auth.requests] == ["/v2/token"]
    assert [r.status_code for r in live] == [200] * 4
    assert [line["url"] for line in exchanges(cassette)] == [
        f"{api.url}/v1/items?page=2", f"{auth.url}/v2/token", f"{api.url}/", f"{api.url}/?x=1",
    ]  # fmt: skip
    assert unknown.status_code == 400
    assert unknown.text.startswith(
        f"no upstream is named 'billing' (in '/billing/v1/x'): this proxy serves /api/... for "
        f"{api.url}, /auth/... for {auth.url}/v2;"
    )
    # Replayed offline, with the upstreams gone.
    with serve(cassette, upstream=upstreams) as proxy, client(proxy.url) as http:
        assert [http.get(path).content for path in paths] == [r.content for r in live]


@pytest.mark.parametrize(
    ("upstream", "message"),
    [
        ({}, "upstream={} names no upstream"),
        ({"a/b": "http://127.0.0.1:9"}, "upstream name 'a/b' must be one path segment"),
        ({"_x": "http://127.0.0.1:9"}, "upstream name '_x' must be one path segment"),
        ({"a": "ftp://127.0.0.1"}, "must be an http:// or https:// URL"),
    ],
)
def test_named_upstreams_are_checked(tmp_path: Path, upstream: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        start(tmp_path / "a.jsonl", upstream=upstream)


# --- a client that goes away while its answer is recorded --------------------------------------


def test_a_client_leaving_a_recording_frees_both_sockets_at_once(
    tmp_path: Path, upstream: Upstream, caplog: pytest.LogCaptureFixture
) -> None:
    cassette = tmp_path / "left.jsonl"
    caplog.set_level(logging.WARNING, "sakura_http.proxy")
    with serve(cassette, upstream=upstream.url, mode="new_episodes", shutdown_timeout=0.5) as proxy:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=HANG_GUARD) as sock:
            sock.sendall(b"GET /forever HTTP/1.1\r\nHost: x\r\n\r\n")
            while not upstream.requests:  # the request reached the upstream
                threading.Event().wait(0.01)
        # The client is gone: the proxy cancels the upstream request, which closes its socket.
        assert upstream.reader_gone.wait(HANG_GUARD)
        with client(proxy.url) as http:
            assert http.get("/v1/after").status_code == 200
        server = proxy._prepared.server
    assert server.cancelled == 0  # nothing was left in flight for the shutdown to cut off
    assert [line["url"] for line in exchanges(cassette)] == [f"{upstream.url}/v1/after"]
    assert "went away while its answer was being recorded; nothing recorded" in caplog.text


def test_a_request_pipelined_while_one_is_recorded_is_served_next(
    tmp_path: Path, upstream: Upstream
) -> None:
    cassette = tmp_path / "pipelined.jsonl"
    with (
        serve(cassette, upstream=upstream.url, mode="new_episodes") as proxy,
        socket.create_connection(("127.0.0.1", proxy.port), timeout=HANG_GUARD) as sock,
    ):
        sock.sendall(b"GET /wait HTTP/1.1\r\nHost: x\r\n\r\n")
        while not upstream.requests:  # the first is being recorded
            threading.Event().wait(0.01)
        # Read by the proxy while it watches the client, and kept for the next cycle.
        sock.sendall(b"GET /v1/next HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        threading.Event().wait(0.05)
        upstream.release.set()
        answer = read_until_closed(sock)
    assert answer.count(b"HTTP/1.1 200 ") == 2
    assert [line["url"].rsplit("/", 1)[1] for line in exchanges(cassette)] == ["wait", "next"]


def _read_answer(sock: socket.socket) -> tuple[bytes, bytes]:
    """One answer framed by its content-length, read in small pieces (a slow reader)."""
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(65536)
    head, _, body = answer.partition(b"\r\n\r\n")
    length = int(re.search(rb"content-length: (\d+)", head.lower()).group(1))  # type: ignore[union-attr]
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "closed early"
        body += chunk
    return head, body


class _Sent(anyio.abc.ByteStream):
    """A client connection that keeps what the proxy writes to it, one item per write."""

    def __init__(self) -> None:
        self.writes: list[Any] = []

    async def send(self, item: bytes) -> None:
        self.writes.append(item)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        raise anyio.EndOfStream

    async def send_eof(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


def _wire_after(request: bytes) -> tuple[Wire, _Sent]:
    sent = _Sent()
    wire = Wire(sent, "a client", Timeouts(HANG_GUARD, HANG_GUARD))
    wire.h11.receive_data(request)
    while not isinstance(wire.h11.next_event(), h11.EndOfMessage):
        pass
    return wire, sent


@pytest.mark.anyio
@pytest.mark.parametrize("size", [0, 1, 200_000, 5 * 1024 * 1024 + 7])
async def test_a_whole_answer_goes_out_in_few_writes_its_body_uncopied(size: int) -> None:
    # Each write is a system call that wakes the client: a small answer is one write, a big
    # body goes as slices of the stored bytes themselves (memoryviews, not copies).
    body = bytes(range(256)) * (size // 256) + bytes(size % 256)
    wire, sent = _wire_after(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
    length = [(b"content-length", str(size).encode())]
    await wire.send_whole(h11.Response(status_code=200, headers=length), body)
    assert wire.reusable()
    head, _, start = bytes(sent.writes[0]).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and f"content-length: {size}".encode() in head
    assert start + b"".join(sent.writes[1:]) == body
    if size <= 200_000:
        assert len(sent.writes) == 1
    else:
        assert len(sent.writes) <= 1 + size // (1024 * 1024) + 1
        assert all(isinstance(w, memoryview) and w.obj is body for w in sent.writes[1:])


@pytest.mark.anyio
async def test_a_whole_answer_to_head_is_its_head_alone() -> None:
    wire, sent = _wire_after(b"HEAD /x HTTP/1.1\r\nHost: a\r\n\r\n")
    length = [(b"content-length", b"5")]
    await wire.send_whole(h11.Response(status_code=200, headers=length), b"")
    assert wire.reusable()
    assert len(sent.writes) == 1 and bytes(sent.writes[0]).endswith(b"content-length: 5\r\n\r\n")


def test_a_big_body_framed_by_its_length_replays_whole(tmp_path: Path, upstream: Upstream) -> None:
    # The replay hot path: a body with a true content-length goes out in slices, uncopied.
    cassette = tmp_path / "big.jsonl"
    size = 5 * 1024 * 1024 + 7
    request = f"GET /big?size={size} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    answers = []
    for mode in ("new_episodes", "none"):
        with (
            serve(cassette, upstream=upstream.url, mode=mode) as proxy,
            socket.create_connection(("127.0.0.1", proxy.port), timeout=HANG_GUARD) as sock,
        ):
            sock.sendall(request)
            answers.append(_read_answer(sock))
            sock.sendall(request)  # the connection is reusable: the body ended where it said
            answers.append(_read_answer(sock))
    assert len(upstream.requests) == 2  # recorded twice, then replayed twice
    for head, body in answers:
        assert head.startswith(b"HTTP/1.1 200 ")
        assert f"content-length: {size}".encode() in head.lower()
        assert b"transfer-encoding" not in head.lower()
        assert body == bytes(size)
