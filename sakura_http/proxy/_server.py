"""The proxy server: anyio sockets, h11 for HTTP/1.1, httpx for upstream, a `CassetteSession`.

One task per client connection runs h11's state machine over the socket (or over the TLS stream
of an intercepted ``CONNECT`` tunnel).  Each complete request is turned into the same
`RequestData` an in-process `RecordingTransport` would build, and drives the session through the
same steps: passthrough? -> `check_request` -> `plan` -> replay the planned exchange, or forward
it upstream, `recorder().start/feed/finish`, `commit`, and replay what was recorded.  The server
makes no decision of its own; it only moves bytes and turns `CassetteError`s into answers.

Which request headers are recorded and which are forwarded (the rule that makes a cassette
recorded through the proxy byte-identical to one recorded in-process):

* recorded: every header the client sent, in its order, except those addressed to the proxy
  itself (`TO_PROXY`: ``proxy-connection``, ``proxy-authorization``, and ``expect``, which the
  proxy answers); ``host`` is set to the authority of the recorded URL (the upstream's in reverse
  mode), as an httpx client sets it from the URL;
* forwarded: the recorded headers less the hop-by-hop ones (`HOP_BY_HOP` and any named in
  ``connection``) and ``content-length``, which httpx sets from the body it sends;
* answered: the recorded response headers less the hop-by-hop ones; h11 frames the body
  (``content-length`` when the recorded one still holds, else chunked, one chunk per recorded
  chunk).
"""

from __future__ import annotations

import contextlib
import errno
import http
import logging
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import h11
import httpx
from anyio.streams.stapled import MultiListener
from anyio.streams.tls import TLSStream

from .._exceptions import (
    BodyTooLargeError,
    CassetteError,
    CassetteFormatError,
    CassetteMiss,
    ConfigurationError,
    CredentialHeaderError,
    RecordingForbidden,
)
from .._format import Exchange, Headers, header_text
from .._hosts import split_host_entry
from .._libraries import library_of
from .._matching import RequestData
from .._policy import check_body_size
from .._session import CassetteUser, Plan, ResponseRecorder
from .._streams import ReplayStream, TeeStream
from ._ca import CertificateAuthority

__all__ = [
    "ERROR_NAMES",
    "HOP_BY_HOP",
    "TO_PROXY",
    "ProxyServer",
    "error_name",
    "framing_problem",
]

logger = logging.getLogger("sakura_http.proxy")

#: Headers that concern one connection only (RFC 9110 7.6.1): never forwarded or answered.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
#: Request headers addressed to the proxy: neither recorded nor forwarded.
TO_PROXY = frozenset({"proxy-connection", "proxy-authorization", "expect"})

#: The ``x-sakura-http-error`` value of each error answer, most specific class first.
ERROR_NAMES: Mapping[type[BaseException], str] = {
    CassetteMiss: "miss",
    CredentialHeaderError: "credential",
    BodyTooLargeError: "body-too-large",
    RecordingForbidden: "recording-forbidden",
    CassetteFormatError: "cassette-format",
    CassetteError: "cassette-error",
    httpx.TransportError: "upstream",
}

#: Largest request head (request line and headers) accepted; larger ones answer 431.
MAX_HEAD_BYTES = 64 * 1024
_READ_SIZE = 65_536
_LINGER_SECONDS = 2.0
# Accepting fails for want of resources (file descriptors, memory) while many connections are
# open: the proxy waits this long and accepts again, rather than stop serving everyone.  The
# connection waiting in the listen backlog is accepted then.
_ACCEPT_RETRY_SECONDS = 0.1
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_LINGER_BYTES = 16 * 1024 * 1024
# Upstream: no read timeout (a stream may pause for minutes); the client keeps its own.
_UPSTREAM_TIMEOUT = {"connect": 30.0, "read": None, "write": 60.0, "pool": 60.0}
_BODILESS_STATUSES = frozenset({204, 304})
_CLIENT_GONE = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError)


def error_name(exc: BaseException) -> str:
    """The ``x-sakura-http-error`` value for `exc` (see `ERROR_NAMES`); "error" otherwise."""
    for cls in type(exc).__mro__:
        name = ERROR_NAMES.get(cls)
        if name is not None:
            return name
    return "error"


def framing_problem(request: h11.Request) -> str | None:
    """Why the end of `request`'s body is ambiguous, or None when it is not.

    h11 already refuses differing ``content-length`` values (two headers or a list) and any
    transfer coding but ``chunked``.  It lets through, and settles by ``transfer-encoding``
    alone, what RFC 9112 section 6.3 calls a smuggling attempt: both headers at once; and
    section 6.1 says a ``transfer-encoding`` in an HTTP/1.0 request means the framing is
    faulty.  A client, or a proxy in front of this one, may have framed such a request the
    other way, so the bytes after it could be read as a request nobody sent: the proxy
    refuses it and closes the connection.
    """
    names = {name for name, _ in request.headers}  # lower-cased by h11
    if b"transfer-encoding" not in names:
        return None
    if b"content-length" in names:
        return (
            "both Content-Length and Transfer-Encoding: the body's end is ambiguous, which is "
            "how requests are smuggled (RFC 9112, section 6.3); send one of them"
        )
    if request.http_version < b"1.1":
        return (
            "Transfer-Encoding in an HTTP/1.0 request, whose framing it cannot change "
            "(RFC 9112, section 6.1); send Content-Length, or speak HTTP/1.1"
        )
    return None


class _BadRequest(Exception):
    """A request the proxy cannot serve in its mode; answered 400 with this message."""


class _Abort(Exception):
    """Close this connection now, without an answer (the reason is logged already)."""


class _ClientGone(_Abort):
    """The client closed the connection, or sending to it failed."""


class _TimedOut(_Abort):
    """The client took longer than a timeout allows (`_Timeouts`); the message says what it
    failed to do in time.  `cut_off` is True when it was in the middle of a request (it is
    then answered 408 if the answer can still be sent) and False when it had sent nothing of
    the next one (the connection is just closed, as HTTP/1.1 lets a server do)."""

    def __init__(self, text: str, *, cut_off: bool) -> None:
        super().__init__(text)
        self.cut_off = cut_off


@dataclass(frozen=True, slots=True)
class _Timeouts:
    """How long a client may take: to send a request head, and to stay silent otherwise."""

    header: float
    idle: float


@dataclass(frozen=True, slots=True)
class _Target:
    url: httpx.URL
    method: str
    raw_headers: list[tuple[bytes, bytes]]
    body: bytes


def _reason(status: int) -> bytes:
    try:
        return http.HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""


def _connection_listed(headers: Iterable[tuple[str, str]]) -> set[str]:
    return {
        token.strip().lower()
        for name, value in headers
        if name == "connection"
        for token in value.split(",")
        if token.strip()
    }


def client_headers(
    headers: Headers, *, bodiless: bool, body_length: int | None, charset: str = "utf-8"
) -> list[tuple[bytes, bytes]]:
    """Response headers for the client: hop-by-hop headers dropped, and ``content-length``
    dropped when it no longer describes the body (h11 then sends it chunked).  Values are sent
    as the bytes they were received as (`charset`, see `_format.header_text`)."""
    hop = HOP_BY_HOP | _connection_listed(headers)
    out = []
    for name, value in headers:
        if name in hop:
            continue
        if (
            name == "content-length"
            and not bodiless
            and body_length is not None
            and value.strip() != str(body_length)
        ):
            continue
        out.append((name.encode("ascii"), value.encode(charset)))
    return out


def recorded_headers(
    raw: Iterable[tuple[bytes, bytes]], authority: bytes
) -> list[tuple[bytes, bytes]]:
    """The request headers as recorded (see the module docstring): `TO_PROXY` dropped, ``host``
    set to `authority` (first, if the client sent none)."""
    out = []
    has_host = False
    for name, value in raw:
        lower = name.lower()
        if lower.decode("latin-1") in TO_PROXY:
            continue
        if lower == b"host":
            has_host = True
            value = authority
        out.append((name, value))
    if not has_host:
        out.insert(0, (b"Host", authority))
    return out


def forwarded_headers(raw: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The recorded headers less hop-by-hop ones and ``content-length`` (httpx sets it)."""
    pairs = list(raw)
    listed = _connection_listed(
        (n.lower().decode("latin-1"), v.decode("latin-1")) for n, v in pairs
    )
    drop = HOP_BY_HOP | listed | {"content-length"}
    return [(n, v) for n, v in pairs if n.lower().decode("latin-1") not in drop]


class _Prepended(anyio.abc.ByteStream):
    """A byte stream that first yields bytes already read (a TLS hello sent with CONNECT)."""

    def __init__(self, stream: anyio.abc.ByteStream, data: bytes) -> None:
        self._stream = stream
        self._data = data

    async def receive(self, max_bytes: int = _READ_SIZE) -> bytes:
        if self._data:
            data, self._data = self._data[:max_bytes], self._data[max_bytes:]
            return data
        return await self._stream.receive(max_bytes)

    async def send(self, item: bytes) -> None:
        await self._stream.send(item)

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def aclose(self) -> None:
        await self._stream.aclose()

    @property
    def extra_attributes(self) -> Mapping[Any, Any]:
        return self._stream.extra_attributes


class _Wire:
    """One client connection: its byte stream, its h11 state machine, and the timeouts that
    keep a client from holding it: every wait on the client ends in `_TimedOut` (or, for a
    send, `_ClientGone`) when the client takes too long."""

    def __init__(self, stream: anyio.abc.ByteStream, peer: str, timeouts: _Timeouts) -> None:
        self.stream = stream
        self.peer = peer
        self.timeouts = timeouts
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        # The first request's head is due `header` seconds after the connection opens; a
        # later one's, `header` seconds after its first byte (until then the connection idles).
        self._head_due: float | None = anyio.current_time() + timeouts.header

    async def next_request(self) -> Any:
        """The event that starts the next request: a `Request`, or `ConnectionClosed`.

        Waits up to `idle` seconds for the first byte of a request on a kept-alive connection,
        then up to `header` seconds from it for the whole head; a trickle of bytes does not
        extend it, so a slowloris client is closed like a silent one."""
        due, self._head_due = self._head_due, None
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            started = bool(self.h11.trailing_data[0])
            if due is None and started:
                due = anyio.current_time() + self.timeouts.header
            if due is None:
                why = f"sent no new request for {self.timeouts.idle:g} s"
                due_now = anyio.current_time() + self.timeouts.idle
                data = await self._receive(due_now, why, cut_off=False)
            else:
                why = f"sent no complete request head within {self.timeouts.header:g} s"
                data = await self._receive(due, why, cut_off=started)
            self.h11.receive_data(data)

    async def next_event(self) -> Any:
        """The next event in the middle of a request (its body): the client may stay silent
        for up to `idle` seconds at a time."""
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            due = anyio.current_time() + self.timeouts.idle
            why = f"sent nothing for {self.timeouts.idle:g} s in the middle of a request"
            self.h11.receive_data(await self._receive(due, why, cut_off=True))

    async def _receive(self, due: float, why: str, *, cut_off: bool) -> bytes:
        """The next bytes from the client (b"" once it closed), or `_TimedOut(why)` at `due`."""
        with anyio.CancelScope(deadline=due):
            try:
                return await self.stream.receive(_READ_SIZE)
            except (anyio.EndOfStream, anyio.BrokenResourceError, ssl.SSLError, OSError):
                return b""
        raise _TimedOut(why, cut_off=cut_off)

    async def send(self, event: Any) -> None:
        data = self.h11.send(event)
        if data:
            # A client that reads nothing for `idle` seconds is not reading at all.
            with anyio.move_on_after(self.timeouts.idle):
                try:
                    await self.stream.send(data)
                except _CLIENT_GONE as exc:
                    self.h11.send_failed()
                    raise _ClientGone(str(exc) or type(exc).__name__) from None
                return
            self.h11.send_failed()
            raise _ClientGone(f"it left its answer unread for {self.timeouts.idle:g} s")

    async def linger(self) -> None:
        """Close gently after an early answer: stop sending, then read and drop what the client
        still sends (briefly, bounded), so closing with unread data does not reset the
        connection before the client has read the answer."""
        with contextlib.suppress(Exception):
            await self.stream.send_eof()
        with anyio.move_on_after(_LINGER_SECONDS):
            left = _LINGER_BYTES
            with contextlib.suppress(Exception):
                while left > 0:
                    left -= len(await self.stream.receive(_READ_SIZE))

    def reusable(self) -> bool:
        return self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE


class ProxyServer:
    """Serves one cassette session until `stop()`; see the module docstring.

    `upstream` (reverse mode) is the base URL requests are sent and recorded under; None is
    forward mode, where `ca` intercepts ``CONNECT`` tunnels.  `run()` serves on an anyio event
    loop; on `stop()` it stops accepting, closes idle connections, lets exchanges in flight
    finish for up to `shutdown_timeout` seconds (then cancels them, counting the requests cut
    off in `cancelled`) and returns.  The caller owns `user` and closes it afterwards
    (``failed=True`` unless `run()` returned normally with nothing `cancelled`).
    """

    #: How many of the errors it answered with a 502 the proxy keeps in `raised`.
    RAISED_KEPT = 1000

    def __init__(
        self,
        user: CassetteUser,
        *,
        upstream: httpx.URL | None,
        ca: CertificateAuthority | None,
        verify: ssl.SSLContext | bool,
        shutdown_timeout: float,
        header_timeout: float,
        idle_timeout: float,
    ) -> None:
        self.user = user
        self.config = user.config
        self.upstream = upstream
        self.ca = ca
        self._verify = verify
        self._shutdown_timeout = shutdown_timeout
        self._timeouts = _Timeouts(header_timeout, idle_timeout)
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
        self._outer = httpx.AsyncHTTPTransport(verify=self._verify, retries=0)
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
        peer = _peer(stream)
        try:
            async with stream:
                await self._serve_http(_Wire(stream, peer, self._timeouts), origin=None)
        except _ClientGone as exc:
            logger.warning("sakura-http proxy: %s went away (%s)", peer, exc)
        except _Abort:
            pass
        except Exception:  # a bug must cost one connection, never the proxy
            logger.exception("sakura-http proxy: connection from %s failed", peer)
        finally:
            self._active -= 1
            if self._stopping and not self._active and self._drained is not None:
                self._drained.set()

    # --- HTTP/1.1 -----------------------------------------------------------------------------

    async def _serve_http(self, wire: _Wire, origin: httpx.URL | None) -> None:
        """Serve requests on one connection (keep-alive) until it closes or the proxy stops."""
        while True:
            with anyio.CancelScope() as idle:
                if self._stopping:
                    return
                self._idle.add(idle)
                try:
                    event = await wire.next_request()
                except h11.RemoteProtocolError as exc:
                    await self._bad_input(wire, exc)
                    return
                except _TimedOut as exc:
                    await self._timed_out(wire, exc)
                    return
                finally:
                    self._idle.discard(idle)
            if idle.cancelled_caught or not isinstance(event, h11.Request):
                return  # shutting down, or the client closed an idle connection
            problem = framing_problem(event)
            if problem is not None:
                logger.warning("sakura-http proxy: bad request from %s: %s", wire.peer, problem)
                with contextlib.suppress(_ClientGone):
                    await self._answer(wire, 400, "bad-request", f"bad request: {problem}\n")
                    await wire.linger()
                return
            if event.method == b"CONNECT":
                try:
                    await self._tunnel(wire, event)
                except _TimedOut as exc:
                    await self._timed_out(wire, exc)
                return
            self._in_flight += 1
            try:
                await self._exchange(wire, event, origin)
            except h11.RemoteProtocolError as exc:
                await self._bad_input(wire, exc)
                return
            except _TimedOut as exc:
                await self._timed_out(wire, exc)
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

    async def _bad_input(self, wire: _Wire, exc: h11.RemoteProtocolError) -> None:
        status = exc.error_status_hint
        logger.warning("sakura-http proxy: bad request from %s: %s", wire.peer, exc)
        if wire.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            with contextlib.suppress(h11.LocalProtocolError, _ClientGone):
                await self._answer(
                    wire, status, "bad-request", f"bad request: {exc}\n", closing=True
                )
                await wire.linger()

    async def _timed_out(self, wire: _Wire, exc: _TimedOut) -> None:
        """Close a connection whose client took too long; tell it (408) if it was cut off in
        the middle of a request and the answer can still be sent."""
        if not exc.cut_off:
            return  # nothing of a request came: close quietly, as an idle connection may be
        logger.warning("sakura-http proxy: closing the connection from %s: it %s", wire.peer, exc)
        if wire.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            with contextlib.suppress(h11.LocalProtocolError, _ClientGone):
                text = f"request timeout: the client {exc}\n"
                await self._answer(wire, 408, "request-timeout", text, closing=True)
                await wire.linger()

    async def _answer(
        self, wire: _Wire, status: int, name: str, text: str, *, closing: bool = False
    ) -> None:
        """A short text/plain answer; `closing` says the connection closes after it."""
        body = text.encode("utf-8")
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(body)).encode()),
            (b"x-sakura-http-error", name.encode("ascii")),
            (b"x-should-retry", b"false"),
        ]
        if closing or wire.h11.their_state is h11.SEND_BODY:
            # Answered before the request body was read (or after bad input): the connection
            # closes after this answer, and says so, or a client could send its next request
            # on it before it sees the close, and have that request dropped unanswered.
            headers.append((b"connection", b"close"))
        await wire.send(h11.Response(status_code=status, headers=headers, reason=_reason(status)))
        await wire.send(h11.Data(data=body))
        await wire.send(h11.EndOfMessage())

    async def _fail(self, wire: _Wire, method: str, url: str, exc: BaseException) -> None:
        """Answer 502 for `exc`, with its name and message, and log it."""
        if isinstance(exc, CassetteError):
            self.raised.append(exc)
            if len(self.raised) > self.RAISED_KEPT:
                del self.raised[: len(self.raised) - self.RAISED_KEPT]
        name = error_name(exc)
        text = str(exc) or type(exc).__name__
        if isinstance(exc, httpx.TransportError):
            text = f"{method} {url}: the upstream request failed: {type(exc).__name__}: {text}"
        logger.warning("sakura-http proxy: 502 %s: %s", name, text)
        await self._answer(wire, 502, name, text + "\n")

    # --- one exchange ---------------------------------------------------------------------------

    def _url(self, request: h11.Request, origin: httpx.URL | None) -> httpx.URL:
        target = request.target.decode("ascii")
        absolute = not target.startswith("/")
        if self.upstream is not None:
            if absolute:
                raise _BadRequest(
                    f"this proxy runs in reverse mode (--upstream {self.upstream}): send "
                    f"requests for paths (GET /path), not {target!r}"
                )
            return httpx.URL(str(self.upstream).rstrip("/") + target)
        if origin is not None and not absolute:
            return httpx.URL(str(origin) + target)
        if not absolute:
            raise _BadRequest(
                f"this proxy runs in forward mode: send absolute-form requests (GET "
                f"http://host/path, as clients do with HTTP_PROXY set) or CONNECT, not "
                f"{target!r}; to stand in for one server, start it with --upstream URL"
            )
        url = httpx.URL(target)
        if url.scheme not in ("http", "https") or not url.host:
            raise _BadRequest(f"cannot proxy {target!r}: only http:// and https:// URLs")
        return url

    async def _read_body(self, wire: _Wire, request: h11.Request) -> bytes:
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

    async def _exchange(self, wire: _Wire, request: h11.Request, origin: httpx.URL | None) -> None:
        method = request.method.decode("ascii")
        target = request.target.decode("ascii")
        try:
            url = self._url(request, origin)
        except (_BadRequest, httpx.InvalidURL) as exc:
            logger.warning("sakura-http proxy: 400 for %s %s: %s", method, target, exc)
            await self._answer(wire, 400, "bad-request", f"{exc}\n")
            return
        try:
            body = await self._read_body(wire, request)
        except BodyTooLargeError as exc:
            await self._fail(wire, method, str(url), exc)
            return
        headers = recorded_headers(request.headers.raw_items(), url.netloc)
        recorded = httpx.Request(method, url, headers=headers, stream=httpx.ByteStream(body))
        recorded.read()
        library = library_of(recorded)
        forward = httpx.Request(
            method,
            url,
            headers=forwarded_headers(headers),
            content=body,
            extensions={"timeout": _UPSTREAM_TIMEOUT},
        )
        head = method == "HEAD"
        if self.user.is_passthrough(*library.host_port(recorded)):
            await self._passthrough(wire, forward, head)
            return
        data = library.request_data(recorded, self.config.secret_query_params)
        try:
            self.user.check_request(data)
            plan = self.user.plan(data)
        except CassetteError as exc:
            await self._fail(wire, method, data.url, exc)
            return
        if plan.exchange is not None:
            await self._replay(wire, plan.exchange, head)
            return
        await self._record(wire, data, plan, forward, head)

    async def _replay(self, wire: _Wire, exchange: Exchange, head: bool) -> None:
        if exchange.error is not None:
            text = (
                f"{exchange.method} {exchange.url}: the recorded upstream request failed: "
                f"{exchange.error.type}: {exchange.error.message}"
            )
            logger.warning("sakura-http proxy: 502 upstream (recorded): %s", text)
            await self._answer(wire, 502, "upstream", text + "\n")
            return
        assert exchange.status is not None
        bodiless = head or exchange.status in _BODILESS_STATUSES
        headers = client_headers(
            exchange.response_headers,
            bodiless=bodiless,
            body_length=len(exchange.response_body),
            charset=exchange.response_header_charset,
        )
        await wire.send(
            h11.Response(
                status_code=exchange.status, headers=headers, reason=_reason(exchange.status)
            )
        )
        if not bodiless:
            config = self.config
            stream = ReplayStream(exchange, config.replay_chunk_size, config.replay_latency)
            async for piece in stream:
                await wire.send(h11.Data(data=piece))
        await wire.send(h11.EndOfMessage())

    async def _send_upstream(self, request: httpx.Request) -> httpx.Response:
        assert self._outer is not None, "run() first"
        return await self._outer.handle_async_request(request)

    async def _passthrough(self, wire: _Wire, request: httpx.Request, head: bool) -> None:
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
                    reason=_reason(status),
                )
            )
            async for raw in _body(response):
                if not bodiless:
                    await wire.send(h11.Data(data=raw))
            await wire.send(h11.EndOfMessage())
        finally:
            await response.aclose()

    async def _record(
        self, wire: _Wire, data: RequestData, plan: Plan, request: httpx.Request, head: bool
    ) -> None:
        """Forward `request` (`data` as recorded), record the answer and replay it, or tee it
        to the client as it arrives (`stream_through`)."""
        user = self.user
        recorder = user.recorder(data, str(request.url))
        method, url = request.method, str(request.url)
        try:
            response = await self._send_upstream(request)
        except httpx.TransportError as exc:
            fault = user.fault_exchange(data, exc)
            if fault is not None:
                await user.acommit(plan, fault)
            await self._fail(wire, method, url, exc)
            return
        raw_headers, charset = header_text(response.headers.raw)
        recorder.start(response.status_code, raw_headers, charset)
        if self.config.stream_through:
            await self._tee(wire, plan, recorder, response, head)
            return
        try:
            async for raw in _body(response):
                recorder.feed(raw)
            exchange = recorder.finish()
        except (BodyTooLargeError, httpx.TransportError) as exc:
            await self._fail(wire, method, url, exc)
            return
        finally:
            await response.aclose()
        await user.acommit(plan, exchange)
        # The client gets the response as the server sent it; only the cassette is redacted.
        await self._replay(wire, recorder.live(), head)

    async def _tee(
        self,
        wire: _Wire,
        plan: Plan,
        recorder: ResponseRecorder,
        response: httpx.Response,
        head: bool,
    ) -> None:
        status = response.status_code
        bodiless = head or status in _BODILESS_STATUSES
        tee = TeeStream(
            response.stream,
            recorder,
            lambda exchange: self.user.commit(plan, exchange),
            lambda exchange: self.user.acommit(plan, exchange),
            response.aclose,
        )
        try:
            await wire.send(
                h11.Response(
                    status_code=status,
                    headers=client_headers(
                        recorder.live_headers(),
                        bodiless=bodiless,
                        body_length=None,
                        charset=recorder.charset,
                    ),
                    reason=_reason(status),
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
                response.request.url,
                exc,
            )
            raise _Abort from None
        finally:
            await tee.aclose()

    # --- CONNECT ------------------------------------------------------------------------------

    async def _tunnel(self, wire: _Wire, request: h11.Request) -> None:
        """Accept a CONNECT, then serve HTTP inside TLS with a certificate for its host."""
        authority = request.target.decode("ascii")
        if self.upstream is not None or self.ca is None:
            await self._answer(
                wire,
                400,
                "bad-request",
                f"this proxy runs in reverse mode (--upstream {self.upstream}): it does not "
                f"open tunnels (CONNECT {authority}); point the client's base URL at it\n",
            )
            return
        host, port = split_host_entry(authority)
        while not isinstance(await wire.next_event(), h11.EndOfMessage):
            pass
        await wire.send(h11.Response(status_code=200, headers=[], reason=b"Connection established"))
        context = await anyio.to_thread.run_sync(self.ca.context_for, host)
        buffered, _ = wire.h11.trailing_data
        stream = _Prepended(wire.stream, buffered) if buffered else wire.stream
        try:
            with anyio.fail_after(self._timeouts.header):
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
        await self._serve_http(_Wire(tls, wire.peer, self._timeouts), origin)


def _body(response: httpx.Response) -> httpx.AsyncByteStream:
    """The raw (still content-encoded) body stream of an upstream response."""
    stream = response.stream
    assert isinstance(stream, httpx.AsyncByteStream)
    return stream


def _peer(stream: anyio.abc.ByteStream) -> str:
    with contextlib.suppress(Exception):
        address = stream.extra(anyio.abc.SocketAttribute.remote_address)
        if isinstance(address, tuple):
            return f"{address[0]}:{address[1]}"
        return str(address)
    return "a client"
