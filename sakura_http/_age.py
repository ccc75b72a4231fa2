"""The age of recorded exchanges: the day stamped on each one written (`Dating`), and how old is
too old (`parse_max_age`, `is_older`).

Each exchange line carries `recorded_at`, the UTC day it was recorded (``"2026-12-01"``): a day,
not a timestamp, so that re-recording an unchanged API on the same day or later changes nothing
in the file, and a cassette does not tell when in the day (or night) someone worked.  The day
is set in one place, `CassetteSession.commit`, through `Dating.stamp`, so every way of recording
(the transports, streamed and stream-through responses, faults, the proxy, requests and
aiohttp) dates its exchanges alike.

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
    it to freeze the day)."""
    return datetime.datetime.now(datetime.timezone.utc).date()


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
    """

    __slots__ = ("_days", "_lock", "_replaced")

    def __init__(self, replaced: Iterable[Exchange] = ()) -> None:
        self._replaced = list(replaced)
        self._days: dict[bytes, deque[datetime.date | None]] | None = None
        self._lock = threading.Lock()

    def stamp(self, exchange: Exchange) -> Exchange:
        """`exchange` with its `recorded_at`: the replaced exchange's day or today's."""
        day = self._kept_day(exchange) if self._replaced else None
        if day is None:
            day = today()
        if exchange.recorded_at == day and type(exchange.recorded_at) is datetime.date:
            return exchange
        return dataclasses.replace(exchange, recorded_at=day)

    def give_back(self, exchange: Exchange) -> None:
        """Undo `stamp` for `exchange` (as stamped), which was not written after all (the
        session's lock was taken: it is stamped again when it is): the day it took from a
        replaced exchange is the next one given for its line again.  (Where it was dated today
        for want of one, giving today back changes nothing either.)"""
        if not self._replaced or exchange.recorded_at is None:
            return
        key = _undated_line(exchange)
        with self._lock:
            days = self._days.get(key) if self._days is not None else None
            if days is not None:
                days.appendleft(exchange.recorded_at)

    def _kept_day(self, exchange: Exchange) -> datetime.date | None:
        key = _undated_line(exchange)
        with self._lock:
            if self._days is None:  # (built at the first exchange a re-recording writes)
                self._days = {}
                for old in self._replaced:
                    self._days.setdefault(_undated_line(old), deque()).append(old.recorded_at)
            days = self._days.get(key)
            return days.popleft() if days else None


def _undated_line(exchange: Exchange) -> bytes:
    """The cassette line of `exchange` without its day."""
    if exchange.recorded_at is not None:
        exchange = dataclasses.replace(exchange, recorded_at=None)
    return encode_exchange(exchange)
