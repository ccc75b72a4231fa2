"""The age of recorded exchanges (`sakura_http._age`): the day each exchange written carries
(`recorded_at`), kept by a re-recording that changes nothing, and how old is too old."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import anyio
import httpx
import pytest

from sakura_http import RecordingTransport, Rules, _age
from sakura_http._age import Dating, is_older, parse_max_age
from sakura_http._cassette import load_cassette
from sakura_http._format import Exchange, FaultInfo, encode_exchange
from tests.client_support import closed_port_url
from tests.drive import Driver
from tests.servers import _QuietServer, _serving
from tests.servers import start_stream_server as start_stream_server

DAY_1 = datetime.date(2026, 3, 1)
DAY_2 = datetime.date(2026, 6, 1)
DAY_3 = datetime.date(2026, 9, 1)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[datetime.date]]:
    """The day the recording path reads (`_age.today`), frozen: set `clock[0]` to move it."""
    day = [DAY_1]
    monkeypatch.setattr(_age, "today", lambda: day[0])
    yield day


# --- a server whose answers a test sets, with no Date header -------------------------------


@dataclass
class Api:
    url: str
    routes: dict[str, bytes] = field(default_factory=dict)


class _Handler(BaseHTTPRequestHandler):
    server: _ApiServer
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = self.server.api.routes.get(self.path, b"no route")
        # send_response_only: no Date (nor Server) header, so an unchanged answer is the same
        # bytes from one second to the next.
        self.send_response_only(200 if self.path in self.server.api.routes else 404)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _ApiServer(_QuietServer):
    daemon_threads = True
    api: Api


@contextlib.contextmanager
def start_api() -> Iterator[Api]:
    server = _ApiServer(("127.0.0.1", 0), _Handler)
    server.api = Api(url=f"http://127.0.0.1:{server.server_address[1]}")
    with _serving(server):
        yield server.api


@pytest.fixture
def api() -> Iterator[Api]:
    with start_api() as running:
        running.routes = {"/a": b'{"a":1}', "/b": b'{"b":2}'}
        yield running


def _record(drive: Driver, path: Path, api: Api, mode: str = "all") -> None:
    transport = drive.transport(path, outer=drive.real_outer(), mode=mode)
    for target in ("/a", "/b", "/a"):
        assert drive.send(transport, "GET", api.url + target).status_code == 200
    drive.close(transport)


def _days(path: Path) -> list[datetime.date | None]:
    return [exchange.recorded_at for exchange in load_cassette(path).exchanges]


# --- recording dates, re-recording keeps -----------------------------------------------------


def test_a_re_recording_that_changes_nothing_leaves_the_file_byte_identical(
    drive: Driver, api: Api, clock: list[datetime.date], tmp_path: Path
) -> None:
    path = tmp_path / "api.jsonl"
    _record(drive, path, api)
    first = path.read_bytes()
    assert _days(path) == [DAY_1] * 3
    assert first.count(b'"recorded_at":"2026-03-01"') == 3

    clock[0] = DAY_2
    _record(drive, path, api)
    assert path.read_bytes() == first

    # One answer changed: its exchanges (both GET /a) are dated today, the other keeps its day.
    api.routes["/a"] = b'{"a":1,"added":true}'
    clock[0] = DAY_3
    _record(drive, path, api)
    assert _days(path) == [DAY_3, DAY_1, DAY_3]
    assert [e.response_body for e in load_cassette(path).exchanges][1] == b'{"b":2}'


def test_an_exchange_recorded_again_in_another_place_keeps_its_day(
    api: Api, clock: list[datetime.date], tmp_path: Path
) -> None:
    # Equal apart from the day, wherever it is: a new request first moves the others down.
    path = tmp_path / "api.jsonl"
    drive = Driver(httpx, "sync")
    _record(drive, path, api)
    clock[0] = DAY_2
    api.routes["/new"] = b"{}"
    transport = drive.transport(path, outer=drive.real_outer(), mode="all")
    for target in ("/new", "/a", "/b", "/a"):
        drive.send(transport, "GET", api.url + target)
    drive.close(transport)
    assert _days(path) == [DAY_2, DAY_1, DAY_1, DAY_1]


def test_an_old_cassette_without_days_is_dated_by_its_re_recording(
    api: Api, clock: list[datetime.date], tmp_path: Path
) -> None:
    path = tmp_path / "api.jsonl"
    drive = Driver(httpx, "sync")
    _record(drive, path, api)
    path.write_bytes(path.read_bytes().replace(b',"recorded_at":"2026-03-01"', b""))
    assert _days(path) == [None] * 3  # a cassette from before the field loads
    clock[0] = DAY_2
    _record(drive, path, api)
    assert _days(path) == [DAY_2] * 3


def test_appending_dates_only_the_new_exchanges(
    api: Api, clock: list[datetime.date], tmp_path: Path
) -> None:
    path = tmp_path / "api.jsonl"
    drive = Driver(httpx, "sync")
    _record(drive, path, api)
    clock[0] = DAY_2
    api.routes["/new"] = b"{}"
    transport = drive.transport(path, outer=drive.real_outer(), mode="new_episodes")
    for target in ("/a", "/new"):
        drive.send(transport, "GET", api.url + target)
    drive.close(transport)
    assert _days(path) == [DAY_1, DAY_1, DAY_1, DAY_2]


def test_streamed_and_fault_exchanges_are_dated_too(
    clock: list[datetime.date], tmp_path: Path
) -> None:
    path = tmp_path / "stream.jsonl"
    transport = RecordingTransport(
        path, outer=httpx.HTTPTransport(), mode="new_episodes", record_errors=True,
        stream_through=True,
    )  # fmt: skip
    with start_stream_server() as server, httpx.Client(transport=transport) as client:
        with client.stream("GET", server.url + "/sse?n=2") as response:
            next(response.iter_bytes())  # closed before its end: a truncated exchange
        with pytest.raises(httpx.ConnectError):
            client.get(closed_port_url())
    exchanges = load_cassette(path).exchanges
    assert [(e.truncated, e.error is not None) for e in exchanges] == [(True, False), (False, True)]
    assert _days(path) == [DAY_1, DAY_1]


def _through_requests(path: Path, api: Api) -> None:
    import requests

    from sakura_http.requests import RecordingAdapter

    with RecordingAdapter(path, mode="all") as adapter, requests.Session() as session:
        session.mount("http://", adapter)
        for target in ("/a", "/b"):
            assert session.get(api.url + target).status_code == 200


def _through_aiohttp(path: Path, api: Api) -> None:
    import aiohttp

    from sakura_http.aiohttp import RecordingMiddleware

    async def go() -> None:
        async with (
            RecordingMiddleware(path, mode="all") as middleware,
            aiohttp.ClientSession(middlewares=[middleware]) as session,
        ):
            for target in ("/a", "/b"):
                async with session.get(api.url + target) as response:
                    assert response.status == 200

    anyio.run(go, backend="asyncio")


def _through_the_proxy(path: Path, api: Api) -> None:
    from sakura_http.proxy import serve

    with serve(path, upstream=api.url, mode="all") as proxy, httpx.Client() as client:
        for target in ("/a", "/b"):
            assert client.get(proxy.url + target).status_code == 200


@pytest.mark.parametrize("record", [_through_requests, _through_aiohttp, _through_the_proxy])
def test_every_front_end_dates_and_keeps_the_day_alike(
    record: Callable[[Path, Api], None], api: Api, clock: list[datetime.date], tmp_path: Path
) -> None:
    path = tmp_path / "api.jsonl"
    record(path, api)
    first = path.read_bytes()
    assert _days(path) == [DAY_1, DAY_1]
    clock[0] = DAY_2
    record(path, api)
    assert path.read_bytes() == first
    api.routes["/b"] = b'{"b":"changed"}'
    record(path, api)
    assert _days(path) == [DAY_1, DAY_2]


def test_an_append_tried_while_another_thread_holds_the_lock_keeps_the_old_day(
    clock: list[datetime.date], tmp_path: Path
) -> None:
    # An async commit first tries without waiting; when another thread holds the session's
    # lock it is tried again from a worker thread.  The day the first try took from the old
    # cassette must still be there for the second.
    path = tmp_path / "c.jsonl"
    outer = httpx.MockTransport(lambda request: httpx.Response(200, text="same"))
    with RecordingTransport(path, outer=outer, mode="all") as transport:
        httpx.Client(transport=transport).get("https://api.example.test/")
    (old,) = load_cassette(path).exchanges
    before = path.read_bytes()
    clock[0] = DAY_2
    with RecordingTransport(path, outer=outer, mode="all") as transport:
        session = transport._user.session
        taken, let_go = threading.Event(), threading.Event()

        def hold_the_lock() -> None:
            with session._lock:
                taken.set()
                let_go.wait(60)

        holder = threading.Thread(target=hold_the_lock)
        holder.start()
        taken.wait(60)
        again = dataclasses.replace(old, recorded_at=None)
        assert session.append(again, wait=False) is False
        let_go.set()
        holder.join()
        assert session.append(again) is True
    assert path.read_bytes() == before


# --- Dating, on its own ----------------------------------------------------------------------


def _exchange(url: str, day: datetime.date | None = None) -> Exchange:
    return Exchange("GET", f"https://api.example.test/{url}", recorded_at=day)


def test_today_is_the_utc_day_and_moves_at_utc_midnight(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _age.today() == datetime.datetime.now(datetime.timezone.utc).date()
    midnight = datetime.datetime(2026, 12, 2, tzinfo=datetime.timezone.utc).timestamp()
    for seconds, day in [(-1, datetime.date(2026, 12, 1)), (0, datetime.date(2026, 12, 2))]:
        monkeypatch.setattr(_age, "_seconds", lambda s=seconds: midnight + s)
        assert _age.today() == day
    monkeypatch.setattr(_age, "_seconds", lambda: midnight - 0.5)  # back: the day follows
    assert _age.today() == datetime.date(2026, 12, 1)


def test_a_recorded_exchange_is_dated_without_a_copy(tmp_path: Path) -> None:
    # The recorder builds it dated today, so the session's stamp has nothing to change.
    stamped: list[tuple[Exchange, Exchange]] = []
    stamp = Dating.stamp

    def spy(self: Dating, exchange: Exchange) -> tuple[Exchange, bytes]:
        dated, line = stamp(self, exchange)
        stamped.append((exchange, dated))
        return dated, line

    outer = httpx.MockTransport(lambda request: httpx.Response(200, text="ok"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Dating, "stamp", spy)
        with RecordingTransport(tmp_path / "c.jsonl", outer=outer, mode="all") as transport:
            httpx.Client(transport=transport).get("https://api.example.test/")
    [(given, written)] = stamped
    assert given is written and written.recorded_at == _age.today()


def test_dating_without_a_replaced_cassette_stamps_today(clock: list[datetime.date]) -> None:
    dated, line = Dating().stamp(_exchange("a", DAY_3))
    assert dated.recorded_at == DAY_1
    assert line == encode_exchange(dated)  # the line the session writes, encoded once


def test_each_replaced_exchange_gives_its_day_once_in_cassette_order(
    clock: list[datetime.date],
) -> None:
    clock[0] = DAY_3
    dating = Dating([_exchange("a", DAY_1), _exchange("b", DAY_1), _exchange("a", DAY_2)])
    stamped = [dating.stamp(_exchange(u))[0].recorded_at for u in ("a", "a", "a", "b", "c")]
    assert stamped == [DAY_1, DAY_2, DAY_3, DAY_1, DAY_3]


def test_an_old_exchange_without_a_day_takes_its_turn_and_gives_none(
    clock: list[datetime.date],
) -> None:
    # Cassette order holds for an exchange written before the field: the first "a" again is
    # paired with it (and dated today), the second with the dated one.
    clock[0] = DAY_3
    dating = Dating([_exchange("a"), _exchange("a", DAY_1)])
    assert [dating.stamp(_exchange("a"))[0].recorded_at for _ in "aa"] == [DAY_3, DAY_1]


def test_an_exchange_already_dated_today_is_the_same_object(clock: list[datetime.date]) -> None:
    exchange = _exchange("a", DAY_1)
    assert Dating().stamp(exchange)[0] is exchange


def test_stamping_keeps_every_other_field(clock: list[datetime.date]) -> None:
    # Every field away from its default, a fault's error too: the stamped exchange is the one
    # dataclasses.replace would give, field by field (a field Exchange gains is caught here).
    exchange = Exchange(
        "POST",
        "https://api.example.test/a",
        (("x-a", "1"),),
        b"sent",
        201,
        (("content-type", "text/plain"),),
        b"answer",
        error=FaultInfo("ReadError", "broke off"),
        id="e1",
        chunks=(2, 4),
        truncated=True,
        timings_ms=(1.0, 2.5),
        response_header_charset="latin-1",
        recorded_at=DAY_3,
        extra={"later": [1]},
    )
    defaults = Exchange("GET", "https://api.example.test/")
    for f in dataclasses.fields(Exchange):
        assert getattr(exchange, f.name) != getattr(defaults, f.name), f.name
    stamped, _ = Dating().stamp(exchange)
    expected = dataclasses.replace(exchange, recorded_at=DAY_1)
    for f in dataclasses.fields(Exchange):
        assert getattr(stamped, f.name) == getattr(expected, f.name), f.name


def test_a_re_recording_compares_lines_only_where_method_and_url_match(
    clock: list[datetime.date],
) -> None:
    clock[0] = DAY_3
    dating = Dating([_exchange("a", DAY_1), _exchange("b", DAY_2)])
    assert dating.stamp(_exchange("c"))[0].recorded_at == DAY_3
    assert dating.stamp(dataclasses.replace(_exchange("a"), body=b"x"))[0].recorded_at == DAY_3
    stamped, line = dating.stamp(_exchange("b"))
    assert stamped.recorded_at == DAY_2 and line == encode_exchange(_exchange("b", DAY_2))
    dating.give_back(stamped)  # (not written after all: the day goes back to its line)
    assert dating.stamp(_exchange("b"))[0].recorded_at == DAY_2
    assert dating.stamp(_exchange("b"))[0].recorded_at == DAY_3
    assert dating.stamp(_exchange("a"))[0].recorded_at == DAY_1


def test_an_exchange_equal_to_an_old_one_keeps_its_day_only_with_its_line(
    clock: list[datetime.date],
) -> None:
    # `==` only chooses the old exchanges whose lines are compared: timings of 1.0 and 1 are
    # equal numbers but not the same line, so the exchange is dated today.
    clock[0] = DAY_3
    old = dataclasses.replace(_exchange("a", DAY_1), chunks=(1, 1), timings_ms=(0.0, 1.0))
    again = dataclasses.replace(_exchange("a"), chunks=(1, 1), timings_ms=(0, 1))
    assert again == old and encode_exchange(again) != encode_exchange(_exchange("a"))
    dating = Dating([old])
    assert dating.stamp(again)[0].recorded_at == DAY_3
    assert dating.stamp(dataclasses.replace(again, timings_ms=(0.0, 1.0)))[0].recorded_at == DAY_1


def test_a_hook_result_keeps_its_day_when_its_line_is_unchanged(
    api: Api, tmp_path: Path, clock: list[datetime.date]
) -> None:
    # A before_record hook may build the exchange anew, with lists where the loader reads
    # tuples: the pipeline reads it back as the loader would, so it still equals the old one.
    def rebuilt(exchange: Exchange) -> Exchange:
        headers = [list(pair) for pair in exchange.response_headers]
        return dataclasses.replace(exchange, response_headers=headers)  # type: ignore[arg-type]

    path = tmp_path / "c.jsonl"
    for day in (DAY_1, DAY_2):
        clock[0] = day
        outer = httpx.HTTPTransport()
        rules = Rules(before_record=rebuilt)
        with RecordingTransport(path, outer=outer, mode="all", rules=rules) as transport:
            assert httpx.Client(transport=transport).get(api.url + "/a").status_code == 200
    assert _days(path) == [DAY_1]


# --- how old is too old ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "age"),
    [
        ("90d", datetime.timedelta(days=90)),
        ("12w", datetime.timedelta(weeks=12)),
        ("36h", datetime.timedelta(hours=36)),
        (" 7D ", datetime.timedelta(days=7)),
    ],
)
def test_max_age_reads_hours_days_and_weeks(text: str, age: datetime.timedelta) -> None:
    assert parse_max_age(text) == age


@pytest.mark.parametrize("text", ["90", "d", "1y", "3m", "-5d", "0d", "1.5d", "90 days", ""])
def test_a_max_age_it_cannot_read_says_what_it_accepts(text: str) -> None:
    with pytest.raises(ValueError, match=r"h \(hours\), d \(days\) or w \(weeks\), such as 90d"):
        parse_max_age(text)


def test_an_age_longer_than_the_calendar_is_refused_or_finds_nothing_older() -> None:
    with pytest.raises(ValueError, match="is longer than any age"):
        parse_max_age("99999999999w")
    now = datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc)
    assert not is_older(datetime.date(1, 1, 1), parse_max_age("999999d"), now)


def test_an_exchange_is_older_when_its_whole_day_lies_before_the_limit() -> None:
    now = datetime.datetime(2026, 12, 1, 16, 25, tzinfo=datetime.timezone.utc)
    ninety = parse_max_age("90d")  # now - 90 days: 2026-09-02 16:25
    assert is_older(datetime.date(2026, 9, 1), ninety, now)
    assert not is_older(datetime.date(2026, 9, 2), ninety, now)  # maybe not yet 90 days old
    assert not is_older(None, ninety, now)  # unknown age
    # 36h before is 2026-11-30 04:25: only days before it are surely older.
    assert is_older(datetime.date(2026, 11, 29), parse_max_age("36h"), now)
    assert not is_older(datetime.date(2026, 11, 30), parse_max_age("36h"), now)
    # `now` in another zone is the same moment.
    tokyo = now.astimezone(datetime.timezone(datetime.timedelta(hours=9)))
    assert is_older(datetime.date(2026, 9, 1), ninety, tokyo)
    assert not is_older(datetime.date(2026, 9, 2), ninety, tokyo)
