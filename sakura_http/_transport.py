"""`RecordingTransport`: thin sync and async shells over one `CassetteSession`.

Each request goes: passthrough? -> safety checks -> plan (replay / record / miss, decided by
`_core`) -> replay a recorded exchange, or forward to `outer`, record the response and replay
what was recorded.  The shells only move bytes; every decision is the session's, and the two
shells differ only in `await`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, overload

import anyio
import httpx

from ._core import RecordMode
from ._exceptions import CassetteError, RecordingForbidden
from ._format import Exchange, header_bytes
from ._libraries import HttpLibrary, library_of
from ._matching import DEFAULT_IGNORE_HEADERS, RequestData
from ._policy import DEFAULT_MAX_BODY_BYTES
from ._session import CassetteSession, Plan, ResponseRecorder
from ._streams import DEFAULT_CHUNK_SIZE

if TYPE_CHECKING:
    import httpx2

__all__ = ["RecordingTransport"]


class RecordingTransport(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """An httpx transport that replays exchanges from a cassette and records new ones.

    One instance serves sync and async clients of httpx and of httpx2; `outer` must be of the
    same library as the client (and async for an async client).  The cassette is read when the
    transport is built: a missing or empty file is an empty cassette; an unreadable one raises
    `CassetteFormatError` here, and is never written to.

    * ``mode``: "none" (replay only; a miss raises `CassetteMiss`), "new_episodes" (record what
      is missing) or "all" (re-record into a fresh cassette that replaces the old one on
      `close()`).  ``SAKURA_HTTP_RECORD`` overrides it; ``SAKURA_HTTP_STRICT=1`` refuses any
      mode but "none" here, with `RecordingForbidden`.
    * ``outer``: the transport a request to record is forwarded to; None means no network, so a
      request that would have to be recorded raises `RecordingForbidden`.
    * ``secret_headers``: forwarded, never written, never matched; echoes of their values in
      responses are written as ``<redacted>``.  A credential header not listed here is refused
      with `CredentialHeaderError` before anything is sent or replayed.
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

    After `close()` / `aclose()` (which close ``outer`` and, in mode "all", replace the
    cassette) a request raises `RuntimeError`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        outer: Any = None,
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
    ) -> None:
        if replay_chunk_size < 1:
            raise ValueError(f"replay_chunk_size must be at least 1, not {replay_chunk_size}")
        if replay_latency < 0:
            raise ValueError(f"replay_latency must be 0 or more, not {replay_latency}")
        self._session = CassetteSession(
            path,
            mode=mode,
            can_record=outer is not None,
            secret_headers=secret_headers,
            ignore_headers=ignore_headers,
            record_hosts=record_hosts,
            passthrough_hosts=passthrough_hosts,
            max_body_bytes=max_body_bytes,
            allow_repeats=allow_repeats,
            record_errors=record_errors,
            record_timings=record_timings,
            environ=environ,
        )
        self._outer = outer
        self._stream_through = stream_through
        self._latency = replay_latency
        self._chunk_size = replay_chunk_size
        self._closed = False
        #: Every `CassetteError` this transport raised, in order, even if the caller caught it.
        self.raised: list[CassetteError] = []

    # --- public state ----------------------------------------------------------------------

    @property
    def path(self) -> str:
        """The cassette file."""
        return str(self._session.path)

    @property
    def mode(self) -> RecordMode:
        """The effective mode (after `SAKURA_HTTP_RECORD`)."""
        return self._session.mode

    @property
    def appended(self) -> int:
        """How many exchanges this transport has written."""
        return self._session.appended

    def unplayed(self) -> list[Exchange]:
        """Recorded exchanges that no request has played yet, in cassette order."""
        return self._session.unplayed()

    def __repr__(self) -> str:
        return f"<RecordingTransport {self.path!r} mode={self.mode.value!r}>"

    # --- shared steps ------------------------------------------------------------------------

    @contextlib.contextmanager
    def _reporting(self) -> Iterator[None]:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed; build a new transport to send requests")
        try:
            yield
        except CassetteError as exc:
            self.raised.append(exc)
            raise

    def _note_error(self, exc: BaseException) -> None:
        """Note a `CassetteError` raised while a `stream_through` response is read (after
        `handle_request` returned, so `_reporting` cannot see it)."""
        if isinstance(exc, CassetteError):
            self.raised.append(exc)

    def _passthrough(self, library: HttpLibrary, request: Any) -> bool:
        return self._session.is_passthrough(*library.host_port(request))

    def _plan(self, library: HttpLibrary, request: Any) -> tuple[RequestData, Plan]:
        data = library.request_data(request)
        self._session.check_request(data)
        return data, self._session.plan(data)

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

    def _fault(self, library: HttpLibrary, data: RequestData, error: Exception) -> Exchange | None:
        if library.is_transport_error(error):
            return self._session.fault_exchange(data, error)
        return None

    def _replay(self, library: HttpLibrary, exchange: Exchange, request: Any) -> Any:
        return library.replay(exchange, request, self._chunk_size, self._latency)

    def _answered(
        self,
        library: HttpLibrary,
        recorder: ResponseRecorder,
        plan: Plan,
        response: Any,
        request: Any,
        close: Callable[[], Any],
    ) -> Any:
        """The outer transport answered: start recording.  With `stream_through`, return the
        response that tees the live stream to the caller; otherwise None (read it all first)."""
        headers, charset = library.response_headers(response)
        recorder.start(response.status_code, headers, charset)
        if not self._stream_through:
            return None
        stream = library.tee_stream(
            response.stream,
            recorder,
            lambda exchange: self._session.commit(plan, exchange),
            close,
            self._note_error,
        )
        return library.module.Response(
            response.status_code,
            headers=header_bytes(recorder.live_headers(), charset),
            stream=stream,
            request=request,
            extensions=response.extensions,
        )

    # --- sync ------------------------------------------------------------------------------

    @overload
    def handle_request(self, request: httpx.Request) -> httpx.Response: ...
    @overload
    def handle_request(self, request: httpx2.Request) -> httpx2.Response: ...

    def handle_request(self, request: Any) -> Any:
        library = library_of(request)
        if self._passthrough(library, request):
            return self._outer_for("handle_request", request)(request)
        with self._reporting():
            request.read()
            data, plan = self._plan(library, request)
            if plan.exchange is not None:
                return self._replay(library, plan.exchange, request)
            send = self._outer_for("handle_request", request)
            recorder = self._session.recorder(data)
            try:
                response = send(request)
            except Exception as exc:
                fault = self._fault(library, data, exc)
                if fault is not None:
                    self._session.commit(plan, fault)
                raise
            teed = self._answered(library, recorder, plan, response, request, response.close)
            if teed is not None:
                return teed
            try:
                for raw in response.stream:
                    recorder.feed(raw)
                exchange = recorder.finish()
            finally:
                response.close()
            self._session.commit(plan, exchange)
            return self._replay(library, exchange, request)

    def close(self) -> None:
        """Close `outer` and, in mode "all", move the re-recorded cassette into place."""
        if self._closed:
            return
        self._closed = True
        try:
            self._session.close()
        finally:
            if self._outer is not None and hasattr(self._outer, "close"):
                self._outer.close()

    # --- async -----------------------------------------------------------------------------

    @overload
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response: ...
    @overload
    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response: ...

    async def handle_async_request(self, request: Any) -> Any:
        library = library_of(request)
        if self._passthrough(library, request):
            return await self._outer_for("handle_async_request", request)(request)
        with self._reporting():
            await request.aread()
            data, plan = self._plan(library, request)
            if plan.exchange is not None:
                return self._replay(library, plan.exchange, request)
            send = self._outer_for("handle_async_request", request)
            recorder = self._session.recorder(data)
            try:
                response = await send(request)
            except Exception as exc:
                fault = self._fault(library, data, exc)
                if fault is not None:
                    await anyio.to_thread.run_sync(self._session.commit, plan, fault)
                raise
            teed = self._answered(library, recorder, plan, response, request, response.aclose)
            if teed is not None:
                return teed
            chunks = response.stream.__aiter__()
            try:
                async for raw in chunks:
                    recorder.feed(raw)
                exchange = recorder.finish()
            finally:
                # Close the stream's generator now, not at garbage collection, when recording
                # stopped early (an over-size body): async generators must be closed explicitly.
                if hasattr(chunks, "aclose"):
                    await chunks.aclose()
                await response.aclose()
            await anyio.to_thread.run_sync(self._session.commit, plan, exchange)
            return self._replay(library, exchange, request)

    async def aclose(self) -> None:
        """Close `outer` and, in mode "all", move the re-recorded cassette into place."""
        if self._closed:
            return
        self._closed = True
        try:
            await anyio.to_thread.run_sync(self._session.close)
        finally:
            outer = self._outer
            if outer is not None:
                if hasattr(outer, "aclose"):
                    await outer.aclose()
                elif hasattr(outer, "close"):
                    outer.close()
