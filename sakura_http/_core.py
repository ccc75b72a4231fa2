"""The pure decision core: replay, record, refuse or miss, given the mode, what the cassette
holds and whether this caller may record.

No I/O happens here.  The sync and async transports, both httpx libraries and the recording proxy
all ask `decide()` what to do with a request, so the rules live in exactly two tables::

    mode          | unplayed match | all matches played         | no match
    --------------+----------------+----------------------------+---------
    none          | replay         | repeat the last (a miss    | miss
                  |                | with allow_repeats=False)  |
    new_episodes  | replay         | record                     | record
    all           | record         | record                     | record

and, when the first table says "record"::

    may the caller record?            | action
    ----------------------------------+-------
    yes                               | record
    no: it has no outer transport     | refuse
    no: the host is not in record_hosts | refuse

`docs/matching.md` shows the same tables; a test checks them cell by cell.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import NamedTuple

from ._exceptions import ConfigurationError, RecordingForbidden

__all__ = [
    "ACTIONS",
    "REFUSALS",
    "Action",
    "Actions",
    "Decision",
    "Lookup",
    "RecordMode",
    "Refusal",
    "actions",
    "decide",
    "is_strict",
    "parse_mode",
    "resolve_mode",
]

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
    REFUSE = "refuse"  # raise RecordingForbidden: it must be recorded, but may not be
    MISS = "miss"  # raise CassetteMiss


class Refusal(enum.Enum):
    """Whether the caller may record a request, and if not, why."""

    MAY_RECORD = "yes"
    NO_OUTER = "no: it has no outer transport"
    HOST = "no: the host is not in record_hosts"


class Decision(NamedTuple):
    """An `Action` and the reason for it, in words (for messages and docs)."""

    action: Action
    reason: str


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


REFUSALS: Mapping[Refusal, Action] = {
    Refusal.MAY_RECORD: Action.RECORD,
    Refusal.NO_OUTER: Action.REFUSE,
    Refusal.HOST: Action.REFUSE,
}


def decide(
    mode: RecordMode,
    lookup: Lookup,
    allow_repeats: bool = True,
    refusal: Refusal = Refusal.MAY_RECORD,
) -> Decision:
    """The action for a request, from the tables above, with its reason."""
    action = ACTIONS[mode, lookup]
    reason = f"mode {mode.value}, {lookup.value}"
    if action is Action.REPEAT and not allow_repeats:
        return Decision(Action.MISS, f"{reason}, allow_repeats=False")
    if action is Action.RECORD:
        action = REFUSALS[refusal]
        if action is Action.REFUSE:
            reason = f"{reason}, and may the caller record? {refusal.value}"
    return Decision(action, reason)


class Actions(NamedTuple):
    """One caller's row of the tables: the action for each `Lookup`, given its mode,
    allow_repeats and refusal, which stay the same request after request (see `actions`)."""

    hit: Action
    exhausted: Action
    absent: Action


def actions(
    mode: RecordMode, allow_repeats: bool = True, refusal: Refusal = Refusal.MAY_RECORD
) -> Actions:
    """`decide` for each `Lookup`: a caller's row of the tables, worked out when it joins the
    cassette (`CassetteUser`) and read on every request."""
    return Actions(
        *(
            decide(mode, lookup, allow_repeats, refusal).action
            for lookup in (Lookup.HIT, Lookup.EXHAUSTED, Lookup.ABSENT)
        )
    )


def parse_mode(value: RecordMode | str, source: str) -> RecordMode:
    """`value` as a `RecordMode`; `ConfigurationError` naming `source` when it is not one."""
    try:
        return RecordMode(value)
    except ValueError:
        choices = ", ".join(repr(m.value) for m in RecordMode)
        raise ConfigurationError(f"{source} is {value!r}; it must be one of {choices}") from None


def is_strict(environ: Mapping[str, str]) -> bool:
    """Whether `SAKURA_HTTP_STRICT` is set (1, true, yes or on): CI's replay-only mode, which
    forbids recording and makes the pytest summary's cassettes older than `sakura_max_age` a
    failure."""
    return environ.get(ENV_STRICT, "").strip().lower() in ("1", "true", "yes", "on")


def resolve_mode(mode: RecordMode | str, environ: Mapping[str, str]) -> RecordMode:
    """The effective mode: `SAKURA_HTTP_RECORD` overrides `mode`; `SAKURA_HTTP_STRICT=1`
    forbids anything but "none" (CI sets it so a stray variable cannot re-record)."""
    effective = parse_mode(mode, "mode")
    override = environ.get(ENV_RECORD, "")
    if override:
        effective = parse_mode(override, f"the environment variable {ENV_RECORD}")
    if is_strict(environ) and effective is not RecordMode.NONE:
        source = f"{ENV_RECORD}={override}" if override else f"mode={effective.value!r}"
        raise RecordingForbidden(
            f"{ENV_STRICT}=1 forbids recording, but {source} asks for mode "
            f"{effective.value!r}. Unset {ENV_STRICT} to record, or drop the recording mode "
            "to replay only"
        )
    return effective
