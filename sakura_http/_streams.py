"""Response streams: replaying recorded chunks, and teeing a live stream into a recording.

Both classes serve sync and async iteration from one object, as `httpx.ByteStream` does; the
httpx and httpx2 flavours (see `_libraries.py`) only add the library's stream base classes.

* `ReplayStream` yields a recorded body in its recorded chunk sizes (or fixed-size chunks when
  the exchange has none), slicing a `memoryview`, so a 16 MiB body is never copied whole.  With
  `latency > 0` it paces the chunks by their recorded arrival offsets (anyio sleeps in async).
* `TeeStream` (`stream_through=True`) hands each chunk of a live response to the caller as it
  arrives and commits the exchange when the stream ends or the caller closes it early (then
  marked `truncated`).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

import anyio

from ._format import Exchange
from ._session import ResponseRecorder

__all__ = ["DEFAULT_CHUNK_SIZE", "ReplayStream", "TeeStream", "chunk_plan"]

#: Chunk size for replaying an exchange recorded without chunk boundaries (httpcore reads 64 KiB).
DEFAULT_CHUNK_SIZE = 65_536


def chunk_plan(exchange: Exchange, chunk_size: int) -> Sequence[int]:
    """The sizes to replay `exchange.response_body` in."""
    if exchange.chunks is not None:
        return exchange.chunks
    size = len(exchange.response_body)
    return [min(chunk_size, size - start) for start in range(0, size, chunk_size)]


class ReplayStream:
    """Yields a recorded response body chunk by chunk, sync or async."""

    def __init__(self, exchange: Exchange, chunk_size: int, latency: float) -> None:
        self._body = memoryview(exchange.response_body)
        self._sizes = chunk_plan(exchange, chunk_size)
        timings = exchange.timings_ms if latency > 0 else None
        self._offsets = [t * latency / 1000 for t in timings] if timings else None

    def _pieces(self) -> Iterator[tuple[float | None, bytes]]:
        position = 0
        for i, size in enumerate(self._sizes):
            piece = bytes(self._body[position : position + size])
            position += size
            yield (self._offsets[i] if self._offsets else None), piece

    def __iter__(self) -> Iterator[bytes]:
        started = time.monotonic()
        for offset, piece in self._pieces():
            if offset is not None:
                delay = started + offset - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            yield piece

    async def __aiter__(self) -> AsyncIterator[bytes]:
        started = anyio.current_time()
        for offset, piece in self._pieces():
            if offset is not None:
                await anyio.sleep_until(started + offset)
            yield piece

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


class TeeStream:
    """Passes a live response's chunks to the caller while recording them.

    `commit(exchange)` is called once, when the stream ends or is closed; not when reading
    failed (an over-size body, a network error), so a broken exchange is never appended.
    """

    def __init__(
        self,
        stream: Any,
        recorder: ResponseRecorder,
        commit: Callable[[Exchange], None],
        close_outer: Callable[[], Any],
    ) -> None:
        self._stream = stream
        self._recorder = recorder
        self._commit = commit
        self._close_outer = close_outer
        self._ended = False
        self._failed = False
        self._closed = False

    def __iter__(self) -> Iterator[bytes]:
        try:
            for raw in self._stream:
                data = self._recorder.feed(raw)
                if data:
                    yield data
            self._ended = True
            tail = self._recorder.finish_decoding()
            if tail:
                yield tail
        except GeneratorExit:
            raise
        except BaseException:
            self._failed = True
            raise

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for raw in self._stream:
                data = self._recorder.feed(raw)
                if data:
                    yield data
            self._ended = True
            tail = self._recorder.finish_decoding()
            if tail:
                yield tail
        except GeneratorExit:
            raise
        except BaseException:
            self._failed = True
            raise

    def _finished(self) -> Exchange | None:
        if self._closed:
            return None
        self._closed = True
        if self._failed:
            return None
        return self._recorder.finish(truncated=not self._ended)

    def close(self) -> None:
        exchange = self._finished()
        try:
            self._close_outer()
        finally:
            if exchange is not None:
                self._commit(exchange)

    async def aclose(self) -> None:
        exchange = self._finished()
        try:
            await self._close_outer()
        finally:
            if exchange is not None:
                await anyio.to_thread.run_sync(self._commit, exchange)
