"""Response streams: replaying recorded chunks, and teeing a live stream into a recording.

Both classes serve sync and async iteration from one object, as `httpx.ByteStream` does; the
httpx and httpx2 flavours (see `_libraries.py`) only add the library's stream base classes.

* `ReplayStream` yields a recorded body in its recorded chunk sizes (or fixed-size chunks when
  the exchange has none), slicing a `memoryview`, so a 16 MiB body is never copied whole.  With
  `latency > 0` it paces the chunks by their recorded arrival offsets (anyio sleeps in async).
* `TeeStream` (`stream_through=True`) hands each chunk of a live response to the caller as it
  arrives and commits the exchange when the stream ends or the caller closes it early (then
  marked `truncated`).

Async iteration returns plain iterator objects rather than async generators: a caller that
stops reading early drops the iterator unexhausted, and an async generator dropped that way has
to be finalized by the event loop (trio warns about each one).  Sync iteration uses generators,
which need no such care.

anyio is imported by the async paths when they first run, not with this module: a sync client
never needs it, and importing it would cost every test run a few milliseconds.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import Any

from ._config import DEFAULT_CHUNK_SIZE
from ._exceptions import hidden_in_tracebacks
from ._format import Exchange
from ._session import ResponseRecorder

__all__ = ["DEFAULT_CHUNK_SIZE", "ReplayStream", "TeeStream", "chunk_plan"]

# A sakura-http error passing through this module's frames is shown under pytest without them
# (the test's own frames and the message say it all); a bug keeps them (`hidden_in_tracebacks`).
__tracebackhide__ = hidden_in_tracebacks


def chunk_plan(exchange: Exchange, chunk_size: int) -> Iterable[int]:
    """The sizes to replay `exchange.response_body` in: its recorded `chunks`, or else pieces of
    `chunk_size` bytes (the last one shorter).  Lazy, so a tiny `chunk_size` costs no memory."""
    if exchange.chunks is not None:
        return exchange.chunks
    size = len(exchange.response_body)
    return (min(chunk_size, size - start) for start in range(0, size, chunk_size))


class ReplayStream:
    """Yields a recorded response body chunk by chunk, sync or async.

    Each chunk is a copy of one slice of the recorded body, made when it is asked for; the body
    itself is never copied.  Empty chunks are skipped, as httpcore never yields one.  With
    `latency > 0` and recorded `timings_ms`, chunk i is yielded no earlier than
    `timings_ms[i] * latency` milliseconds after iteration started (`time.sleep` in sync code,
    `anyio.sleep_until` in async code); async iteration is a checkpoint between chunks, as a read
    from a socket is.  `close()` and `aclose()` release nothing, so closing early is free.
    A body that fits in one chunk is yielded as the stored bytes object itself: bytes are
    immutable, so no copy is needed, and a small replay costs no more than a small response.
    """

    def __init__(self, exchange: Exchange, chunk_size: int, latency: float) -> None:
        self._exchange = exchange
        self._chunk_size = chunk_size
        timings = exchange.timings_ms if latency > 0 else None
        self._offsets = [t * latency / 1000 for t in timings] if timings else None
        # The body as its only chunk, when it is one (or none): no slicing, no copy.
        body = exchange.response_body
        self._whole: tuple[bytes, ...] | None = None
        if exchange.chunks is None and len(body) <= chunk_size:
            self._whole = (body,) if body else ()

    def _pieces(self) -> Iterator[tuple[float | None, bytes]]:
        if self._whole is not None:
            for piece in self._whole:
                yield None, piece
            return
        body = memoryview(self._exchange.response_body)
        offsets = self._offsets
        position = 0
        for i, size in enumerate(chunk_plan(self._exchange, self._chunk_size)):
            if size:
                yield (offsets[i] if offsets else None), bytes(body[position : position + size])
            position += size

    @property
    def content(self) -> bytes | None:
        """The whole body, when reading it all at once loses nothing: no pacing by recorded
        arrival times (with them, None) and chunks that add up to the body, as a recorded
        exchange's do (a hand-built one's might not: then None, and the chunks are read)."""
        exchange = self._exchange
        if self._offsets is not None or (
            self._whole is None
            and exchange.chunks is not None
            and sum(exchange.chunks) != len(exchange.response_body)
        ):
            return None
        return exchange.response_body

    @property
    def several_chunks(self) -> bool:
        """Whether the body replays in more than one chunk: async iteration then passes a
        checkpoint (between chunks)."""
        if self._whole is not None:
            return False
        chunks = self._exchange.chunks
        return chunks is None or (len(chunks) > 1 and sum(1 for size in chunks if size) > 1)

    def __iter__(self) -> Iterator[bytes]:
        if self._offsets is None and self._whole is not None:
            return iter(self._whole)
        return self._chunk_by_chunk()

    def _chunk_by_chunk(self) -> Iterator[bytes]:
        started = time.monotonic()
        for offset, piece in self._pieces():
            if offset is not None:
                delay = started + offset - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            yield piece

    def __aiter__(self) -> AsyncIterator[bytes]:
        if self._offsets is None and self._whole is not None:
            return _AsyncWhole(self._whole)
        return _AsyncReplay(self._pieces())

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


class _AsyncWhole:
    """Async iteration of a body that is one chunk (or none): nothing to wait for, no checkpoint
    (see `_AsyncReplay`), so the cheapest async iterator there is."""

    __slots__ = ("_pieces",)

    def __init__(self, pieces: tuple[bytes, ...]) -> None:
        self._pieces = pieces

    def __aiter__(self) -> _AsyncWhole:
        return self

    async def __anext__(self) -> bytes:
        if not self._pieces:
            raise StopAsyncIteration
        (piece,), self._pieces = self._pieces, ()
        return piece


class _AsyncReplay:
    """Async iteration of a `ReplayStream` (see the module docstring for why not a generator)."""

    def __init__(self, pieces: Iterator[tuple[float | None, bytes]]) -> None:
        self._pieces = pieces
        self._started: float | None = None
        self._first = True

    def __aiter__(self) -> _AsyncReplay:
        return self

    async def __anext__(self) -> bytes:
        try:
            offset, piece = next(self._pieces)
        except StopIteration:
            raise StopAsyncIteration from None
        first, self._first = self._first, False
        if offset is not None:
            import anyio  # see the module docstring

            if self._started is None:  # iteration started with this first paced chunk
                self._started = anyio.current_time()
            await anyio.sleep_until(self._started + offset)
        elif not first:
            # Between chunks other tasks run and a cancellation is delivered; before the first
            # one there is nothing to wait for, as there is none in a response held in memory.
            import anyio.lowlevel  # see the module docstring

            await anyio.lowlevel.checkpoint()
        return piece


class TeeStream:
    """Passes a live response's chunks to the caller while recording them.

    `commit(exchange)` (`await acommit(exchange)` when closed by async code) is called once,
    when the stream is closed: with the whole body when the caller read to the end, else with
    what was delivered, marked `truncated` (an early close, or a cancelled async read: both are
    the caller's choice).  The exchange is the recorder's `finish()`: the capture through the
    write pipeline (`_pipeline`), as for a response read whole; nothing when the `before_record`
    hook declined it.  It is not called when reading failed
    (an over-size body, a network error), so a broken exchange is never appended.  Nor is it
    called for a response that is never closed: httpx closes it when a `with client.stream(...)`
    block ends, or when a non-streaming request has read the body.

    `on_error(exc)`, when given, sees each exception that made reading fail, before it reaches
    the caller: the transport notes its own errors (an over-size body) even if the code under
    test swallows them.
    """

    def __init__(
        self,
        stream: Any,
        recorder: ResponseRecorder,
        commit: Callable[[Exchange], Any],
        acommit: Callable[[Exchange], Awaitable[None]],
        close_outer: Callable[[], Any],
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        self._stream = stream
        self._recorder = recorder
        self._commit = commit
        self._acommit = acommit
        self._close_outer = close_outer
        self._on_error = on_error
        self._ended = False
        self._failed = False
        self._closed = False

    # Steps shared by the sync and async loops; a failure in any of them rules out the commit.

    def _fail(self, exc: BaseException) -> None:
        self._failed = True
        if self._on_error is not None:
            self._on_error(exc)

    def _fed(self, raw: bytes) -> bytes:
        try:
            return self._recorder.feed(raw)
        except BaseException as exc:
            self._fail(exc)
            raise

    def _tail(self) -> bytes:
        self._ended = True
        try:
            return self._recorder.finish_decoding()
        except BaseException as exc:
            self._fail(exc)
            raise

    def __iter__(self) -> Iterator[bytes]:
        chunks = iter(self._stream)
        while True:
            try:
                raw = next(chunks)
            except StopIteration:
                break
            except BaseException as exc:
                self._fail(exc)
                raise
            data = self._fed(raw)
            if data:
                yield data
        tail = self._tail()
        if tail:
            yield tail

    def __aiter__(self) -> AsyncIterator[bytes]:
        return _AsyncTee(self, self._stream.__aiter__())

    def _finished(self) -> Exchange | None:
        if self._closed:
            return None
        self._closed = True
        if self._failed:
            return None
        return self._recorder.finish(truncated=not self._ended)

    def _refused(self, exc: BaseException) -> None:
        """The write pipeline refused the exchange: the transport notes it, as it notes its
        other errors, and the live response is closed all the same."""
        if self._on_error is not None:
            self._on_error(exc)

    def close(self) -> None:
        try:
            exchange = self._finished()
        except BaseException as exc:
            self._refused(exc)
            self._close_outer()
            raise
        try:
            self._close_outer()
        finally:
            if exchange is not None:
                self._commit(exchange)

    async def aclose(self) -> None:
        try:
            exchange = self._finished()
        except BaseException as exc:
            self._refused(exc)
            await self._close_outer()
            raise
        try:
            await self._close_outer()
        finally:
            if exchange is not None:
                import anyio  # see the module docstring

                # Shielded: a response closed because its task was cancelled still records
                # what it delivered.
                with anyio.CancelScope(shield=True):
                    await self._acommit(exchange)


class _AsyncTee:
    """Async iteration of a `TeeStream` (see the module docstring for why not a generator)."""

    def __init__(self, tee: TeeStream, chunks: AsyncIterator[bytes]) -> None:
        self._tee = tee
        self._chunks = chunks
        self._done = False

    def __aiter__(self) -> _AsyncTee:
        return self

    async def __anext__(self) -> bytes:
        tee = self._tee
        while not self._done:
            try:
                raw = await self._chunks.__anext__()
            except StopAsyncIteration:
                self._done = True
                tail = tee._tail()
                if tail:
                    return tail
                break
            except BaseException as exc:
                import anyio  # see the module docstring

                if not isinstance(exc, anyio.get_cancelled_exc_class()):
                    tee._fail(exc)
                raise
            data = tee._fed(raw)
            if data:
                return data
        raise StopAsyncIteration
