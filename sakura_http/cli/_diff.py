"""A structural diff of two cassettes: the logic behind `sakura-http diff`.

Exchanges are paired by identity: their `id` where they have one, otherwise their match key
(the same key replay uses, see `_matching.py`) together with an ordinal, so the second
identical request of OLD pairs with the second of NEW.  What is left is then paired by method
and URL, in order: an exchange whose request changed in a matched part (an LLM prompt edited
by one word) is one *changed* exchange whose request body differs, not a removal and an
addition.  `pairing` on the result says which rule paired it.

For a paired exchange every recorded part is compared: method, URL, each request header (but
those the caller ignores, such as `date`), the request body, status, each response header, the
response body, the recorded error, chunk boundaries, the truncated mark and unknown extra
fields.  Text bodies get a unified diff (JSON pretty-printed with sorted keys, server-sent
events one field per line); binary bodies their sizes and SHA-256.  `timings_ms` is not
compared: arrival times differ on every recording and say nothing about the content.  This
module does no I/O.
"""

from __future__ import annotations

import bisect
import hashlib
from collections import Counter, deque
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Any

from .._format import CassetteContent, Exchange, Headers
from .._matching import DEFAULT_IGNORE_HEADERS, Matcher, normalized_body, pretty_body
from .._policy import CREDENTIAL_HEADERS, shown_header_value
from ._show import url_shown

__all__ = [
    "CassetteDiff",
    "Change",
    "ChangedExchange",
    "ExchangeRef",
    "diff_cassettes",
    "diff_exchanges",
    "unified_diff",
]

#: How replay matches by default: pairing by match key mirrors what replay would find.
_MATCHER = Matcher(ignore=DEFAULT_IGNORE_HEADERS, secret=CREDENTIAL_HEADERS)

_BODY_DIFF_LINES = 400


@dataclass(frozen=True, slots=True)
class ExchangeRef:
    """An exchange and where it is: `index` is 0-based, `line` its line in the file."""

    index: int
    line: int | None
    exchange: Exchange

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready summary: index (1-based, as printed), line, id, method, url, status."""
        ex = self.exchange
        return {
            "index": self.index + 1,
            "line": self.line,
            "id": ex.id,
            "method": ex.method,
            "url": url_shown(ex.url),
            "status": ex.status,
            "error": None if ex.error is None else ex.error.type,
        }


@dataclass(frozen=True, slots=True)
class Change:
    """One part that differs between a paired old and new exchange.

    `field` is an exchange field name (`status`, `response_headers`, `response_body`, ...);
    `name` the header or extra key for per-name fields; `old`/`new` the two values (None when
    absent; for bodies, their sizes in bytes); `diff` a short unified diff for bodies.
    """

    field: str
    old: Any
    new: Any
    name: str | None = None
    diff: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; `name` and `diff` appear only when set."""
        out: dict[str, Any] = {"field": self.field}
        if self.name is not None:
            out["name"] = self.name
        out["old"] = self.old
        out["new"] = self.new
        if self.diff:
            out["diff"] = list(self.diff)
        return out


@dataclass(frozen=True, slots=True)
class ChangedExchange:
    """A paired exchange whose recorded parts differ.

    `pairing` is "id", "match key" (the request is the same as far as replay is concerned) or
    "method and url" (the request changed, so replay would not find the old recording).
    """

    old: ExchangeRef
    new: ExchangeRef
    changes: tuple[Change, ...]
    pairing: str = "match key"

    def as_dict(self) -> dict[str, Any]:
        return {
            "old": self.old.as_dict(),
            "new": self.new.as_dict(),
            "pairing": self.pairing,
            "changes": [change.as_dict() for change in self.changes],
        }


@dataclass(slots=True)
class CassetteDiff:
    """The result of `diff_cassettes`; false when the cassettes are equal."""

    added: list[ExchangeRef] = field(default_factory=list)
    removed: list[ExchangeRef] = field(default_factory=list)
    changed: list[ChangedExchange] = field(default_factory=list)
    unchanged: list[tuple[ExchangeRef, ExchangeRef]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)

    def as_dict(self, verbose: bool = False) -> dict[str, Any]:
        """`{"added": [...], "removed": [...], "changed": [...]}`, plus `"unchanged"` (pairs of
        old and new summaries) when `verbose`."""
        out: dict[str, Any] = {
            "added": [ref.as_dict() for ref in self.added],
            "removed": [ref.as_dict() for ref in self.removed],
            "changed": [changed.as_dict() for changed in self.changed],
        }
        if verbose:
            out["unchanged"] = [
                {"old": old.as_dict(), "new": new.as_dict()} for old, new in self.unchanged
            ]
        return out


def _identities(exchanges: Sequence[Exchange]) -> list[tuple[Hashable, int]]:
    seen: Counter[Hashable] = Counter()
    out: list[tuple[Hashable, int]] = []
    for exchange in exchanges:
        base: Hashable = (
            ("id", exchange.id)
            if exchange.id is not None
            else ("key", _MATCHER.key_of_exchange(exchange))
        )
        out.append((base, seen[base]))
        seen[base] += 1
    return out


def _by_name(headers: Headers) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, value in headers:
        out.setdefault(name, []).append(value)
    return out


def _header_changes(
    field_name: str, old: Headers, new: Headers, ignore: frozenset[str]
) -> list[Change]:
    mine, theirs = _by_name(old), _by_name(new)
    return [
        Change(
            field_name, _hidden(name, mine.get(name)), _hidden(name, theirs.get(name)), name=name
        )
        for name in sorted(mine.keys() | theirs.keys())
        if mine.get(name) != theirs.get(name) and name not in ignore
    ]


def _hidden(name: str, values: list[str] | None) -> list[str] | None:
    # A credential's value (a request credential, a cookie the server set) is never printed,
    # only its size (`shown_header_value`).
    return None if values is None else [shown_header_value(name, v) for v in values]


def _is_text(body: bytes) -> bool:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()[:12]


# --- the line diff ------------------------------------------------------------------------------
#
# difflib's SequenceMatcher looks for the longest matching run in the whole of what is left
# at every step: on a pretty-printed JSON body of many similar records (values that repeat
# thousands of times, but under its 1% "popular" cut-off) that is quadratic, and two 3.9 MB
# cassettes took two minutes.  Large inputs are diffed by anchors instead, as
# `git diff --patience` and `--histogram` do: the common head and tail are matched first;
# then lines that occur as often on each side, the rarest such (a line that occurs once on
# each side where there is one), are paired in order and the longest run of pairs in the same
# order on both sides (a longest increasing subsequence) anchors the diff; the gaps between
# anchors are diffed the same way.  Each step is linear in what it looks at (n log n for the
# subsequence), and the steps together look at each line a few times in the usual case; a
# budget of looks stops anchoring past 32 a line, whatever the input.  A gap with nothing to
# anchor on is left to difflib when it is small, and shown as removed and added lines
# otherwise.  Inputs of up to _SMALL lines keep difflib's own diff, as they always had it.

_SMALL = 2_000  # lines a side: difflib's diff, exactly
_SMALL_GAP = 64  # lines on both sides of a gap together: difflib refines it
_LOOKS_PER_LINE = 32
_CONTEXT = 1


def _anchors(
    a: Sequence[str], alo: int, ahi: int, b: Sequence[str], blo: int, bhi: int
) -> list[tuple[int, int]]:
    """Lines of a[alo:ahi] paired with equal lines of b[blo:bhi] to anchor the diff, as (i, j),
    in order on both sides.

    The lines taken are those that occur as often on each side, and of them the rarest: lines
    that occur once (the patience diff's) where there are any.  The k-th occurrence in `a` is
    paired with the k-th in `b`, and of the pairs the longest run in the same order on both
    sides is kept.
    """
    in_a = Counter(a[alo:ahi])
    in_b = Counter(b[blo:bhi])
    counts = [n for line, n in in_a.items() if in_b[line] == n]
    if not counts:
        return []
    rarest = min(counts)
    chosen = {line for line, n in in_a.items() if n == rarest and in_b[line] == n}
    where_b: dict[str, list[int]] = {}
    for j in range(blo, bhi):
        if b[j] in chosen:
            where_b.setdefault(b[j], []).append(j)
    seen: Counter[str] = Counter()
    pairs: list[tuple[int, int]] = []
    for i in range(alo, ahi):
        line = a[i]
        if line in chosen:
            pairs.append((i, where_b[line][seen[line]]))
            seen[line] += 1
    # Longest increasing subsequence of the j's (patience sorting): tails[k] is the index in
    # `pairs` of the smallest last j of an increasing run of length k + 1.
    tails: list[int] = []
    tail_js: list[int] = []
    before: list[int] = []
    for index, (_, j) in enumerate(pairs):
        k = bisect.bisect_left(tail_js, j)
        before.append(tails[k - 1] if k else -1)
        if k == len(tails):
            tails.append(index)
            tail_js.append(j)
        else:
            tails[k] = index
            tail_js[k] = j
    run: list[tuple[int, int]] = []
    index = tails[-1] if tails else -1
    while index >= 0:
        run.append(pairs[index])
        index = before[index]
    return run[::-1]


def _matching_blocks(a: Sequence[str], b: Sequence[str]) -> list[tuple[int, int, int]]:
    """The runs of equal lines (i, j, size) shared by `a` and `b` in order, ending with the
    sentinel (len(a), len(b), 0), as `difflib.SequenceMatcher.get_matching_blocks` gives."""
    if len(a) <= _SMALL and len(b) <= _SMALL:
        return [(m.a, m.b, m.size) for m in SequenceMatcher(None, a, b).get_matching_blocks()]
    blocks: list[tuple[int, int, int]] = []
    todo = [(0, len(a), 0, len(b))]
    looks = _LOOKS_PER_LINE * (len(a) + len(b))
    while todo:
        alo, ahi, blo, bhi = todo.pop()
        head = 0
        while alo + head < ahi and blo + head < bhi and a[alo + head] == b[blo + head]:
            head += 1
        if head:
            blocks.append((alo, blo, head))
            alo, blo = alo + head, blo + head
        tail = 0
        while alo < ahi - tail and blo < bhi - tail and a[ahi - tail - 1] == b[bhi - tail - 1]:
            tail += 1
        if tail:
            ahi, bhi = ahi - tail, bhi - tail
            blocks.append((ahi, bhi, tail))
        if alo == ahi or blo == bhi:
            continue
        looks -= (ahi - alo) + (bhi - blo)
        anchors = _anchors(a, alo, ahi, b, blo, bhi) if looks > 0 else []
        if not anchors:
            if (ahi - alo) + (bhi - blo) <= _SMALL_GAP:
                matcher = SequenceMatcher(None, a[alo:ahi], b[blo:bhi], autojunk=False)
                blocks += [(alo + i, blo + j, n) for i, j, n in matcher.get_matching_blocks() if n]
            continue
        for i, j in anchors:
            blocks.append((i, j, 1))
            todo.append((alo, i, blo, j))
            alo, blo = i + 1, j + 1
        todo.append((alo, ahi, blo, bhi))
    blocks.sort()
    merged: list[tuple[int, int, int]] = []
    for i, j, n in blocks:
        if merged and merged[-1][0] + merged[-1][2] == i and merged[-1][1] + merged[-1][2] == j:
            merged[-1] = (merged[-1][0], merged[-1][1], merged[-1][2] + n)
        else:
            merged.append((i, j, n))
    return [*merged, (len(a), len(b), 0)]


def _opcodes(a: Sequence[str], b: Sequence[str]) -> list[tuple[str, int, int, int, int]]:
    """`SequenceMatcher.get_opcodes()` for `_matching_blocks`."""
    codes: list[tuple[str, int, int, int, int]] = []
    i = j = 0
    for ai, bj, size in _matching_blocks(a, b):
        tag = "replace" if i < ai and j < bj else "delete" if i < ai else "insert" if j < bj else ""
        if tag:
            codes.append((tag, i, ai, j, bj))
        if size:
            codes.append(("equal", ai, ai + size, bj, bj + size))
        i, j = ai + size, bj + size
    return codes


def _hunks(
    codes: list[tuple[str, int, int, int, int]], n: int
) -> Iterator[list[tuple[str, int, int, int, int]]]:
    """`SequenceMatcher.get_grouped_opcodes(n)`: the changes with `n` lines of context, one
    list per hunk."""
    if not codes:
        return
    tag, i1, i2, j1, j2 = codes[0]
    if tag == "equal":
        codes[0] = (tag, max(i1, i2 - n), i2, max(j1, j2 - n), j2)
    tag, i1, i2, j1, j2 = codes[-1]
    if tag == "equal":
        codes[-1] = (tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n))
    group: list[tuple[str, int, int, int, int]] = []
    for tag, i1, i2, j1, j2 in codes:
        if tag == "equal" and i2 - i1 > 2 * n:
            group.append((tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n)))
            yield group
            group = []
            i1, j1 = max(i1, i2 - n), max(j1, j2 - n)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        yield group


def _range(start: int, stop: int) -> str:
    length = stop - start
    if length == 1:
        return str(start + 1)
    return f"{start if not length else start + 1},{length}"


def unified_diff(old: Sequence[str], new: Sequence[str]) -> list[str]:
    """The lines of a unified diff (`--- old`, `+++ new`, one line of context) of two lists of
    lines; empty when they are equal.  The same as `difflib.unified_diff(old, new, "old",
    "new", n=1, lineterm="")` for inputs of up to 2,000 lines; near-linear time for larger
    ones (see the comment above)."""
    out: list[str] = []
    for group in _hunks(_opcodes(old, new), _CONTEXT):
        if not out:
            out += ["--- old", "+++ new"]
        first, last = group[0], group[-1]
        out.append(f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out += [" " + line for line in old[i1:i2]]
                continue
            out += ["-" + line for line in old[i1:i2]]
            out += ["+" + line for line in new[j1:j2]]
    return out


def _body_diff(old_headers: Headers, old: bytes, new_headers: Headers, new: bytes) -> list[str]:
    lines = unified_diff(pretty_body(old_headers, old), pretty_body(new_headers, new))
    if len(lines) > _BODY_DIFF_LINES:
        lines = [
            *lines[:_BODY_DIFF_LINES],
            f"... ({len(lines) - _BODY_DIFF_LINES} more diff lines)",
        ]
    return lines


def _body_change(
    field_name: str, old_headers: Headers, old: bytes, new_headers: Headers, new: bytes
) -> Change | None:
    if old == new:
        return None
    if normalized_body(old_headers, old) == normalized_body(new_headers, new):
        lines: list[str] = ["same JSON value: only key order or whitespace differs"]
    elif _is_text(old) and _is_text(new):
        lines = _body_diff(old_headers, old, new_headers, new)
    else:
        lines = [
            f"binary body: {len(old):,} -> {len(new):,} bytes "
            f"(sha256 {_digest(old)} -> {_digest(new)})"
        ]
    return Change(field_name, len(old), len(new), diff=tuple(lines))


def diff_exchanges(
    old: Exchange, new: Exchange, ignore_headers: frozenset[str] = frozenset()
) -> list[Change]:
    """Every recorded part that differs between two exchanges (empty when they are equal,
    `timings_ms` and the lower-case header names in `ignore_headers` aside)."""
    changes: list[Change] = []
    if old.method != new.method:
        changes.append(Change("method", old.method, new.method))
    if old.url != new.url:  # a secret query value is never printed, only its size
        changes.append(Change("url", url_shown(old.url), url_shown(new.url)))
    changes += _header_changes("headers", old.headers, new.headers, ignore_headers)
    body = _body_change("body", old.headers, old.body, new.headers, new.body)
    if body is not None:
        changes.append(body)
    if old.status != new.status:
        changes.append(Change("status", old.status, new.status))
    changes += _header_changes(
        "response_headers", old.response_headers, new.response_headers, ignore_headers
    )
    body = _body_change(
        "response_body",
        old.response_headers,
        old.response_body,
        new.response_headers,
        new.response_body,
    )
    if body is not None:
        changes.append(body)
    if old.error != new.error:
        changes.append(
            Change(
                "error",
                None
                if old.error is None
                else {"type": old.error.type, "message": old.error.message},
                None
                if new.error is None
                else {"type": new.error.type, "message": new.error.message},
            )
        )
    if old.chunks != new.chunks:
        changes.append(
            Change(
                "chunks",
                None if old.chunks is None else list(old.chunks),
                None if new.chunks is None else list(new.chunks),
            )
        )
    if old.truncated != new.truncated:
        changes.append(Change("truncated", old.truncated, new.truncated))
    for key in sorted(old.extra.keys() | new.extra.keys()):
        if old.extra.get(key) != new.extra.get(key):
            changes.append(Change("extra", old.extra.get(key), new.extra.get(key), name=key))
    return changes


def _refs(content: CassetteContent) -> list[ExchangeRef]:
    lines: Sequence[int | None] = content.line_numbers or [None] * len(content.exchanges)
    return [ExchangeRef(i, lines[i], ex) for i, ex in enumerate(content.exchanges)]


def diff_cassettes(
    old: CassetteContent, new: CassetteContent, ignore_headers: frozenset[str] = frozenset()
) -> CassetteDiff:
    """Pair the exchanges of `old` and `new` and sort them into added, removed, changed and
    unchanged.  Two empty cassettes are equal; the header lines are not compared.  Differences
    in the (lower-case) headers named in `ignore_headers` are not reported.

    Added and changed follow NEW's order, removed follows OLD's.
    """
    old_refs, new_refs = _refs(old), _refs(new)
    old_by_identity = dict(zip(_identities(old.exchanges), old_refs, strict=True))
    result = CassetteDiff()
    pairs: list[tuple[ExchangeRef, ExchangeRef, str]] = []
    unpaired: list[ExchangeRef] = []
    for identity, new_ref in zip(_identities(new.exchanges), new_refs, strict=True):
        old_ref = old_by_identity.pop(identity, None)
        if old_ref is None:
            unpaired.append(new_ref)
        else:
            pairs.append((old_ref, new_ref, "match key" if new_ref.exchange.id is None else "id"))
    # What is left: the same method and URL, in order, is the same call with a changed request.
    left: dict[tuple[str, str], deque[ExchangeRef]] = {}
    for ref in sorted(old_by_identity.values(), key=lambda ref: ref.index):
        left.setdefault((ref.exchange.method.upper(), ref.exchange.url), deque()).append(ref)
    for new_ref in unpaired:
        candidates = left.get((new_ref.exchange.method.upper(), new_ref.exchange.url))
        if candidates:
            pairs.append((candidates.popleft(), new_ref, "method and url"))
        else:
            result.added.append(new_ref)
    for old_ref, new_ref, pairing in sorted(pairs, key=lambda pair: pair[1].index):
        changes = diff_exchanges(old_ref.exchange, new_ref.exchange, ignore_headers)
        if changes:
            result.changed.append(ChangedExchange(old_ref, new_ref, tuple(changes), pairing))
        else:
            result.unchanged.append((old_ref, new_ref))
    result.removed = sorted((ref for refs in left.values() for ref in refs), key=lambda r: r.index)
    return result
