"""The proxy server: anyio sockets, h11 for HTTP/1.1, httpx for upstream, a `CassetteSession`.

One task per client connection runs h11's state machine over the socket (or over the TLS stream
of an intercepted ``CONNECT`` tunnel).  Each complete request is turned into the same
`RequestData` an in-process `RecordingTransport` would build, and drives the session through the
same steps: passthrough? -> `plan` (the safety checks, then the decision) -> replay the planned
exchange, or record it: the step sequence every front end drives (`_steps.record_steps`), sent
upstream through the transport's `OuterIO`, and replay what was recorded.  The server
makes no decision of its own; it only moves bytes and turns `CassetteError`s into answers.

The client side of a connection (h11, timeouts, the header rules, the proxy's own answers) is
`_wire.py`; this module is the connection loop and the steps of one exchange.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import json
import logging
import re
import ssl
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.abc
import h11
import httpx
from anyio.streams.stapled import MultiListener
from anyio.streams.tls import TLSStream

from .._exceptions import BodyTooLargeError, CassetteError, ConfigurationError
from .._exchange import RequestData
from .._format import Exchange, header_text
from .._hosts import split_host_entry
from .._libraries import library_of
from .._policy import check_body_size, shown_url
from .._session import CassetteUser, Plan
from .._steps import Answer, arun_steps, record_steps
from .._streams import ReplayStream, TeeStream
from .._transport import OuterIO
from ._ca import CertificateAuthority
from ._cassettes import Cassettes
from ._h2 import is_prior_knowledge
from ._wire import (
    ERROR_NAMES,
    HOP_BY_HOP,
    TO_PROXY,
    Abort,
    ClientGone,
    Prepended,
    TimedOut,
    Timeouts,
    Wire,
    client_headers,
    error_name,
    forwarded_headers,
    framing_problem,
    peer_name,
    reason_phrase,
    recorded_headers,
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
# Upstream: no read timeout (a stream may pause for minutes); the client keeps its own.
_UPSTREAM_TIMEOUT = {"connect": 30.0, "read": None, "write": 60.0, "pool": 60.0}
# As many upstream connections as requests in flight, each kept for the next request: with
# httpx's default (100 at once, 20 kept alive) one of 101 requests in flight at once was never
# answered, and more than 20 clients made every round of requests open new connections, a TLS
# handshake each.  Idle ones close after 5 s.
_UPSTREAM_LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=None)
_BODILESS_STATUSES = frozenset({204, 304})
#: The proxy's own health check: ``GET`` it on the proxy's address (never forwarded, never
#: recorded, in either mode) for 200 once the proxy serves, e.g. from a compose ``healthcheck``.
HEALTH_PATH = "/__sakura-http/health"
# The first byte of a TLS record that starts a handshake: a tunnel that opens otherwise carries
# plain HTTP.
_TLS_HANDSHAKE = b"\x16"
_GONE = (anyio.EndOfStream, anyio.BrokenResourceError, OSError)


# The upstream transport of the CONNECT tunnel being served, if any (`_serve_tunnel`).  A
# tunnel is one client connection to one origin: it gets an upstream connection of its own,
# closed with it, as mitmproxy does.  One pool for every tunnel made each request look over
# every idle connection in it (httpcore checks each for expiry, a poll through anyio's TLS
# stream): with 32 clients recording over https, that cost three times the CPU per request.
_TUNNEL_UPSTREAM: contextvars.ContextVar[httpx.AsyncHTTPTransport | None] = contextvars.ContextVar(
    "sakura_http_tunnel_upstream", default=None
)


class _BadRequest(Exception):
    """A request the proxy cannot serve in its mode; answered 400 with this message."""


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

    #: How many of the errors it answered with a 502 the proxy keeps in `raised`.
    RAISED_KEPT = 1000

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
        self._passthrough_hosts = self.config.passthrough_host_list
        self.upstream = upstream
        #: Reverse mode for several upstreams: ``/NAME/path`` goes to ``routes[NAME] + /path``.
        self.routes = dict(routes or {})
        self.ca = ca
        # One TLS context for every upstream transport (making one reads the CA bundle).
        self._upstream_tls = (
            verify if isinstance(verify, ssl.SSLContext) else httpx.create_ssl_context(verify)
        )
        self._shutdown_timeout = shutdown_timeout
        self._timeouts = Timeouts(header_timeout, idle_timeout)
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
        self._outer: httpx.AsyncHTTPTransport | None = None
        #: The `CassetteError`s answered with a 502, in order: the last `RAISED_KEPT` of them,
        #: so a proxy left running for days does not grow without bound.
        self.raised: list[CassetteError] = []

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
        self._outer = httpx.AsyncHTTPTransport(
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
                await self._outer.aclose()

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
                    await self._tunnel(wire, event)
                except TimedOut as exc:
                    await wire.timed_out(exc)
                return
            self._in_flight += 1
            try:
                if origin is None and is_health_check(event):
                    await self._health(wire, event)
                else:
                    await self._exchange(wire, event, origin)
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

    async def _fail(self, wire: Wire, method: str, url: str, exc: BaseException) -> None:
        """Answer 502 for `exc`, with its name and message, and log it."""
        if isinstance(exc, CassetteError):
            self.raised.append(exc)
            if len(self.raised) > self.RAISED_KEPT:
                del self.raised[: len(self.raised) - self.RAISED_KEPT]
        name = error_name(exc)
        text = str(exc) or type(exc).__name__
        if isinstance(exc, httpx.TransportError):
            shown = self._shown(url)
            text = f"{method} {shown}: the upstream request failed: {type(exc).__name__}: {text}"
        logger.warning("sakura-http proxy: 502 %s: %s", name, text)
        await wire.answer(502, name, text + "\n")

    # --- one exchange ---------------------------------------------------------------------------

    def _url(self, request: h11.Request, origin: httpx.URL | None) -> httpx.URL:
        target = request.target.decode("ascii")
        absolute = not target.startswith("/")
        if self.upstream is not None or self.routes:
            if absolute:
                raise _BadRequest(
                    f"this proxy runs in reverse mode ({self._reverse_flags()}): send "
                    f"requests for paths (GET /path), not {self._shown(target)!r}"
                )
            base, target = self._route(target)
            return httpx.URL(str(base).rstrip("/") + target)
        if origin is not None and not absolute:
            return httpx.URL(str(origin) + target)
        if not absolute:
            raise _BadRequest(
                f"this proxy runs in forward mode: send absolute-form requests (GET "
                f"http://host/path, as clients do with HTTP_PROXY set) or CONNECT, not "
                f"{self._shown(target)!r}; to stand in for one server, start it with --upstream URL"
            )
        url = httpx.URL(target)
        if url.scheme not in ("http", "https") or not url.host:
            raise _BadRequest(
                f"cannot proxy {self._shown(target)!r}: only http:// and https:// URLs"
            )
        return url

    def _shown(self, url: str) -> str:
        """`url` (or a request target) as the proxy's answers and logs print it: secret query
        values as their length (`shown_url`), since both reach CI logs."""
        return shown_url(url, self.config.secret_query_params)

    def _reverse_flags(self) -> str:
        if self.upstream is not None:
            return f"--upstream {self.upstream}"
        return " ".join(f"--upstream {name}={url}" for name, url in self.routes.items())

    def _route(self, target: str) -> tuple[httpx.URL, str]:
        """The upstream a path-form `target` goes to, and the target to send it."""
        if self.upstream is not None:
            return self.upstream, target
        match = re.match(r"/([^/?]*)(.*)", target, flags=re.S)
        assert match is not None  # reverse mode reaches here with "/..." targets only
        name, rest = match.groups()
        base = self.routes.get(name)
        if base is None:
            served = ", ".join(f"/{n}/... for {url}" for n, url in self.routes.items())
            raise _BadRequest(
                f"no upstream is named {name!r} (in {self._shown(target)!r}): this proxy serves "
                f"{served}; "
                "send the request under one of these prefixes, or start the proxy with "
                "another --upstream NAME=URL"
            )
        return base, rest if rest.startswith("/") else "/" + rest

    async def _read_body(self, wire: Wire, request: h11.Request) -> bytes:
        limit = self.config.max_body_bytes
        for name, value in request.headers:
            if name == b"content-length" and value.isdigit():
                check_body_size(int(value), limit, "request")
        parts: list[bytes] = []
        size = 0
        while True:
            if wire.h11.they_are_waiting_for_100_continue:
                await wire.send(h11.InformationalResponse(status_code=100, headers=[]))
            event = await wire.next_event()
            if isinstance(event, h11.Data):
                size += len(event.data)
                check_body_size(size, limit, "request")
                parts.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return b"".join(parts)

    async def _exchange(self, wire: Wire, request: h11.Request, origin: httpx.URL | None) -> None:
        method = request.method.decode("ascii")
        target = request.target.decode("ascii")
        try:
            url = self._url(request, origin)
        except (_BadRequest, httpx.InvalidURL) as exc:
            shown = self._shown(target)
            logger.warning("sakura-http proxy: 400 for %s %s: %s", method, shown, exc)
            await wire.answer(400, "bad-request", f"{exc}\n")
            return
        try:
            body = await self._read_body(wire, request)
        except BodyTooLargeError as exc:
            await self._fail(wire, method, str(url), exc)
            return
        if _wants_websocket(request):
            text = (
                f"{method} {url}: WebSocket is not supported: the recording proxy records "
                "HTTP exchanges only, and would turn the upgrade into a plain request. Connect "
                "the WebSocket client to the server itself (in forward mode, add its host to "
                "NO_PROXY; in reverse mode, give it the server's URL, not the proxy's)"
            )
            logger.warning("sakura-http proxy: 501 unsupported: %s", text)
            await wire.answer(501, "unsupported", text + "\n")
            return
        headers = recorded_headers(request.headers.raw_items(), url.netloc)
        recorded = httpx.Request(method, url, headers=headers, stream=httpx.ByteStream(body))
        recorded.read()
        library = library_of(recorded)
        head = method == "HEAD"
        if library.host_port(recorded) in self._passthrough_hosts:
            await self._passthrough(wire, _forwarded(method, url, headers, body), head)
            return
        data = library.request_data(recorded, self.config.secret_query_params)
        try:
            user = self.cassettes.user_for(url)
            plan = user.plan(data, str(url))
        except CassetteError as exc:
            await self._fail(wire, method, data.url, exc)
            return
        if plan.exchange is not None:
            await self._replay(wire, plan.exchange, head)
            return
        # Built only now: a replay (the hot path) sends nothing upstream.
        forward = _forwarded(method, url, headers, body)
        await self._record(wire, user, data, plan, forward, head)

    async def _replay(self, wire: Wire, exchange: Exchange, head: bool) -> None:
        if exchange.error is not None:
            text = (
                f"{exchange.method} {exchange.url}: the recorded upstream request failed: "
                f"{exchange.error.type}: {exchange.error.message}"
            )
            logger.warning("sakura-http proxy: 502 upstream (recorded): %s", text)
            await wire.answer(502, "upstream", text + "\n")
            return
        assert exchange.status is not None
        bodiless = head or exchange.status in _BODILESS_STATUSES
        headers = client_headers(
            exchange.response_headers,
            bodiless=bodiless,
            body_length=len(exchange.response_body),
            charset=exchange.response_header_charset,
        )
        response = h11.Response(
            status_code=exchange.status, headers=headers, reason=reason_phrase(exchange.status)
        )
        if bodiless:
            await wire.send_whole(response, b"")
            return
        config = self.config
        stream = ReplayStream(exchange, config.replay_chunk_size, config.replay_latency)
        whole = stream.content
        if whole is not None and any(name == b"content-length" for name, _ in headers):
            # Framed by its length, the chunk boundaries are invisible to the client: the head
            # and the body go out in as few writes as can be, the body never copied (the
            # replay hot path: benchmark measure 10, the proxy against mitmdump).
            await wire.send_whole(response, whole)
            return
        await wire.send(response)
        async for piece in stream:
            await wire.send(h11.Data(data=piece))
        await wire.send(h11.EndOfMessage())

    async def _send_upstream(self, request: httpx.Request) -> httpx.Response:
        assert self._outer is not None, "run() first"
        outer = _TUNNEL_UPSTREAM.get() or self._outer
        return await outer.handle_async_request(request)

    async def _passthrough(self, wire: Wire, request: httpx.Request, head: bool) -> None:
        """Send `request` upstream and hand the answer on as it is; nothing is recorded."""
        try:
            response = await self._send_upstream(request)
        except httpx.TransportError as exc:
            await self._fail(wire, request.method, str(request.url), exc)
            return
        try:
            status = response.status_code
            bodiless = head or status in _BODILESS_STATUSES
            headers, charset = header_text(response.headers.raw)
            await wire.send(
                h11.Response(
                    status_code=status,
                    headers=client_headers(
                        headers, bodiless=bodiless, body_length=None, charset=charset
                    ),
                    reason=reason_phrase(status),
                )
            )
            async for raw in _body(response):
                if not bodiless:
                    await wire.send(h11.Data(data=raw))
            await wire.send(h11.EndOfMessage())
        finally:
            await response.aclose()

    async def _record(
        self,
        wire: Wire,
        user: CassetteUser,
        data: RequestData,
        plan: Plan,
        request: httpx.Request,
        head: bool,
    ) -> None:
        """Forward `request` (`data` as recorded), record the answer and replay it, or tee it
        to the client as it arrives (`stream_through`).

        Until the answer is recorded the client is not written to, so it is watched instead:
        if it closes the connection (it gave up), the upstream request is cancelled at once,
        nothing is recorded, and both sockets are freed.  (With `stream_through` a client that
        leaves is noticed when a chunk cannot be sent, and a truncated exchange is recorded.)"""
        method, url = request.method, str(request.url)
        if self.config.stream_through:
            io = OuterIO(library_of(request), self._send_upstream)
            steps = record_steps(user, data, request, url, plan, io)
            try:
                head_answer: Answer = await arun_steps(steps, io)
            except httpx.TransportError as exc:  # (recorded as a fault under record_errors)
                await self._fail(wire, method, url, exc)
                return
            await self._tee(wire, TeeStream(steps, io), head_answer, head)
            return
        gone = False
        answer: Exchange | Exception | None = None
        async with anyio.create_task_group() as group:

            async def watch() -> None:
                nonlocal gone
                await wire.until_closed()
                gone = True
                group.cancel_scope.cancel()

            group.start_soon(watch)
            answer = await self._fetch(user, data, plan, request)
            group.cancel_scope.cancel()  # done: stop watching before answering
        if gone:
            logger.warning(
                "sakura-http proxy: %s went away while its answer was being recorded; nothing "
                "recorded for %s %s, and the upstream request was cancelled",
                wire.peer,
                method,
                url,
            )
            raise ClientGone("it closed the connection before its answer was ready")
        assert answer is not None
        if isinstance(answer, Exception):
            await self._fail(wire, method, url, answer)
            return
        # The client gets the response as the server sent it; only the cassette is redacted.
        await self._replay(wire, answer, head)

    async def _fetch(
        self, user: CassetteUser, data: RequestData, plan: Plan, request: httpx.Request
    ) -> Exchange | Exception:
        """Forward `request`, read and record the whole answer: the live exchange to send the
        client, or the error to answer it with (an error sending it is recorded as a fault
        exchange under `record_errors`).  Cancelled (the client left), it records nothing and
        closes the upstream response; read in full, it is recorded even if the client left."""
        io = OuterIO(library_of(request), self._send_upstream)
        try:
            answer: Answer = await arun_steps(
                record_steps(user, data, request, str(request.url), plan, io), io
            )
        except (BodyTooLargeError, httpx.TransportError) as exc:
            return exc
        assert answer.live is not None
        return answer.live

    async def _tee(self, wire: Wire, tee: TeeStream, answer: Answer, head: bool) -> None:
        response = answer.response
        status = response.status_code
        bodiless = head or status in _BODILESS_STATUSES
        try:
            await wire.send(
                h11.Response(
                    status_code=status,
                    headers=client_headers(
                        answer.headers, bodiless=bodiless, body_length=None, charset=answer.charset
                    ),
                    reason=reason_phrase(status),
                )
            )
            async for piece in tee:
                if not bodiless:
                    await wire.send(h11.Data(data=piece))
            await wire.send(h11.EndOfMessage())
        except (BodyTooLargeError, httpx.TransportError) as exc:
            # The head is sent: all the client can learn is that the body ends too early.
            logger.warning(
                "sakura-http proxy: %s %s: stream broken, nothing recorded: %s",
                response.request.method,
                self._shown(str(response.request.url)),
                exc,
            )
            raise Abort from None
        finally:
            await tee.aclose()

    # --- CONNECT ------------------------------------------------------------------------------

    async def _tunnel(self, wire: Wire, request: h11.Request) -> None:
        """Accept a CONNECT, then serve HTTP inside TLS with a certificate for its host."""
        authority = request.target.decode("ascii")
        if self.upstream is not None or self.routes or self.ca is None:
            await wire.answer(
                400,
                "bad-request",
                f"this proxy runs in reverse mode ({self._reverse_flags()}): it does not "
                f"open tunnels (CONNECT {authority}); point the client's base URL at it\n",
            )
            return
        host, port = split_host_entry(authority)
        while not isinstance(await wire.next_event(), h11.EndOfMessage):
            pass
        await wire.send(h11.Response(status_code=200, headers=[], reason=b"Connection established"))
        buffered, _ = wire.h11.trailing_data
        deadline = anyio.current_time() + self._timeouts.header
        if not buffered:  # the first bytes tell TLS from plain HTTP
            with anyio.CancelScope(deadline=deadline) as waiting, contextlib.suppress(*_GONE):
                buffered = await wire.stream.receive()
            if waiting.cancelled_caught:
                logger.warning(
                    "sakura-http proxy: closing the tunnel from %s for %s: no TLS handshake or "
                    "request within %g s",
                    wire.peer,
                    authority,
                    self._timeouts.header,
                )
            if not buffered:
                return
        stream = Prepended(wire.stream, buffered)
        if buffered[:1] != _TLS_HANDSHAKE:
            # Plain HTTP in the tunnel (undici's EnvHttpProxyAgent tunnels http:// URLs too):
            # served as the requests for http://host:port a client sends in absolute form.
            origin = httpx.URL(scheme="http", host=host, port=port or 80)
            await self._serve_tunnel(Wire(stream, wire.peer, self._timeouts), origin)
            return
        context = await anyio.to_thread.run_sync(self.ca.context_for, host)
        try:
            with anyio.fail_after(max(deadline - anyio.current_time(), 0)):
                tls = await TLSStream.wrap(
                    stream, server_side=True, ssl_context=context, standard_compatible=False
                )
        except TimeoutError:
            logger.warning(
                "sakura-http proxy: closing the tunnel from %s for %s: no TLS handshake within "
                "%g s",
                wire.peer,
                authority,
                self._timeouts.header,
            )
            return
        except (ssl.SSLError, anyio.BrokenResourceError, anyio.EndOfStream, OSError) as exc:
            logger.warning(
                "sakura-http proxy: TLS handshake with %s for %s failed (%s); does the client "
                "trust the proxy's CA? `sakura-http ca` says how",
                wire.peer,
                authority,
                exc,
            )
            return
        origin = httpx.URL(scheme="https", host=host, port=port or 443)
        await self._serve_tunnel(Wire(tls, wire.peer, self._timeouts), origin)

    async def _serve_tunnel(self, wire: Wire, origin: httpx.URL) -> None:
        """Serve the requests of a tunnel to `origin`, sent upstream over a connection of the
        tunnel's own (`_TUNNEL_UPSTREAM`), closed with it."""
        upstream = httpx.AsyncHTTPTransport(verify=self._upstream_tls, retries=0)
        token = _TUNNEL_UPSTREAM.set(upstream)
        try:
            await self._serve_http(wire, origin)
        finally:
            _TUNNEL_UPSTREAM.reset(token)
            with anyio.CancelScope(shield=True):
                await upstream.aclose()


def is_health_check(request: h11.Request) -> bool:
    """Whether `request`, sent to the proxy itself (not in a tunnel), asks for `HEALTH_PATH`."""
    path = request.target.split(b"?", 1)[0]
    return request.method in (b"GET", b"HEAD") and path == HEALTH_PATH.encode("ascii")


def _wants_websocket(request: h11.Request) -> bool:
    """Whether `request` asks to switch to WebSocket.  Other upgrades (``h2c``) are ignored,
    as HTTP/1.1 lets a server do: the client gets an ordinary answer and goes on with it."""
    return any(
        name == b"upgrade" and b"websocket" in value.lower() for name, value in request.headers
    )


def _forwarded(
    method: str, url: httpx.URL, headers: list[tuple[bytes, bytes]], body: bytes
) -> httpx.Request:
    """The request sent upstream: the recorded `headers` less the hop-by-hop ones."""
    return httpx.Request(
        method,
        url,
        headers=forwarded_headers(headers),
        content=body,
        extensions={"timeout": _UPSTREAM_TIMEOUT},
    )


def _body(response: httpx.Response) -> httpx.AsyncByteStream:
    """The raw (still content-encoded) body stream of an upstream response."""
    stream = response.stream
    assert isinstance(stream, httpx.AsyncByteStream)
    return stream
