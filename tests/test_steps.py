"""The step sequence of recording one request (`sakura_http._steps`), written once.

First the sequence itself, sans I/O: the steps are driven by hand, as a front end's driver
would, and their order is checked for a plain exchange, a body streamed through, a caller that
stops early, a body that fails, and a network error.  Then every front end (httpx sync and
async, requests, aiohttp, the proxy) records through a spy on the sequence, against a real
server on 127.0.0.1: each takes the very same steps, in the same order, and writes the same
exchange.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import httpx
import pytest
import requests

from sakura_http import CassetteConfig, RecordingTransport, Rules, UnwritableExchangeError
from sakura_http import _steps as steps_module
from sakura_http._exchange import RequestData
from sakura_http._format import Headers
from sakura_http._session import CassetteSession, CassetteUser
from sakura_http._steps import (
    ENDED,
    Answer,
    CallerStopped,
    Commit,
    Deliver,
    Read,
    Send,
    record_steps,
)
from sakura_http.aiohttp import RecordingMiddleware
from sakura_http.proxy import serve
from sakura_http.requests import RecordingAdapter
from tests.client_support import ClientServer, closed_port_url, sse_events, start_client_server

URL = "http://api.test/items"


# --- the sequence, driven by hand ---------------------------------------------------------------


class _Live:
    """What the steps ask of a library (no I/O): a response is a (status, headers) pair."""

    def head(self, response: Any) -> tuple[int, Headers, str]:
        status, headers = response
        return status, headers, "utf-8"

    def is_transport_error(self, error: BaseException) -> bool:
        return isinstance(error, ConnectionError)


def _user(tmp_path: Path, **options: Any) -> CassetteUser:
    config = CassetteConfig(mode="new_episodes", **options)
    return CassetteSession.open(tmp_path / "c.jsonl", config, can_record=True)


def _steps(user: CassetteUser) -> Generator[Any, Any, Any]:
    data = RequestData("GET", URL, (), b"", "api.test", 80)
    return record_steps(user, data, "the request", URL, user.plan(data), _Live())


def _two_recorded(tmp_path: Path) -> tuple[Path, bytes]:
    """A cassette holding two answers to the same request: its path and its bytes."""
    first = _user(tmp_path)
    _drive(_steps(first), [b"recorded 1"])
    _drive(_steps(first), [b"recorded 2"])
    first.close()
    path = tmp_path / "c.jsonl"
    return path, path.read_bytes()


def _drive(
    steps: Generator[Any, Any, Any],
    chunks: list[bytes],
    *,
    stop_at: int | None = None,
    send_error: BaseException | None = None,
    read_error: BaseException | None = None,
) -> tuple[list[str], Any]:
    """Run `steps` as a driver does (sync), answering each with fake I/O; returns the names of
    the steps taken and what the steps returned (or the exception they raised).  `stop_at`:
    the caller closes the body after that many `Deliver` steps."""
    taken: list[str] = []
    left = iter(chunks)
    value: Any = None
    error: BaseException | None = None
    delivered = 0
    while True:
        try:
            step = steps.send(value) if error is None else steps.throw(error)
        except StopIteration as done:
            return taken, done.value
        except BaseException as exc:
            return taken, exc
        taken.append("ENDED" if step is ENDED else type(step).__name__)
        value, error = None, None
        if isinstance(step, Send):
            assert step.request == "the request"
            if send_error is not None:
                error = send_error
            else:
                value = (200, (("content-type", "text/plain"),))
        elif isinstance(step, Read):
            chunk = next(left, None)
            if chunk is None and read_error is not None:
                error = read_error
            value = chunk
        elif isinstance(step, Commit):
            step.user.commit(step.plan, step.exchange)
        elif isinstance(step, Deliver):
            delivered += 1
            if delivered == stop_at:
                error = CallerStopped()
        elif step is ENDED and stop_at is not None:
            error = CallerStopped()


def _written(path: Path) -> list[dict[str, Any]]:
    """The exchanges in the cassette at `path` (none when nothing made the file)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()[1:]]


def _written_in(tmp_path: Path) -> list[dict[str, Any]]:
    return _written(tmp_path / "c.jsonl")


def test_recording_sends_reads_to_the_end_closes_commits_then_answers(tmp_path: Path) -> None:
    user = _user(tmp_path)
    taken, answer = _drive(_steps(user), [b"one ", b"two"])
    assert taken == ["Send", "Read", "Read", "Read", "Close", "Commit"]
    assert isinstance(answer, Answer)
    assert answer.response[0] == 200
    assert answer.live is not None and answer.live.response_body == b"one two"
    assert [e["response_body"] for e in _written_in(tmp_path)] == ["one two"]
    user.close()


def test_streamed_through_the_caller_gets_the_answer_first_then_each_chunk(
    tmp_path: Path,
) -> None:
    user = _user(tmp_path, stream_through=True)
    taken, returned = _drive(_steps(user), [b"one ", b"two"])
    assert taken == [
        "Send",
        "Answer",
        "Read",
        "Deliver",
        "Read",
        "Deliver",
        "Read",
        "ENDED",  # the steps wait for the caller to close the body
        "Close",
        "Commit",
    ]
    assert returned is None
    assert [e["response_body"] for e in _written_in(tmp_path)] == ["one two"]
    user.close()


@pytest.mark.parametrize("stop_at", [1, 2])
def test_a_caller_closing_early_records_what_was_delivered_marked_truncated(
    tmp_path: Path, stop_at: int
) -> None:
    user = _user(tmp_path, stream_through=True)
    taken, _ = _drive(_steps(user), [b"one ", b"two", b" three"], stop_at=stop_at)
    assert taken[-2:] == ["Close", "Commit"]
    assert taken.count("Deliver") == stop_at
    (written,) = _written_in(tmp_path)
    assert written["response_body"] == "one two"[: 4 + 3 * (stop_at - 1)]
    assert written["truncated"] is True
    user.close()


def test_a_caller_closing_once_the_whole_body_arrived_is_not_a_truncation(tmp_path: Path) -> None:
    # The last chunk the decoder held back (the tail) may still be on its way to the caller:
    # the body has ended all the same, so the exchange is whole.
    user = _user(tmp_path, stream_through=True)
    taken, _ = _drive(_steps(user), [b"one ", b"two"], stop_at=99)  # stops at ENDED
    assert taken[-3:] == ["ENDED", "Close", "Commit"]
    (written,) = _written_in(tmp_path)
    assert written["response_body"] == "one two"
    assert not written.get("truncated")
    user.close()


@pytest.mark.parametrize("stream_through", [False, True])
def test_a_body_that_fails_to_read_closes_and_commits_nothing(
    tmp_path: Path, stream_through: bool
) -> None:
    user = _user(tmp_path, stream_through=stream_through)
    broken = OSError("connection reset")
    taken, raised = _drive(_steps(user), [b"one "], read_error=broken)
    assert raised is broken
    assert taken[-1] == "Close" and "Commit" not in taken
    assert _written_in(tmp_path) == []
    user.close()


def test_a_network_error_is_committed_as_a_fault_then_raised(tmp_path: Path) -> None:
    user = _user(tmp_path, record_errors=True)
    refused = ConnectionError("refused")
    taken, raised = _drive(_steps(user), [], send_error=refused)
    assert raised is refused
    assert taken == ["Send", "Commit"]
    (written,) = _written_in(tmp_path)
    assert written["error"] == {"type": "ConnectionError", "message": "refused"}
    user.close()


def test_an_error_that_is_not_the_network_s_is_raised_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    user = _user(tmp_path, record_errors=True)
    bug = TypeError("not a transport")
    taken, raised = _drive(_steps(user), [], send_error=bug)
    assert raised is bug and taken == ["Send"]
    assert _written_in(tmp_path) == []
    user.close()


def test_an_exchange_the_pipeline_refuses_is_closed_and_never_committed(tmp_path: Path) -> None:
    user = _user(tmp_path, rules=Rules(before_record=lambda e: dataclasses.replace(e, status=1)))
    taken, raised = _drive(_steps(user), [b"body"])
    assert isinstance(raised, UnwritableExchangeError)
    assert taken[-1] == "Close" and "Commit" not in taken
    user.close()


# --- every front end takes the same steps ---------------------------------------------------------


def _spy(taken: list[str]) -> Callable[..., Generator[Any, Any, Any]]:
    """`record_steps`, noting the name of each step it yields."""
    real = steps_module.record_steps

    def spying(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
        steps = real(*args, **kwargs)
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                step = steps.send(value) if error is None else steps.throw(error)
            except StopIteration as done:
                return done.value
            taken.append("ENDED" if step is ENDED else type(step).__name__)
            try:
                value, error = (yield step), None
            except BaseException as exc:
                value, error = None, exc

    return spying


def _runs(taken: list[str]) -> list[str]:
    """The steps with each run of reads (and chunks handed on) as one: how many chunks a
    client library reads a body in is its own business."""
    runs: list[str] = []
    for name in taken:
        name = "Read" if name in ("Read", "Deliver") else name
        if not runs or runs[-1] != name or name != "Read":
            runs.append(name)
    return runs


def _httpx_sync(url: str, path: Path, **options: Any) -> tuple[bytes, str]:
    transport = RecordingTransport(path, outer=httpx.HTTPTransport(), **options)
    with (
        transport,
        httpx.Client(transport=transport) as client,
        client.stream("GET", url) as response,
    ):
        return response.read(), "sakura_http._transport"


def _httpx_async(backend: str) -> Callable[..., tuple[bytes, str]]:
    def record(url: str, path: Path, **options: Any) -> tuple[bytes, str]:
        async def main() -> bytes:
            transport = RecordingTransport(path, outer=httpx.AsyncHTTPTransport(), **options)
            async with (
                transport,
                httpx.AsyncClient(transport=transport) as client,
                client.stream("GET", url) as response,
            ):
                return await response.aread()

        return anyio.run(main, backend=backend), "sakura_http._transport"

    return record


def _requests(url: str, path: Path, **options: Any) -> tuple[bytes, str]:
    with RecordingAdapter(path, **options) as adapter, requests.Session() as session:
        session.mount("http://", adapter)
        return session.get(url).content, "sakura_http.requests._adapter"


def _aiohttp(url: str, path: Path, **options: Any) -> tuple[bytes, str]:
    async def main() -> bytes:
        middleware = RecordingMiddleware(path, **options)
        async with (
            middleware,
            aiohttp.ClientSession(middlewares=[middleware]) as session,
            session.get(url) as response,
        ):
            return await response.read()

    return anyio.run(main, backend="asyncio"), "sakura_http.aiohttp._middleware"


def _proxy(url: str, path: Path, **options: Any) -> tuple[bytes, str]:
    # Reverse mode: the proxy's upstream is the server, and the client asks the proxy.
    target = httpx.URL(url)
    origin = f"http://{target.host}:{target.port}"
    with serve(path, upstream=origin, **options) as proxy, httpx.Client() as client:
        return client.get(proxy.url + url[len(origin) :]).content, "sakura_http.proxy._exchanges"


FRONT_ENDS: dict[str, Callable[..., tuple[bytes, str]]] = {
    "httpx-sync": _httpx_sync,
    "httpx-async-asyncio": _httpx_async("asyncio"),
    "httpx-async-trio": _httpx_async("trio"),
    "requests": _requests,
    "aiohttp": _aiohttp,
    "proxy": _proxy,
}
#: The front ends that can hand a body on while it is recorded (aiohttp reads it whole).
STREAMING = [name for name in FRONT_ENDS if name != "aiohttp"]
FRONT_END_MODULES = (
    "sakura_http._transport",
    "sakura_http.requests._adapter",
    "sakura_http.aiohttp._middleware",
    "sakura_http.proxy._exchanges",
)


@pytest.fixture(scope="module")
def server() -> Iterator[ClientServer]:
    with start_client_server() as running:
        yield running


def _record_through(
    monkeypatch: pytest.MonkeyPatch,
    taken: list[str],
    front_end: str,
    url: str,
    path: Path,
    **options: Any,
) -> bytes:
    """Record `url` through `front_end`, the steps it takes noted in `taken`; the body."""
    record = FRONT_ENDS[front_end]
    spy = _spy(taken)
    # Each front end imports `record_steps` by name: the spy replaces it in every one of them,
    # so a front end that stopped driving the sequence would take no step at all.
    for module in FRONT_END_MODULES:
        monkeypatch.setattr(f"{module}.record_steps", spy)
    body, module = record(url, path, **options)
    assert module in FRONT_END_MODULES
    return body


@pytest.mark.parametrize("front_end", list(FRONT_ENDS))
def test_every_front_end_records_through_the_one_sequence(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, server: ClientServer, front_end: str
) -> None:
    path = tmp_path / "c.jsonl"
    taken: list[str] = []
    body = _record_through(
        monkeypatch, taken, front_end, f"{server.url}/sse?n=3", path, mode="new_episodes"
    )
    events = b"".join(sse_events(3))
    assert body == events
    assert _runs(taken) == ["Send", "Read", "Close", "Commit"]
    (written,) = _written(path)
    assert written["response_body"] == events.decode()


@pytest.mark.parametrize("front_end", STREAMING)
def test_every_front_end_streams_through_the_one_sequence(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, server: ClientServer, front_end: str
) -> None:
    path = tmp_path / "c.jsonl"
    taken: list[str] = []
    options = {"mode": "new_episodes", "stream_through": True}
    body = _record_through(monkeypatch, taken, front_end, f"{server.url}/sse?n=3", path, **options)
    events = b"".join(sse_events(3))
    assert body == events
    assert _runs(taken) == ["Send", "Answer", "Read", "ENDED", "Close", "Commit"]
    assert "Deliver" in taken
    (written,) = _written(path)
    assert written["response_body"] == events.decode()
    assert not written.get("truncated")


@pytest.mark.parametrize("front_end", list(FRONT_ENDS))
def test_every_front_end_records_a_network_error_through_the_one_sequence(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, front_end: str
) -> None:
    path = tmp_path / "c.jsonl"
    taken: list[str] = []
    options = {"mode": "new_episodes", "record_errors": True}
    try:
        answer = _record_through(monkeypatch, taken, front_end, closed_port_url(), path, **options)
    except Exception as exc:  # each library raises its own connection error
        assert front_end != "proxy", exc
    else:  # the proxy answers its client 502, naming the error
        assert front_end == "proxy"
        assert b"502" in answer or b"failed" in answer, answer
    assert taken == ["Send", "Commit"]
    (written,) = _written(path)
    assert written["error"]["type"] in ("ConnectError", "ConnectionError", "ClientConnectorError")


# --- the review's trace (issue 29): finishing one exchange happens in the write pipeline ----------


def _trace(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "trace.py"
    spec = importlib.util.spec_from_file_location("sakura_trace", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # (its dataclass looks itself up)
    spec.loader.exec_module(module)
    return module.trace()  # type: ignore[no-any-return]


def test_finishing_one_exchange_enters_the_pipeline_once_and_decides_nothing_beside_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # benchmarks/trace.py records a request with a secret header the response echoes and one
    # scrub.  Finishing the exchange (the capture through to what is written) calls into the
    # write pipeline once; every redaction, scrub and check runs under it.  Beside it are only
    # the capture (the recorder, the decoder's headers, building the exchange) and the one
    # refusal the decoder's state decides (`check_redactable`).
    request, finishing = _trace(monkeypatch)
    assert request["window"] == "one recorded request"
    assert request["entered"]["sakura_http._steps"] == 1  # one driver runs the whole sequence
    assert finishing["window"] == "finishing the exchange"
    assert finishing["entered"]["sakura_http._pipeline"] == 1
    assert finishing["calls_by_module"]["sakura_http._rules"] > 0  # the scrub ran
    capture = (
        "ResponseRecorder.",
        "CassetteUser.prepare",
        "AdvisedErrors.",
        "BodyDecoder.",
        "check_redactable",
        "new_exchange",
        "__create_fn__.",  # a dataclass's __init__
        "today",  # the day the exchange is built with (`Dating.stamp` decides it later)
    )
    beside = [name.partition(":")[2] for name in finishing["beside_pipeline"]]
    assert [name for name in beside if not name.startswith(capture)] == []


# --- a re-recording loses no exchange to a failed body ------------------------------------------


@pytest.mark.parametrize("stream_through", [False, True])
def test_a_body_that_fails_to_read_keeps_the_old_cassette_in_a_rerecording(
    tmp_path: Path, stream_through: bool
) -> None:
    """Mode all: the old cassette holds two answers to the request; re-recorded, the second
    body breaks off, the code under test catches the error and closes cleanly.  The
    re-recording lacks that exchange (nothing is committed for a broken body), so replacing the
    old cassette with it would lose one: the old cassette stays, byte for byte."""
    path, before = _two_recorded(tmp_path)
    config = CassetteConfig(mode="all", stream_through=stream_through)
    user = CassetteSession.open(path, config, can_record=True)
    _drive(_steps(user), [b"live 1"], stop_at=99)
    _, raised = _drive(_steps(user), [b"one "], read_error=OSError("connection reset"))
    assert isinstance(raised, OSError)
    user.close()  # cleanly: the caller caught the error
    assert path.read_bytes() == before


@pytest.mark.anyio
async def test_a_read_cancelled_by_the_caller_keeps_the_old_cassette_in_a_rerecording(
    tmp_path: Path,
) -> None:
    """Mode all, asyncio and trio: the second request's body is half read when the code under
    test gives up on it (a timeout it handles); the block then ends cleanly.  Nothing was
    committed for that request, so the old cassette stays, byte for byte."""
    path, before = _two_recorded(tmp_path)
    halfway = anyio.Event()

    async def body() -> Any:
        yield b"live "
        halfway.set()
        await anyio.sleep_forever()

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/slow":
            return httpx.Response(200, content=body())
        return httpx.Response(200, content=b"live 1")

    transport = RecordingTransport(path, outer=httpx.MockTransport(answer), mode="all")
    async with transport, httpx.AsyncClient(transport=transport) as client:
        await client.get(URL)
        async with anyio.create_task_group() as group:

            async def give_up() -> None:
                await halfway.wait()
                group.cancel_scope.cancel()

            group.start_soon(give_up)
            await client.get("http://api.test/slow")
    assert path.read_bytes() == before


@pytest.mark.anyio
async def test_a_close_cancelled_by_the_caller_still_records_the_exchange_read_in_full(
    tmp_path: Path,
) -> None:
    """asyncio and trio: the body has been read to its end when the caller's task is cancelled
    while the live response closes (an outer transport whose close waits).  The exchange read
    in full is written all the same, and the cancellation reaches the caller."""
    path = tmp_path / "closing.jsonl"
    closing, may_finish = anyio.Event(), anyio.Event()

    class Body(httpx.AsyncByteStream):
        async def __aiter__(self) -> Any:
            yield b"whole body"

        async def aclose(self) -> None:
            closing.set()
            await may_finish.wait()  # a close that waits: where the cancellation lands

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=Body())

    transport = RecordingTransport(path, outer=httpx.MockTransport(answer), mode="new_episodes")
    async with transport, httpx.AsyncClient(transport=transport) as client:
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as group:

                async def cancel_while_closing() -> None:
                    await closing.wait()
                    scope.cancel()
                    may_finish.set()

                group.start_soon(cancel_while_closing)
                await client.get(URL)
                await anyio.sleep_forever()  # (a close that was not interrupted: cancelled here)
        assert scope.cancelled_caught
    assert [(line["url"], line["response_body"]) for line in _written(path)] == [
        (URL, "whole body")
    ]
