"""Real HTTP servers on 127.0.0.1 for tests and examples (stdlib only)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class LocalServer:
    """A running server: `url` is its base URL, `requests` what it received (method, path)."""

    url: str
    requests: list[tuple[str, str]] = field(default_factory=list)


class _EchoHandler(BaseHTTPRequestHandler):
    server: _EchoHTTPServer
    protocol_version = "HTTP/1.1"

    def _echo(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.state.requests.append((self.command, self.path))
        payload = json.dumps(
            {
                "method": self.command,
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body.decode("utf-8", "replace"),
                "count": len(self.server.state.requests),
            }
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.send_header("x-echo-auth", self.headers.get("authorization", ""))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_DELETE = _echo

    def log_message(self, format: str, *args: object) -> None:
        pass


class _EchoHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    state: LocalServer


@contextlib.contextmanager
def start_echo_server() -> Iterator[LocalServer]:
    """Serve the echo handler on 127.0.0.1 (a free port) until the block ends."""
    server = _EchoHTTPServer(("127.0.0.1", 0), _EchoHandler)
    server.state = LocalServer(url=f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.state
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
