"""Where a body cut short could hold the beginning of a regular expression's match.

A stream the caller closed early (`stream_through`) ends where it ends: a value a `Scrub.regex`
covers may have arrived in part, too short for the pattern to match, so no search finds it.
`partial_start` answers the earliest position from which the rest of the body is the beginning
of some match, so that what follows it is not written.

The pattern is read by the parser of Python's own `re` (its private `re._parser`: this module
is the only one that touches it) and turned into a nondeterministic automaton, which is run
backwards from the end of the body for as long as some state can still read what follows:
each character is looked at once per set of live states, and the walk stops at the first
character no state can take.  Where the automaton cannot follow `re` exactly it accepts more
than `re` would, so the answer errs on the side of cutting more: assertions (``\\b``, ``^``,
lookarounds) are taken as true, a backreference as any text, and a repeat of more than
`_UNROLLED` as any number of repeats.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

if sys.version_info >= (3, 11):
    from re import _constants as _c
    from re import _parser
else:  # pragma: no cover - the same modules under their 3.10 names
    import sre_constants as _c
    import sre_parse as _parser

import re

__all__ = ["partial_start"]

#: Repeats up to this count are unrolled; a larger count is taken as "any number".
_UNROLLED = 64

_Test = Callable[[int], bool]
_WORD = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_SPACE = frozenset(b" \t\n\r\f\v")
_DIGIT = frozenset(b"0123456789")


def _category(name: str) -> _Test:
    """A character class of a bytes pattern (ASCII), such as ``\\d``, ``\\W``."""
    if "DIGIT" in name:
        members = _DIGIT
    elif "WORD" in name:
        members = _WORD
    elif "SPACE" in name:
        members = _SPACE
    elif "LINEBREAK" in name:
        members = frozenset(b"\n")
    else:  # an unknown class: anything (cutting more, never less)
        return lambda c: True
    if "NOT" in name:
        return lambda c: c not in members
    return lambda c: c in members


def _folded(c: int) -> tuple[int, ...]:
    """`c` and its other case (ASCII, as a bytes pattern's IGNORECASE has it)."""
    if 65 <= c <= 90:
        return (c, c + 32)
    if 97 <= c <= 122:
        return (c, c - 32)
    return (c,)


def _char_test(op: Any, av: Any, ignorecase: bool) -> _Test:
    if op is _c.LITERAL:
        wanted = frozenset(_folded(av)) if ignorecase else frozenset((av,))
        return lambda c: c in wanted
    if op is _c.NOT_LITERAL:
        unwanted = frozenset(_folded(av)) if ignorecase else frozenset((av,))
        return lambda c: c not in unwanted
    assert op is _c.IN
    negated = False
    tests: list[_Test] = []
    for item_op, item in av:
        if item_op is _c.NEGATE:
            negated = True
        elif item_op is _c.LITERAL:
            tests.append(_char_test(_c.LITERAL, item, False))
        elif item_op is _c.RANGE:
            tests.append(_in_range(*item))
        elif item_op is _c.CATEGORY:
            tests.append(_category(str(item)))
        else:  # an item this reader does not know: anything
            tests.append(lambda c: True)

    def member(c: int) -> bool:
        found = any(test(x) for x in (_folded(c) if ignorecase else (c,)) for test in tests)
        return found != negated

    return member


def _in_range(low: int, high: int) -> _Test:
    return lambda c: low <= c <= high


class _Automaton:
    """States are numbers; `moves[s]` the (test, next state) pairs on a character, `empty[s]`
    the states reached without reading one."""

    def __init__(self) -> None:
        self.moves: list[list[tuple[_Test, int]]] = []
        self.empty: list[list[int]] = []

    def state(self) -> int:
        self.moves.append([])
        self.empty.append([])
        return len(self.moves) - 1

    def any_text(self, follow: int) -> int:
        loop = self.state()
        self.moves[loop].append((lambda c: True, loop))
        self.empty[loop].append(follow)
        return loop

    def sequence(self, items: Iterable[tuple[Any, Any]], follow: int, flags: int) -> int:
        """The entry state of `items`, which go on to `follow`."""
        for op, av in reversed(list(items)):
            follow = self.item(op, av, follow, flags)
        return follow

    def item(self, op: Any, av: Any, follow: int, flags: int) -> int:
        ignorecase = bool(flags & re.IGNORECASE)
        if op in (_c.LITERAL, _c.NOT_LITERAL, _c.IN):
            state = self.state()
            self.moves[state].append((_char_test(op, av, ignorecase), follow))
            return state
        if op is _c.ANY:
            state = self.state()
            dotall = bool(flags & re.DOTALL)
            self.moves[state].append(((lambda c: True) if dotall else (lambda c: c != 10), follow))
            return state
        if op in (_c.AT, _c.ASSERT, _c.ASSERT_NOT):
            return follow  # taken as true
        if op is _c.BRANCH:
            state = self.state()
            self.empty[state] = [self.sequence(alt, follow, flags) for alt in av[1]]
            return state
        if op is _c.SUBPATTERN:
            _group, add, remove, items = av
            return self.sequence(items, follow, (flags | add) & ~remove)
        if op is getattr(_c, "ATOMIC_GROUP", None):
            return self.sequence(av, follow, flags)
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", None)):
            return self.repeat(av, follow, flags)
        if op is _c.GROUPREF_EXISTS:
            _group, yes, no = av
            state = self.state()
            self.empty[state] = [self.sequence(yes, follow, flags)]
            self.empty[state].append(self.sequence(no, follow, flags) if no else follow)
            return state
        return self.any_text(follow)  # a backreference, or what this reader does not know

    def repeat(self, av: Any, follow: int, flags: int) -> int:
        low, high, items = av
        if low > _UNROLLED or (high is not _c.MAXREPEAT and high > _UNROLLED):
            low, high = 0, _c.MAXREPEAT  # more than is unrolled: any number
        if high is _c.MAXREPEAT:
            entry = self.state()
            self.empty[entry] = [follow, self.sequence(items, entry, flags)]
        else:
            entry = follow
            for _ in range(high - low):
                optional = self.state()
                self.empty[optional] = [follow, self.sequence(items, entry, flags)]
                entry = optional
        for _ in range(low):
            entry = self.sequence(items, entry, flags)
        return entry


def _automaton(pattern: re.Pattern[bytes]) -> tuple[_Automaton, int]:
    automaton = _Automaton()
    # (typeshed types `parse` for str patterns; it reads bytes patterns alike)
    parsed: Any = _parser.parse(pattern.pattern, pattern.flags)  # type: ignore[arg-type]
    accept = automaton.state()
    return automaton, automaton.sequence(parsed, accept, parsed.state.flags)


def partial_start(pattern: re.Pattern[bytes], body: bytes) -> int | None:
    """The earliest position from which the end of `body` is the beginning of a match of
    `pattern` that reads all of it (None: nowhere).  A match may be complete already there."""
    automaton, start = _automaton(pattern)
    states = range(len(automaton.moves))
    # `into[s]`: the states that reach s on a character, with the test; `back[s]`: the states
    # that reach s without one.
    into: list[list[tuple[int, _Test]]] = [[] for _ in states]
    back: list[list[int]] = [[] for _ in states]
    for state in states:
        for test, target in automaton.moves[state]:
            into[target].append((state, test))
        for target in automaton.empty[state]:
            back[target].append(state)

    def closure(found: set[int]) -> frozenset[int]:
        """`found` and every state that reaches one of them without reading."""
        todo = list(found)
        while todo:
            for earlier in back[todo.pop()]:
                if earlier not in found:
                    found.add(earlier)
                    todo.append(earlier)
        return frozenset(found)

    # `live`: the states from which the rest of the body, from the current position on, can be
    # read (at the end, every state: nothing is left to read).
    live = frozenset(states)
    earliest = None
    steps: dict[tuple[frozenset[int], int], frozenset[int]] = {}
    for position in range(len(body) - 1, -1, -1):
        char = body[position]
        step = steps.get((live, char))
        if step is None:
            step = closure({s for t in live for s, test in into[t] if test(char)})
            steps[live, char] = step
        live = step
        if not live:
            break
        if start in live:
            earliest = position
    return earliest
