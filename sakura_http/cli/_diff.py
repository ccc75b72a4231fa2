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
events one field per line); binary bodies their sizes and SHA-256.  `timings_ms` and
`recorded_at` are not compared: arrival times and the day of recording differ from one
recording to the next and say nothing about the content.  The
comparison does no I/O; the end of the module is the `diff` subcommand itself (its parser and
handler, `add_diff_command`): it reads the cassettes, from disk or from git (`_git.py`), pairs
the cassettes of two folders or revisions by their path, and prints the result.
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
from collections import Counter, deque
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from difflib import SequenceMatcher
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from .._exceptions import CassetteFormatError
from .._format import CassetteContent, Exchange, Headers, parse_cassette
from .._matching import DEFAULT_IGNORE_HEADERS, Matcher, normalized_body, pretty_body
from .._policy import CREDENTIAL_HEADERS, shown_header_value, shown_value
from ._git import (
    BlobReader,
    GitError,
    blob_ids,
    files_at_revision,
    kind_at_revision,
    show_at_revision,
)
from ._lint import not_a_cassette
from ._show import human_size, load_named, status_text, url_shown
from ._usage import (
    CASSETTE_GLOB,
    EXIT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    PROG,
    AddCommand,
    UsageError,
    cassettes_below,
    dump_json,
    err,
    out,
)

__all__ = [
    "CassetteDiff",
    "Change",
    "ChangedExchange",
    "ExchangeRef",
    "add_diff_command",
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


# --- the command -----------------------------------------------------------------------------


def _describe(ref: ExchangeRef) -> str:
    ex = ref.exchange
    ident = f" id={ex.id}" if ex.id is not None else ""
    outcome = status_text(ex) if ex.error is None else f"error {ex.error.type}"
    return f"#{ref.index + 1}{ident} {ex.method} {url_shown(ex.url)} -> {outcome}"


def _values(values: list[str] | None) -> str:
    if values is None:
        return "(absent)"
    return ", ".join(shown_value(v) for v in values)


def _change_lines(change: Change) -> list[str]:
    label = {"headers": "request header", "response_headers": "response header"}.get(change.field)
    if label is not None:
        return [f"{label} {change.name}: {_values(change.old)} -> {_values(change.new)}"]
    if change.diff:
        head = f"{change.field}: {human_size(change.old)} -> {human_size(change.new)}"
        return [head, *(f"    {line}" for line in change.diff)]
    if change.field == "url":  # a URL is printed whole (`_diff` hid its secret query values)
        return [f"url: {change.old} -> {change.new}"]
    name = f" {change.name}" if change.name is not None else ""
    return [f"{change.field}{name}: {shown_value(change.old)} -> {shown_value(change.new)}"]


def _render_diff(result: CassetteDiff, verbose: bool) -> None:
    for ref in result.removed:
        out(f"removed {_describe(ref)}")
    for ref in result.added:
        out(f"added   {_describe(ref)}")
    for changed in result.changed:
        notes = []
        if changed.old.index != changed.new.index:
            notes.append(f"was #{changed.old.index + 1}")
        if changed.pairing == "method and url":
            notes.append("the request changed")
        out(f"changed {_describe(changed.new)}{''.join(f' ({note})' for note in notes)}")
        for change in changed.changes:
            for line in _change_lines(change):
                out(f"    {line}")
    if verbose:
        for _, new in result.unchanged:
            out(f"same    {_describe(new)}")
    counts = (
        f"{len(result.added)} added, {len(result.removed)} removed, "
        f"{len(result.changed)} changed, {len(result.unchanged)} unchanged"
    )
    out(counts if result else f"no differences ({counts})")


# A comparison of several cassettes (`diff A B` of two folders, `diff REV -- PATH...`): each
# cassette has a name as printed and up to two sides, read only when they may differ.


@dataclass(frozen=True)
class _Side:
    """One side of a cassette compared: `label` names it in messages, `read` gives its bytes,
    `blob` is git's id of them when it is known without reading them."""

    label: str
    read: Callable[[], bytes]
    blob: str | None = None


@dataclass(frozen=True)
class _Compared:
    """A cassette compared: `old` or `new` is None when only the other side has it."""

    name: str
    old: _Side | None
    new: _Side | None


def _parse(data: bytes, label: str) -> CassetteContent:
    try:
        return parse_cassette(data, label)
    except CassetteFormatError as exc:
        other = not_a_cassette(data, label)
        raise UsageError(str(exc) if other is None else f"{label}: {other}") from None


def _disk_side(path: Path) -> _Side:
    def read() -> bytes:
        try:
            return path.read_bytes()
        except OSError as exc:
            raise UsageError(f"{path}: cannot read it ({exc.strerror or exc})") from None

    return _Side(str(path), read)


def _git_side(
    revision: str, path: Path, blob: str | None = None, reader: BlobReader | None = None
) -> _Side:
    def read() -> bytes:
        try:
            if reader is not None and blob is not None:
                data: bytes | None = reader.read(blob)
            else:
                data = show_at_revision(revision, path)
        except GitError as exc:
            raise UsageError(str(exc)) from None
        return data or b""

    return _Side(f"{revision}:{path}", read, blob)


def _folder_files(folder: Path) -> dict[str, Path]:
    """The cassettes of `folder` (`cassettes_below`), by their path below it."""
    return {path.relative_to(folder).as_posix(): path for path in cassettes_below(folder)}


def _git_kind(revision: str, path: Path) -> str | None:
    try:
        return kind_at_revision(revision, path)
    except GitError as exc:
        raise UsageError(str(exc)) from None


def _disk_kind(path: Path) -> str | None:
    return "directory" if path.is_dir() else "file" if path.exists() else None


def _git_compared(revisions: list[str], paths: list[str], reader: BlobReader) -> list[_Compared]:
    """The cassettes named by `paths` (files or folders) at `revisions[0]` and on disk, or at
    `revisions[1]`."""
    old_rev = revisions[0]
    new_rev = revisions[1] if len(revisions) == 2 else None
    where = "on disk" if new_rev is None else f"at {new_rev}"
    compared: dict[str, _Compared] = {}
    for name in paths:
        path = Path(name)
        old_kind = _git_kind(old_rev, path)
        new_kind = _disk_kind(path) if new_rev is None else _git_kind(new_rev, path)
        if old_kind is None and new_kind is None:
            raise UsageError(f"{path}: no such file or directory, at {old_rev} or {where}")
        if "directory" not in (old_kind, new_kind):
            new_side = _disk_side(path) if new_rev is None else _git_side(new_rev, path)
            compared[str(path)] = _Compared(
                str(path),
                _git_side(old_rev, path) if old_kind else None,
                new_side if new_kind else None,
            )
            continue
        if None not in (old_kind, new_kind) and old_kind != new_kind:
            raise UsageError(
                f"{path} is a {old_kind} at {old_rev} and a {new_kind} {where}: name the "
                "cassettes to compare"
            )
        try:
            old_files = files_at_revision(old_rev, path) if old_kind else {}
            if new_rev is not None:
                new_blobs = files_at_revision(new_rev, path) if new_kind else {}
                new_files = {
                    rel: _git_side(new_rev, path / rel, blob, reader)
                    for rel, blob in new_blobs.items()
                    if fnmatch(rel, CASSETTE_GLOB)
                }
            else:
                on_disk = _folder_files(path) if new_kind else {}
                blobs = blob_ids(list(on_disk.values()))
                new_files = {
                    rel: replace(_disk_side(file), blob=blob)
                    for (rel, file), blob in zip(on_disk.items(), blobs, strict=True)
                }
        except GitError as exc:
            raise UsageError(str(exc)) from None
        old_sides = {
            rel: _git_side(old_rev, path / rel, blob, reader)
            for rel, blob in old_files.items()
            if fnmatch(rel, CASSETTE_GLOB)
        }
        for rel in sorted(old_sides.keys() | new_files.keys()):
            shown = (path / rel).as_posix()
            compared[shown] = _Compared(shown, old_sides.get(rel), new_files.get(rel))
    return list(compared.values())


def _folders_compared(old: Path, new: Path) -> list[_Compared]:
    """The cassettes of two folders, paired by their path below each."""
    mine, theirs = _folder_files(old), _folder_files(new)
    return [
        _Compared(
            rel,
            _disk_side(mine[rel]) if rel in mine else None,
            _disk_side(theirs[rel]) if rel in theirs else None,
        )
        for rel in sorted(mine.keys() | theirs.keys())
    ]


def _content(side: _Side | None, data: bytes | None) -> CassetteContent:
    """The cassette read from `side` (`data`); an empty one when the side has none."""
    return _parse(data or b"", "" if side is None else side.label)


def _diff_many(args: argparse.Namespace, compared: list[_Compared], ignore: frozenset[str]) -> int:
    """Diff each cassette of `compared`: the ones that differ are shown (all of them with
    --verbose), each under a `=== NAME` line, then the counts of cassettes."""
    counts = Counter[str]()
    shown: list[dict[str, Any]] = []
    unreadable: list[dict[str, str]] = []
    for item in compared:
        old, new = item.old, item.new
        blob = None if old is None or new is None or old.blob != new.blob else old.blob
        if blob is not None and not args.verbose:  # git's ids say they are equal: none is read
            counts["unchanged"] += 1
            continue
        try:
            old_data = None if old is None else old.read()
            new_data = None if new is None else new.read()
            if old_data == new_data and not args.verbose:
                counts["unchanged"] += 1
                continue
            result = diff_cassettes(_content(old, old_data), _content(new, new_data), ignore)
        except UsageError as exc:
            unreadable.append({"path": item.name, "reason": str(exc)})
            continue
        status = (
            "added" if old is None else "removed" if new is None
            else "changed" if result else "unchanged"
        )  # fmt: skip
        counts[status] += 1
        if status == "unchanged" and not args.verbose:
            continue
        if args.json:
            shown.append({"path": item.name, "status": status, **result.as_dict(args.verbose)})
            continue
        out(f"=== {item.name}" + ("" if status in ("changed", "unchanged") else f" ({status})"))
        _render_diff(result, args.verbose)
    summary = {key: counts[key] for key in ("added", "removed", "changed", "unchanged")}
    if args.json:
        dump_json({"cassettes": shown, "summary": summary, "unreadable": unreadable})
    else:
        line = "cassettes: " + ", ".join(f"{n} {key}" for key, n in summary.items())
        differ = summary["added"] or summary["removed"] or summary["changed"]
        out(line if differ else f"no differences ({line})")
    for problem in unreadable:
        err(f"{PROG} diff: error: {problem['reason']}")
    if unreadable:
        return EXIT_USAGE
    return EXIT_FOUND if summary["added"] or summary["removed"] or summary["changed"] else EXIT_OK


def _diff(args: argparse.Namespace) -> int:
    ignore = frozenset(name.lower() for name in args.ignore_header)
    paths: list[str] | None = args.git_paths
    if args.git is not None:  # diff --git REV PATH...
        paths, revisions = [args.old, *([args.new] if args.new is not None else [])], [args.git]
    elif paths is not None:  # diff REV [REV2] -- PATH...
        revisions = [args.old] if args.new is None else [args.old, args.new]
    else:
        if args.new is None:
            raise UsageError(
                "name two cassettes or directories (diff OLD NEW), or a git revision and "
                "cassettes or directories (diff HEAD -- PATH...); see `sakura-http diff --help`"
            )
        old, new = Path(args.old), Path(args.new)
        if not old.exists() and new.exists():
            raise UsageError(
                f"{old}: no such file or directory; to compare {new} with the git revision "
                f"{old}, run `sakura-http diff {old} -- {new}`"
            )
        if old.is_dir() and new.is_dir():
            return _diff_many(args, _folders_compared(old, new), ignore)
        for one, other in ((old, new), (new, old)):
            if one.is_dir() and other.exists():
                raise UsageError(
                    f"{one} is a directory and {other} a file: name two directories (their "
                    f"{CASSETTE_GLOB} files are paired by their path below each) or two cassettes"
                )
        return _diff_one(args, load_named(old), load_named(new), ignore)
    if not paths:
        raise UsageError(
            "name the cassettes or directories to compare after `--`: diff REV -- PATH"
        )
    with BlobReader() as reader:
        compared = _git_compared(revisions, paths, reader)
        if len(paths) == 1 and [item.name for item in compared] == [str(Path(paths[0]))]:
            (only,) = compared  # one cassette, named as such: the diff of one file
            return _diff_one(
                args,
                _content(only.old, None if only.old is None else only.old.read()),
                _content(only.new, None if only.new is None else only.new.read()),
                ignore,
            )
        return _diff_many(args, compared, ignore)


def _diff_one(
    args: argparse.Namespace, old: CassetteContent, new: CassetteContent, ignore: frozenset[str]
) -> int:
    result = diff_cassettes(old, new, ignore)
    if args.json:
        dump_json(result.as_dict(verbose=args.verbose))
    else:
        _render_diff(result, args.verbose)
    return EXIT_FOUND if result else EXIT_OK


def add_diff_command(command: AddCommand) -> None:
    """Register `diff` through the CLI's registrar.  `main` hands the paths after `--` (git's
    form, `diff REV [REV2] -- PATH...`) in as `git_paths`."""
    diff = command(
        "diff",
        _diff,
        "Compare two cassettes or directories of cassettes, or cassettes with a git "
        "revision; exit 1 when they differ.",
        "Exchanges pair by id, else by match key and ordinal, then by method and URL, and "
        "show what changed, bodies as unified diffs. Two directories pair their *.jsonl "
        "files by their path below each. OLD may be a git revision: `diff HEAD -- PATH...` "
        "or `diff --git HEAD PATH...` compares each cassette or directory PATH with its "
        "committed version, `diff REV1 REV2 -- PATH...` two revisions; only the cassettes "
        "that differ are shown.",
    )
    diff.add_argument("old", metavar="OLD")
    diff.add_argument("new", metavar="NEW", nargs="?")
    diff.add_argument(
        "--git",
        metavar="REV",
        help="compare the cassettes or directories OLD (and NEW) with their version at REV",
    )
    diff.add_argument(
        "--ignore-header",
        metavar="NAME",
        action="append",
        default=[],
        help="do not report changes of this request or response header (repeatable), "
        "e.g. --ignore-header date",
    )
    diff.add_argument("--json", action="store_true", help="print the diff as JSON")
    diff.add_argument(
        "--verbose", action="store_true", help="also list unchanged exchanges and cassettes"
    )
    diff.set_defaults(git_paths=None)
