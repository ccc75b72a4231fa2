"""Replaying streamed responses: chunk boundaries, every read API, pacing and memory.

These tests replay hand-written cassettes (hosts under the reserved `.test` name, no network);
`test_streaming_record.py` records from real servers on 127.0.0.1.  Each behaviour runs with
httpx and httpx2 (the `lib` fixture), sync and async (anyio: asyncio and trio).
"""

from __future__ import annotations

import base64
import copy
import gzip
import importlib
import itertools
import json
import pickle
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import httpx_sse
import pytest

from sakura_http import RecordingTransport, _libraries
from sakura_http._streams import DEFAULT_CHUNK_SIZE, ReplayStream

URL = "http://api.example.test/stream"

# What httpx (and httpx2) send on a plain GET, and what httpx-sse adds, less the volatile headers.
PLAIN_HEADERS = [["accept", "*/*"]]
SSE_HEADERS = [["accept", "text/event-stream"], ["cache-control", "no-store"]]

# httpx's and httpcore's own async generators (Response.aiter_raw, BoundAsyncStream.__aiter__,
# PoolByteStream.__aiter__, httpx-sse's aiter_sse) are left unexhausted when a caller stops
# reading early, and trio warns when it has to finalize them; it does against a live server too.
# sakura-http's streams are not generators, and this filter spares only httpx's and httpcore's.
IGNORE_HTTPX_ASYNCGEN = pytest.mark.filterwarnings(
    "ignore:Async generator 'http(x|core):ResourceWarning"
)


def write_cassette(
    path: Path,
    body: bytes,
    *,
    chunks: Sequence[int] | None = None,
    timings_ms: Sequence[float] | None = None,
    content_type: str = "application/x-ndjson",
    headers: list[list[str]] = PLAIN_HEADERS,
    content_encoding: str | None = None,
) -> Path:
    """Write a cassette by hand: the header line and one GET `URL` exchange answering `body`."""
    exchange: dict[str, Any] = {
        "method": "GET",
        "url": URL,
        "headers": headers,
        "body": "",
        "status": 200,
        "response_headers": [["content-type", content_type]],
    }
    if content_encoding is not None:
        exchange["response_headers"].append(["content-encoding", content_encoding])
    try:
        exchange["response_body"] = body.decode("utf-8")
    except UnicodeDecodeError:
        exchange["response_body_b64"] = base64.b64encode(body).decode("ascii")
    if chunks is not None:
        exchange["chunks"] = list(chunks)
    if timings_ms is not None:
        exchange["timings_ms"] = list(timings_ms)
    lines = [{"schema_version": "1.0", "kind": "cassette"}, exchange]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def split(body: bytes, cuts: Sequence[int]) -> list[bytes]:
    """`body` cut at the given offsets."""
    bounds = [0, *cuts, len(body)]
    return [body[a:b] for a, b in itertools.pairwise(bounds)]


# --- an NDJSON body whose recorded chunks split lines and multi-byte characters -------------------

LINES = ['{"n": 0, "text": "été"}', '{"n": 1, "text": "☕ and 🍰"}', '{"n": 2, "text": ""}']
NDJSON = "".join(line + "\n" for line in LINES).encode()
CUTS = [
    NDJSON.index("é".encode()) + 1,  # inside a 2-byte character
    NDJSON.index(b"\n") + 5,  # just after the first line ends
    NDJSON.index("☕".encode()) + 2,  # inside a 3-byte character
    NDJSON.index("🍰".encode()) + 1,  # inside a 4-byte character
    NDJSON.index("🍰".encode()) + 3,  # ... and again
]
PIECES = split(NDJSON, CUTS)


@pytest.fixture
def ndjson_cassette(tmp_path: Path) -> Path:
    return write_cassette(tmp_path / "ndjson.jsonl", NDJSON, chunks=[len(p) for p in PIECES])


# Each read API, with what it must return for NDJSON in PIECES.
READS: list[tuple[str, dict[str, Any]]] = [
    ("raw", {}),
    ("bytes", {}),
    ("bytes", {"chunk_size": 5}),
    ("bytes", {"chunk_size": 1000}),
    ("text", {}),
    ("lines", {}),
    ("read", {}),
]


def check_read(how: str, kwargs: dict[str, Any], got: list[Any]) -> None:
    if how in ("raw", "bytes") and not kwargs:
        assert got == PIECES  # the recorded boundaries, as a live server delivered them
    elif how == "bytes":
        n = kwargs["chunk_size"]
        assert b"".join(got) == NDJSON
        assert all(0 < len(chunk) <= n for chunk in got)  # nothing empty, nothing after EOF
        assert all(len(chunk) == n for chunk in got[:-1])
    elif how == "text":
        assert "".join(got) == NDJSON.decode()  # split characters reassembled, none replaced
        assert "\ufffd" not in "".join(got)
    elif how == "lines":
        assert got == LINES
    else:
        assert got == [NDJSON]


def sync_read(client: Any, how: str, kwargs: dict[str, Any]) -> list[Any]:
    with client.stream("GET", URL) as response:
        if how == "read":
            return [response.read()]
        return list(getattr(response, f"iter_{how}")(**kwargs))


async def async_read(client: Any, how: str, kwargs: dict[str, Any]) -> list[Any]:
    async with client.stream("GET", URL) as response:
        if how == "read":
            return [await response.aread()]
        return [chunk async for chunk in getattr(response, f"aiter_{how}")(**kwargs)]


@pytest.mark.parametrize(("how", "kwargs"), READS)
def test_sync_reads_see_recorded_chunks(
    lib: ModuleType, ndjson_cassette: Path, how: str, kwargs: dict[str, Any]
) -> None:
    with lib.Client(transport=RecordingTransport(ndjson_cassette)) as client:
        check_read(how, kwargs, sync_read(client, how, kwargs))


@pytest.mark.anyio
@pytest.mark.parametrize(("how", "kwargs"), READS)
async def test_async_reads_see_recorded_chunks(
    lib: ModuleType, ndjson_cassette: Path, how: str, kwargs: dict[str, Any]
) -> None:
    async with lib.AsyncClient(transport=RecordingTransport(ndjson_cassette)) as client:
        check_read(how, kwargs, await async_read(client, how, kwargs))


def test_client_get_reads_the_whole_body(lib: ModuleType, ndjson_cassette: Path) -> None:
    with lib.Client(transport=RecordingTransport(ndjson_cassette)) as client:
        response = client.get(URL)
    assert response.content == NDJSON
    assert [json.loads(line) for line in response.iter_lines()] == [json.loads(x) for x in LINES]


# --- fixed-size chunks when no boundaries were recorded ----------------------------------------


def test_without_recorded_chunks_replay_uses_the_default_chunk_size(
    lib: ModuleType, tmp_path: Path
) -> None:
    body = b"x" * (2 * DEFAULT_CHUNK_SIZE + 10)
    path = write_cassette(tmp_path / "c.jsonl", body, content_type="application/octet-stream")
    with (
        lib.Client(transport=RecordingTransport(path)) as client,
        client.stream("GET", URL) as response,
    ):
        sizes = [len(chunk) for chunk in response.iter_raw()]
    assert sizes == [DEFAULT_CHUNK_SIZE, DEFAULT_CHUNK_SIZE, 10]


@pytest.mark.anyio
async def test_replay_chunk_size_is_configurable(lib: ModuleType, tmp_path: Path) -> None:
    path = write_cassette(tmp_path / "c.jsonl", b"0123456789", content_type="text/plain")
    transport = RecordingTransport(path, replay_chunk_size=4)
    async with (
        lib.AsyncClient(transport=transport) as client,
        client.stream("GET", URL) as response,
    ):
        assert [chunk async for chunk in response.aiter_raw()] == [b"0123", b"4567", b"89"]


def test_an_empty_body_replays_no_chunks(lib: ModuleType, tmp_path: Path) -> None:
    path = write_cassette(tmp_path / "c.jsonl", b"", content_type="text/plain")
    with (
        lib.Client(transport=RecordingTransport(path)) as client,
        client.stream("GET", URL) as response,
    ):
        assert list(response.iter_raw()) == []


def test_replay_chunk_size_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="replay_chunk_size must be at least 1, not 0"):
        RecordingTransport(tmp_path / "c.jsonl", replay_chunk_size=0)


# --- closing early -----------------------------------------------------------------------------


def test_sync_close_after_one_chunk(lib: ModuleType, ndjson_cassette: Path) -> None:
    with lib.Client(transport=RecordingTransport(ndjson_cassette)) as client:
        with client.stream("GET", URL) as response:
            first = next(response.iter_raw())
        assert first == PIECES[0]
        assert response.is_closed
        assert client.get(URL).content == NDJSON  # the transport serves on (the exchange repeats)


@IGNORE_HTTPX_ASYNCGEN
@pytest.mark.anyio
async def test_async_close_after_one_chunk(lib: ModuleType, ndjson_cassette: Path) -> None:
    async with lib.AsyncClient(transport=RecordingTransport(ndjson_cassette)) as client:
        async with client.stream("GET", URL) as response:
            async for chunk in response.aiter_raw():
                assert chunk == PIECES[0]
                break
        assert response.is_closed
        assert (await client.get(URL)).content == NDJSON


# --- Server-Sent Events split across chunks ----------------------------------------------------

EVENTS = [
    b'id: 1\nevent: tick\ndata: {"text": "caf\xc3\xa9"}\n\n',
    b"id: 2\ndata: first line\ndata: \xe2\x98\x95 second line\n\n",
    b": a comment, then an event with no id\ndata: last\n\n",
]
SSE = b"".join(EVENTS)
SSE_CUTS = [
    SSE.index(b"event:") + 3,  # inside a field name
    len(EVENTS[0]) - 1,  # between the two newlines that end an event
    SSE.index(b"\xe2\x98\x95") + 1,  # inside a 3-byte character
    SSE.index(b"\xe2\x98\x95") + 2,
    len(EVENTS[0]) + len(EVENTS[1]) + 2,  # inside a comment
]
EXPECTED_EVENTS = [
    ("1", "tick", '{"text": "café"}'),
    ("2", "message", "first line\n☕ second line"),
    ("2", "message", "last"),  # the last event id carries over, as the SSE spec says
]


@pytest.fixture
def sse_cassette(tmp_path: Path) -> Path:
    return write_cassette(
        tmp_path / "sse.jsonl",
        SSE,
        chunks=[len(p) for p in split(SSE, SSE_CUTS)],
        content_type="text/event-stream",
        headers=SSE_HEADERS,
    )


def test_sync_sse_events_reassemble_across_chunks(lib: ModuleType, sse_cassette: Path) -> None:
    with (
        lib.Client(transport=RecordingTransport(sse_cassette)) as client,
        httpx_sse.connect_sse(client, "GET", URL) as source,
    ):
        events = [(e.id, e.event, e.data) for e in source.iter_sse()]
    assert events == EXPECTED_EVENTS


@pytest.mark.anyio
async def test_async_sse_events_reassemble_across_chunks(
    lib: ModuleType, sse_cassette: Path
) -> None:
    async with (
        lib.AsyncClient(transport=RecordingTransport(sse_cassette)) as client,
        httpx_sse.aconnect_sse(client, "GET", URL) as source,
    ):
        events = [(e.id, e.event, e.data) async for e in source.aiter_sse()]
    assert events == EXPECTED_EVENTS


# --- pacing: timings_ms scaled by replay_latency -----------------------------------------------

PACED = [b"data: one\n\n", b"data: two\n\n", b"data: three\n\n"]


def paced_cassette(tmp_path: Path, timings_ms: Sequence[float]) -> Path:
    return write_cassette(
        tmp_path / "paced.jsonl",
        b"".join(PACED),
        chunks=[len(p) for p in PACED],
        timings_ms=timings_ms,
        content_type="text/event-stream",
    )


def sync_elapsed(lib: ModuleType, transport: RecordingTransport) -> float:
    with lib.Client(transport=transport) as client, client.stream("GET", URL) as response:
        started = time.monotonic()
        assert list(response.iter_raw()) == PACED
        return time.monotonic() - started


async def async_elapsed(lib: ModuleType, transport: RecordingTransport) -> float:
    async with (
        lib.AsyncClient(transport=transport) as client,
        client.stream("GET", URL) as response,
    ):
        started = anyio.current_time()
        assert [chunk async for chunk in response.aiter_raw()] == PACED
        return anyio.current_time() - started


# Lower bounds only: timing is never asserted from above, so a slow machine cannot fail these.
def test_sync_replay_latency_reproduces_recorded_pacing(lib: ModuleType, tmp_path: Path) -> None:
    path = paced_cassette(tmp_path, [5.0, 105.0, 205.0])
    assert sync_elapsed(lib, RecordingTransport(path, replay_latency=1.0)) >= 0.15
    assert sync_elapsed(lib, RecordingTransport(path, replay_latency=0.5)) >= 0.075


def test_sync_replay_latency_zero_ignores_timings(lib: ModuleType, tmp_path: Path) -> None:
    # A 10-minute recorded gap: replaying at the default latency 0 finishes at all only if it
    # does not wait.
    path = paced_cassette(tmp_path, [0.0, 600_000.0, 600_000.0])
    sync_elapsed(lib, RecordingTransport(path))


@pytest.mark.anyio
async def test_async_replay_latency_paces_without_blocking_the_loop(
    lib: ModuleType, tmp_path: Path
) -> None:
    path = paced_cassette(tmp_path, [5.0, 105.0, 205.0])
    ticks = 0
    elapsed = 0.0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await anyio.sleep(0.01)
            ticks += 1

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(ticker)
        elapsed = await async_elapsed(lib, RecordingTransport(path, replay_latency=1.0))
        tasks.cancel_scope.cancel()
    assert elapsed >= 0.15
    assert ticks >= 5  # the other task ran while the replay waited


@pytest.mark.anyio
async def test_async_replay_latency_zero_ignores_timings(lib: ModuleType, tmp_path: Path) -> None:
    path = paced_cassette(tmp_path, [0.0, 600_000.0, 600_000.0])
    with anyio.fail_after(30):  # a guard against a hang, not a performance assertion
        await async_elapsed(lib, RecordingTransport(path))


def test_replay_latency_must_not_be_negative(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="replay_latency must be 0 or more, not -1"):
        RecordingTransport(tmp_path / "c.jsonl", replay_latency=-1)


# --- memory: a 16 MiB body is sliced, never copied whole ---------------------------------------

BIG = 16 * 1024 * 1024


@pytest.fixture(scope="module")
def big_cassette(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("big") / "big.jsonl"
    return write_cassette(path, b"a" * BIG, content_type="application/octet-stream")


def traced_peak(measure: Any) -> int:
    """The peak of memory allocated while `measure()` runs, above what was allocated before."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        measure()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def test_sync_chunked_replay_of_16_mib_holds_no_copy_of_the_body(
    lib: ModuleType, big_cassette: Path
) -> None:
    transport = RecordingTransport(big_cassette)
    with lib.Client(transport=transport) as client, client.stream("GET", URL) as response:
        seen = 0

        def iterate() -> None:
            nonlocal seen
            for chunk in response.iter_bytes():
                seen += len(chunk)

        peak = traced_peak(iterate)
    assert seen == BIG
    assert peak < BIG // 8  # a few chunks at a time, not a copy of the body


def test_sync_read_of_16_mib_holds_no_copy_of_the_body(lib: ModuleType, big_cassette: Path) -> None:
    transport = RecordingTransport(big_cassette)
    with lib.Client(transport=transport) as client, client.stream("GET", URL) as response:
        peak = traced_peak(response.read)
        assert len(response.content) == BIG
        # Read whole, a replayed body is the recorded bytes themselves (see "reading a replayed
        # body whole" below), where httpx would collect the chunks and join them: two copies.
        peak_get = traced_peak(lambda: client.get(URL))
    assert peak < BIG // 8
    assert peak_get < BIG // 8


@pytest.mark.anyio
async def test_async_chunked_replay_of_16_mib_holds_no_copy_of_the_body(
    lib: ModuleType, big_cassette: Path
) -> None:
    transport = RecordingTransport(big_cassette)
    async with (
        lib.AsyncClient(transport=transport) as client,
        client.stream("GET", URL) as response,
    ):
        seen = 0
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            async for chunk in response.aiter_bytes():
                seen += len(chunk)
            peak = tracemalloc.get_traced_memory()[1] - before
        finally:
            tracemalloc.stop()
    assert seen == BIG
    assert peak < BIG // 8


# --- reading a replayed body whole --------------------------------------------------------------
#
# `read()` / `aread()` of a replayed response take the recorded body at once instead of joining
# its chunks through httpx's generators (`_libraries._response_class`).  Every way of reading
# must leave the response exactly as the library's own read would: these tests replay each
# cassette both ways and compare everything observable, including the errors.


def whole_read_cassettes(tmp_path: Path) -> dict[str, tuple[Path, dict[str, Any]]]:
    """Cassettes of every shape a whole read meets, and the transport options to replay them."""
    big = b"y" * (2 * DEFAULT_CHUNK_SIZE + 10)
    gzipped = gzip.compress(NDJSON)
    rest = len(NDJSON) - 7
    return {
        "recorded chunks": (write_cassette(tmp_path / "a.jsonl", NDJSON, chunks=[7, 0, rest]), {}),
        "one chunk": (write_cassette(tmp_path / "b.jsonl", b'{"ok": true}'), {}),
        "empty": (write_cassette(tmp_path / "c.jsonl", b""), {}),
        "over the chunk size": (write_cassette(tmp_path / "d.jsonl", big), {}),
        "gzip": (write_cassette(tmp_path / "e.jsonl", gzipped, content_encoding="gzip"), {}),
        "bad gzip": (write_cassette(tmp_path / "f.jsonl", b"nope", content_encoding="GZip"), {}),
        "gzip without its header": (write_cassette(tmp_path / "h.jsonl", gzipped), {}),
        "one recorded chunk": (write_cassette(tmp_path / "i.jsonl", NDJSON, chunks=[80]), {}),
        "paced": (
            write_cassette(tmp_path / "g.jsonl", NDJSON, chunks=[7, rest], timings_ms=[0, 1]),
            {"replay_latency": 0.01},
        ),
    }


def observed(response: Any) -> dict[str, Any]:
    """What a caller can see of a response (its request and timing aside)."""
    seen = {
        name: value
        for name, value in vars(response).items()
        if name not in ("stream", "_decoder", "_replayed", "_request", "_elapsed")
    }
    seen["class"] = type(response).__mro__[-2]  # the library's Response (then object)
    seen["elapsed is set"] = response.is_closed and response.elapsed is not None
    return seen


def outcome(act: Any) -> Any:
    try:
        return act()
    except Exception as exc:  # the same error both ways, with the same message
        return type(exc), str(exc)


SYNC_WHOLE_READS = {
    "get": lambda client: observed(client.get(URL)),
    "read": lambda r: (r.read(), observed(r)),
    "read twice": lambda r: (r.read(), r.read(), observed(r)),
    "bytes after read": lambda r: (r.read(), list(r.iter_bytes(chunk_size=5)), observed(r)),
    "raw after read": lambda r: (r.read(), list(r.iter_raw())),
    "read after raw": lambda r: (list(r.iter_raw()), r.read()),
    "read after close": lambda r: (r.close(), r.read()),
    "text and json": lambda r: (r.read(), r.text, observed(r)),
    "read a stream put in the replay's place": lambda r: (replace_stream(r), r.read()),
    # httpx decides at read time, from the headers as they are then, what to decode.
    "read after a content-encoding is set": lambda r: (set_gzip(r), r.read(), observed(r)),
}


def set_gzip(response: Any) -> None:
    response.headers["content-encoding"] = "gzip"


def replace_stream(response: Any) -> None:
    """Put another body stream of the response's library in place of the replay's."""
    library = importlib.import_module(type(response).__mro__[-2].__module__.partition(".")[0])
    response.stream = library.ByteStream(b"another body")


def usual_reads(monkeypatch: pytest.MonkeyPatch, lib: ModuleType) -> None:
    """Make replays of `lib` answer with the library's own `Response`, read the usual way."""
    library = _libraries.library_of(lib.Request("GET", URL))
    monkeypatch.setitem(_libraries._BY_TYPE, lib.Request, library._replace(response=lib.Response))


def sync_whole_read(lib: ModuleType, path: Path, options: dict[str, Any], how: str) -> Any:
    act = SYNC_WHOLE_READS[how]
    with lib.Client(transport=RecordingTransport(path, **options)) as client:
        if how == "get":
            return outcome(lambda: act(client))
        with client.stream("GET", URL) as response:
            return outcome(lambda: act(response))


@pytest.mark.parametrize("how", SYNC_WHOLE_READS)
def test_sync_whole_reads_leave_the_response_as_the_usual_read(
    lib: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    for name, (path, options) in whole_read_cassettes(tmp_path).items():
        taken = sync_whole_read(lib, path, options, how)
        with monkeypatch.context() as patch:
            usual_reads(patch, lib)
            usual = sync_whole_read(lib, path, options, how)
        assert taken == usual, name


async def async_whole_read(lib: ModuleType, path: Path, options: dict[str, Any], how: str) -> Any:
    async with lib.AsyncClient(transport=RecordingTransport(path, **options)) as client:
        if how == "get":
            try:
                return observed(await client.get(URL))
            except Exception as exc:
                return type(exc), str(exc)
        async with client.stream("GET", URL) as response:
            try:
                if how == "read":
                    return await response.aread(), observed(response)
                if how == "read twice":
                    return await response.aread(), await response.aread(), observed(response)
                if how == "raw after read":
                    await response.aread()
                    return [chunk async for chunk in response.aiter_raw()]
                if how == "read after raw":
                    [chunk async for chunk in response.aiter_raw()]
                    return await response.aread()
                if how == "read after close":
                    await response.aclose()
                    return await response.aread()
                if how == "read after a content-encoding is set":
                    set_gzip(response)
                    return await response.aread(), observed(response)
                if how == "read in a cancelled scope":
                    # Reading a body of several chunks is a checkpoint, as reading a socket is:
                    # a cancellation is delivered (a body of one chunk has none to wait for).
                    with anyio.CancelScope() as scope:
                        scope.cancel()
                        await response.aread()
                    return scope.cancelled_caught
                assert how == "sync read of an async response"
                return response.read()
            except Exception as exc:
                return type(exc), str(exc)


@IGNORE_HTTPX_ASYNCGEN  # a body that fails to decode stops httpx's generators midway
@pytest.mark.anyio
@pytest.mark.parametrize(
    "how",
    [
        "get",
        "read",
        "read twice",
        "raw after read",
        "read after raw",
        "read after close",
        "read after a content-encoding is set",
        "read in a cancelled scope",
        "sync read of an async response",
    ],
)
async def test_async_whole_reads_leave_the_response_as_the_usual_read(
    lib: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    for name, (path, options) in whole_read_cassettes(tmp_path).items():
        taken = await async_whole_read(lib, path, options, how)
        with monkeypatch.context() as patch:
            usual_reads(patch, lib)
            usual = await async_whole_read(lib, path, options, how)
        assert taken == usual, name


@pytest.fixture
def iterations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Notes each time a replay stream is iterated (which a whole read of it skips)."""
    seen: list[str] = []
    sync_iter, async_iter = ReplayStream.__iter__, ReplayStream.__aiter__

    def spy_iter(self: ReplayStream) -> Any:
        seen.append("sync")
        return sync_iter(self)

    def spy_aiter(self: ReplayStream) -> Any:
        seen.append("async")
        return async_iter(self)

    monkeypatch.setattr(ReplayStream, "__iter__", spy_iter)
    monkeypatch.setattr(ReplayStream, "__aiter__", spy_aiter)
    return seen


@pytest.mark.anyio
async def test_a_whole_read_takes_the_body_without_iterating_its_stream(
    lib: ModuleType, tmp_path: Path, iterations: list[str]
) -> None:
    cassettes = whole_read_cassettes(tmp_path)
    for name in ("recorded chunks", "one chunk", "empty", "over the chunk size"):
        path, _ = cassettes[name]
        with lib.Client(transport=RecordingTransport(path)) as client:
            response = client.get(URL)
        async with lib.AsyncClient(transport=RecordingTransport(path)) as async_client:
            async_response = await async_client.get(URL)
        assert response.content == async_response.content == path_body(path), name
        assert response.is_closed and async_response.is_closed
        assert iterations == [], name
    for name in ("gzip", "paced"):  # httpx decodes the one; the other is paced chunk by chunk
        path, options = cassettes[name]
        with lib.Client(transport=RecordingTransport(path, **options)) as client:
            assert client.get(URL).content == NDJSON
        assert iterations == ["sync"], name
        iterations.clear()


def path_body(path: Path) -> bytes:
    """The response body of the one exchange in a cassette written by `write_cassette`."""
    exchange = json.loads(path.read_text(encoding="utf-8").splitlines()[1])
    return str(exchange["response_body"]).encode("utf-8")


def test_a_replayed_response_pickles_as_the_library_s_own(lib: ModuleType, tmp_path: Path) -> None:
    path, _ = whole_read_cassettes(tmp_path)["recorded chunks"]
    with lib.Client(transport=RecordingTransport(path)) as client:
        response = client.get(URL)
    assert b"sakura_http" not in pickle.dumps(response)  # it unpickles with the library alone
    response.seen = [response]  # a response that refers to itself is copied as one
    deep = copy.deepcopy(response)
    assert deep.seen[0] is deep
    for again in (pickle.loads(pickle.dumps(response)), copy.copy(response), deep):
        assert type(again) is lib.Response
        assert again.content == NDJSON
        assert (again.status_code, again.headers) == (response.status_code, response.headers)
        assert again.is_closed


def test_a_library_whose_response_reads_otherwise_is_read_the_usual_way(lib: ModuleType) -> None:
    class Other(lib.Response):  # type: ignore[name-defined,misc]
        def read(self) -> bytes:
            self.noted = True  # state the fast read would not leave
            return super().read()  # type: ignore[no-any-return]

    assert _libraries._response_class(lib) is not lib.Response  # the library as it is: taken
    other = ModuleType("other")
    other.__dict__.update(vars(lib))
    other.Response = Other  # type: ignore[attr-defined]
    assert _libraries._response_class(other) is Other


# --- the hand-written exchange in docs/streaming.md --------------------------------------------


def test_the_documented_hand_written_stream_replays(lib: ModuleType, tmp_path: Path) -> None:
    doc = (Path(__file__).parent.parent / "docs" / "streaming.md").read_text(encoding="utf-8")
    line = doc.split("```json\n", 1)[1].split("\n```", 1)[0]
    path = tmp_path / "events.jsonl"
    path.write_text('{"schema_version":"1.0","kind":"cassette"}\n' + line + "\n", encoding="utf-8")
    url = json.loads(line)["url"]
    with lib.Client(transport=RecordingTransport(path)) as client:
        with httpx_sse.connect_sse(client, "GET", url) as source:
            events = [(event.event, event.data) for event in source.iter_sse()]
        assert events == [("greeting", "café"), ("message", "second")]
        with client.stream("GET", url, headers=dict(SSE_HEADERS)) as response:
            assert [len(chunk) for chunk in response.iter_raw()] == json.loads(line)["chunks"]
