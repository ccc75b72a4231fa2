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
from collections.abc import Iterable
from time import time as _seconds

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
    """The day to stamp on each exchange a session writes, and its line (`stamp`).  Thread-safe.

    `replaced`: the exchanges of the cassette a re-recording replaces (none otherwise).  An
    exchange written whose line, apart from its day, is one of theirs takes that one's day
    (each old exchange gives its day once, in cassette order); any other is dated `today()`.
    Only an old exchange with the same method and URL that is equal to the one written
    (``==``, which leaves the day out) has its line compared: the stages that build an exchange
    to write build what the loader reads back (`_pipeline`), so an exchange unequal to an old
    one cannot have its line, and the lines of the others are never encoded.  Benchmark row
    "4. The same, sakura-http and the bare client alternating in one process" (recording,
    <= 1.15x) re-records its cassette on every pass: comparing lines first cost two encodings
    an exchange (docs/performance.md, "Plain code").
    """

    __slots__ = ("_lock", "_replaced", "_unread")

    def __init__(self, replaced: Iterable[Exchange] = ()) -> None:
        self._replaced = list(replaced)
        # The replaced exchanges not yet taken, by method and URL, in cassette order (built at
        # the first exchange a re-recording writes).
        self._unread: dict[tuple[str, str], list[Exchange]] | None = None
        self._lock = threading.Lock()

    def stamp(self, exchange: Exchange) -> tuple[Exchange, bytes]:
        """`exchange` with its `recorded_at` (the replaced exchange's day, or today's), and
        its cassette line (`encode_exchange`)."""
        if self._replaced:
            kept = self._kept(exchange)
            if kept is not None:
                return kept
        exchange = _dated(exchange, today())
        return exchange, encode_exchange(exchange)

    def give_back(self, exchange: Exchange) -> None:
        """Undo `stamp` for `exchange` (as stamped), which was not written after all (the
        session's lock was taken: it is stamped again when it is): the day it took from a
        replaced exchange is the next one given for its line again.  (Where it was dated today
        for want of one, giving today back changes nothing either.)"""
        if not self._replaced or exchange.recorded_at is None:
            return
        with self._lock:
            olds = self._olds_of(exchange)
            if olds is not None:
                olds.insert(0, exchange)  # (it stands for the old one: equal, the same line)

    def _kept(self, exchange: Exchange) -> tuple[Exchange, bytes] | None:
        """`exchange` dated with the day of the first replaced exchange not yet taken whose
        line it repeats, and that line (taking it); None when there is none."""
        with self._lock:
            olds = self._olds_of(exchange)
            for index, old in enumerate(olds or ()):
                # The response headers first: what a re-recorded answer most often changes (its
                # `date`), told apart at a quarter of the cost of `!=` (benchmark row 4).
                if old.response_headers != exchange.response_headers or old != exchange:
                    continue
                dated = _dated(exchange, old.recorded_at)
                line = encode_exchange(dated)
                if line != encode_exchange(old):
                    continue
                assert olds is not None
                del olds[index]
                if old.recorded_at is None:  # (written before the field: it gives no day)
                    dated = _dated(exchange, today())
                    line = encode_exchange(dated)
                return dated, line
            return None

    def _olds_of(self, exchange: Exchange) -> list[Exchange] | None:
        """The replaced exchanges not yet taken with the method and URL of `exchange` (None: no
        replaced exchange had them).  Call with the lock held."""
        if self._unread is None:
            self._unread = {}
            for old in self._replaced:
                self._unread.setdefault((old.method, old.url), []).append(old)
        return self._unread.get((exchange.method, exchange.url))


def _dated(exchange: Exchange, day: datetime.date | None) -> Exchange:
    """`exchange` dated `day` (None: undated): itself when it already is (the recorder dates
    what it builds today, so stamping copies nothing then)."""
    if exchange.recorded_at == day and type(exchange.recorded_at) is type(day):
        return exchange
    return dataclasses.replace(exchange, recorded_at=day)
