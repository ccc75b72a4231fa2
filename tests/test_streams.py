"""Response streams (`sakura_http._streams`), on their own: `chunk_plan`, `ReplayStream` (sync
and async, paced or not) and `TeeStream` driving a scripted step sequence.  Reading replayed
and teed bodies through real clients is tests/test_streaming.py's and
tests/test_streaming_record.py's."""

from __future__ import annotations

import inspect
from collections.abc import Generator
from typing import Any

import anyio
import pytest

from sakura_http import _streams
from sakura_http._exchange import Exchange
from sakura_http._steps import ENDED, CallerStopped, Deliver, Read
from sakura_http._streams import ReplayStream, TeeStream, chunk_plan

URL = "https://api.example.test/v1/stream"


def recorded(body: bytes, chunks: tuple[int, ...] | None = None, **kw: Any) -> Exchange:
    return Exchange("GET", URL, response_body=body, chunks=chunks, **kw)


# --- chunk_plan --------------------------------------------------------------------------------


def test_the_plan_is_the_recorded_chunks() -> None:
    assert list(chunk_plan(recorded(b"abcdef", (2, 0, 4)), 1)) == [2, 0, 4]


def test_without_recorded_chunks_the_body_is_cut_in_chunk_size_pieces() -> None:
    assert list(chunk_plan(recorded(b"x" * 10), 4)) == [4, 4, 2]
    assert list(chunk_plan(recorded(b"x" * 8), 4)) == [4, 4]
    assert list(chunk_plan(recorded(b""), 4)) == []


def test_the_plan_is_lazy() -> None:
    plan = chunk_plan(recorded(b"x" * (16 << 20)), 1)
    assert inspect.isgenerator(plan)
    assert next(iter(plan)) == 1


# --- ReplayStream ------------------------------------------------------------------------------


def test_replay_yields_the_recorded_chunks_and_skips_empty_ones() -> None:
    stream = ReplayStream(recorded(b"abcdef", (2, 0, 4)), 1024, 0.0)
    assert list(stream) == [b"ab", b"cdef"]
    assert list(stream) == [b"ab", b"cdef"]  # iterated again: the same body
    assert stream.content == b"abcdef"
    assert stream.several_chunks


def test_a_body_in_one_chunk_is_the_stored_bytes_themselves() -> None:
    exchange = recorded(b"small body")
    stream = ReplayStream(exchange, 1024, 0.0)
    (piece,) = list(stream)
    assert piece is exchange.response_body
    assert not stream.several_chunks
    assert list(ReplayStream(recorded(b""), 1024, 0.0)) == []


def test_a_body_without_chunks_is_cut_by_chunk_size() -> None:
    stream = ReplayStream(recorded(b"abcdefg"), 3, 0.0)
    assert list(stream) == [b"abc", b"def", b"g"]
    assert stream.several_chunks


def test_content_is_none_when_reading_it_whole_would_lose_something() -> None:
    paced = recorded(b"abcd", (2, 2), timings_ms=(0.0, 50.0))
    assert ReplayStream(paced, 1024, 1.0).content is None  # the pacing
    assert ReplayStream(paced, 1024, 0.0).content == b"abcd"  # no latency: no pacing
    hand_built = recorded(b"abcd", (2, 1))  # chunks that do not add up to the body
    assert ReplayStream(hand_built, 1024, 0.0).content is None


def test_one_non_empty_chunk_is_not_several() -> None:
    assert not ReplayStream(recorded(b"abcd", (0, 4, 0)), 1024, 0.0).several_chunks
    assert ReplayStream(recorded(b"abcd", (1, 3)), 1024, 0.0).several_chunks


def test_paced_replay_waits_for_each_chunk_s_recorded_offset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Clock:
        now = 100.0
        slept: list[float] = []  # noqa: RUF012

        @classmethod
        def monotonic(cls) -> float:
            return cls.now

        @classmethod
        def sleep(cls, seconds: float) -> None:
            cls.slept.append(round(seconds, 6))
            cls.now += seconds

    monkeypatch.setattr(_streams, "time", Clock)
    exchange = recorded(b"aabbcc", (2, 2, 2), timings_ms=(0.0, 100.0, 250.0))
    assert list(ReplayStream(exchange, 1024, 2.0)) == [b"aa", b"bb", b"cc"]
    assert Clock.slept == [0.2, 0.3]  # offsets 0, 0.2 and 0.5 s at latency 2


@pytest.mark.anyio
async def test_async_replay_is_a_checkpoint_between_chunks_only() -> None:
    order: list[Any] = []

    async def other() -> None:
        order.append("other task")

    async with anyio.create_task_group() as group:
        group.start_soon(other)
        async for piece in ReplayStream(recorded(b"ab" * 20, (2,) * 20), 1024, 0.0):
            order.append(piece)
    # The other task ran while the chunks were read, not before the first one.
    assert order[0] == b"ab"
    assert order.index("other task") < len(order) - 1

    order.clear()
    async with anyio.create_task_group() as group:
        group.start_soon(other)
        async for piece in ReplayStream(recorded(b"one chunk"), 1024, 0.0):
            order.append(piece)
    assert order == [b"one chunk", "other task"]  # nothing to wait for in one chunk


@pytest.mark.anyio
async def test_async_paced_replay_sleeps_until_each_offset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    until: list[float] = []

    async def sleep_until(deadline: float) -> None:
        until.append(round(deadline, 6))

    monkeypatch.setattr(anyio, "current_time", lambda: 50.0)
    monkeypatch.setattr(anyio, "sleep_until", sleep_until)
    exchange = recorded(b"aabb", (2, 2), timings_ms=(0.0, 40.0))
    pieces = [piece async for piece in ReplayStream(exchange, 1024, 1.5)]
    assert pieces == [b"aa", b"bb"]
    assert until == [50.0, 50.06]  # from the first chunk on: offsets 0 and 0.06 s at latency 1.5


# --- TeeStream ---------------------------------------------------------------------------------


class LiveBody:
    """The I/O a tee reads through: the chunks of a live body, then None."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = list(chunks)

    def read(self, response: Any) -> bytes | None:
        return self.chunks.pop(0) if self.chunks else None

    async def aread(self, response: Any) -> bytes | None:
        return self.read(response)


def scripted_steps(outcome: list[Any]) -> Generator[Any, Any, None]:
    """The tail of a recording's steps as a tee drives them: read a chunk, deliver it, ...;
    at the end of the body wait at ENDED; `outcome` gets what would be committed."""
    delivered = b""
    try:
        while (chunk := (yield Read("live response"))) is not None:
            delivered += chunk
            yield Deliver(chunk.upper())
        yield ENDED
    except CallerStopped:
        outcome.append(("truncated", delivered))
        return None
    outcome.append(("whole", delivered))
    return None


def test_a_tee_hands_on_each_chunk_and_commits_the_whole_body_at_the_close() -> None:
    outcome: list[Any] = []
    tee = TeeStream(scripted_steps(outcome), LiveBody(b"ab", b"cd"))
    assert list(tee) == [b"AB", b"CD"]
    assert outcome == []  # nothing is committed before the caller closes the stream
    tee.close()
    assert outcome == [("whole", b"abcd")]
    tee.close()  # a second close does nothing
    assert outcome == [("whole", b"abcd")]


def test_a_tee_closed_early_records_what_was_delivered_as_truncated() -> None:
    outcome: list[Any] = []
    tee = TeeStream(scripted_steps(outcome), LiveBody(b"ab", b"cd", b"ef"))
    pieces = iter(tee)
    assert next(pieces) == b"AB"
    tee.close()
    assert outcome == [("truncated", b"ab")]


def test_a_failed_read_reaches_the_caller_and_on_error() -> None:
    class Broken(LiveBody):
        def read(self, response: Any) -> bytes | None:
            if not self.chunks:
                raise ConnectionResetError("peer went away")
            return super().read(response)

    seen: list[BaseException] = []
    tee = TeeStream(scripted_steps([]), Broken(b"ab"), on_error=seen.append)
    with pytest.raises(ConnectionResetError, match="peer went away"):
        list(tee)
    assert [type(error) for error in seen] == [ConnectionResetError]
    tee.close()  # the steps failed: closing runs nothing more
    assert len(seen) == 1


@pytest.mark.anyio
async def test_an_async_tee_does_the_same() -> None:
    outcome: list[Any] = []
    tee = TeeStream(scripted_steps(outcome), LiveBody(b"ab", b"cd"))
    assert [piece async for piece in tee] == [b"AB", b"CD"]
    await tee.aclose()
    assert outcome == [("whole", b"abcd")]

    outcome.clear()
    tee = TeeStream(scripted_steps(outcome), LiveBody(b"ab", b"cd"))
    pieces = tee.__aiter__()
    assert await pieces.__anext__() == b"AB"
    await tee.aclose()
    assert outcome == [("truncated", b"ab")]
