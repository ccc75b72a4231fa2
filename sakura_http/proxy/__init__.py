"""The recording proxy: cassettes for every client that is not httpx.

`serve()` runs the proxy in a background thread for the length of a ``with`` block; `run()`
serves in the foreground until SIGINT or SIGTERM (the ``sakura-http proxy`` command).  Both take
the options of `RecordingTransport` and drive the same `CassetteSession`, so a cassette recorded
through the proxy replays in-process and the other way round.  `docs/proxy.md` documents it.

* Reverse mode (``upstream="https://api.example.com"``): clients send ``GET /path`` to the proxy,
  which records it as ``https://api.example.com/path``.
* Forward mode (no upstream): an HTTP/1.1 proxy for ``HTTP_PROXY`` / ``HTTPS_PROXY`` clients;
  ``CONNECT`` tunnels are intercepted with certificates from a local CA (`_ca.py`).

Needs the ``proxy`` extra (``pip install sakura-http[proxy]``) for h11 and cryptography.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import signal
import ssl
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import httpx

from .._core import RecordMode
from .._exceptions import CassetteError, ConfigurationError
from .._format import Exchange
from .._hosts import split_host_entry
from .._matching import DEFAULT_IGNORE_HEADERS
from .._policy import DEFAULT_MAX_BODY_BYTES
from .._session import CassetteSession
from .._streams import DEFAULT_CHUNK_SIZE
from ._ca import CertificateAuthority, default_ca_dir
from ._server import ProxyServer

__all__ = [
    "DEFAULT_LISTEN",
    "CertificateAuthority",
    "Proxy",
    "default_ca_dir",
    "run",
    "serve",
]

logger = logging.getLogger("sakura_http.proxy")

DEFAULT_LISTEN = "127.0.0.1:0"
#: How long a shutdown waits for exchanges in flight before cancelling them.
DEFAULT_SHUTDOWN_TIMEOUT = 10.0


@dataclass(frozen=True)
class Proxy:
    """A running proxy.

    `url` is its address (``http://127.0.0.1:PORT``); in forward mode `ca_cert` is the CA
    certificate clients must trust (None in reverse mode).  `env()` gives the environment
    variables that send a subprocess through the proxy.  Like a `RecordingTransport`, it
    tells what happened: `appended`, `unplayed()`, and `raised`, every `CassetteError` it
    answered with a 502 (a client may have ignored the answer; a test should not).
    """

    url: str
    host: str
    port: int
    path: str
    upstream: str | None
    ca_cert: Path | None
    _server: ProxyServer = field(repr=False)

    @property
    def mode(self) -> RecordMode:
        """The effective mode (after ``SAKURA_HTTP_RECORD``)."""
        return self._server.session.mode

    @property
    def appended(self) -> int:
        """How many exchanges the proxy has written."""
        return self._server.session.appended

    @property
    def raised(self) -> list[CassetteError]:
        """Every `CassetteError` the proxy answered with a 502, in order."""
        return self._server.raised

    def unplayed(self) -> list[Exchange]:
        """Recorded exchanges that no request has played yet, in cassette order."""
        return self._server.session.unplayed()

    def env(self) -> dict[str, str]:
        """Variables for a subprocess (``env={**os.environ, **proxy.env()}``).

        Forward mode: ``HTTP_PROXY`` / ``HTTPS_PROXY`` (both cases: curl reads only the
        lower-case ``http_proxy``) set to `url`, ``NO_PROXY`` cleared so no host bypasses it, and
        the CA certificate in ``SSL_CERT_FILE``, ``REQUESTS_CA_BUNDLE``, ``CURL_CA_BUNDLE`` and
        ``NODE_EXTRA_CA_CERTS``.  Reverse mode: only ``NO_PROXY`` naming the proxy's host, so a
        proxy set in the environment is not put in front of it; point the client's base URL at
        `url`.
        """
        if self.upstream is not None:
            return {"NO_PROXY": self.host, "no_proxy": self.host}
        env = {
            name: self.url for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
        }
        env.update(NO_PROXY="", no_proxy="")
        assert self.ca_cert is not None
        ca = str(self.ca_cert)
        for name in (
            "SSL_CERT_FILE",
            "REQUESTS_CA_BUNDLE",
            "CURL_CA_BUNDLE",
            "NODE_EXTRA_CA_CERTS",
        ):
            env[name] = ca
        return env


@dataclass(frozen=True)
class _Options:
    """Every option of `serve()` and `run()`, with its default."""

    upstream: str | None = None
    listen: str = DEFAULT_LISTEN
    ca_dir: str | os.PathLike[str] | None = None
    verify: ssl.SSLContext | str | os.PathLike[str] | bool = True
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT
    mode: RecordMode | str = RecordMode.NONE
    secret_headers: Iterable[str] = ()
    record_hosts: Iterable[str] | None = None
    passthrough_hosts: Iterable[str] = ()
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    ignore_headers: Iterable[str] = DEFAULT_IGNORE_HEADERS
    allow_repeats: bool = True
    record_errors: bool = False
    stream_through: bool = False
    record_timings: bool = False
    replay_latency: float = 0.0
    replay_chunk_size: int = DEFAULT_CHUNK_SIZE
    environ: Mapping[str, str] | None = None


def _open_session(cassette: str | os.PathLike[str], options: _Options) -> CassetteSession:
    """The session the proxy drives (the one place that builds it)."""
    return CassetteSession(
        cassette,
        mode=options.mode,
        can_record=True,  # the proxy always has the network (through httpx)
        secret_headers=options.secret_headers,
        ignore_headers=options.ignore_headers,
        record_hosts=options.record_hosts,
        passthrough_hosts=options.passthrough_hosts,
        max_body_bytes=options.max_body_bytes,
        allow_repeats=options.allow_repeats,
        record_errors=options.record_errors,
        record_timings=options.record_timings,
        environ=options.environ,
    )


def _listen_address(listen: str) -> tuple[str, int]:
    host, port = split_host_entry(listen)
    if not host:
        raise ConfigurationError(
            f"listen={listen!r} names no address; give host:port, e.g. {DEFAULT_LISTEN}"
        )
    return host, port or 0


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _upstream_url(upstream: str) -> httpx.URL:
    try:
        url = httpx.URL(upstream)
    except httpx.InvalidURL as exc:
        raise ConfigurationError(f"upstream={upstream!r} is not a URL: {exc}") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ConfigurationError(
            f"upstream={upstream!r} must be an http:// or https:// URL with a host, "
            "e.g. https://api.example.com"
        )
    if url.query or url.fragment or url.userinfo:
        raise ConfigurationError(
            f"upstream={upstream!r} must be scheme, host, port and path only (no query, "
            "fragment or user:password)"
        )
    return url


def _verify_context(
    verify: ssl.SSLContext | str | os.PathLike[str] | bool,
) -> ssl.SSLContext | bool:
    if isinstance(verify, (str, os.PathLike)):
        return ssl.create_default_context(cafile=os.fspath(verify))
    return verify


@dataclass
class _Prepared:
    server: ProxyServer
    host: str
    port: int
    proxy: Callable[[int], Proxy]


def _prepare(cassette: str | os.PathLike[str], options: _Options) -> _Prepared:
    if options.replay_chunk_size < 1:
        raise ConfigurationError(
            f"replay_chunk_size must be at least 1, not {options.replay_chunk_size}"
        )
    if options.replay_latency < 0:
        raise ConfigurationError(f"replay_latency must be 0 or more, not {options.replay_latency}")
    listen, upstream = options.listen, options.upstream
    host, port = _listen_address(listen)
    if not _is_loopback(host):
        logger.warning(
            "sakura-http proxy: warning: listening on %s, not on a loopback address: anyone "
            "who can reach it can replay the cassette %s (and record through it)",
            listen,
            cassette,
        )
    upstream_url = _upstream_url(upstream) if upstream is not None else None
    ca = CertificateAuthority(options.ca_dir) if upstream_url is None else None
    session = _open_session(cassette, options)
    server = ProxyServer(
        session,
        upstream=upstream_url,
        ca=ca,
        verify=_verify_context(options.verify),
        stream_through=options.stream_through,
        replay_latency=options.replay_latency,
        replay_chunk_size=options.replay_chunk_size,
        shutdown_timeout=options.shutdown_timeout,
    )
    shown = f"[{host}]" if ":" in host else host

    def proxy(bound: int) -> Proxy:
        return Proxy(
            url=f"http://{shown}:{bound}",
            host=host,
            port=bound,
            path=str(session.path),
            upstream=str(upstream_url) if upstream_url is not None else None,
            ca_cert=ca.cert_path if ca is not None else None,
            _server=server,
        )

    return _Prepared(server, host, port, proxy)


@contextlib.contextmanager
def serve(
    cassette: str | os.PathLike[str],
    *,
    upstream: str | None = None,
    listen: str = DEFAULT_LISTEN,
    ca_dir: str | os.PathLike[str] | None = None,
    verify: ssl.SSLContext | str | os.PathLike[str] | bool = True,
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
    mode: RecordMode | str = RecordMode.NONE,
    secret_headers: Iterable[str] = (),
    record_hosts: Iterable[str] | None = None,
    passthrough_hosts: Iterable[str] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ignore_headers: Iterable[str] = DEFAULT_IGNORE_HEADERS,
    allow_repeats: bool = True,
    record_errors: bool = False,
    stream_through: bool = False,
    record_timings: bool = False,
    replay_latency: float = 0.0,
    replay_chunk_size: int = DEFAULT_CHUNK_SIZE,
    environ: Mapping[str, str] | None = None,
) -> Iterator[Proxy]:
    """Run a recording proxy on `cassette` in a background thread for the ``with`` block.

    The options after `shutdown_timeout` are `RecordingTransport`'s, with the same meaning and
    defaults (``SAKURA_HTTP_RECORD`` / ``SAKURA_HTTP_STRICT`` apply unless `environ` says
    otherwise).  `upstream` selects reverse mode; without it the proxy is a forward proxy whose
    CA lives in `ca_dir` (default: `default_ca_dir()`), created there on first use.  `verify`
    checks upstream TLS: True (the system's CAs, or ``SSL_CERT_FILE``), a CA bundle path, an
    `ssl.SSLContext`, or False.  `listen` is ``host:port`` (port 0: a free one); a non-loopback
    host logs a warning.

    The cassette is read before the block starts (an unreadable one raises
    `CassetteFormatError` here).  Leaving the block stops the proxy gracefully: exchanges in
    flight get `shutdown_timeout` seconds, then the session closes (in mode "all" the fresh
    cassette replaces the old one).  A proxy that failed while serving re-raises its error
    here and, in mode "all", leaves the old cassette in place.
    """
    options = _Options(
        upstream=upstream,
        listen=listen,
        ca_dir=ca_dir,
        verify=verify,
        shutdown_timeout=shutdown_timeout,
        mode=mode,
        secret_headers=secret_headers,
        record_hosts=record_hosts,
        passthrough_hosts=passthrough_hosts,
        max_body_bytes=max_body_bytes,
        ignore_headers=ignore_headers,
        allow_repeats=allow_repeats,
        record_errors=record_errors,
        stream_through=stream_through,
        record_timings=record_timings,
        replay_latency=replay_latency,
        replay_chunk_size=replay_chunk_size,
        environ=environ,
    )
    prepared = _prepare(cassette, options)
    server = prepared.server
    with anyio.from_thread.start_blocking_portal() as portal:
        future, port = portal.start_task(server.run, prepared.host, prepared.port)
        try:
            yield prepared.proxy(port)
        finally:
            portal.call(server.stop)
            future.result()


def run(
    cassette: str | os.PathLike[str],
    *,
    on_ready: Callable[[Proxy], None] | None = None,
    **options: Any,
) -> None:
    """Serve `cassette` in the foreground until SIGINT or SIGTERM, then shut down gracefully.

    Takes the options of `serve()`; `on_ready(proxy)` is called once the proxy listens.  The
    first signal stops accepting connections and lets exchanges in flight finish (for up to
    `shutdown_timeout` seconds), then closes the cassette: in mode "all" the fresh recording
    replaces the old file.  A second signal stops at once and leaves the old file in place.
    """
    prepared = _prepare(cassette, _Options(**options))

    async def main() -> None:
        server = prepared.server
        # Signals are caught before the ready line: a script may stop the proxy at once.
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with anyio.create_task_group() as group:

                async def serve_then_stop(*, task_status: Any) -> None:
                    await server.run(prepared.host, prepared.port, task_status=task_status)
                    group.cancel_scope.cancel()  # done: stop watching for signals

                port = await group.start(serve_then_stop)
                if on_ready is not None:
                    on_ready(prepared.proxy(port))
                stopping = False
                async for signum in signals:
                    name = signal.Signals(signum).name
                    if stopping:  # a second signal: stop now, and keep the old cassette
                        logger.warning("sakura-http proxy: %s again: stopping now", name)
                        group.cancel_scope.cancel()
                        break
                    stopping = True
                    logger.warning(
                        "sakura-http proxy: %s: finishing exchanges in flight, then stopping "
                        "(%s again stops at once)",
                        name,
                        name,
                    )
                    server.stop()

    anyio.run(main)
