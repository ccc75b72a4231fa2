"""Real HTTP servers on 127.0.0.1 for tests and examples (stdlib only)."""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import sys
import threading
import urllib.parse
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


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


class _QuietServer(ThreadingHTTPServer):
    """A test server: `stop()` ends it; a client hanging up mid-request is normal, not news."""

    def handle_error(self, request: object, client_address: object) -> None:
        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)  # type: ignore[arg-type]

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


@contextlib.contextmanager
def _serving(server: _QuietServer) -> Iterator[None]:
    """Run `server` in a thread for the block, then stop it and join the thread."""
    # A short poll interval: shutdown() waits up to one interval for the serving loop.
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.stop()
        thread.join()


class _EchoHTTPServer(_QuietServer):
    daemon_threads = True
    state: LocalServer


@contextlib.contextmanager
def start_echo_server() -> Iterator[LocalServer]:
    """Serve the echo handler on 127.0.0.1 (a free port) until the block ends."""
    server = _EchoHTTPServer(("127.0.0.1", 0), _EchoHandler)
    server.state = LocalServer(url=f"http://127.0.0.1:{server.server_address[1]}")
    with _serving(server):
        yield server.state


# --- streaming ---------------------------------------------------------------------------------


@dataclass
class StreamServer(LocalServer):
    """A running streaming server (see `start_stream_server`).

    `disconnects` counts streams the client closed before their end (endless streams included).
    """

    disconnects: int = 0


def sse_event(n: int) -> bytes:
    """The bytes of event `n` as the streaming server sends it (multi-byte UTF-8 included)."""
    return f'id: {n}\nevent: tick\ndata: {{"n": {n}, "text": "caf\u00e9 \u2615"}}\n\n'.encode()


def ndjson_line(n: int) -> bytes:
    """Line `n` of the streaming server's NDJSON stream."""
    return json.dumps({"n": n, "text": "\u00e9t\u00e9"}, ensure_ascii=False).encode() + b"\n"


class _StreamHandler(BaseHTTPRequestHandler):
    """Each chunk is written as one HTTP/1.1 chunk, straight to the socket (wfile is unbuffered)."""

    server: _StreamHTTPServer
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        params = {k: v[-1] for k, v in urllib.parse.parse_qs(query).items()}
        self.server.state.requests.append((self.command, self.path))
        gap = int(params.get("gap_ms", "0")) / 1000
        count = int(params.get("n", "3"))
        if path == "/sse":
            self._stream("text/event-stream", (sse_event(i) for i in range(1, count + 1)), gap)
        elif path == "/sse/endless":
            self._stream("text/event-stream", (sse_event(i) for i in itertools.count(1)), gap)
        elif path == "/ndjson":
            self._stream("application/x-ndjson", (ndjson_line(i) for i in range(count)), gap)
        elif path == "/bytes":
            size, piece = int(params.get("size", "1024")), int(params.get("chunk", "65536"))
            chunks = (
                bytes(min(piece, size - start)) for start in range(0, size, piece)
            )  # zero bytes: cheap to make, easy to check
            self._stream("application/octet-stream", chunks, gap)
        else:
            self.send_error(404)

    def _stream(self, content_type: str, chunks: Iterable[bytes], gap: float) -> None:
        self.send_response(200)
        self.send_header("content-type", content_type)
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        stopping = self.server.stopping
        try:
            for i, chunk in enumerate(chunks):
                if i and gap and stopping.wait(gap):
                    break
                if stopping.is_set():
                    break
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            else:
                self.wfile.write(b"0\r\n\r\n")
                return
        except OSError:  # the client closed the stream early
            pass
        self.server.state.disconnects += 1
        self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:
        pass


class _StreamHTTPServer(_QuietServer):
    # Handler threads are joined on close; stop() ends their streams and idle keep-alive reads.
    daemon_threads = False
    state: StreamServer

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _StreamHandler)
        self.stopping = threading.Event()
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def stop(self) -> None:
        self.shutdown()
        self.stopping.set()
        with self._open_lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        self.server_close()


@contextlib.contextmanager
def start_stream_server() -> Iterator[StreamServer]:
    """Serve streamed responses on 127.0.0.1 (a free port) until the block ends.

    Every response uses chunked transfer encoding and writes each piece as its own chunk, so a
    client receives them as separate chunks.  ``gap_ms=`` (default 0) waits between pieces.

    * ``GET /sse?n=3``: `n` Server-Sent Events, ``sse_event(1)`` to ``sse_event(n)``, then the end.
    * ``GET /sse/endless``: ``sse_event(1)``, ``sse_event(2)``, ... until the client closes it.
    * ``GET /ndjson?n=3``: ``ndjson_line(0)`` to ``ndjson_line(n - 1)``.
    * ``GET /bytes?size=1024&chunk=65536``: `size` zero bytes in chunks of `chunk` bytes.

    Leaving the block stops the server, ends streams still running and joins every thread.
    """
    server = _StreamHTTPServer()
    server.state = StreamServer(url=f"http://127.0.0.1:{server.server_address[1]}")
    with _serving(server):
        yield server.state
