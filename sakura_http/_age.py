"""The age of recorded exchanges: the day stamped on each one written (`Dating`), and how old is
too old (`parse_max_age`, `is_older`).

Each exchange line carries `recorded_at`, the UTC day it was recorded (``"2026-12-01"``): a day,
not a timestamp, so that re-recording an unchanged API on the same day or later changes nothing
in the file, and a cassette does not tell when in the day (or night) someone worked.  The day
is set in one place, `CassetteSession.append`, through `Dating.stamp`, so every way of recording
(the transports, streamed and stream-through responses, faults, the proxy, requests and
aiohttp) dates its exchanges alike.  (The recorder builds a response's exchange dated today
already, so that stamping one recorded today copies nothing; the stamp still decides.)

A re-recording (mode "all") keeps the day of an exchange it records again unchanged: an
exchange whose line, apart from `recorded_at`, is the line of an exchange of the cassette it
replaces takes that exchange's day, so a re-recording that changed nothing leaves the file
byte-identical (no churn in git).  Only an old exchange without a day (written before the
field existed) gives none: the re-recording dates it today.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
import threading
from collections import deque
from collections.abc import Iterable
from time import time as _seconds

from ._exchange import new_exchange
from ._format import Exchange, encode_exchange
from ._shown import shown_value

__all__ = ["AGE_UNITS", "Dating", "age_text", "is_older", "parse_max_age", "today"]

#: The units `parse_max_age` reads, and how long each is.
AGE_UNITS = {
    "h": datetime.timedelta(hours=1),
    "d": datetime.timedelta(days=1),
    "w": datetime.timedelta(weeks=1),
}
_AGE = re.compile(r"([0-9]{1,18})([a-z]+)\Z")


def today() -> datetime.date:
    """The current UTC day: the only place the recording path reads the clock (a test replaces
    it to freeze the day).  The day's date is made once a day, and `time.time()` (seconds since
    the epoch, in UTC) says which day it is: benchmark row 4 (recording) dates every exchange,
    and `datetime.now(timezone.utc).date()` cost 4,200 instructions a call."""
    global _today
    number = int(_seconds() // _SECONDS_A_DAY)
    if number != _today[0]:
        _today = (number, _EPOCH + datetime.timedelta(days=number))
    return _today[1]


_SECONDS_A_DAY = 86_400
_EPOCH = datetime.date(1970, 1, 1)
_today: tuple[int, datetime.date] = (-1, _EPOCH)  # (days since the epoch, that day)


def parse_max_age(text: str) -> datetime.timedelta:
    """``"90d"`` as a timedelta: a whole number and a unit, ``h`` (hours), ``d`` (days) or
    ``w`` (weeks).  Raises ValueError with a message that says what is accepted."""
    match = _AGE.match(text.strip().lower())
    unit = AGE_UNITS.get(match.group(2)) if match else None
    if match is None or unit is None or int(match.group(1)) == 0:
        raise ValueError(
            f"{shown_value(text)} is not an age: give a whole number and a unit, h (hours), "
            "d (days) or w (weeks), such as 90d, 12w or 36h"
        )
    try:
        return int(match.group(1)) * unit
    except OverflowError:
        raise ValueError(
            f"{shown_value(text)} is longer than any age a cassette can have: give a number of "
            "weeks, days or hours that fits in the calendar, such as 520w"
        ) from None


def age_text(age: datetime.timedelta) -> str:
    """`age` as `parse_max_age` reads it: in weeks, days or hours, whichever is whole."""
    hours = int(age.total_seconds()) // 3600
    if hours % (24 * 7) == 0:
        return f"{hours // (24 * 7)}w"
    if hours % 24 == 0:
        return f"{hours // 24}d"
    return f"{hours}h"


def is_older(
    recorded_at: datetime.date | None, max_age: datetime.timedelta, now: datetime.datetime
) -> bool:
    """Whether an exchange recorded on the UTC day `recorded_at` is older than `max_age` at
    `now` (an aware datetime): whether that whole day lies before ``now - max_age``, so it is
    older however late in the day it was recorded.  An exchange without a day (from before the
    field) is not: its age is unknown."""
    if recorded_at is None:
        return False
    try:
        limit = (now.astimezone(datetime.timezone.utc) - max_age).date()
    except OverflowError:  # before the first day of the calendar: nothing is older
        return False
    return recorded_at < limit


class Dating:
    """The day to stamp on each exchange a session writes (`stamp`).  Thread-safe.

    `replaced`: the exchanges of the cassette a re-recording replaces (none otherwise).  An
    exchange written whose line, apart from its day, is one of theirs takes that one's day
    (each old exchange gives its day once, in cassette order); any other is dated `today()`.
    Lines are compared only where an old exchange has the same method and URL: the others'
    lines are never encoded.
    """

    __slots__ = ("_days", "_lock", "_replaced", "_unread")

    def __init__(self, replaced: Iterable[Exchange] = ()) -> None:
        self._replaced = list(replaced)
        # The replaced exchanges by method and URL (built at the first exchange a re-recording
        # writes), emptied once a written exchange with the same ones needs their lines.
        self._unread: dict[tuple[str, str], list[Exchange]] | None = None
        # The days of the replaced exchanges whose lines were needed, by line without the day.
        self._days: dict[bytes, deque[datetime.date | None]] = {}
        self._lock = threading.Lock()

    def stamp(self, exchange: Exchange) -> Exchange:
        """`exchange` with its `recorded_at`: the replaced exchange's day or today's."""
        day = self._kept_day(exchange) if self._replaced else None
        if day is None:
            day = today()
        if exchange.recorded_at == day and type(exchange.recorded_at) is datetime.date:
            return exchange
        return _with_day(exchange, day)

    def give_back(self, exchange: Exchange) -> None:
        """Undo `stamp` for `exchange` (as stamped), which was not written after all (the
        session's lock was taken: it is stamped again when it is): the day it took from a
        replaced exchange is the next one given for its line again.  (Where it was dated today
        for want of one, giving today back changes nothing either.)"""
        if not self._replaced or exchange.recorded_at is None:
            return
        with self._lock:
            days = self._days_of(exchange)
            if days is not None:
                days.appendleft(exchange.recorded_at)

    def _kept_day(self, exchange: Exchange) -> datetime.date | None:
        with self._lock:
            days = self._days_of(exchange)
            return days.popleft() if days else None

    def _days_of(self, exchange: Exchange) -> deque[datetime.date | None] | None:
        """The days left for the line of `exchange` (None: no replaced exchange had it).  Call
        with the lock held."""
        if self._unread is None:
            self._unread = {}
            for old in self._replaced:
                self._unread.setdefault((old.method, old.url), []).append(old)
        target = (exchange.method, exchange.url)
        if target not in self._unread:
            return None  # (a line holds the method and URL: no replaced exchange has this one)
        olds, self._unread[target] = self._unread[target], []
        for old in olds:
            self._days.setdefault(_undated_line(old), deque()).append(old.recorded_at)
        return self._days.get(_undated_line(exchange))


def _undated_line(exchange: Exchange) -> bytes:
    """The cassette line of `exchange` without its day."""
    if exchange.recorded_at is not None:
        exchange = _with_day(exchange, None)
    return encode_exchange(exchange)


def _with_day(exchange: Exchange, day: datetime.date | None) -> Exchange:
    """``dataclasses.replace(exchange, recorded_at=day)``, built as the loader builds an
    exchange (`new_exchange`: each field through its slot setter).  Kept for benchmark row "4.
    The same, sakura-http and the bare client alternating in one process" (recording, <=
    1.15x), which stamps every exchange: `replace` cost 49,000 instructions, `Exchange(...)`
    26,000, this 15,000 (docs/performance.md, "Plain code").  tests/test_age.py holds it equal
    to `replace`, field by field."""
    dated = new_exchange(
        exchange.method,
        exchange.url,
        exchange.headers,
        exchange.body,
        exchange.status,
        exchange.response_headers,
        exchange.response_body,
        exchange.chunks,
        exchange.truncated,
        exchange.timings_ms,
        exchange.response_header_charset,
        exchange.id,
        day,
        exchange.extra,
    )
    if exchange.error is not None:  # (a fault: new_exchange makes none)
        dated = dataclasses.replace(dated, error=exchange.error)
    return dated
