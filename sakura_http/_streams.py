"""Response streams: replaying recorded chunks, and teeing a live stream into a recording.

Both classes serve sync and async iteration from one object, as `httpx.ByteStream` does; the
httpx and httpx2 flavours (see `_libraries.py`) only add the library's stream base classes.

* `ReplayStream` yields a recorded body in its recorded chunk sizes (or fixed-size chunks when
  the exchange has none), slicing a `memoryview`, so a 16 MiB body is never copied whole.  With
  `latency > 0` it paces the chunks by their recorded arrival offsets (anyio sleeps in async).
* `TeeStream` (`stream_through=True`) hands each chunk of a live response to the caller as it
  arrives, driving the recording's steps (`_steps`) as the caller reads, and commits the
  exchange when the caller closes it (after the end, or early: then marked `truncated`).

Async iteration returns plain iterator objects rather than async generators: a caller that
stops reading early drops the iterator unexhausted, and an async generator dropped that way has
to be finalized by the event loop (trio warns about each one).  Sync iteration uses generators,
which need no such care.

anyio is imported by the async paths when they first run, not with this module: a sync client
never needs it, and benchmark row "6. Import" (<= 30 ms, measured 16 ms) would pay for it: on
this VM importing anyio after httpx and pytest took 17 ms.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any

from ._config import DEFAULT_CHUNK_SIZE
from ._exceptions import hidden_in_tracebacks
from ._format import Exchange
from ._steps import ENDED, CallerStopped, Deliver, Steps, arun_steps, run_steps

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
        return _AsyncReplay(self._pieces())

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


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

    It drives the rest of the recording's steps (`_steps.record_steps`, after their `Answer`)
    as the caller reads: each raw chunk is read through `io` (sync iteration with its `read`,
    async with `aread`), decoded and handed on (`Deliver`).  When the stream is closed, the
    steps finish, close the live response and commit the exchange: the whole body when the
    caller read to the end, else what was delivered, marked `truncated` (an early close, or a
    cancelled async read: both are the caller's choice).  The exchange goes through the write
    pipeline (`_pipeline`) as one read whole does; nothing is written when the `before_record`
    hook declined it.  Nothing is committed when reading failed (an over-size body, a network
    error): the live response is closed then, so a broken exchange is never appended.  Nor is
    anything for a response that is never closed: httpx closes it when a
    `with client.stream(...)` block ends, or when a non-streaming request has read the body.

    `on_error(exc)`, when given, sees each exception that made reading fail (or that the write
    pipeline raised at the close), before it reaches the caller: the transport notes its own
    errors (an over-size body) even if the code under test swallows them.
    """

    def __init__(
        self,
        steps: Steps,
        io: Any,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        self._steps = steps
        self._io = io
        self._on_error = on_error
        self._ended = False  # the body was delivered to its end (the steps wait at ENDED)
        self._done = False  # the steps ended: committed, or failed

    def _after(self, step: Any) -> Any:
        if step is ENDED:
            self._ended = True
        elif step is None:
            self._done = True
        return step

    def _failed(self, exc: BaseException) -> None:
        self._done = True
        if self._on_error is not None:
            self._on_error(exc)

    def _run(self, error: BaseException | None = None) -> Any:
        try:
            return self._after(run_steps(self._steps, self._io, None, error))
        except BaseException as exc:
            self._failed(exc)
            raise

    async def _arun(self, error: BaseException | None = None) -> Any:
        import anyio  # see the module docstring

        try:
            step = await arun_steps(self._steps, self._io, None, error, teeing=True)
        except anyio.get_cancelled_exc_class():
            raise  # a cancelled read: the caller stopped; closing records what it delivered
        except BaseException as exc:
            self._failed(exc)
            raise
        return self._after(step)

    def __iter__(self) -> Iterator[bytes]:
        while not (self._done or self._ended):
            step = self._run()
            if type(step) is not Deliver:
                return
            yield step.data

    def __aiter__(self) -> AsyncIterator[bytes]:
        return _AsyncTee(self)

    def close(self) -> None:
        if not self._done:
            self._run(None if self._ended else CallerStopped())

    async def aclose(self) -> None:
        if not self._done:
            await self._arun(None if self._ended else CallerStopped())


class _AsyncTee:
    """Async iteration of a `TeeStream` (see the module docstring for why not a generator)."""

    def __init__(self, tee: TeeStream) -> None:
        self._tee = tee

    def __aiter__(self) -> _AsyncTee:
        return self

    async def __anext__(self) -> bytes:
        tee = self._tee
        if not (tee._done or tee._ended):
            step = await tee._arun()
            if type(step) is Deliver:
                return step.data
        raise StopAsyncIteration
