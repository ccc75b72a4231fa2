"""A deterministic upstream server (http and https) on 127.0.0.1 for the proxy tests.

Its answers carry no ``Date`` or ``Server`` header and depend only on the request, so two
recordings of the same requests are byte-for-byte the same file.  https uses a certificate from
a trustme CA (`Upstream.ca_file` is the bundle that verifies it).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import ssl
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import trustme

from tests.servers import _QuietServer, _serving

#: A hang guard for clients in the proxy tests (never an assertion about speed).
HANG_GUARD = 60.0


def sse_events(n: int) -> list[bytes]:
    return [f'event: tick\ndata: {{"n": {i}}}\n\n'.encode() for i in range(1, n + 1)]


@dataclass
class Upstream:
    """A running upstream: `url` its base URL; `requests` the (method, path, headers) seen."""

    url: str
    ca_file: Path | None = None
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    #: Set when the reader of a /forever stream closed the connection.
    reader_gone: threading.Event = field(default_factory=threading.Event)
    #: The client address of every connection a request came on (a reused one counts once).
    connections: set[tuple[str, int]] = field(default_factory=set)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def ssl_context(self) -> ssl.SSLContext:
        assert self.ca_file is not None
        return ssl.create_default_context(cafile=str(self.ca_file))


class _Handler(BaseHTTPRequestHandler):
    server: _UpstreamServer
    protocol_version = "HTTP/1.1"

    def send_response(self, code: int, message: str | None = None) -> None:
        # No Server or Date header: the same request always gets the same bytes.
        self.send_response_only(code, message)

    def _body(self) -> bytes:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def _reply(self, status: int, body: bytes, content_type: str, **extra: str) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        for name, value in extra.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        if self.command != "HEAD" and status not in (204, 304):
            self.wfile.write(body)

    def _handle(self) -> None:
        body = self._body()
        path, _, query = self.path.partition("?")
        params = {k: v[-1] for k, v in urllib.parse.parse_qs(query).items()}
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.server.state.requests.append((self.command, self.path, headers))
        self.server.state.connections.add(self.client_address)
        if path == "/sse":
            self._sse(int(params.get("n", "3")))
        elif path.startswith("/status/"):
            status = int(path.rsplit("/", 1)[1])
            self._reply(status, b"" if status in (204, 304) else b"status", "text/plain")
        elif path == "/gzip":
            self._reply(200, gzip.compress(b"hello " * 100, mtime=0), "text/plain",
                        content_encoding="gzip")  # fmt: skip
        elif path == "/headers":  # each query parameter comes back as a response header
            self._reply(200, b"headers", "text/plain", **params)
        elif path == "/big":
            self._reply(200, bytes(int(params["size"])), "application/octet-stream")
        elif path == "/broken":  # one chunk of a chunked body, then the connection drops
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            event = sse_events(1)[0]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
            self.close_connection = True
        elif path == "/forever":  # a stream that ends only when its reader goes away
            self._forever()
        elif path == "/wait":  # answers once the test sets `release`
            self.server.state.release.wait(HANG_GUARD)
            self._reply(200, b"released", "text/plain")
        else:
            payload = {
                "method": self.command,
                "path": self.path,
                "body": body.decode("utf-8", "replace"),
                "x-test": headers.get("x-test"),
            }
            self._reply(200, json.dumps(payload).encode(), "application/json")

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = _handle

    def _sse(self, n: int) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for event in sse_events(n):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def _forever(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/plain")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        try:
            for _ in range(int(HANG_GUARD / 0.02)):
                self.wfile.write(b"5\r\ntick\n\r\n")
                self.wfile.flush()
                threading.Event().wait(0.02)
        except OSError:  # the reader closed the connection
            self.server.state.reader_gone.set()
        self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:
        pass


class _UpstreamServer(_QuietServer):
    daemon_threads = True
    state: Upstream

    def __init__(self, context: ssl.SSLContext | None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self._context = context

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        if self._context is not None:
            sock = self._context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, address

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # TLS handshakes refused on purpose, clients hanging up: the tests check results


@contextlib.contextmanager
def start_upstream(tls: bool = False, folder: Path | None = None) -> Iterator[Upstream]:
    """Serve the deterministic upstream on 127.0.0.1; with `tls`, over https (the CA bundle
    is written into `folder`)."""
    context = None
    ca_file = None
    if tls:
        assert folder is not None
        ca = trustme.CA()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
        ca_file = folder / "upstream-ca.pem"
        ca.cert_pem.write_to_path(str(ca_file))
    server = _UpstreamServer(context)
    scheme = "https" if tls else "http"
    server.state = Upstream(f"{scheme}://127.0.0.1:{server.server_address[1]}", ca_file)
    with _serving(server):
        try:
            yield server.state
        finally:
            server.state.release.set()
