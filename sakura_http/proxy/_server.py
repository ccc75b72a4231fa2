"""The proxy server: anyio sockets, h11 for HTTP/1.1, httpx for upstream, cassette sessions.

One task per client connection runs the connection loop: h11's state machine over the socket
(or over the TLS stream of an intercepted ``CONNECT`` tunnel), one request after another while
the client keeps the connection alive.  This module is that loop: accepting, serving a
connection, the health check, and the graceful stop.  Everything else it hands on, each to the
module named after it:

- `_wire.py`: the client side of a connection (h11, timeouts, the header rules, the proxy's
  own answers);
- `_routing.py`: where a request goes (reverse mode, named upstreams, forward mode);
- `_exchanges.py`: one exchange, replayed, recorded through the step sequence or passed
  through;
- `_tunnel.py`: ``CONNECT`` tunnels, TLS interception and a tunnel's own upstream connection;
- `_h2.py`: the refusal of an HTTP/2 prior-knowledge client.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import ssl
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.abc
import h11
import httpx
from anyio.streams.stapled import MultiListener

from .._exceptions import CassetteError, ConfigurationError
from ._ca import CertificateAuthority
from ._cassettes import Cassettes
from ._exchanges import Exchanges
from ._h2 import is_prior_knowledge
from ._routing import Routing
from ._tunnel import Tunnels
from ._wire import (
    ERROR_NAMES,
    HOP_BY_HOP,
    TO_PROXY,
    Abort,
    ClientGone,
    TimedOut,
    Timeouts,
    Wire,
    error_name,
    framing_problem,
    peer_name,
)

__all__ = [
    "ERROR_NAMES",
    "HEALTH_PATH",
    "HOP_BY_HOP",
    "TO_PROXY",
    "ProxyServer",
    "error_name",
    "framing_problem",
    "is_health_check",
]

logger = logging.getLogger("sakura_http.proxy")

# Accepting fails for want of resources (file descriptors, memory) while many connections are
# open: the proxy waits this long and accepts again, rather than stop serving everyone.  The
# connection waiting in the listen backlog is accepted then.
_ACCEPT_RETRY_SECONDS = 0.1
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
# As many upstream connections as requests in flight, each kept for the next request: with
# httpx's default (100 at once, 20 kept alive) one of 101 requests in flight at once was never
# answered, and more than 20 clients made every round of requests open new connections, a TLS
# handshake each.  Idle ones close after 5 s.
_UPSTREAM_LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=None)
#: The proxy's own health check: ``GET`` it on the proxy's address (never forwarded, never
#: recorded, in either mode) for 200 once the proxy serves, e.g. from a compose ``healthcheck``.
HEALTH_PATH = "/__sakura-http/health"


class ProxyServer:
    """Serves one cassette session until `stop()`; see the module docstring.

    `upstream` (reverse mode) is the base URL requests are sent and recorded under, or
    `routes` maps names to base URLs, each served under the path prefix ``/NAME``; with
    neither it is forward mode, where `ca` intercepts ``CONNECT`` tunnels.  `run()` serves
    on an anyio event loop; on `stop()` it stops accepting, closes idle connections, lets
    exchanges in flight finish for up to `shutdown_timeout` seconds (then cancels them,
    counting the requests cut off in `cancelled`) and returns.  The caller owns `cassettes`
    and closes them afterwards (``failed=True`` unless `run()` returned normally with nothing
    `cancelled`).
    """

    def __init__(
        self,
        cassettes: Cassettes,
        *,
        upstream: httpx.URL | None,
        ca: CertificateAuthority | None,
        routes: Mapping[str, httpx.URL] | None = None,
        verify: ssl.SSLContext | bool,
        shutdown_timeout: float,
        header_timeout: float,
        idle_timeout: float,
    ) -> None:
        self.cassettes = cassettes
        self.config = cassettes.config
        self.routing = Routing(upstream, routes, self.config.secret_query_params)
        self.ca = ca
        # One TLS context for every upstream transport (making one reads the CA bundle).
        self._upstream_tls = (
            verify if isinstance(verify, ssl.SSLContext) else httpx.create_ssl_context(verify)
        )
        self._shutdown_timeout = shutdown_timeout
        self._timeouts = Timeouts(header_timeout, idle_timeout)
        self._exchanges = Exchanges(cassettes, self.routing)
        self._tunnels = Tunnels(
            self.routing, ca, self._timeouts, self._upstream_tls, self._serve_http
        )
        # Events belong to the event loop that runs the server: made in run().
        self._stop: anyio.Event | None = None
        self._drained: anyio.Event | None = None
        self._stopping = False
        self._idle: set[anyio.CancelScope] = set()
        self._active = 0
        self._in_flight = 0
        #: How many requests in flight the last shutdown cancelled (their clients got no
        #: complete answer, and nothing was recorded for them).
        self.cancelled = 0
        #: The `CassetteError`s answered with a 502, in order: the last
        #: `Exchanges.RAISED_KEPT` of them, so a proxy left running for days does not grow
        #: without bound.
        self.raised: list[CassetteError] = self._exchanges.raised

    # --- lifecycle -----------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask `run()` to shut down gracefully (call it from the server's event loop)."""
        assert self._stop is not None, "run() first"
        self._stop.set()

    @staticmethod
    async def listen(host: str, port: int) -> anyio.abc.Listener[Any]:
        """A listening socket on `host`:`port` (0: a free port); `ConfigurationError` if the
        address cannot be used."""
        try:
            return await anyio.create_tcp_listener(local_host=host, local_port=port)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot listen on {host}:{port} ({exc.strerror or exc}); pick another "
                "address or port (port 0 picks a free one)"
            ) from None

    async def run(
        self,
        host: str,
        port: int,
        *,
        task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen on `host`:`port` and serve (the port is reported through `task_status`)."""
        await self.serve(await self.listen(host, port), task_status=task_status)

    async def serve(
        self,
        listener: anyio.abc.Listener[Any],
        *,
        task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve on `listener` until `stop()` (its port is reported through `task_status`)."""
        stop = self._stop = anyio.Event()
        drained = self._drained = anyio.Event()
        outer = self._exchanges.outer = httpx.AsyncHTTPTransport(
            verify=self._upstream_tls, retries=0, limits=_UPSTREAM_LIMITS
        )
        try:
            async with anyio.create_task_group() as connections:
                try:
                    accepting = await connections.start(self._accept, listener, connections)
                    task_status.started(listener.extra(anyio.abc.SocketAttribute.local_port))
                    await stop.wait()
                    self._stopping = True
                    accepting.cancel()
                    for scope in list(self._idle):
                        scope.cancel()
                    with anyio.move_on_after(self._shutdown_timeout):
                        if self._active:
                            await drained.wait()
                    if self._active:
                        logger.warning(
                            "sakura-http proxy: %d connection(s) still busy after %g s; "
                            "cancelling their exchanges",
                            self._active,
                            self._shutdown_timeout,
                        )
                except anyio.get_cancelled_exc_class():  # stopped at once from outside
                    self.cancelled = self._in_flight
                    raise
                self.cancelled = self._in_flight
                connections.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await listener.aclose()
                await outer.aclose()

    async def _accept(
        self,
        listener: anyio.abc.Listener[Any],
        connections: anyio.abc.TaskGroup,
        *,
        task_status: anyio.abc.TaskStatus[anyio.CancelScope] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        # The accept loops are the proxy's own, not `Listener.serve()`, which gives up on the
        # first failed accept: a proxy out of file descriptors must wait, not stop.
        sockets = listener.listeners if isinstance(listener, MultiListener) else [listener]
        with anyio.CancelScope() as scope:
            task_status.started(scope)
            async with anyio.create_task_group() as group:
                for socket_listener in sockets:
                    group.start_soon(self._accept_on, socket_listener, connections)

    async def _accept_on(self, listener: Any, connections: anyio.abc.TaskGroup) -> None:
        short = False  # log once per shortage, not once per retry
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in _OUT_OF_RESOURCES:
                    raise
                if not short:
                    logger.warning(
                        "sakura-http proxy: cannot accept a connection (%s); accepting again "
                        "as connections close",
                        exc.strerror or exc,
                    )
                short = True
                await anyio.sleep(_ACCEPT_RETRY_SECONDS)
                continue
            short = False
            connections.start_soon(self._connection, stream)

    async def _connection(self, stream: anyio.abc.ByteStream) -> None:
        self._active += 1
        peer = peer_name(stream)
        try:
            async with stream:
                await self._serve_http(Wire(stream, peer, self._timeouts), origin=None)
        except ClientGone as exc:
            logger.warning("sakura-http proxy: %s went away (%s)", peer, exc)
        except Abort:
            pass
        except Exception:  # a bug must cost one connection, never the proxy
            logger.exception("sakura-http proxy: connection from %s failed", peer)
        finally:
            self._active -= 1
            if self._stopping and not self._active and self._drained is not None:
                self._drained.set()

    # --- HTTP/1.1 -----------------------------------------------------------------------------

    async def _serve_http(self, wire: Wire, origin: httpx.URL | None) -> None:
        """Serve requests on one connection (keep-alive) until it closes or the proxy stops."""
        while True:
            with anyio.CancelScope() as idle:
                if self._stopping:
                    return
                self._idle.add(idle)
                try:
                    event = await wire.next_request()
                except h11.RemoteProtocolError as exc:
                    await wire.bad_input(exc)
                    return
                except TimedOut as exc:
                    await wire.timed_out(exc)
                    return
                finally:
                    self._idle.discard(idle)
            if idle.cancelled_caught or not isinstance(event, h11.Request):
                return  # shutting down, or the client closed an idle connection
            problem = framing_problem(event)
            if problem is not None:
                logger.warning("sakura-http proxy: bad request from %s: %s", wire.peer, problem)
                with contextlib.suppress(ClientGone):
                    await wire.answer(400, "bad-request", f"bad request: {problem}\n")
                    await wire.linger()
                return
            if is_prior_knowledge(event.method, event.target, event.http_version):
                text = (
                    "HTTP/2 is not supported: the recording proxy speaks HTTP/1.1 only. Make "
                    "the client use HTTP/1.1 (curl: drop --http2-prior-knowledge; httpx: "
                    "http2=False) and send the request again"
                )
                logger.warning("sakura-http proxy: 501 unsupported for %s: %s", wire.peer, text)
                await wire.refuse_http2(text + "\n")
                return
            if event.method == b"CONNECT":
                try:
                    await self._tunnels.serve(wire, event)
                except TimedOut as exc:
                    await wire.timed_out(exc)
                return
            self._in_flight += 1
            try:
                if origin is None and is_health_check(event):
                    await self._health(wire, event)
                else:
                    await self._exchanges.serve(wire, event, origin)
            except h11.RemoteProtocolError as exc:
                await wire.bad_input(exc)
                return
            except TimedOut as exc:
                await wire.timed_out(exc)
                return
            finally:
                self._in_flight -= 1
            if not wire.reusable():
                if wire.h11.their_state is h11.SEND_BODY:  # answered before the body was read
                    await wire.linger()
                return
            if self._stopping:
                return
            wire.h11.start_next_cycle()

    async def _health(self, wire: Wire, request: h11.Request) -> None:
        """Answer the health check (`HEALTH_PATH`): 200 and the mode, since the proxy serves."""
        while not isinstance(await wire.next_event(), h11.EndOfMessage):
            pass  # a body, if any, is read and dropped
        body = json.dumps({"status": "ready", "mode": self.cassettes.mode.value}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-store"),
        ]
        await wire.send(h11.Response(status_code=200, headers=headers, reason=b"OK"))
        if request.method != b"HEAD":
            await wire.send(h11.Data(data=body))
        await wire.send(h11.EndOfMessage())


def is_health_check(request: h11.Request) -> bool:
    """Whether `request`, sent to the proxy itself (not in a tunnel), asks for `HEALTH_PATH`."""
    path = request.target.split(b"?", 1)[0]
    return request.method in (b"GET", b"HEAD") and path == HEALTH_PATH.encode("ascii")
