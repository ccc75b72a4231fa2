"""Record a Server-Sent Events stream with httpx-sse, then replay it offline, chunk by chunk.

Run it with `python examples/sse_replay.py` (needs httpx, httpx-sse and sakura-http).  It starts
a small SSE server on 127.0.0.1 that sends three events 50 ms apart, records them into a
cassette in a temporary folder, stops the server, and replays the stream with no network:
sync, async, and at the recorded pace.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
from httpx_sse import aconnect_sse, connect_sse

from sakura_http import RecordingTransport


class Ticker(BaseHTTPRequestHandler):
    """An SSE endpoint: each event is written and flushed as its own HTTP chunk."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for n in range(1, 4):
            time.sleep(0.05)
            event = f'id: {n}\nevent: tick\ndata: {{"n": {n}, "text": "sakura 🌸"}}\n\n'
            data = event.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, format: str, *args: object) -> None:
        pass


def record(cassette: Path, url: str) -> list[tuple[str, str]]:
    """Record the stream: a miss goes to the real network and is appended to the cassette."""
    transport = RecordingTransport(
        cassette,
        outer=httpx.HTTPTransport(),
        mode="new_episodes",
        record_timings=True,  # also keep when each chunk arrived (see replay_latency below)
    )
    with httpx.Client(transport=transport) as client, connect_sse(client, "GET", url) as source:
        return [(event.event, event.data) for event in source.iter_sse()]


def replay(cassette: Path, url: str, latency: float = 0.0) -> list[tuple[str, str]]:
    """Replay offline: no outer transport, mode "none" (the default), so nothing can leak out."""
    transport = RecordingTransport(cassette, replay_latency=latency)
    with httpx.Client(transport=transport) as client, connect_sse(client, "GET", url) as source:
        return [(event.event, event.data) for event in source.iter_sse()]


async def replay_async(cassette: Path, url: str) -> list[tuple[str, str]]:
    """The same replay from an async client: one transport class serves both."""
    async with (
        httpx.AsyncClient(transport=RecordingTransport(cassette)) as client,
        aconnect_sse(client, "GET", url) as source,
    ):
        return [(event.event, event.data) async for event in source.aiter_sse()]


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Ticker)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/ticks"
    with tempfile.TemporaryDirectory() as folder:
        run(server, url, Path(folder) / "fixtures" / "ticks.jsonl")


def run(server: ThreadingHTTPServer, url: str, cassette: Path) -> None:
    live = record(cassette, url)
    print(f"recorded {len(live)} events into {cassette}")
    for name, data in live:
        print(f"  {name}: {data}")
    exchange = json.loads(cassette.read_text(encoding="utf-8").splitlines()[1])
    print(f"  chunk sizes kept: {exchange['chunks']}")
    print(f"  arrival times kept (ms): {exchange['timings_ms']}")

    server.shutdown()
    server.server_close()
    print("server stopped")

    events = replay(cassette, url)
    assert events == live
    print(f"replayed offline: {len(events)} events, identical")

    events = asyncio.run(replay_async(cassette, url))
    assert events == live
    print(f"replayed offline from an AsyncClient: {len(events)} events, identical")

    started = time.monotonic()
    events = replay(cassette, url, latency=1.0)
    assert events == live
    print(f"replayed at the recorded pace (replay_latency=1.0): {len(events)} events, identical")
    print(f"  took {time.monotonic() - started:.2f} s; the default replay_latency=0 does not wait")


if __name__ == "__main__":
    main()
