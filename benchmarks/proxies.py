"""Measure 10: the recording proxy against mitmdump, requests per second through each.

Run by `run.py` through ``measures.py`` (kind ``proxy_peer``), one process per figure: it starts
the proxy in a process of its own (``sakura-http proxy`` or ``mitmdump``), then loads it from
this process with `clients` keep-alive connections, one thread each, for `seconds`, and reports
the requests per second and the proxy process's CPU time per request (from ``/proc``).

Both proxies run as forward proxies on 127.0.0.1 with their defaults, as a user starts them:
plain ``http://`` requests in absolute form, and ``https://`` through ``CONNECT`` with each
proxy's own CA.  A replay answers from what was recorded beforehand through the same proxy
(``sakura-http proxy CASSETTE`` in mode none; ``mitmdump --server-replay FLOWS`` with
``server_replay_reuse``, ``server_replay_extra=kill`` and ``connection_strategy=lazy``, so it
neither contacts the upstream nor forgets a flow once played); a recording forwards every
request to the local upstream and records it (``--mode all``; ``mitmdump -w FLOWS``).  mitmdump
runs with ``-q`` (it prints no line per flow), in its own virtualenv: mitmproxy needs Python 3.12
or later and pins h11 and cryptography, so it is not one of our dependency groups.  Point
``SAKURA_HTTP_MITMDUMP`` at its ``mitmdump`` (else it is looked up on ``PATH``).

The load generator is deliberately lean (blocking sockets, a minimal HTTP/1.1 response reader
that reads bodies into one buffer with ``recv_into``), so that the client costs little next to
either proxy; it shares the machine with the proxy all the same, so compare the ratios of one
run, not the absolute figures of two.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MITMDUMP_ENV = "SAKURA_HTTP_MITMDUMP"
TOOLS = ("sakura-http", "mitmdump")
_READ = 262_144


class Unavailable(Exception):
    """A proxy that cannot run here: the benchmark notes why and goes on without it."""


def mitmdump_path() -> str | None:
    """The ``mitmdump`` to measure: ``$SAKURA_HTTP_MITMDUMP``, else the one on ``PATH``."""
    given = os.environ.get(MITMDUMP_ENV)
    if given:
        return given if Path(given).is_file() else None
    return shutil.which("mitmdump")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Proxy:
    """A running proxy: its URL, its process id and the CA certificate clients trust."""

    url: str
    pid: int
    ca_cert: str


@contextlib.contextmanager
def running(
    tool: str, store: str, *, record: bool, workdir: str, upstream_ca: str | None
) -> Iterator[Proxy]:
    """Run `tool` as a forward proxy on 127.0.0.1, recording into `store` (`record`) or
    replaying it; stopped with SIGTERM (which writes a recording) on leaving."""
    env = dict(os.environ)
    work = Path(workdir)
    if tool == "sakura-http":
        ca_dir = work / "sakura-ca"
        command = [sys.executable, "-m", "sakura_http", "proxy", store, "--ca-dir", str(ca_dir)]
        if record:
            command += ["--mode", "all"]
        if upstream_ca:
            env["SSL_CERT_FILE"] = upstream_ca  # how the proxy trusts the local upstream
        env.pop("SAKURA_HTTP_RECORD", None)
        env.pop("SAKURA_HTTP_STRICT", None)
        ca_cert = ca_dir / "sakura-http-ca-cert.pem"
    elif tool == "mitmdump":
        mitmdump = mitmdump_path()
        if mitmdump is None:
            raise Unavailable(
                f"mitmdump not installed (pip install mitmproxy in a virtualenv of its own, "
                f"Python 3.12 or later; then put its mitmdump on PATH or in ${MITMDUMP_ENV})"
            )
        confdir = work / "mitmproxy-conf"
        port = _free_port()
        command = [mitmdump, "-q", "--mode", "regular", "--listen-host", "127.0.0.1"]
        command += ["--listen-port", str(port), "--set", f"confdir={confdir}"]
        if upstream_ca:
            command += ["--set", f"ssl_verify_upstream_trusted_ca={upstream_ca}"]
        if record:
            command += ["-w", store]
        else:
            command += ["--server-replay", store, "--set", "server_replay_reuse=true"]
            command += ["--set", "server_replay_extra=kill"]
            command += ["--set", "connection_strategy=lazy"]
        ca_cert = confdir / "mitmproxy-ca-cert.pem"
    else:
        raise ValueError(tool)
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=env, text=True, cwd=ROOT
    )
    try:
        assert process.stdout is not None
        if tool == "sakura-http":
            url = process.stdout.readline().split()[4]  # the ready line
            if not ca_cert.exists():  # made by the first tunnel: the client reads it before
                subprocess.run(
                    [sys.executable, "-m", "sakura_http", "ca", "--ca-dir", str(ca_dir)],
                    check=True, capture_output=True, cwd=ROOT,
                )  # fmt: skip
        else:
            url = f"http://127.0.0.1:{port}"
            _wait_for(port, process)
        yield Proxy(url, process.pid, str(ca_cert))
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_for(port: int, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the proxy exited with status {process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        time.sleep(0.05)
    raise RuntimeError("the proxy did not start listening within 60 s")


# --- the load generator ----------------------------------------------------------------------


class Connection:
    """One keep-alive connection to `url` through the proxy at `proxy` (http in absolute form,
    https through CONNECT and TLS), sending one GET at a time and reading its whole answer."""

    def __init__(self, proxy: str, url: str, ca_cert: str) -> None:
        target = urllib.parse.urlsplit(url)
        address = urllib.parse.urlsplit(proxy)
        assert address.hostname is not None and address.port is not None
        sock = socket.create_connection((address.hostname, address.port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock: socket.socket = sock
        self.buffer = bytearray()
        self.scratch = bytearray(1 << 20)
        authority = target.netloc
        if target.scheme == "https":
            sock.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
            status, _ = self._head()
            if status != 200:
                raise RuntimeError(f"CONNECT {authority} answered {status}")
            context = ssl.create_default_context(cafile=ca_cert)
            self.sock = context.wrap_socket(sock, server_hostname=target.hostname)
            line = target.path or "/"
        else:
            line = url
        self.request = (
            f"GET {line} HTTP/1.1\r\nHost: {authority}\r\nAccept: */*\r\n"
            "User-Agent: sakura-bench\r\n\r\n"
        ).encode()

    def get(self) -> int:
        """Send the GET and read its answer to the end; its status."""
        self.sock.sendall(self.request)
        status, headers = self._head()
        length = headers.get(b"content-length")
        if length is not None:
            self._skip(int(length))
        elif b"chunked" in headers.get(b"transfer-encoding", b""):
            while True:
                size = int(self._line().split(b";")[0], 16)
                self._skip(size + 2)
                if size == 0:
                    break
        else:
            raise RuntimeError(f"an answer framed by the close of the connection ({status})")
        return status

    def _fill(self) -> None:
        data = self.sock.recv(_READ)
        if not data:
            raise ConnectionError("the proxy closed the connection")
        self.buffer += data

    def _line(self) -> bytes:
        while (end := self.buffer.find(b"\r\n")) < 0:
            self._fill()
        line = bytes(self.buffer[:end])
        del self.buffer[: end + 2]
        return line

    def _head(self) -> tuple[int, dict[bytes, bytes]]:
        while (end := self.buffer.find(b"\r\n\r\n")) < 0:
            self._fill()
        lines = bytes(self.buffer[:end]).split(b"\r\n")
        del self.buffer[: end + 4]
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        return int(lines[0].split()[1]), headers

    def _skip(self, size: int) -> None:
        """Read and drop `size` bytes of body, the bulk of it straight into one buffer."""
        taken = min(size, len(self.buffer))
        del self.buffer[:taken]
        size -= taken
        view = memoryview(self.scratch)
        while size:
            got = self.sock.recv_into(view, min(size, len(view)))
            if not got:
                raise ConnectionError("the proxy closed the connection mid-body")
            size -= got

    def close(self) -> None:
        self.sock.close()


def _cpu_seconds(pid: int) -> float:
    """The user and system CPU time process `pid` has used so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load(proxy: Proxy, url: str, clients: int, seconds: float) -> dict[str, float]:
    """`clients` connections GET `url` through `proxy` one request after another for
    `seconds` (after two requests each to warm up): requests per second, and the proxy's CPU
    time per request."""
    connections = [Connection(proxy.url, url, proxy.ca_cert) for _ in range(clients)]
    for connection in connections:
        for _ in range(2):
            status = connection.get()
            if status != 200:
                raise RuntimeError(f"GET {url} through {proxy.url} answered {status}")
    counts = [0] * clients
    failures: list[BaseException] = []
    start = threading.Barrier(clients + 1)
    stop = threading.Event()

    def client(k: int) -> None:
        connection = connections[k]
        start.wait()
        try:
            while not stop.is_set():
                connection.get()
                counts[k] += 1
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for thread in threads:
        thread.start()
    cpu_before = _cpu_seconds(proxy.pid)
    start.wait()
    started = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    cpu = _cpu_seconds(proxy.pid) - cpu_before
    for connection in connections:
        connection.close()
    if failures:
        raise RuntimeError(f"a client failed: {failures[0]!r}")
    done = sum(counts)
    return {"rps": done / elapsed, "cpu_per_request_s": cpu / max(done, 1), "requests": done}


def record_urls(
    tool: str, store: str, urls: list[str], workdir: str, upstream_ca: str | None
) -> None:
    """Record one GET of each of `urls` through `tool` into `store` (not timed)."""
    with running(tool, store, record=True, workdir=workdir, upstream_ca=upstream_ca) as proxy:
        for url in urls:
            connection = Connection(proxy.url, url, proxy.ca_cert)
            status = connection.get()
            connection.close()
            if status != 200:
                raise RuntimeError(f"recording GET {url} through {tool} answered {status}")


def proxy_peer(
    tool: str,
    store: str,
    url: str,
    clients: int,
    seconds: float,
    workdir: str,
    record: bool = False,
    upstream_ca: str | None = None,
) -> dict[str, Any]:
    """The measure: `tool` replaying `store` (or recording into it) for `clients` clients
    sending GET `url` for `seconds`."""
    if tool == "mitmdump" and mitmdump_path() is None:
        raise Unavailable(
            f"mitmdump not installed (pip install mitmproxy in a virtualenv of its own, Python "
            f"3.12 or later; then put its mitmdump on PATH or in ${MITMDUMP_ENV})"
        )
    if record:  # a fresh recording each time
        with contextlib.suppress(FileNotFoundError):
            os.unlink(store)
    with running(tool, store, record=record, workdir=workdir, upstream_ca=upstream_ca) as proxy:
        return load(proxy, url, clients, seconds)
