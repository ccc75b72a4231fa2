"""Has a live API drifted from its cassette?  Comparing the shape of two responses, not values.

`compare_responses(recorded, live)` lists how a live response's shape differs from the recorded
one; an empty list means "same shape".  It is a pure function: no I/O, no clock, so `sakura-http
verify` (and any other front end) decides drift the same way, and it is tested on its own.

What counts as drift, in the order it is checked:

1. the status class changed (2xx -> 4xx); a change within a class (200 -> 201) is not drift.
   When the class changed, nothing else is compared: an error's body says nothing about the
   shape of the answer it replaced;
2. the set of response header names changed, leaving out the volatile ones
   (`VOLATILE_RESPONSE_HEADERS`: the `Rules.llm()` set, rate limits, framing, the request
   headers `DEFAULT_IGNORE_HEADERS` names) and the caller's `ignore_headers`;
3. the media type of `content-type` changed (its parameters, such as charset, are not compared);
4. for JSON bodies, the shape: a key added or removed, a value's type changed (null, bool,
   number, string, array, object), recursively.  Arrays are compared by the shapes of their
   elements, not by position or length: each element shape one side has and the other lacks is
   compared with the nearest shape of the other side.  Strings are values and are not compared,
   except the enum-like ones: a short token under a key of `ENUM_KEYS` (`type`, `role`,
   `stop_reason`, ...), whose change (``"text" -> "thinking"``) is drift;
5. for ``text/event-stream`` bodies: the event names (in order of first appearance; how often an
   event repeats depends on the answer's length and is not compared) and the shapes of each
   event's data, compared as the elements of an array are.

A body that was cut short at recording (`Exchange.truncated`) has no shape to compare; neither
has a recorded body that is not valid JSON or SSE.

Every front end that verifies reports through the same two steps: `check_exchange` turns a
recorded exchange and its live counterpart into a `Checked` result, whose `lines()` are the
report (``#1 POST https://... (200 -> 200): drifted`` and one line per difference); and
`replay_pairs` pairs live exchanges with the recorded ones a replay would have played, for a
front end (``pytest --verify``) whose live requests are not re-sent from the cassette.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from ._config import DEFAULT_SECRET_QUERY_PARAMS
from ._exchange import is_json_type, media_type
from ._format import Exchange
from ._matching import DEFAULT_IGNORE_HEADERS, HOP_BY_HOP_HEADERS, Matcher, MatchKey
from ._rules import LLM_VOLATILE_RESPONSE_HEADERS, header_wildcards
from ._shown import shown_url

__all__ = [
    "ENUM_KEYS",
    "OUTCOME_WORDS",
    "VOLATILE_RESPONSE_HEADERS",
    "Checked",
    "Difference",
    "Outcome",
    "check_exchange",
    "compare_json",
    "compare_responses",
    "replay_pairs",
    "sse_events",
]

#: Response header names left out of the comparison: set anew on every call (the `Rules.llm()`
#: set, rate limits), framing that depends on how the body travelled, and the request headers
#: recording ignores.  A "*" matches any run of characters (`header_wildcards`).
VOLATILE_RESPONSE_HEADERS = frozenset(
    {
        *LLM_VOLATILE_RESPONSE_HEADERS,
        *DEFAULT_IGNORE_HEADERS,
        *HOP_BY_HOP_HEADERS,
        "x-ratelimit-*",
        "anthropic-ratelimit-*",
        "content-length",
        "content-encoding",
        "transfer-encoding",
    }
)

#: Object keys whose string values are enum-like: their change is drift, when the value is a
#: short token (`_TOKEN`).  Other strings are answers and are never compared.
ENUM_KEYS = frozenset(
    {
        "type",
        "object",
        "role",
        "stop_reason",
        "finish_reason",
        "status",
        "event",
        "kind",
    }
)  # not "code": OAuth answers carry an authorization code under it, which must not be printed

_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9_.:/-]{0,39}")
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
# Arrays: at most this many distinct element shapes per side are paired (a bound on the work
# for arrays of many differently shaped items; the first ones found are kept).
_MAX_SHAPES = 64

Kind = Literal[
    "status",
    "header added",
    "header removed",
    "content type",
    "body",
    "key added",
    "key removed",
    "type",
    "value",
    "event added",
    "event removed",
    "event order",
]


@dataclass(frozen=True, slots=True)
class Difference:
    """One way a live response's shape differs from the recorded one.

    `kind` says what changed; `path` where (``response.body.usage.input_tokens``,
    ``response.event[message_start].message``, a header's name); `old` and `new` are the
    recorded and live sides as printed (a type name, a quoted enum value, a status), None for
    an addition or a removal.
    """

    kind: Kind
    path: str
    old: str | None = None
    new: str | None = None

    def __str__(self) -> str:
        if self.kind in ("key added", "key removed", "header added", "header removed"):
            return f"{self.kind}: {self.path}"
        if self.kind in ("event added", "event removed"):
            return f"{self.kind}: {self.new if self.kind == 'event added' else self.old}"
        label = {"status": "status", "content type": "content-type", "event order": "events"}
        return f"{label.get(self.kind, self.path)}: {self.old} -> {self.new}"

    def to_json(self) -> dict[str, Any]:
        """The difference as a JSON object: its fields and its `text` as printed."""
        return {
            "kind": self.kind,
            "path": self.path,
            "old": self.old,
            "new": self.new,
            "text": str(self),
        }


def compare_responses(
    recorded: Exchange, live: Exchange, *, ignore_headers: Iterable[str] = ()
) -> list[Difference]:
    """How `live`'s response shape differs from `recorded`'s (empty: the same shape).

    `ignore_headers` (header names, where ``*`` matches any run of characters, as in
    `Rules.ignore_headers`: `header_wildcards`) are left out of the header comparison besides
    `VOLATILE_RESPONSE_HEADERS`.  Exchanges without a status (a recorded
    transport failure) compare by status only: None against a status is drift.
    """
    if recorded.status is None or live.status is None:
        if recorded.status == live.status:
            return []
        return [Difference("status", "response.status", _status(recorded), _status(live))]
    if recorded.status // 100 != live.status // 100:
        return [Difference("status", "response.status", str(recorded.status), str(live.status))]
    ignored = VOLATILE_RESPONSE_HEADERS | {name.lower() for name in ignore_headers}
    old_names = _header_names(recorded.response_headers, ignored)
    new_names = _header_names(live.response_headers, ignored)
    out = [Difference("header removed", name) for name in sorted(old_names - new_names)]
    out.extend(Difference("header added", name) for name in sorted(new_names - old_names))
    old_type = media_type(recorded.response_headers)
    new_type = media_type(live.response_headers)
    if old_type != new_type:
        out.append(Difference("content type", "content-type", old_type or "(none)", new_type))
        return out
    if recorded.truncated or not recorded.response_body:
        return out
    if is_json_type(old_type):
        try:
            old = orjson.loads(recorded.response_body)
        except orjson.JSONDecodeError:
            return out
        try:
            new = orjson.loads(live.response_body)
        except orjson.JSONDecodeError:
            out.append(Difference("body", "response.body", "JSON", "not JSON"))
            return out
        out.extend(compare_json(old, new, "response.body"))
    elif old_type == "text/event-stream":
        old_events = sse_events(recorded.response_body)
        new_events = sse_events(live.response_body)
        if old_events is not None:
            if new_events is None:
                out.append(Difference("body", "response.body", "UTF-8 events", "not UTF-8"))
            else:
                out.extend(_compare_events(old_events, new_events))
    return out


Outcome = Literal["same", "drifted", "failed", "skipped"]

#: How each outcome is printed.
OUTCOME_WORDS: dict[Outcome, str] = {
    "same": "same shape",
    "drifted": "drifted",
    "failed": "failed",
    "skipped": "skipped",
}


@dataclass(frozen=True)
class Checked:
    """What verifying one recorded exchange found: its `outcome`, the `differences` of a drifted
    one, the `live_status` (None when nothing live answered) and a `reason` (why it failed or
    was skipped, or advice on a drifted one).  `index` is its position in the cassette, from 0.
    """

    index: int
    recorded: Exchange
    outcome: Outcome
    differences: list[Difference] = field(default_factory=list)
    live_status: int | None = None
    reason: str | None = None

    def label(self) -> str:
        """``#1 id=... POST https://...``: the exchange as every report names it (secret query
        values shown as their length)."""
        ex = self.recorded
        ident = f" id={ex.id}" if ex.id is not None else ""
        url = shown_url(ex.url, DEFAULT_SECRET_QUERY_PARAMS)
        return f"#{self.index + 1}{ident} {ex.method} {url}"

    def lines(self) -> list[str]:
        """The report of this exchange: its label, the statuses, the outcome (and reason), then
        each difference on a line of its own, indented by four spaces."""
        status = ""
        if self.live_status is not None:
            recorded = "ERR" if self.recorded.status is None else str(self.recorded.status)
            status = f" ({recorded} -> {self.live_status})"
        reason = f": {self.reason}" if self.reason else ""
        head = f"{self.label()}{status}: {OUTCOME_WORDS[self.outcome]}{reason}"
        return [head, *(f"    {difference}" for difference in self.differences)]


def check_exchange(
    index: int,
    recorded: Exchange,
    live: Exchange,
    *,
    ignore_headers: Iterable[str] = (),
    reason: str | None = None,
) -> Checked:
    """Compare `live` with `recorded` (`compare_responses`): "drifted" with the differences, or
    "same".  `index` is the recorded exchange's position in its cassette."""
    differences = compare_responses(recorded, live, ignore_headers=ignore_headers)
    outcome: Outcome = "drifted" if differences else "same"
    return Checked(index, recorded, outcome, differences, live.status, reason)


def replay_pairs(
    recorded: Sequence[Exchange], live: Iterable[Exchange], matcher: Matcher
) -> Iterator[tuple[int | None, Exchange]]:
    """Each of `live` (in the order it was sent) with the position in `recorded` of the exchange
    a replay would have played for its request under `matcher`: the next unplayed one of the
    same match key, or the last of them again once all were played; None when no recorded
    exchange has its key (a replay would miss it)."""
    slots: dict[MatchKey, list[int]] = {}
    for position, exchange in enumerate(recorded):
        slots.setdefault(matcher.key_of_exchange(exchange), []).append(position)
    played: dict[MatchKey, int] = {}
    for exchange in live:
        key = matcher.key_of_exchange(exchange)
        positions = slots.get(key)
        if not positions:
            yield None, exchange
            continue
        count = played.get(key, 0)
        played[key] = count + 1
        yield positions[min(count, len(positions) - 1)], exchange


def compare_json(old: Any, new: Any, path: str = "") -> list[Difference]:
    """How the shape of the JSON value `new` differs from `old`'s, `path` naming the value.

    Repeats of one difference at several array positions are reported once, at the first."""
    out: list[Difference] = []
    _compare(old, new, path, None, out)
    return _once(out)


def sse_events(body: bytes) -> list[tuple[str, str]] | None:
    """The events of a ``text/event-stream`` body as (name, data) pairs (None: not UTF-8).

    The name is ``message`` unless an ``event:`` field names it; ``data:`` lines are joined by
    newlines; comments are skipped, and so are blocks with neither a name nor data (``retry:``).
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    events: list[tuple[str, str]] = []
    for block in text.replace("\r\n", "\n").replace("\r", "\n").split("\n\n"):
        name: str | None = None
        data: list[str] = []
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
        if name is not None or data:
            events.append((name or "message", "\n".join(data)))
    return events


# --- the parts ---------------------------------------------------------------------------------


def _status(exchange: Exchange) -> str:
    return "a transport failure" if exchange.status is None else str(exchange.status)


def _header_names(headers: Iterable[tuple[str, str]], ignored: frozenset[str]) -> set[str]:
    """The names of `headers` that `ignored` (names and patterns, `header_wildcards`) leaves."""
    wildcards = header_wildcards(ignored)
    return {
        name
        for name in (name.lower() for name, _ in headers)
        if name not in ignored and (wildcards is None or wildcards.fullmatch(name) is None)
    }


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):  # before int: a bool is an int to Python
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _enum(key: str | None, value: str) -> bool:
    return key in ENUM_KEYS and _TOKEN.fullmatch(value) is not None


def _shape(value: Any, key: str | None) -> Any:
    """A hashable summary of `value`'s shape: kinds, keys, element shapes, enum values."""
    kind = _kind(value)
    if kind == "object":
        return (kind, tuple(sorted((k, _shape(v, k)) for k, v in value.items())))
    if kind == "array":
        return (kind, frozenset(_shape(item, None) for item in value))
    if kind == "string" and _enum(key, value):
        return (kind, value)
    return (kind,)


def _child(path: str, key: str) -> str:
    if _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{orjson.dumps(key).decode()}]"


def _compare(old: Any, new: Any, path: str, key: str | None, out: list[Difference]) -> None:
    old_kind, new_kind = _kind(old), _kind(new)
    if old_kind != new_kind:
        out.append(Difference("type", path, old_kind, new_kind))
    elif old_kind == "object":
        out.extend(Difference("key removed", _child(path, k)) for k in old if k not in new)
        out.extend(Difference("key added", _child(path, k)) for k in new if k not in old)
        for k, value in old.items():
            if k in new:
                _compare(value, new[k], _child(path, k), k, out)
    elif old_kind == "array":
        _compare_items(old, new, lambda j: f"{path}[{j}]", out)
    elif old_kind == "string" and old != new and (_enum(key, old) or _enum(key, new)):
        out.append(Difference("value", path, _quoted(old), _quoted(new)))


def _quoted(value: str) -> str:
    return orjson.dumps(value).decode()


def _first_of_each_shape(items: list[Any]) -> dict[Any, int]:
    """The index of the first item of each shape, for the first `_MAX_SHAPES` shapes."""
    first: dict[Any, int] = {}
    for index, item in enumerate(items):
        shape = _shape(item, None)
        if shape not in first:
            if len(first) == _MAX_SHAPES:
                break
            first[shape] = index
    return first


def _compare_items(
    old: list[Any], new: list[Any], where: Callable[[int], str], out: list[Difference]
) -> None:
    """Pair each element shape one side lacks with the nearest of the other side; an empty side
    has no shapes to compare."""
    if not old or not new:
        return
    old_first, new_first = _first_of_each_shape(old), _first_of_each_shape(new)

    def nearest(item: Any, candidates: dict[Any, int], items: list[Any], live: bool) -> int:
        def cost(index: int) -> int:
            found: list[Difference] = []
            pair = (items[index], item) if live else (item, items[index])
            _compare(*pair, "", None, found)
            return len(found)

        return min(candidates.values(), key=cost)

    pairs: dict[tuple[int, int], None] = {}
    for shape, j in new_first.items():
        if shape not in old_first:
            pairs[(nearest(new[j], old_first, old, live=True), j)] = None
    for shape, i in old_first.items():
        if shape not in new_first:
            pairs[(i, nearest(old[i], new_first, new, live=False))] = None
    for i, j in pairs:
        _compare(old[i], new[j], where(j), None, out)


def _once(found: list[Difference]) -> list[Difference]:
    """`found` without repeats that differ only in array positions (the first one is kept)."""
    seen: set[tuple[str, str, str | None, str | None]] = set()
    kept = []
    for difference in found:
        key = (
            difference.kind,
            re.sub(r"\[\d+\]", "[]", difference.path),
            difference.old,
            difference.new,
        )
        if key not in seen:
            seen.add(key)
            kept.append(difference)
    return kept


def _data(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text  # "[DONE]" and other plain data: a string, whose value is not compared


def _compare_events(old: list[tuple[str, str]], new: list[tuple[str, str]]) -> list[Difference]:
    old_names = list(dict.fromkeys(name for name, _ in old))
    new_names = list(dict.fromkeys(name for name, _ in new))
    out = [
        Difference("event removed", "response.events", old=name)
        for name in old_names
        if name not in new_names
    ]
    out.extend(
        Difference("event added", "response.events", new=name)
        for name in new_names
        if name not in old_names
    )
    if not out and old_names != new_names:
        out.append(
            Difference("event order", "response.events", ", ".join(old_names), ", ".join(new_names))
        )
    found: list[Difference] = []
    for name in old_names:
        if name in new_names:
            _compare_items(
                [_data(data) for n, data in old if n == name],
                [_data(data) for n, data in new if n == name],
                functools.partial("response.event[{}][{}]".format, name),
                found,
            )
    return out + _once(found)
