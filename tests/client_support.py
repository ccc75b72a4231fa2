"""A real server on 127.0.0.1 for the requests and aiohttp front ends' tests (stdlib only).

Routes: ``/sse?n=3`` (Server-Sent Events, one HTTP chunk each), ``/gzip`` (a gzip body),
``/redirect`` (302 to ``/echo?from=redirect``), ``/cookie`` (two ``set-cookie`` headers),
``/status/<n>``, ``/bytes?size=<n>``, and anything else echoes the request as JSON (method,
path, body, headers, and how many requests the server answered).  A chunked request body is
read whole.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

from tests.servers import _QuietServer, _serving

#: The cookie values ``/cookie`` sets (seen live, never written).
COOKIES = {"sid": "fake-session-cookie-0001", "theme": "dark"}
GZIPPED = b"hello " * 100


def sse_events(n: int) -> list[bytes]:
    return [f'event: tick\ndata: {{"n": {i}}}\n\n'.encode() for i in range(1, n + 1)]


@dataclass
class ClientServer:
    """A running server: `url` its base URL, `requests` the (method, path) it answered."""

    url: str
    requests: list[tuple[str, str]] = field(default_factory=list)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def _body(self) -> bytes:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while size := int(self.rfile.readline().strip(), 16):
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            self.rfile.readline()
            return b"".join(parts)
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def _reply(self, status: int, body: bytes, content_type: str, *extra: tuple[str, str]) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        for name, value in extra:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _handle(self) -> None:
        body = self._body()
        self.server.state.requests.append((self.command, self.path))
        path, _, query = self.path.partition("?")
        params = {k: v[-1] for k, v in urllib.parse.parse_qs(query).items()}
        if path == "/sse":
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for event in sse_events(int(params.get("n", "3"))):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        elif path == "/gzip":
            encoded = gzip.compress(GZIPPED, mtime=0)
            self._reply(200, encoded, "text/plain", ("content-encoding", "gzip"))
        elif path == "/redirect":
            self._reply(302, b"", "text/plain", ("location", "/echo?from=redirect"))
        elif path == "/cookie":
            cookies = [("set-cookie", f"{k}={v}; Path=/") for k, v in COOKIES.items()]
            self._reply(200, b"cookies set", "text/plain", *cookies)
        elif path.startswith("/status/"):
            self._reply(int(path.rsplit("/", 1)[1]), b"status", "text/plain")
        elif path == "/bytes":
            self._reply(200, bytes(int(params["size"])), "application/octet-stream")
        else:
            payload = {
                "method": self.command,
                "path": self.path,
                "body": body.decode("utf-8", "replace"),
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "count": len(self.server.state.requests),
            }
            self._reply(200, json.dumps(payload).encode(), "application/json")

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = _handle

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(_QuietServer):
    daemon_threads = True
    state: ClientServer


@contextlib.contextmanager
def start_client_server() -> Iterator[ClientServer]:
    """Serve the routes above on 127.0.0.1 (a free port) until the block ends."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.state = ClientServer(url=f"http://127.0.0.1:{server.server_address[1]}")
    with _serving(server):
        yield server.state


def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (a connection to it is refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/down"
