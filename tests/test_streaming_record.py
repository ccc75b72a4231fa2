"""Recording streamed responses from real servers on 127.0.0.1, then replaying them offline.

The server (`tests.servers.start_stream_server`) writes each event or line as its own HTTP
chunk.  A recording keeps those chunk boundaries; a replay, with the server stopped and
`outer=None`, delivers the same chunks.  Each test runs with httpx and httpx2, sync and async.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import httpx_sse
import pytest

from sakura_http import BodyTooLargeError, RecordingTransport
from tests.servers import StreamServer, ndjson_line, sse_event, start_stream_server
from tests.test_streaming import IGNORE_HTTPX_ASYNCGEN

ROOT = Path(__file__).resolve().parent.parent

# The headers httpx-sse adds, for reading a recorded SSE stream with plain `client.stream()`.
SSE_HEADERS = {"accept": "text/event-stream", "cache-control": "no-store"}


@pytest.fixture
def server() -> Iterator[StreamServer]:
    with start_stream_server() as running:
        yield running


def recorded(path: Path) -> list[dict[str, Any]]:
    """The exchange lines of a cassette file, as JSON objects."""
    lines = path.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0])["schema_version"] == "1.0"
    return [json.loads(line) for line in lines[1:]]


def recorder(lib: ModuleType, path: Path, *, is_async: bool, **options: Any) -> RecordingTransport:
    outer = lib.AsyncHTTPTransport() if is_async else lib.HTTPTransport()
    return RecordingTransport(path, outer=outer, mode="new_episodes", **options)


def event_tuples(events: list[Any]) -> list[tuple[str, str, str]]:
    return [(e.id, e.event, e.data) for e in events]


def expected_events(n: int) -> list[tuple[str, str, str]]:
    return [
        (str(i), "tick", json.dumps({"n": i, "text": "café ☕"}, ensure_ascii=False))
        for i in range(1, n + 1)
    ]


# --- Server-Sent Events: record with httpx-sse, replay offline ---------------------------------


def test_sync_sse_recorded_then_replayed_offline(lib: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "sse.jsonl"
    with start_stream_server() as server:
        url = f"{server.url}/sse?n=4"
        with (
            lib.Client(transport=recorder(lib, path, is_async=False)) as client,
            httpx_sse.connect_sse(client, "GET", url) as source,
        ):
            live = event_tuples(list(source.iter_sse()))
    assert live == expected_events(4)

    [exchange] = recorded(path)
    body = b"".join(sse_event(i) for i in range(1, 5))
    assert exchange["response_body"].encode() == body
    # Each event was its own HTTP chunk, and HTTP/1.1 never merges chunks: at least 4 chunks.
    chunks = exchange["chunks"]
    assert len(chunks) >= 4 and sum(chunks) == len(body)
    assert "truncated" not in exchange and "timings_ms" not in exchange

    # The server is gone and there is no outer transport: the replay is offline.
    with lib.Client(transport=RecordingTransport(path)) as client:
        with httpx_sse.connect_sse(client, "GET", url) as source:
            assert event_tuples(list(source.iter_sse())) == live
        with client.stream("GET", url, headers=SSE_HEADERS) as response:
            assert [len(raw) for raw in response.iter_raw()] == chunks


@pytest.mark.anyio
async def test_async_sse_recorded_then_replayed_offline(lib: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "sse.jsonl"
    with start_stream_server() as server:
        url = f"{server.url}/sse?n=4"
        async with (
            lib.AsyncClient(transport=recorder(lib, path, is_async=True)) as client,
            httpx_sse.aconnect_sse(client, "GET", url) as source,
        ):
            live = event_tuples([event async for event in source.aiter_sse()])
    assert live == expected_events(4)
    [exchange] = recorded(path)
    chunks = exchange["chunks"]
    assert len(chunks) >= 4

    async with lib.AsyncClient(transport=RecordingTransport(path)) as client:
        async with httpx_sse.aconnect_sse(client, "GET", url) as source:
            assert event_tuples([event async for event in source.aiter_sse()]) == live
        async with client.stream("GET", url, headers=SSE_HEADERS) as response:
            assert [len(raw) async for raw in response.aiter_raw()] == chunks


# --- a download and a line protocol ------------------------------------------------------------


def test_sync_ndjson_and_download_recorded_then_replayed(lib: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "downloads.jsonl"
    size = 300_000
    with start_stream_server() as server:
        lines_url, bytes_url = f"{server.url}/ndjson?n=5", f"{server.url}/bytes?size={size}"
        with lib.Client(transport=recorder(lib, path, is_async=False)) as client:
            with client.stream("GET", lines_url) as response:
                live_lines = list(response.iter_lines())
            with client.stream("GET", bytes_url) as response:
                live_size = sum(len(chunk) for chunk in response.iter_bytes(chunk_size=40_000))
    assert live_lines == [ndjson_line(i).decode().rstrip("\n") for i in range(5)]
    assert live_size == size
    ndjson, download = recorded(path)
    assert len(ndjson["chunks"]) >= 5
    assert len(download["response_body"]) == size

    with lib.Client(transport=RecordingTransport(path)) as client:
        with client.stream("GET", lines_url) as response:
            assert list(response.iter_lines()) == live_lines
        with client.stream("GET", bytes_url) as response:
            chunks = list(response.iter_bytes(chunk_size=40_000))
        assert b"".join(chunks) == bytes(size)
        assert all(len(chunk) == 40_000 for chunk in chunks[:-1])
        assert client.get(bytes_url).content == bytes(size)


@pytest.mark.anyio
async def test_async_ndjson_recorded_then_replayed(lib: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "lines.jsonl"
    with start_stream_server() as server:
        url = f"{server.url}/ndjson?n=5"
        async with (
            lib.AsyncClient(transport=recorder(lib, path, is_async=True)) as client,
            client.stream("GET", url) as response,
        ):
            live = [line async for line in response.aiter_lines()]
    async with (
        lib.AsyncClient(transport=RecordingTransport(path)) as client,
        client.stream("GET", url) as response,
    ):
        assert [line async for line in response.aiter_lines()] == live
    assert [json.loads(line)["n"] for line in live] == [0, 1, 2, 3, 4]


# --- stream_through: an endless stream read in part --------------------------------------------


def test_sync_stream_through_records_what_was_read_of_an_endless_stream(
    lib: ModuleType, tmp_path: Path
) -> None:
    path = tmp_path / "endless.jsonl"
    with start_stream_server() as server:
        url = f"{server.url}/sse/endless?gap_ms=20"
        transport = recorder(lib, path, is_async=False, stream_through=True)
        with (
            lib.Client(transport=transport) as client,
            httpx_sse.connect_sse(client, "GET", url) as source,
        ):
            live = []
            for event in source.iter_sse():
                live.append(event)
                if len(live) == 3:
                    break
    assert event_tuples(live) == expected_events(3)

    [exchange] = recorded(path)
    assert exchange["truncated"] is True
    assert exchange["response_body"].encode() == b"".join(sse_event(i) for i in (1, 2, 3))

    with (
        lib.Client(transport=RecordingTransport(path)) as client,
        httpx_sse.connect_sse(client, "GET", url) as source,
    ):
        # Exactly the events that were read, then the stream ends.
        assert event_tuples(list(source.iter_sse())) == expected_events(3)


@IGNORE_HTTPX_ASYNCGEN
@pytest.mark.anyio
async def test_async_stream_through_records_what_was_read_of_an_endless_stream(
    lib: ModuleType, tmp_path: Path
) -> None:
    path = tmp_path / "endless.jsonl"
    with start_stream_server() as server:
        url = f"{server.url}/sse/endless?gap_ms=20"
        transport = recorder(lib, path, is_async=True, stream_through=True)
        async with (
            lib.AsyncClient(transport=transport) as client,
            httpx_sse.aconnect_sse(client, "GET", url) as source,
        ):
            live = []
            async for event in source.aiter_sse():
                live.append(event)
                if len(live) == 3:
                    break
    assert event_tuples(live) == expected_events(3)
    [exchange] = recorded(path)
    assert exchange["truncated"] is True

    async with (
        lib.AsyncClient(transport=RecordingTransport(path)) as client,
        httpx_sse.aconnect_sse(client, "GET", url) as source,
    ):
        assert event_tuples([event async for event in source.aiter_sse()]) == expected_events(3)


@IGNORE_HTTPX_ASYNCGEN
@pytest.mark.anyio
async def test_async_stream_through_cancelled_read_records_what_arrived(
    lib: ModuleType, tmp_path: Path
) -> None:
    # A read cancelled (by a timeout, a task group...) is the caller's choice, like an early
    # close.  The scope is cancelled once the first event has arrived, so the read that waits
    # for the next one is the one cancelled: no timing window, however loaded the machine.
    path = tmp_path / "cancelled.jsonl"
    with start_stream_server() as server:
        url = f"{server.url}/sse/endless?gap_ms=20"
        transport = recorder(lib, path, is_async=True, stream_through=True)
        async with lib.AsyncClient(transport=transport) as client:
            received = b""
            with anyio.CancelScope() as scope:
                async with client.stream("GET", url) as response:
                    async for raw in response.aiter_raw():
                        received += raw
                        if received.startswith(sse_event(1)):
                            scope.cancel()
    assert scope.cancelled_caught
    [exchange] = recorded(path)
    assert exchange["truncated"] is True
    assert exchange["response_body"].encode() == received
    assert received.startswith(sse_event(1))


def test_sync_stream_through_read_to_the_end_is_not_truncated(
    lib: ModuleType, server: StreamServer, tmp_path: Path
) -> None:
    path = tmp_path / "whole.jsonl"
    transport = recorder(lib, path, is_async=False, stream_through=True)
    with lib.Client(transport=transport) as client:
        response = client.get(f"{server.url}/sse?n=3")
    assert response.content == b"".join(sse_event(i) for i in (1, 2, 3))
    [exchange] = recorded(path)
    assert "truncated" not in exchange
    assert len(exchange["chunks"]) >= 3


# --- timings -----------------------------------------------------------------------------------


@pytest.mark.parametrize("record_timings", [True, False])
def test_record_timings_keeps_chunk_arrival_offsets(
    lib: ModuleType, server: StreamServer, tmp_path: Path, record_timings: bool
) -> None:
    path = tmp_path / "timed.jsonl"
    url = f"{server.url}/sse?n=2&gap_ms=150"
    transport = recorder(lib, path, is_async=False, record_timings=record_timings)
    with lib.Client(transport=transport) as client:
        client.get(url)
    [exchange] = recorded(path)
    if not record_timings:
        assert "timings_ms" not in exchange  # off by default: they change on every recording
        return
    timings = exchange["timings_ms"]
    assert len(timings) == len(exchange["chunks"])
    assert timings == sorted(timings)
    assert timings[-1] - timings[0] >= 100  # the server waited 150 ms between the events

    with lib.Client(transport=RecordingTransport(path, replay_latency=1.0)) as client:
        started = time.monotonic()
        client.get(url)
        assert time.monotonic() - started >= 0.1


# --- body limit --------------------------------------------------------------------------------

LIMIT_MESSAGE = (
    "response body over 16 MiB: sakura-http stores at most 16,777,216 bytes of a response body; "
    "raise the limit with RecordingTransport(..., max_body_bytes=33554432)"
)


def test_over_16_mib_streamed_recording_fails_and_appends_nothing(
    server: StreamServer, tmp_path: Path
) -> None:
    import httpx

    path = tmp_path / "big.jsonl"
    url = f"{server.url}/bytes?size={16 * 1024 * 1024 + 1}&chunk=1048576"
    with (
        httpx.Client(transport=recorder(httpx, path, is_async=False)) as client,
        pytest.raises(BodyTooLargeError) as caught,
    ):
        client.get(url)
    assert str(caught.value) == LIMIT_MESSAGE
    assert not path.exists()


@pytest.mark.parametrize("stream_through", [False, True])
def test_sync_over_limit_appends_nothing(
    lib: ModuleType, server: StreamServer, tmp_path: Path, stream_through: bool
) -> None:
    path = tmp_path / "big.jsonl"
    transport = recorder(
        lib, path, is_async=False, max_body_bytes=1000, stream_through=stream_through
    )
    with lib.Client(transport=transport) as client:
        with (
            pytest.raises(BodyTooLargeError, match="response body over 1,000 bytes"),
            client.stream("GET", f"{server.url}/bytes?size=1500&chunk=600") as response,
        ):
            for _ in response.iter_raw():
                pass
        # The transport goes on: a small body still records.
        assert client.get(f"{server.url}/bytes?size=500").content == bytes(500)
    assert [e["url"] for e in recorded(path)] == [f"{server.url}/bytes?size=500"]


@IGNORE_HTTPX_ASYNCGEN  # the recording stops reading the live stream mid-way
@pytest.mark.anyio
@pytest.mark.parametrize("stream_through", [False, True])
async def test_async_over_limit_appends_nothing(
    lib: ModuleType, server: StreamServer, tmp_path: Path, stream_through: bool
) -> None:
    path = tmp_path / "big.jsonl"
    transport = recorder(
        lib, path, is_async=True, max_body_bytes=1000, stream_through=stream_through
    )
    async with lib.AsyncClient(transport=transport) as client:
        with pytest.raises(BodyTooLargeError, match="response body over 1,000 bytes"):
            async with client.stream("GET", f"{server.url}/bytes?size=1500&chunk=600") as r:
                async for _ in r.aiter_raw():
                    pass
    assert not path.exists()


# --- the documented example --------------------------------------------------------------------


def test_sse_example_from_the_docs_runs() -> None:
    script = ROOT / "examples" / "sse_replay.py"
    doc = (ROOT / "docs" / "streaming.md").read_text(encoding="utf-8")
    assert script.read_text(encoding="utf-8") in doc  # the page shows the script verbatim
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0].startswith("recorded 3 events into ")
    assert "replayed offline: 3 events, identical" in lines


def test_stream_through_over_limit_is_noted_even_if_swallowed(
    server: StreamServer, tmp_path: Path
) -> None:
    import httpx

    path = tmp_path / "big.jsonl"
    transport = recorder(httpx, path, is_async=False, max_body_bytes=1000, stream_through=True)
    with httpx.Client(transport=transport) as client:
        try:
            with client.stream("GET", f"{server.url}/bytes?size=1500&chunk=600") as response:
                response.read()
        except Exception:  # code under test that swallows every error
            pass
    assert [type(exc) for exc in transport.raised] == [BodyTooLargeError]


# --- a stream that breaks mid-way --------------------------------------------------------------


def broken_outer(lib: ModuleType) -> Any:
    """An outer transport whose response sends one chunk, then fails as a dropped connection."""

    class Broken(lib.SyncByteStream, lib.AsyncByteStream):
        def __init__(self, request: Any) -> None:
            self.request = request

        def __iter__(self) -> Iterator[bytes]:
            yield sse_event(1)
            raise lib.ReadError("connection dropped", request=self.request)

        async def __aiter__(self) -> Any:
            yield sse_event(1)
            raise lib.ReadError("connection dropped", request=self.request)

    def handler(request: Any) -> Any:
        headers = {"content-type": "text/event-stream"}
        return lib.Response(200, headers=headers, stream=Broken(request))

    return lib.MockTransport(handler)


@pytest.mark.parametrize("stream_through", [False, True])
def test_sync_stream_broken_mid_way_appends_nothing(
    lib: ModuleType, tmp_path: Path, stream_through: bool
) -> None:
    path = tmp_path / "broken.jsonl"
    transport = RecordingTransport(
        path, outer=broken_outer(lib), mode="new_episodes", stream_through=stream_through
    )
    with (
        lib.Client(transport=transport) as client,
        pytest.raises(lib.ReadError, match="connection dropped"),
        client.stream("GET", "http://api.example.test/events") as response,
    ):
        for _ in response.iter_raw():
            pass
    assert not path.exists()


@pytest.mark.anyio
@pytest.mark.parametrize("stream_through", [False, True])
async def test_async_stream_broken_mid_way_appends_nothing(
    lib: ModuleType, tmp_path: Path, stream_through: bool
) -> None:
    path = tmp_path / "broken.jsonl"
    transport = RecordingTransport(
        path, outer=broken_outer(lib), mode="new_episodes", stream_through=stream_through
    )
    async with lib.AsyncClient(transport=transport) as client:
        with pytest.raises(lib.ReadError, match="connection dropped"):
            async with client.stream("GET", "http://api.example.test/events") as response:
                async for _ in response.aiter_raw():
                    pass
    assert not path.exists()
