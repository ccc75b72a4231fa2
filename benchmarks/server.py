"""The benchmarks' local HTTP/1.1 server, run in its own process on 127.0.0.1.

    python benchmarks/server.py      # prints "PORT <n>", then serves until stdin closes
    python benchmarks/server.py --tls CERT_AND_KEY.pem   # the same over https

* ``GET /items/<i>``: a small JSON object (about 60 bytes), keep-alive.
* ``GET /bytes/<n>``: `n` bytes of text, framed by ``content-length`` (the proxy measures' big
  body).
* ``GET /sse?n=5&gap_ms=100``: `n` Server-Sent Events, each its own HTTP chunk, the first one at
  once and the next ones `gap_ms` apart.

It runs apart from the benchmark so its work never competes with the client's for the GIL.
"""

from __future__ import annotations

import ssl
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The head and the body go out in separate writes: without TCP_NODELAY, Nagle's algorithm
    # and the client's delayed ACK would add ~40 ms to every keep-alive request.
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        if path.startswith("/items/"):
            item = path.rsplit("/", 1)[1]
            body = b'{"id":%s,"name":"item %s","tags":["a","b"],"ok":true}' % (
                item.encode(),
                item.encode(),
            )
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif path.startswith("/bytes/"):
            size = int(path.rsplit("/", 1)[1])
            self.send_response(200)
            self.send_header("content-type", "application/octet-stream")
            self.send_header("content-length", str(size))
            self.end_headers()
            self.wfile.write((b"0123456789abcdef" * (size // 16 + 1))[:size])
        elif path == "/sse":
            params = dict(urllib.parse.parse_qsl(query))
            count, gap = int(params.get("n", "5")), int(params.get("gap_ms", "100")) / 1000
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            try:
                for i in range(count):
                    if i:
                        time.sleep(gap)
                    event = b'data: {"n": %d}\n\n' % i
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.write(b"0\r\n\r\n")
            except OSError:  # the client stopped reading after the first chunk
                self.close_connection = True
        else:
            self.send_error(404)

    def log_message(self, format: str, *args: object) -> None:
        pass


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client hanging up mid-stream is expected here


def main() -> None:
    server = Server(("127.0.0.1", 0), Handler)
    if sys.argv[1:2] == ["--tls"]:  # a certificate for 127.0.0.1 and its key, in one PEM file
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(sys.argv[2])
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    print(f"PORT {server.server_address[1]}", flush=True)
    sys.stdin.read()  # the benchmark closes our stdin when it is done
    server.shutdown()


if __name__ == "__main__":
    main()
