"""The step sequence of recording one request, written once for every front end.

Every front end (`RecordingTransport`, `RecordingAdapter`, `RecordingMiddleware`, the proxy)
takes the same steps for a request: passthrough? -> plan (the safety checks, then replay /
record / refuse / miss: `CassetteUser.plan`, one call) -> replay the planned exchange, or record:
send -> read -> finish -> close -> commit -> answer.  Recording is the generator
`record_steps`: it makes every decision and yields the I/O it needs (`Send`, `Read`, `Close`,
`Commit`) and what is for the caller (`Answer`, `Deliver`, `ENDED`); it does no I/O itself, as
h11 does none, so one sequence serves sync and async code and every library.

A front end supplies the I/O of its library, an object with the `RecordingIO` methods (sync,
async, or both), and runs the steps with `run_steps` (sync) or `arun_steps` (async), the two
drivers, which differ only in ``await``.  With ``stream_through`` the steps hand the caller the
response (`Answer`) before its body is read; the rest of them is driven by the caller reading
the body, through a `_streams.TeeStream` (the same drivers again), which hands on each `Deliver`
and, when the caller closes it, finishes, closes and commits: on a close before the end, what
was delivered, marked truncated.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Protocol

from ._exceptions import hidden_in_tracebacks
from ._exchange import Exchange, Headers, RequestData

if TYPE_CHECKING:  # (the session imports the streams, which import the steps)
    from ._session import CassetteUser, Plan

__all__ = [
    "ENDED",
    "Answer",
    "AsyncRecordingIO",
    "CallerStopped",
    "Close",
    "Commit",
    "Deliver",
    "Read",
    "RecordingIO",
    "Send",
    "Steps",
    "arun_steps",
    "record_steps",
    "run_steps",
]

# A sakura-http error passing through this module's frames is shown under pytest without them
# (the test's own frames and the message say it all); a bug keeps them (`hidden_in_tracebacks`).
__tracebackhide__ = hidden_in_tracebacks


class LiveResponses(Protocol):
    """What the steps ask of a front end's library, sync or async alike (no I/O)."""

    def head(self, response: Any) -> tuple[int, Headers, str]:
        """A live response's status, its header list as text (`_format.header_text`: names
        lower-case) and the charset that spells the values' bytes."""
        ...

    def is_transport_error(self, error: BaseException) -> bool:
        """Whether sending failed in the network (recorded as a fault under `record_errors`)."""
        ...


class RecordingIO(LiveResponses, Protocol):
    """The sync I/O of recording one request: what `run_steps` does for each step."""

    def send(self, request: Any) -> Any: ...

    def read(self, response: Any) -> bytes | None:
        """The next raw (still content-encoded) chunk of the body, or None at its end."""
        ...

    def close(self, response: Any) -> None: ...


class AsyncRecordingIO(LiveResponses, Protocol):
    """The async I/O of recording one request: what `arun_steps` awaits for each step."""

    async def asend(self, request: Any) -> Any: ...

    async def aread(self, response: Any) -> bytes | None: ...

    async def aclose(self, response: Any) -> None: ...


# --- the steps ----------------------------------------------------------------------------------


class Send:
    """Send the request (-> the live response; an error sending it is thrown back)."""

    __slots__ = ("request",)

    def __init__(self, request: Any) -> None:
        self.request = request


class Read:
    """Read the next raw chunk of the body (-> the chunk, or None at the end)."""

    __slots__ = ("response",)

    def __init__(self, response: Any) -> None:
        self.response = response


class Close:
    """Close the live response (once the body is read, or reading it failed or stopped)."""

    __slots__ = ("response",)

    def __init__(self, response: Any) -> None:
        self.response = response


class Commit:
    """Append `exchange` to the cassette (`CassetteUser.commit`; None: a hook declined it)."""

    __slots__ = ("exchange", "plan", "user")

    def __init__(self, user: CassetteUser, plan: Plan, exchange: Exchange | None) -> None:
        self.user = user
        self.plan = plan
        self.exchange = exchange


class Deliver:
    """For the caller (``stream_through``): the next decoded chunk of the body."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class _Ended:
    """For the caller (``stream_through``): the body has been delivered to its end; the steps
    wait for the caller to close it, then finish, close and commit."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ENDED"


ENDED = _Ended()


class Answer:
    """For the caller: the response to hand on, built by the front end in its library's terms.

    `response` is the live response (its status line and extensions), `headers` the header
    list to show (as received, unless the body was decoded from its content-encoding, which
    `decoded` says: then without it), spelled in `charset`.  `live` is the exchange as read
    (decoded, unredacted: for the caller, never for the disk), to replay from memory; or, with
    ``stream_through``, None: the rest of the steps runs as the caller reads the body (a
    `TeeStream` drives them)."""

    __slots__ = ("charset", "decoded", "headers", "live", "response")

    def __init__(
        self,
        response: Any,
        headers: Headers,
        decoded: bool,
        charset: str,
        live: Exchange | None = None,
    ) -> None:
        self.response = response
        self.headers = headers
        self.decoded = decoded
        self.charset = charset
        self.live = live


class CallerStopped(Exception):
    """Thrown into the steps when the caller closes a ``stream_through`` body before its end:
    what was delivered is recorded, marked truncated."""


Step = Send | Read | Close | Commit | Deliver | _Ended | Answer
Steps = Generator[Step, Any, "Answer | None"]


# --- the sequence -------------------------------------------------------------------------------


def record_steps(
    user: CassetteUser,
    data: RequestData,
    request: Any,
    sent_url: str,
    plan: Plan,
    io: LiveResponses,
) -> Steps:
    """Every decision for recording `request` (`data` as matched and written, `sent_url` its
    URL as sent, which may be "" when it has no query: only its secret query values are read
    from it; `plan` says to record it): send -> read -> finish -> close -> commit ->
    answer.  `io` (a `LiveResponses`) reads a live response's head and tells a network error.

    Returns the `Answer`; with ``stream_through`` it yields the `Answer` first and returns None
    once the caller closed the body.  A network error sending the request is recorded as a
    fault exchange (under `record_errors`) and raised again; a body that fails to read or to
    decode, or an exchange the write pipeline refuses, closes the live response, commits
    nothing (a re-recording is then incomplete: `CassetteSession.fail_rerecording`) and is
    raised.
    """
    recorder = user.recorder(data, sent_url)
    try:
        response = yield Send(request)
    except Exception as exc:
        fault = user.fault_exchange(data, exc) if io.is_transport_error(exc) else None
        if fault is not None:
            yield Commit(user, plan, fault)
        raise
    status, headers, charset = io.head(response)
    recorder.start(status, headers, charset)
    through = user.config.stream_through
    try:
        ended = False  # the whole body arrived (the caller may still close before the tail)
        try:
            if through:
                yield Answer(
                    response, recorder.live_headers(), not recorder.headers_as_received, charset
                )
            read = Read(response)  # one step object for every chunk
            while (raw := (yield read)) is not None:
                chunk = recorder.feed(raw)
                if through and chunk:
                    yield Deliver(chunk)
            tail = recorder.decode_tail()
            ended = True
            if through:
                if tail:
                    yield Deliver(tail)
                yield ENDED
        except CallerStopped:
            pass  # what was delivered is written, marked truncated unless the body had ended
        exchange = recorder.exchange_to_write(truncated=not ended)
    except GeneratorExit:
        raise  # a stream nobody closed, dropped: nothing to close, nothing is written
    except BaseException:
        # Answered but not written (the body broke off, was too large or failed to decode, the
        # read was cancelled, the pipeline refused it): a re-recording (mode "all") without this
        # exchange is incomplete, and keeps the old cassette when it ends, even if the caller
        # caught the error and closes cleanly.
        user.session.fail_rerecording()
        yield Close(response)
        raise
    try:
        yield Close(response)
    finally:
        yield Commit(user, plan, exchange)
    if through:
        return None
    live = recorder.live()  # (a body that failed to decode is kept raw, headers as received)
    return Answer(response, live.response_headers, not recorder.headers_as_received, charset, live)


# --- the drivers --------------------------------------------------------------------------------


def run_steps(
    steps: Steps, io: RecordingIO, value: Any = None, error: BaseException | None = None
) -> Any:
    """Run `steps` with sync I/O, resuming them with `value` (or throwing `error` into them),
    until one is for the caller: returns that step (`Answer`, `Deliver`, `ENDED`), or what
    the steps return when they end.  An I/O error is thrown into the steps."""
    while True:
        try:
            step = steps.send(value) if error is None else steps.throw(error)
        except StopIteration as done:
            return done.value
        value, error = None, None
        try:
            if type(step) is Read:
                value = io.read(step.response)
            elif type(step) is Send:
                value = io.send(step.request)
            elif type(step) is Close:
                io.close(step.response)
            elif type(step) is Commit:
                step.user.commit(step.plan, step.exchange)
            else:
                return step
        except BaseException as exc:
            error = exc


async def arun_steps(
    steps: Steps,
    io: AsyncRecordingIO,
    value: Any = None,
    error: BaseException | None = None,
    *,
    teeing: bool = False,
) -> Any:
    """`run_steps` with async I/O.  A response read in full is recorded even when the caller's
    task is cancelled while it closes (the commit follows the close whatever it raised) or
    while the commit waits for another writer (that wait is shielded).  With `teeing` (a
    `TeeStream` driving the steps), a cancelled read is not thrown into the steps: the caller
    chose to stop, and closing the stream then records what was delivered."""
    while True:
        try:
            step = steps.send(value) if error is None else steps.throw(error)
        except StopIteration as done:
            return done.value
        value, error = None, None
        try:
            if type(step) is Read:
                value = await io.aread(step.response)
            elif type(step) is Send:
                value = await io.asend(step.request)
            elif type(step) is Close:
                # Not shielded here: httpcore (and httpx2's httpcore2) shields its own close (the
                # connection goes back to the pool however the task is cancelled), as httpx's
                # client, which closes responses unshielded, relies on; aiohttp's release
                # awaits nothing.  A close cancelled anyway is thrown into the steps, which
                # commit what was read all the same.  (Benchmark row "4. ... alternating in one
                # process, async (asyncio)", <= 1.15x: a shield costs 5 microseconds a request.)
                await io.aclose(step.response)
            elif type(step) is Commit:
                # Shielded inside, only around the wait for another writer: an append done at
                # once awaits nothing, so nothing can cancel it (row 4 again).
                await step.user.acommit(step.plan, step.exchange)
            else:
                return step
        except BaseException as exc:
            if teeing and type(step) is Read:
                import anyio  # imported by the async paths only (see _streams)

                if isinstance(exc, anyio.get_cancelled_exc_class()):
                    raise
            error = exc
