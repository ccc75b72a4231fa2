"""`RecordingTransport`: thin sync and async shells over one shared cassette session.

Each request goes: passthrough? -> safety checks -> plan (replay / record / refuse / miss,
decided by `_core`) -> replay a recorded exchange, or forward to `outer`, record the response
and hand the caller the live response.  The checks and the plan are one method, `_planned`,
which also answers a replay.  Recording is written once, as the generator `_exchange_steps`: it
makes every decision and yields the I/O it needs (`_Send`, `_Read`, `_Close`, `_Commit`) to a
driver, and the sync and async shells are the two drivers, which differ only in `await`.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, overload

import httpx

from ._config import CassetteConfig, CassetteOptions, resolve_config
from ._exceptions import (
    CassetteError,
    ConfigurationError,
    RecordingForbidden,
    hidden_in_tracebacks,
)
from ._exchange import RequestData
from ._format import Exchange
from ._front_end import CassetteFrontEnd
from ._libraries import HttpLibrary, library_of
from ._session import Plan

if TYPE_CHECKING:
    import httpx2
    from typing_extensions import Unpack  # typing.Unpack from Python 3.11 on

__all__ = ["AsyncOuterTransport", "OuterTransport", "RecordingTransport"]

# A sakura-http error passing through this module's frames is shown under pytest without them
# (the test's own frames and the message say it all); a bug keeps them (`hidden_in_tracebacks`).
__tracebackhide__ = hidden_in_tracebacks


class OuterTransport(Protocol):
    """A sync outer transport: what `httpx.HTTPTransport` (or httpx2's) provides."""

    def handle_request(self, request: Any, /) -> Any: ...


class AsyncOuterTransport(Protocol):
    """An async outer transport: what `httpx.AsyncHTTPTransport` (or httpx2's) provides."""

    async def handle_async_request(self, request: Any, /) -> Any: ...


# --- the step sequence: what the drivers are asked to do -------------------------------------


# Plain slotted classes: as plain to read as named tuples, and a tenth of their cost to define
# (a named tuple compiles its constructor), which every `import sakura_http` pays.


class _Send:
    __slots__ = ("request",)

    def __init__(self, request: Any) -> None:
        self.request = request  # -> the outer transport's response


class _Read:
    __slots__ = ("response",)

    def __init__(self, response: Any) -> None:
        self.response = response  # -> the next raw chunk of its body, or None at the end


class _Close:
    __slots__ = ("response",)

    def __init__(self, response: Any) -> None:
        self.response = response  # -> None, once the body is read (or reading failed)


class _Commit:
    __slots__ = ("exchange", "plan")

    def __init__(self, plan: Plan, exchange: Exchange | None) -> None:
        self.plan = plan
        self.exchange = exchange  # -> None, once appended (None: a hook declined it)


_Step = _Send | _Read | _Close | _Commit


class RecordingTransport(CassetteFrontEnd, httpx.BaseTransport, httpx.AsyncBaseTransport):
    """An httpx transport that replays exchanges from a cassette and records new ones.

    One instance serves sync and async clients of httpx and of httpx2; `outer` must be of the
    same library as the client (and async for an async client).  For httpx2 clients under
    mypy, use `sakura_http.httpx2.RecordingTransport`, the same class typed for httpx2.

    The cassette is read when the transport is built: a missing or empty file is an empty
    cassette; an unreadable one raises `CassetteFormatError` here, and is never written to.
    Every transport (and fixture, SDK helper or proxy) on the same cassette file in one process
    shares one session: one index, one play order, one re-recording; the cassette is finished
    when the last of them closes.

    Options, as keyword arguments or as one `CassetteConfig` (``config=``):

    * ``mode``: "none" (replay only; a miss raises `CassetteMiss`), "new_episodes" (record what
      is missing) or "all" (re-record into a fresh cassette that replaces the old one when the
      last user closes cleanly).  ``SAKURA_HTTP_RECORD`` overrides it; ``SAKURA_HTTP_STRICT=1``
      refuses any mode but "none" here, with `RecordingForbidden`.
    * ``outer``: the transport a request to record is forwarded to; None means no network, so a
      request that would have to be recorded raises `RecordingForbidden`.
    * ``secret_headers``: forwarded, never written, never matched; echoes of their values in
      responses are written as ``<redacted>``.  A credential header not listed here is refused
      with `CredentialHeaderError` before anything is sent or replayed.  ``allow_headers``:
      header names that look like credentials but are not (written and matched as usual).
    * ``secret_query_params``: query parameters whose values are written as ``<redacted>`` and
      not matched (default `DEFAULT_SECRET_QUERY_PARAMS`: key, api_key, token, sig, ...).
    * ``record_hosts``: None allows recording from any host; else only these "host" or
      "host:port" entries.  ``passthrough_hosts``: sent straight to ``outer``, never matched or
      written, exempt from every rule.
    * ``ignore_headers``: request headers left out of matching (still recorded); defaults to
      `DEFAULT_IGNORE_HEADERS`.  An entry ending in "*" is a prefix.
    * ``allow_repeats``: in mode "none", once identical requests have used up their recorded
      exchanges the last one repeats; False makes that a miss.
    * ``max_body_bytes``: request and response bodies over it raise `BodyTooLargeError`.
    * ``record_errors``: record transport errors from ``outer`` as fault exchanges.
    * ``stream_through``: hand each chunk to the caller as it arrives while recording; an early
      close records what was delivered, marked truncated.
    * ``record_timings`` / ``replay_latency``: record chunk arrival offsets, and replay them
      scaled by a factor (0, the default, replays as fast as possible).
    * ``replay_chunk_size``: chunk size for exchanges recorded without chunk boundaries.
    * ``environ``: where ``SAKURA_HTTP_RECORD`` and ``SAKURA_HTTP_STRICT`` are read; None (the
      default) reads `os.environ`.  The pytest plugin resolves them once per session and passes
      an empty mapping.

    While recording, the caller receives the live response as the server sent it (decoded);
    only what is written is redacted.  Replay serves what was written.

    `close()` / `aclose()` close ``outer`` and leave the session.  `close(failed=True)` (and a
    ``with`` block left by an exception) says the run did not finish cleanly: in mode "all" the
    old cassette is then kept as it was.  After closing, a request raises `RuntimeError`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        outer: OuterTransport | AsyncOuterTransport | None = None,
        config: CassetteConfig | None = None,
        environ: Mapping[str, str] | None = None,
        **options: Unpack[CassetteOptions],
    ) -> None:
        config = resolve_config("RecordingTransport()", config, options, environ)
        if isinstance(path, str) and "\0" in path:
            raise ConfigurationError(
                f"the cassette path {path!r} holds a NUL character; give a plain file name"
            )
        self._open(path, config, can_record=outer is not None)
        self._outer = outer

    def __repr__(self) -> str:
        return f"<RecordingTransport {self.path!r} mode={self.mode.value!r}>"

    # --- the step sequence -------------------------------------------------------------------

    def _refuse_closed(self) -> None:
        raise RuntimeError(f"{self!r} is closed; build a new transport to send requests")

    def _outer_for(self, method: str, request: Any) -> Any:
        outer = self._outer
        if outer is None:
            raise RecordingForbidden(
                f"{request.method} {request.url} goes to a passthrough host, but the transport "
                "has outer=None: pass the real transport as outer=",
                host=request.url.host,
            )
        if not hasattr(outer, method):
            kind = "an async" if method == "handle_async_request" else "a sync"
            raise TypeError(f"{kind} client needs {kind} outer transport, not {outer!r}")
        return getattr(outer, method)

    def _replay(self, library: HttpLibrary, exchange: Exchange, request: Any) -> Any:
        config = self._config
        return library.replay(exchange, request, config.replay_chunk_size, config.replay_latency)

    def _planned(self, library: HttpLibrary, request: Any) -> tuple[RequestData, Plan, Any]:
        """The safety checks and the plan for a request whose body has been read: (its data,
        the plan, and the replayed response when the plan is to replay, else None)."""
        data: RequestData = library.request_data(request, self._config.secret_query_params)
        self._user.check_request(data)
        # The URL as sent only matters for its secret query values (none without a query): not
        # built per replayed request otherwise.
        plan = self._user.plan(data, str(request.url) if "?" in data.url else "")
        if plan.exchange is None:
            return data, plan, None
        return data, plan, self._replay(library, plan.exchange, request)

    def _exchange_steps(
        self, library: HttpLibrary, request: Any, data: RequestData, plan: Plan, close: Any
    ) -> Generator[_Step, Any, Any]:
        """Every decision for recording one request (`plan` says to); yields the I/O to do.

        Returns the response for the caller.  `close` closes the live response (sync or async),
        for the tee of a `stream_through` response.
        """
        user = self._user
        recorder = user.recorder(data, str(request.url))
        try:
            response = yield _Send(request)
        except Exception as exc:
            fault = user.fault_exchange(data, exc) if library.is_transport_error(exc) else None
            if fault is not None:
                yield _Commit(plan, fault)
            raise
        headers, charset = library.response_headers(response)
        recorder.start(response.status_code, headers, charset)
        if self._config.stream_through:
            # Headers as received, unless the body is decoded (content-encoding dropped).
            decoded = None if recorder.headers_as_received else recorder.live_headers()
            stream = library.tee_stream(
                response.stream,
                recorder,
                lambda exchange: user.commit(plan, exchange),
                lambda exchange: user.acommit(plan, exchange),
                close(response),
                self._note_error,
            )
            return library.handed_on(response, request, stream, decoded, charset)
        read = _Read(response)  # one step object for every chunk
        try:
            while (raw := (yield read)) is not None:
                recorder.feed(raw)
            exchange = recorder.finish()
        finally:
            yield _Close(response)
        yield _Commit(plan, exchange)
        live = recorder.live()  # (a body that failed to decode is kept raw, headers as received)
        decoded = None if recorder.headers_as_received else live.response_headers
        replay = library.replay_stream(live, self._config.replay_chunk_size, 0.0)
        return library.handed_on(response, request, replay, decoded, charset)

    # --- sync ------------------------------------------------------------------------------

    @overload
    def handle_request(self, request: httpx.Request) -> httpx.Response: ...
    @overload
    def handle_request(self, request: httpx2.Request) -> httpx2.Response: ...

    def handle_request(self, request: Any) -> Any:
        library = library_of(request)
        if self._user.has_passthrough and self._user.is_passthrough(*library.host_port(request)):
            self.passed_through += 1
            return self._outer_for("handle_request", request)(request)
        if self._closed:
            self._refuse_closed()
        try:
            request.read()
            data, plan, replayed = self._planned(library, request)
            if replayed is not None:
                return replayed
            steps = self._exchange_steps(
                library, request, data, plan, lambda response: response.close
            )
            chunks: dict[int, Iterator[bytes]] = {}
            result: Any = None
            error: BaseException | None = None
            while True:
                try:
                    step = steps.throw(error) if error is not None else steps.send(result)
                except StopIteration as done:
                    return done.value
                result, error = None, None
                try:
                    if isinstance(step, _Send):
                        result = self._outer_for("handle_request", request)(step.request)
                    elif isinstance(step, _Read):
                        reader = chunks.setdefault(id(step.response), iter(step.response.stream))
                        result = next(reader, None)
                    elif isinstance(step, _Close):
                        step.response.close()
                    else:
                        self._user.commit(step.plan, step.exchange)
                except BaseException as exc:
                    error = exc
        except CassetteError as exc:
            self._note_error(exc)
            raise

    def close(self, *, failed: bool = False) -> None:
        """Close `outer` and leave the cassette's session (see the class docstring)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._user.close(failed=failed)
        finally:
            if self._outer is not None and hasattr(self._outer, "close"):
                self._outer.close()

    def __exit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        self.close(failed=exc_type is not None)

    # --- async -----------------------------------------------------------------------------

    @overload
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response: ...
    @overload
    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response: ...

    async def handle_async_request(self, request: Any) -> Any:
        library = library_of(request)
        if self._user.has_passthrough and self._user.is_passthrough(*library.host_port(request)):
            self.passed_through += 1
            return await self._outer_for("handle_async_request", request)(request)
        if self._closed:
            self._refuse_closed()
        try:
            await request.aread()
            data, plan, replayed = self._planned(library, request)
            if replayed is not None:
                return replayed
            steps = self._exchange_steps(
                library, request, data, plan, lambda response: response.aclose
            )
            chunks: dict[int, Any] = {}
            result: Any = None
            error: BaseException | None = None
            while True:
                try:
                    step = steps.throw(error) if error is not None else steps.send(result)
                except StopIteration as done:
                    return done.value
                result, error = None, None
                try:
                    if isinstance(step, _Send):
                        result = await self._outer_for("handle_async_request", request)(
                            step.request
                        )
                    elif isinstance(step, _Read):
                        reader = chunks.setdefault(
                            id(step.response), step.response.stream.__aiter__()
                        )
                        try:
                            result = await reader.__anext__()
                        except StopAsyncIteration:
                            result = None
                    elif isinstance(step, _Close):
                        # Close the stream's generator now, not at garbage collection, when
                        # recording stopped early (an over-size body): async generators must
                        # be closed explicitly.
                        reader = chunks.pop(id(step.response), None)
                        if hasattr(reader, "aclose"):
                            await reader.aclose()
                        await step.response.aclose()
                    else:
                        await self._user.acommit(step.plan, step.exchange)
                except BaseException as exc:
                    error = exc
        except CassetteError as exc:
            self._note_error(exc)
            raise

    async def aclose(self, *, failed: bool = False) -> None:
        """Close `outer` and leave the cassette's session (see the class docstring)."""
        if self._closed:
            return
        self._closed = True
        import anyio.to_thread  # imported by the async paths only (see _streams)

        try:
            await anyio.to_thread.run_sync(lambda: self._user.close(failed=failed))
        finally:
            outer = self._outer
            if outer is not None:
                if hasattr(outer, "aclose"):
                    await outer.aclose()
                elif hasattr(outer, "close"):
                    outer.close()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.aclose(failed=exc_type is not None)
