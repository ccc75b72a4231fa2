"""sakura-http in one minute: record from a real local server, then replay with no network.

Run it with `python examples/demo.py`.  It starts a small HTTP server on 127.0.0.1, records one
exchange into a cassette in a temporary folder, stops the server, and replays the exchange
offline, printing each step.
"""

from __future__ import annotations

import json
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from sakura_http import CassetteMiss, RecordingTransport


class Weather(BaseHTTPRequestHandler):
    """A tiny JSON API standing in for a real service."""

    def do_GET(self) -> None:
        body = json.dumps({"city": "Kyoto", "forecast": "sakura showers"}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Weather)
    url = f"http://127.0.0.1:{server.server_address[1]}/forecast?city=kyoto"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    cassette = Path(tempfile.mkdtemp()) / "fixtures" / "weather.jsonl"

    print(f"1. recording GET {url}")
    with (
        RecordingTransport(cassette, outer=httpx.HTTPTransport(), mode="new_episodes") as transport,
        httpx.Client(transport=transport) as client,
    ):
        live = client.get(url)
    print(f"   live response: {live.status_code} {live.json()}")
    print(f"   cassette {cassette.name} now holds:")
    for line in cassette.read_text().splitlines():
        print(f"     {line[:110]}{'...' if len(line) > 110 else ''}")

    server.shutdown()
    server.server_close()
    print("2. server stopped; replaying offline (outer=None: no network at all)")
    with httpx.Client(transport=RecordingTransport(cassette)) as client:
        replayed = client.get(url)
        print(f"   replayed response: {replayed.status_code} {replayed.json()}")
        assert replayed.json() == live.json()
        try:
            client.get(url.replace("kyoto", "osaka"))
        except CassetteMiss as miss:
            print("3. a request that was never recorded fails with a diagnosis:")
            for line in str(miss).splitlines():
                print(f"   {line}")
    print("done: recorded once, replayed offline.")


if __name__ == "__main__":
    main()
