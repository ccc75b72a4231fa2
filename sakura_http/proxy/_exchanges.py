"""One exchange: a request answered from the cassette, recorded, or passed through.

Each complete request is turned into the same `RequestData` an in-process `RecordingTransport`
would build, and drives its cassette's session through the same steps: passthrough? -> `plan`
(the safety checks, then the decision) -> replay the planned exchange, or record it: the step
sequence every front end drives (`_steps.record_steps`), sent upstream through the transport's
`OuterIO`, and replay what was recorded (or, with `stream_through`, tee it to the client as it
arrives).  Nothing here decides; `CassetteError`s and upstream failures become 502 answers.
Where the request goes is `_routing.py`; the client's connection, `_wire.py`.
"""

from __future__ import annotations

import logging

import anyio
import h11
import httpx

from .._exceptions import BodyTooLargeError, CassetteError
from .._exchange import RequestData
from .._format import Exchange, header_text
from .._libraries import library_of
from .._policy import check_body_size, shown_url
from .._session import CassetteUser, Plan
from .._steps import Answer, arun_steps, record_steps
from .._streams import ReplayStream, TeeStream
from .._transport import OuterIO
from ._cassettes import Cassettes
from ._routing import BadRequest, Routing
from ._tunnel import TUNNEL_UPSTREAM
from ._wire import (
    Abort,
    ClientGone,
    Wire,
    client_headers,
    error_name,
    forwarded_headers,
    reason_phrase,
    recorded_headers,
)

__all__ = ["Exchanges"]

logger = logging.getLogger("sakura_http.proxy")

# Upstream: no read timeout (a stream may pause for minutes); the client keeps its own.
_UPSTREAM_TIMEOUT = {"connect": 30.0, "read": None, "write": 60.0, "pool": 60.0}
_BODILESS_STATUSES = frozenset({204, 304})


class Exchanges:
    """Answers the proxy's requests, one exchange at a time, with `cassettes` (each request's
    session) and `routing` (its URL); sends them upstream over `outer`, or the transport of the
    tunnel they came through (`TUNNEL_UPSTREAM`)."""

    #: How many of the errors it answered with a 502 the proxy keeps in `raised`.
    RAISED_KEPT = 1000

    def __init__(self, cassettes: Cassettes, routing: Routing) -> None:
        self.cassettes = cassettes
        self.config = cassettes.config
        self._passthrough_hosts = self.config.passthrough_host_list
        self._routing = routing
        #: The upstream connections shared by the requests outside tunnels: set by the server
        #: while it serves (made on its event loop, closed when it stops).
        self.outer: httpx.AsyncHTTPTransport | None = None
        #: The `CassetteError`s answered with a 502, in order: the last `RAISED_KEPT` of them,
        #: so a proxy left running for days does not grow without bound.
        self.raised: list[CassetteError] = []

    async def serve(self, wire: Wire, request: h11.Request, origin: httpx.URL | None) -> None:
        """Answer `request` (its body still unread on `wire`; `origin` is a tunnel's): from
        the cassette, recorded, passed through, or with the error that stops it."""
        method = request.method.decode("ascii")
        target = request.target.decode("ascii")
        try:
            url = self._routing.url(target, origin)
        except (BadRequest, httpx.InvalidURL) as exc:
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
        assert self.outer is not None, "the server's serve() first"
        outer = TUNNEL_UPSTREAM.get() or self.outer
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

    def _shown(self, url: str) -> str:
        """`url` (or a request target) as the proxy's answers and logs print it: secret query
        values as their length (`shown_url`), since both reach CI logs."""
        return shown_url(url, self.config.secret_query_params)


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
