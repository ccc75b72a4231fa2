"""The pure decision core: replay, record or miss, given the mode and what the cassette holds.

No I/O happens here.  The sync and async transports, both httpx libraries and the recording proxy
all ask `decide()` what to do with a request, so the rules live in exactly one table::

    mode          | unplayed match | all matches played         | no match
    --------------+----------------+----------------------------+---------
    none          | replay         | repeat the last (a miss    | miss
                  |                | with allow_repeats=False)  |
    new_episodes  | replay         | record                     | record
    all           | record         | record                     | record

`docs/matching.md` shows the same table; a test checks the two agree.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from ._exceptions import ConfigurationError, RecordingForbidden

__all__ = ["ACTIONS", "Action", "Lookup", "RecordMode", "decide", "resolve_mode"]

ENV_RECORD = "SAKURA_HTTP_RECORD"
ENV_STRICT = "SAKURA_HTTP_STRICT"


class RecordMode(str, enum.Enum):
    """How a transport treats requests: replay only, record what is new, or re-record all."""

    NONE = "none"
    NEW_EPISODES = "new_episodes"
    ALL = "all"

    def __str__(self) -> str:
        return self.value


class Lookup(enum.Enum):
    """What the cassette holds for a request's match key."""

    HIT = "unplayed match"
    EXHAUSTED = "all matches played"
    ABSENT = "no match"


class Action(enum.Enum):
    """What to do with a request."""

    REPLAY = "replay"  # play the next unplayed matching exchange
    REPEAT = "repeat"  # play the last matching exchange again
    RECORD = "record"  # forward to the outer transport and append the exchange
    MISS = "miss"  # raise CassetteMiss


ACTIONS: Mapping[tuple[RecordMode, Lookup], Action] = {
    (RecordMode.NONE, Lookup.HIT): Action.REPLAY,
    (RecordMode.NONE, Lookup.EXHAUSTED): Action.REPEAT,
    (RecordMode.NONE, Lookup.ABSENT): Action.MISS,
    (RecordMode.NEW_EPISODES, Lookup.HIT): Action.REPLAY,
    (RecordMode.NEW_EPISODES, Lookup.EXHAUSTED): Action.RECORD,
    (RecordMode.NEW_EPISODES, Lookup.ABSENT): Action.RECORD,
    (RecordMode.ALL, Lookup.HIT): Action.RECORD,
    (RecordMode.ALL, Lookup.EXHAUSTED): Action.RECORD,
    (RecordMode.ALL, Lookup.ABSENT): Action.RECORD,
}


def decide(mode: RecordMode, lookup: Lookup, allow_repeats: bool = True) -> Action:
    """The action for a request, from the table above."""
    action = ACTIONS[mode, lookup]
    if action is Action.REPEAT and not allow_repeats:
        return Action.MISS
    return action


def _parse_mode(value: RecordMode | str, source: str) -> RecordMode:
    try:
        return RecordMode(value)
    except ValueError:
        choices = ", ".join(repr(m.value) for m in RecordMode)
        raise ConfigurationError(f"{source} is {value!r}; it must be one of {choices}") from None


def resolve_mode(mode: RecordMode | str, environ: Mapping[str, str]) -> RecordMode:
    """The effective mode: `SAKURA_HTTP_RECORD` overrides `mode`; `SAKURA_HTTP_STRICT=1`
    forbids anything but "none" (CI sets it so a stray variable cannot re-record)."""
    effective = _parse_mode(mode, "mode")
    override = environ.get(ENV_RECORD, "")
    if override:
        effective = _parse_mode(override, f"the environment variable {ENV_RECORD}")
    strict = environ.get(ENV_STRICT, "").strip().lower() in ("1", "true", "yes", "on")
    if strict and effective is not RecordMode.NONE:
        source = f"{ENV_RECORD}={override}" if override else f"mode={effective.value!r}"
        raise RecordingForbidden(
            f"{ENV_STRICT}=1 forbids recording, but {source} asks for mode "
            f"{effective.value!r}. Unset {ENV_STRICT} to record, or drop the recording mode "
            "to replay only"
        )
    return effective
