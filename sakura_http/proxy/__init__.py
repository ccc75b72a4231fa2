"""The recording proxy: cassettes for every client that is not httpx.

`serve()` runs the proxy in a background thread for the length of a ``with`` block (`start()`
without the block); `run()` serves in the foreground until SIGINT or SIGTERM (the
``sakura-http proxy`` command).  All take the options of `RecordingTransport` (or one
`CassetteConfig`) and join the cassette's shared `CassetteSession`, so a cassette recorded
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
import re
import signal
import ssl
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.from_thread
import httpx

from .._config import CassetteConfig, CassetteOptions, resolve_config
from .._core import RecordMode
from .._exceptions import CassetteError, ConfigurationError, RecordingIncomplete
from .._format import Exchange
from .._hosts import split_host_entry
from .._session import CassetteSession
from ._advice import CommandAdvice, ServeAdvice
from ._ca import CertificateAuthority, default_ca_dir
from ._cassettes import CassetteFolder, Cassettes, OneCassette
from ._server import HEALTH_PATH, ProxyServer

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack from Python 3.11 on

__all__ = [
    "DEFAULT_HEADER_TIMEOUT",
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_LISTEN",
    "DEFAULT_SHUTDOWN_TIMEOUT",
    "HEALTH_PATH",
    "CertificateAuthority",
    "CommandAdvice",
    "Proxy",
    "RecordingIncomplete",
    "ServeAdvice",
    "default_ca_dir",
    "run",
    "serve",
    "start",
]

logger = logging.getLogger("sakura_http.proxy")

DEFAULT_LISTEN = "127.0.0.1:0"
#: How long a shutdown waits for exchanges in flight before cancelling them.
DEFAULT_SHUTDOWN_TIMEOUT = 10.0
#: How long a client may take to send a request's head (its request line and headers).
DEFAULT_HEADER_TIMEOUT = 30.0
#: How long a client may stay silent (or not read) when the proxy waits on it: between
#: requests on a keep-alive connection, in the middle of a body, while being answered.
DEFAULT_IDLE_TIMEOUT = 60.0


@dataclass(frozen=True)
class _ProxyOptions:
    """The proxy's own options (the cassette's are in its `CassetteConfig`)."""

    upstream: str | Mapping[str, str] | None = None
    listen: str = DEFAULT_LISTEN
    ca_dir: str | os.PathLike[str] | None = None
    verify: ssl.SSLContext | str | os.PathLike[str] | bool = True
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    cassette_dir: str | os.PathLike[str] | None = None


def _listen_address(listen: str, cassette: str | os.PathLike[str]) -> tuple[str, int]:
    """(host, port) to listen on; warns when the host is not a loopback address."""
    host, port = split_host_entry(listen)
    if not host:
        raise ConfigurationError(
            f"listen={listen!r} names no address; give host:port, e.g. {DEFAULT_LISTEN}"
        )
    if not _is_loopback(host):
        logger.warning(
            "sakura-http proxy: warning: listening on %s, not on a loopback address: anyone "
            "who can reach it can replay the cassette %s (and record through it)",
            listen,
            cassette,
        )
    return host, port or 0


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_seconds(name: str, value: float, *, zero: bool = True) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (value >= 0 if zero else value > 0)
    ):
        more = "0 or more" if zero else "more than 0"
        raise ConfigurationError(f"{name}={value!r} must be a number of seconds, {more}")


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


#: A name in ``upstream={NAME: URL}``: one path segment clients can type as it is.
_ROUTE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._~-]*")


def _routes(upstreams: Mapping[str, str]) -> dict[str, httpx.URL]:
    """Named upstreams, checked: each name one plain path segment, each URL an upstream's."""
    if not upstreams:
        raise ConfigurationError(
            "upstream={} names no upstream; give {NAME: URL, ...}, a URL, or None (forward mode)"
        )
    routes = {}
    for name, url in upstreams.items():
        if not isinstance(name, str) or not _ROUTE_NAME.fullmatch(name):
            raise ConfigurationError(
                f"upstream name {name!r} must be one path segment of letters, digits and . _ ~ "
                "- (not starting with a symbol): clients send /NAME/path"
            )
        routes[name] = _upstream_url(url)
    return routes


def _verify_context(
    verify: ssl.SSLContext | str | os.PathLike[str] | bool,
) -> ssl.SSLContext | bool:
    if isinstance(verify, (str, os.PathLike)):
        return ssl.create_default_context(cafile=os.fspath(verify))
    return verify


@dataclass
class _Prepared:
    """A proxy ready to listen: its server, its address, and its session user."""

    server: ProxyServer
    user: Cassettes
    host: str
    port: int
    upstream: httpx.URL | None
    routes: dict[str, httpx.URL]
    ca: CertificateAuthority | None
    shutdown_timeout: float

    def url(self, port: int) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{shown}:{port}"


def _prepare(
    caller: str,
    cassette: str | os.PathLike[str] | None,
    own: _ProxyOptions,
    config: CassetteConfig | None,
    options: CassetteOptions,
    environ: Mapping[str, str] | None,
    advice: Callable[[], Any],
) -> _Prepared:
    """Check every option, then join the cassette's session (the one place that opens it)."""
    if (cassette is None) == (own.cassette_dir is None):
        raise ConfigurationError(
            "give the proxy one cassette, or a cassette folder (cassette_dir=, --cassette-dir) "
            "for one cassette per upstream origin: "
            + ("neither was given" if cassette is None else "not both")
        )
    if own.cassette_dir is not None and own.upstream is not None:
        raise ConfigurationError(
            "cassette_dir (--cassette-dir) keeps one cassette per upstream origin, which is "
            "forward mode; in reverse mode (upstream=...) give one cassette instead"
        )
    if config is None:
        options.setdefault("advice", advice())
    config = resolve_config(caller, config, options, environ)
    _check_seconds("shutdown_timeout", own.shutdown_timeout)
    _check_seconds("header_timeout", own.header_timeout, zero=False)
    _check_seconds("idle_timeout", own.idle_timeout, zero=False)
    where = cassette if cassette is not None else f"{own.cassette_dir}/*.jsonl"
    host, port = _listen_address(own.listen, where)
    upstream = routes = None
    if isinstance(own.upstream, Mapping):
        routes = _routes(own.upstream)
    elif own.upstream is not None:
        upstream = _upstream_url(own.upstream)
    ca = CertificateAuthority(own.ca_dir) if upstream is None and not routes else None
    user: Cassettes
    if own.cassette_dir is not None:
        user = CassetteFolder(Path(own.cassette_dir), config)
    else:
        assert cassette is not None
        # The one place that opens the cassette; the proxy has the network.
        user = OneCassette(CassetteSession.open(cassette, config, can_record=True))
    server = ProxyServer(
        user,
        upstream=upstream,
        ca=ca,
        routes=routes,
        verify=_verify_context(own.verify),
        shutdown_timeout=own.shutdown_timeout,
        header_timeout=own.header_timeout,
        idle_timeout=own.idle_timeout,
    )
    return _Prepared(server, user, host, port, upstream, routes or {}, ca, own.shutdown_timeout)


def _incomplete(
    prepared: _Prepared, *, at_once: bool, timeout: float, timeout_option: str
) -> RecordingIncomplete | None:
    """The error to raise when a re-recording was cut short, None if it was not."""
    if prepared.user.mode is not RecordMode.ALL:
        return None  # appends already written stay; nothing is replaced
    cancelled = prepared.server.cancelled
    if at_once:
        why = "a second signal stopped the proxy at once"
        fix = "stop the proxy with one signal, which lets the requests in flight finish"
    elif cancelled:
        many = (
            f"{cancelled} requests in flight were" if cancelled > 1 else "1 request in flight was"
        )
        why = f"{many} cancelled when the proxy stopped (after waiting {timeout:g} s)"
        fix = (
            "let the clients' requests finish before stopping the proxy, or give them more "
            f"time with {timeout_option}"
        )
    else:
        return None
    return RecordingIncomplete(str(prepared.user.path), cancelled, why, fix)


class Proxy:
    """A proxy running in a background thread (from `start()` or `serve()`).

    `url` is its address (``http://127.0.0.1:PORT``); in forward mode `ca_cert` is the CA
    certificate clients must trust (None in reverse mode).  `env()` gives the environment
    variables that send a subprocess through the proxy.  Like a `RecordingTransport`, it tells
    what happened: `appended`, `unplayed()`, and `raised`, every `CassetteError` it answered
    with a 502 (a client may ignore such an answer; a test should not).
    """

    def __init__(self, prepared: _Prepared) -> None:
        self._prepared = prepared
        self._stack = contextlib.ExitStack()
        portal = self._stack.enter_context(anyio.from_thread.start_blocking_portal())
        try:
            self._future, port = portal.start_task(
                prepared.server.run, prepared.host, prepared.port
            )
        except BaseException:
            self._stack.close()
            prepared.user.close(failed=True)
            raise
        self._portal = portal
        self.port: int = port
        self.host = prepared.host
        self.url = prepared.url(port)
        self.upstream = str(prepared.upstream) if prepared.upstream is not None else None
        #: Named upstreams (``upstream={NAME: URL}``): NAME -> URL, served under ``url/NAME``.
        self.upstreams = {name: str(url) for name, url in prepared.routes.items()}
        self.ca_cert: Path | None = prepared.ca.cert_path if prepared.ca is not None else None
        self._closed = False

    @property
    def path(self) -> str:
        """The cassette file (the folder, with `cassette_dir`)."""
        return str(self._prepared.user.path)

    @property
    def config(self) -> CassetteConfig:
        """The cassette's configuration, with the effective mode."""
        return self._prepared.user.config

    @property
    def mode(self) -> RecordMode:
        """The effective mode (after ``SAKURA_HTTP_RECORD``)."""
        return self._prepared.user.mode

    @property
    def appended(self) -> int:
        """How many exchanges the proxy has written."""
        return self._prepared.user.appended

    @property
    def raised(self) -> list[CassetteError]:
        """The `CassetteError`s the proxy answered with a 502, in order (the last 1,000: a
        proxy left running does not keep them all)."""
        return self._prepared.server.raised

    def unplayed(self) -> list[Exchange]:
        """Recorded exchanges that no request has played yet, in cassette order."""
        return self._prepared.user.unplayed()

    def env(self) -> dict[str, str]:
        """Variables for a subprocess (``env={**os.environ, **proxy.env()}``).

        Forward mode: ``HTTP_PROXY`` / ``HTTPS_PROXY`` (both cases: curl reads only the
        lower-case ``http_proxy``) set to `url`, ``NO_PROXY`` cleared so no host bypasses it,
        ``NODE_USE_ENV_PROXY=1`` (without it Node 24's ``fetch`` and ``https`` ignore the proxy
        variables), and the CA certificate in ``SSL_CERT_FILE``, ``REQUESTS_CA_BUNDLE``,
        ``CURL_CA_BUNDLE`` and ``NODE_EXTRA_CA_CERTS``.  Reverse mode: only ``NO_PROXY`` (both
        cases) naming the proxy's host, so a proxy already set in the environment (a corporate
        ``HTTP_PROXY``) is not put between the client and this one; point the client's base
        URL at `url`.
        """
        if self.ca_cert is None:
            return {"NO_PROXY": self.host, "no_proxy": self.host}
        env = {
            name: self.url for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
        }
        env.update(NO_PROXY="", no_proxy="", NODE_USE_ENV_PROXY="1")
        for name in (
            "SSL_CERT_FILE",
            "REQUESTS_CA_BUNDLE",
            "CURL_CA_BUNDLE",
            "NODE_EXTRA_CA_CERTS",
        ):
            env[name] = str(self.ca_cert)
        return env

    def close(self, *, failed: bool = False) -> None:
        """Stop the proxy gracefully (see `serve()`) and leave the cassette's session.

        `failed=True` says the run did not finish cleanly: in mode "all" the old cassette is
        then kept as it was.  So it is when stopping had to cancel requests in flight (after
        `shutdown_timeout`): the re-recording lacks them, and `RecordingIncomplete` is raised.
        Closing again does nothing.
        """
        if self._closed:
            return
        self._closed = True
        prepared = self._prepared
        incomplete = None
        try:
            self._portal.call(prepared.server.stop)
            self._future.result()
            if not failed:
                incomplete = _incomplete(
                    prepared,
                    at_once=False,
                    timeout=prepared.shutdown_timeout,
                    timeout_option="serve(..., shutdown_timeout=...)",
                )
        except BaseException:
            failed = True
            raise
        finally:
            self._stack.close()
            prepared.user.close(failed=failed or incomplete is not None)
        if incomplete is not None:
            raise incomplete

    def __repr__(self) -> str:
        return f"<sakura_http Proxy {self.url} mode={self.mode.value!r} cassette={self.path!r}>"


def start(
    cassette: str | os.PathLike[str] | None = None,
    *,
    cassette_dir: str | os.PathLike[str] | None = None,
    upstream: str | Mapping[str, str] | None = None,
    listen: str = DEFAULT_LISTEN,
    ca_dir: str | os.PathLike[str] | None = None,
    verify: ssl.SSLContext | str | os.PathLike[str] | bool = True,
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
    header_timeout: float = DEFAULT_HEADER_TIMEOUT,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    config: CassetteConfig | None = None,
    environ: Mapping[str, str] | None = None,
    **options: Unpack[CassetteOptions],
) -> Proxy:
    """Start a recording proxy on `cassette` in a background thread; `Proxy.close()` stops it.

    Takes the same arguments as `serve()`, which is the same with a ``with`` block.
    """
    own = _ProxyOptions(
        upstream,
        listen,
        ca_dir,
        verify,
        shutdown_timeout,
        header_timeout,
        idle_timeout,
        cassette_dir,
    )
    return Proxy(_prepare("serve()", cassette, own, config, options, environ, ServeAdvice))


@contextlib.contextmanager
def serve(
    cassette: str | os.PathLike[str] | None = None,
    *,
    cassette_dir: str | os.PathLike[str] | None = None,
    upstream: str | Mapping[str, str] | None = None,
    listen: str = DEFAULT_LISTEN,
    ca_dir: str | os.PathLike[str] | None = None,
    verify: ssl.SSLContext | str | os.PathLike[str] | bool = True,
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
    header_timeout: float = DEFAULT_HEADER_TIMEOUT,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    config: CassetteConfig | None = None,
    environ: Mapping[str, str] | None = None,
    **options: Unpack[CassetteOptions],
) -> Iterator[Proxy]:
    """Run a recording proxy on `cassette` in a background thread for the ``with`` block.

    The cassette's options are `RecordingTransport`'s, as keywords (``mode``,
    ``secret_headers``, ``record_hosts``, ``stream_through``, ...) or one `CassetteConfig`;
    ``SAKURA_HTTP_RECORD`` / ``SAKURA_HTTP_STRICT`` apply unless `environ` says otherwise.
    The proxy's own:

    * `cassette_dir`, instead of `cassette` (forward mode only): a folder holding one cassette
      per upstream origin, ``HOST.jsonl``, or ``HOST_PORT.jsonl`` for a port other than 80 and
      443; each is its own session, opened at its origin's first request (created only when
      recording), and closed, in mode "all" replaced, on its own when the proxy stops.
    * `upstream`: reverse mode, the base URL requests are sent to and recorded under; or
      several, ``{NAME: URL, ...}``, each served under the path prefix ``/NAME`` (``GET
      /NAME/v1/x`` is sent to, and recorded as, ``URL/v1/x``; a name is one path segment).
      Without it the proxy is a forward proxy whose CA lives in `ca_dir` (default:
      `default_ca_dir()`), created there on first use.
    * `verify`: how upstream TLS is checked: True (the system's CAs, or ``SSL_CERT_FILE``), a
      CA bundle path, an `ssl.SSLContext`, or False.
    * `listen`: ``host:port`` (port 0: a free one); a non-loopback host logs a warning.
    * `shutdown_timeout`: how long leaving the block waits for exchanges in flight before
      cancelling them.
    * `header_timeout`, `idle_timeout`: how long a client may take to send a request's head
      (from the connection's start, or from the first byte of a later request), and how long
      it may stay silent (between requests, in the middle of a body) or leave its answer
      unread; past either, the connection is closed, so a stuck or hostile client cannot hold
      one for ever.

    The cassette is read before the block starts (an unreadable one raises
    `CassetteFormatError` here).  Leaving the block stops the proxy gracefully and leaves the
    cassette's session: in mode "all" the fresh cassette replaces the old one, unless the block
    was left by an exception or the proxy failed while serving (its error is raised here).
    If stopping had to cancel requests still in flight after `shutdown_timeout`, the
    re-recording is incomplete: the old cassette is kept and `RecordingIncomplete` is raised.
    """
    proxy = start(
        cassette,
        cassette_dir=cassette_dir,
        upstream=upstream,
        listen=listen,
        ca_dir=ca_dir,
        verify=verify,
        shutdown_timeout=shutdown_timeout,
        header_timeout=header_timeout,
        idle_timeout=idle_timeout,
        config=config,
        environ=environ,
        **options,
    )
    try:
        yield proxy
    except BaseException:
        proxy.close(failed=True)
        raise
    proxy.close()


def run(
    cassette: str | os.PathLike[str] | None = None,
    *,
    cassette_dir: str | os.PathLike[str] | None = None,
    on_ready: Callable[[str, RecordMode], None] | None = None,
    upstream: str | Mapping[str, str] | None = None,
    listen: str = DEFAULT_LISTEN,
    ca_dir: str | os.PathLike[str] | None = None,
    verify: ssl.SSLContext | str | os.PathLike[str] | bool = True,
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
    header_timeout: float = DEFAULT_HEADER_TIMEOUT,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    config: CassetteConfig | None = None,
    environ: Mapping[str, str] | None = None,
    **options: Unpack[CassetteOptions],
) -> None:
    """Serve `cassette` in the foreground until SIGINT or SIGTERM, then shut down gracefully.

    Takes the arguments of `serve()`; error messages name the command's flags (`CommandAdvice`)
    unless `config` brings its own advice.  `on_ready(url, mode)` is called once the proxy
    listens, with its URL and effective mode.  The first signal stops accepting connections and lets
    exchanges in flight finish (for up to `shutdown_timeout` seconds), then leaves the
    cassette's session: in mode "all" the fresh recording replaces the old file.  A second
    signal stops at once and leaves the old file in place, as does a failure while serving.
    In mode "all", a stop that cancelled requests in flight, or a second signal, leaves the
    re-recording incomplete: the old file is kept and `RecordingIncomplete` is raised.
    """
    own = _ProxyOptions(
        upstream,
        listen,
        ca_dir,
        verify,
        shutdown_timeout,
        header_timeout,
        idle_timeout,
        cassette_dir,
    )
    prepared = _prepare("sakura-http proxy", cassette, own, config, options, environ, CommandAdvice)
    server = prepared.server
    clean = False
    at_once = False

    async def main() -> None:
        nonlocal clean, at_once
        listener = await server.listen(prepared.host, prepared.port)  # errors: not grouped
        # Signals are caught before the ready line: a script may stop the proxy at once.
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with anyio.create_task_group() as group:

                async def serve_then_stop(*, task_status: Any) -> None:
                    nonlocal clean
                    await server.serve(listener, task_status=task_status)
                    clean = True
                    group.cancel_scope.cancel()  # done: stop watching for signals

                port = await group.start(serve_then_stop)
                if on_ready is not None:
                    on_ready(prepared.url(port), prepared.user.mode)
                stopping = False
                async for signum in signals:
                    name = signal.Signals(signum).name
                    if stopping:  # a second signal: stop now, and keep the old cassette
                        logger.warning("sakura-http proxy: %s again: stopping now", name)
                        at_once = True
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

    incomplete = None
    try:
        anyio.run(main)
        incomplete = _incomplete(
            prepared,
            at_once=at_once,
            timeout=prepared.shutdown_timeout,
            timeout_option="--shutdown-timeout",
        )
    finally:
        prepared.user.close(failed=not clean or incomplete is not None)
    if incomplete is not None:
        raise incomplete
