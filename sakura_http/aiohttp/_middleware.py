"""`RecordingMiddleware`: an aiohttp client middleware over the cassette engine.

aiohttp (3.12 and later) passes every request of a ``ClientSession(middlewares=[...])`` to its
middlewares, each hop of a redirect it follows included.  The middleware drives the cassette's
`CassetteUser` through the steps every front end takes (docs/architecture.md): passthrough? ->
read the body -> `plan` (the safety checks, then the decision) -> replay the planned exchange
without calling the handler (no connection is opened), or record it: the step sequence every
front end drives (`_steps.record_steps`), calling the handler (the session's own connector
makes the live request) through `_HandlerIO`, and hand the caller the live response.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

import aiohttp

from .._config import CassetteConfig, CassetteOptions, resolve_config
from .._exceptions import CassetteError, ConfigurationError, hidden_in_tracebacks
from .._exchange import RequestData, reason_phrase
from .._format import Exchange, FaultInfo, Headers, header_text
from .._front_end import CassetteFrontEnd
from .._matching import canonical_url
from .._session import Plan
from .._steps import arun_steps, record_steps
from .._streams import ReplayStream
from ._advice import AiohttpAdvice
from ._response import replayed_response

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack from Python 3.11 on

__all__ = ["RecordingMiddleware"]

# A sakura-http error passing through this module's frames is shown under pytest without them
# (the test's own frames and the message say it all); a bug keeps them (`hidden_in_tracebacks`).
__tracebackhide__ = hidden_in_tracebacks

#: Content encodings aiohttp decodes itself (``auto_decompress``, the default); any other
#: (``x-gzip``) reaches the recorder still encoded, with its header, and is decoded there.
_DECODED_BY_AIOHTTP = frozenset({"gzip", "deflate", "br", "zstd"})

#: The aiohttp exception a fault recorded by another client (httpx, requests) replays as.
_FAULTS: dict[str, type[aiohttp.ClientConnectionError]] = {
    "ConnectError": aiohttp.ClientConnectionError,
    "ConnectionError": aiohttp.ClientConnectionError,
    "ConnectTimeout": aiohttp.ConnectionTimeoutError,
    "ReadTimeout": aiohttp.SocketTimeoutError,
    "Timeout": aiohttp.ServerTimeoutError,
    "RemoteProtocolError": aiohttp.ServerDisconnectedError,
    "ReadError": aiohttp.ClientOSError,
    "WriteError": aiohttp.ClientOSError,
}


class RecordingMiddleware(CassetteFrontEnd):
    """An aiohttp client middleware that replays exchanges from a cassette and records new ones.

    Give it to a session::

        middleware = RecordingMiddleware("tests/cassettes/api.jsonl")
        async with aiohttp.ClientSession(middlewares=[middleware]) as session:
            ...
        await middleware.aclose()

    The options are those of `RecordingTransport` (``mode``, ``secret_headers``,
    ``record_hosts``, ``rules``, ..., or one ``config=``), validated by the same
    `CassetteConfig`; every transport, adapter, fixture and proxy on one cassette file in one
    process shares its session.  The cassette is read here: a missing or empty file is an
    empty cassette, an unreadable one raises `CassetteFormatError`.

    A replay is answered without calling the handler: no connection is opened.  It is a real
    `aiohttp.ClientResponse` with the recorded status, reason, header list (repeats kept) and
    body, whose ``content`` yields the recorded chunks; a recorded fault raises the aiohttp
    exception it names.  Recording calls the handler, so the session's connector, TLS and
    timeouts make the live request; the caller gets the live response as received (aiohttp
    decodes gzip, deflate and br itself, and the body is written decoded).
    ``stream_through`` is not supported here (the whole body is read before it is handed on).

    `aclose()` (and leaving ``async with``) leaves the session; `aclose(failed=True)`, and a
    block left by an exception, keep the old cassette in mode "all".  After closing, a request
    raises `RuntimeError`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        config: CassetteConfig | None = None,
        environ: Mapping[str, str] | None = None,
        **options: Unpack[CassetteOptions],
    ) -> None:
        if config is None and "advice" not in options:
            options["advice"] = AiohttpAdvice()
        config = resolve_config("RecordingMiddleware()", config, options, environ)
        if config.stream_through:
            raise ConfigurationError(
                "RecordingMiddleware reads a live body whole before handing it on: "
                "stream_through=True is not supported with aiohttp; drop it"
            )
        self._open(path, config, can_record=True)

    def __repr__(self) -> str:
        return f"<RecordingMiddleware {self.path!r} mode={self.mode.value!r}>"

    # --- the middleware --------------------------------------------------------------------

    async def __call__(
        self, request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
    ) -> aiohttp.ClientResponse:
        user = self._user
        url = request.url
        if user.has_passthrough and user.is_passthrough(url.host or "", url.port):
            self.passed_through += 1
            return await handler(request)
        if self._closed:
            raise RuntimeError(f"{self!r} is closed; build a new middleware to send requests")
        try:
            config = self._config
            data = RequestData(
                request.method,
                canonical_url(str(url), config.secret_query_params),
                tuple((name.lower(), value) for name, value in request.headers.items()),
                await _body_bytes(request),
                url.host or "",
                url.port,
            )
            plan = user.plan(data, str(url))
            if plan.exchange is not None:
                return self._replay(request, plan.exchange)
            return await self._record(request, data, plan, handler)
        except CassetteError as exc:
            self._note_error(exc)
            raise

    def _replay(self, request: aiohttp.ClientRequest, exchange: Exchange) -> aiohttp.ClientResponse:
        if exchange.error is not None:
            raise _fault(exchange.error)
        assert exchange.status is not None
        config = self._config
        return replayed_response(
            request,
            exchange.status,
            reason_phrase(exchange.status),
            exchange.response_headers,
            exchange.response_header_charset,
            ReplayStream(exchange, config.replay_chunk_size, config.replay_latency),
        )

    async def _record(
        self,
        request: aiohttp.ClientRequest,
        data: RequestData,
        plan: Plan,
        handler: aiohttp.ClientHandlerType,
    ) -> aiohttp.ClientResponse:
        io = _HandlerIO(handler, request.session.auto_decompress)
        steps = record_steps(self._user, data, request, str(request.url), plan, io)
        answer = await arun_steps(steps, io)
        assert answer.live is not None  # (no stream_through here: see the class docstring)
        return replayed_response(
            request,
            answer.response.status,
            answer.response.reason or "",
            answer.live.response_headers,
            answer.charset,
            ReplayStream(answer.live, self._config.replay_chunk_size, 0.0),
        )

    # --- closing ---------------------------------------------------------------------------

    def close(self, *, failed: bool = False) -> None:
        """Leave the cassette's session (blocking file I/O in mode "all"; async code awaits
        `aclose()`).  Closing again does nothing."""
        if self._closed:
            return
        self._closed = True
        self._user.close(failed=failed)

    async def aclose(self, *, failed: bool = False) -> None:
        """Leave the cassette's session, its file work done in a worker thread."""
        if self._closed:
            return
        import anyio.to_thread  # imported by the async paths only (see _streams)

        await anyio.to_thread.run_sync(lambda: self.close(failed=failed))

    async def __aenter__(self) -> RecordingMiddleware:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.aclose(failed=exc_type is not None)


class _HandlerIO:
    """The I/O of recording one request through aiohttp's handler, for the step sequence
    (`_steps.record_steps`): the live body is read chunk by chunk as received (each HTTP
    chunk of a chunked body: an SSE event)."""

    def __init__(self, handler: aiohttp.ClientHandlerType, auto_decompress: bool) -> None:
        self._handler = handler
        self._auto_decompress = auto_decompress
        self._chunks: AsyncIterator[tuple[bytes, bool]] | None = None

    def head(self, live: aiohttp.ClientResponse) -> tuple[int, Headers, str]:
        headers, charset = header_text(live.raw_headers)
        if self._auto_decompress:
            # aiohttp hands on the body decoded: record it as an identity body.
            encoding = live.headers.get("content-encoding", "").strip().lower()
            if encoding in _DECODED_BY_AIOHTTP:
                headers = tuple(
                    (n, v) for n, v in headers if n not in ("content-encoding", "content-length")
                )
        return live.status, headers, charset

    def is_transport_error(self, error: BaseException) -> bool:
        return isinstance(error, aiohttp.ClientConnectionError)

    async def asend(self, request: aiohttp.ClientRequest) -> aiohttp.ClientResponse:
        return await self._handler(request)

    async def aread(self, live: aiohttp.ClientResponse) -> bytes | None:
        if self._chunks is None:
            self._chunks = live.content.iter_chunks().__aiter__()
        try:
            chunk, _ = await self._chunks.__anext__()
        except StopAsyncIteration:
            return None
        return chunk

    async def aclose(self, live: Any) -> None:
        live.release()


async def _body_bytes(request: aiohttp.ClientRequest) -> bytes:
    """The request body as the bytes aiohttp sends (a payload aiohttp streams, such as a file,
    is read through its `as_bytes()`)."""
    body = request.body
    if isinstance(body, (bytes, bytearray)):
        return bytes(body)
    return await body.as_bytes()


def _fault(fault: FaultInfo) -> Exception:
    """The aiohttp exception a recorded fault names."""
    cls = getattr(aiohttp, fault.type, None)
    if (
        isinstance(cls, type)
        and issubclass(cls, aiohttp.ClientConnectionError)
        and cls is not aiohttp.ClientConnectorError  # (built from a connection key)
    ):
        return cls(fault.message)
    known = _FAULTS.get(fault.type, aiohttp.ClientConnectionError)
    return known(f"{fault.message} (recorded as {fault.type})")
