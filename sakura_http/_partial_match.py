"""Where a body cut short could hold the beginning of a regular expression's match.

A stream the caller closed early (`stream_through`) ends where it ends: a value a `Scrub.regex`
covers may have arrived in part, too short for the pattern to match, so no search finds it.
`partial_start` answers the earliest position from which the rest of the body is the beginning
of some match, so that what follows it is not written.

Python's `re` cannot tell a text that ends inside a match from one that does not match; the
`regex` library, a superset of `re`'s syntax, can (``partial=True``): the pattern is searched
for anchored at the end of the body, and a partial match is one the body ended inside of.
"""

from __future__ import annotations

import re

import regex

__all__ = ["partial_start"]

# `re`'s flags as `regex` spells them (their values differ for ASCII).
_FLAGS = (
    (re.IGNORECASE, regex.IGNORECASE),
    (re.MULTILINE, regex.MULTILINE),
    (re.DOTALL, regex.DOTALL),
    (re.VERBOSE, regex.VERBOSE),
    (re.LOCALE, regex.LOCALE),
)


def _at_the_end(pattern: re.Pattern[bytes]) -> regex.Pattern[bytes]:
    """`pattern`, anchored at the end of the text, in `regex` (compiled on each call: a body
    is cut short once per closed stream)."""
    flags = 0
    for ours, theirs in _FLAGS:
        if pattern.flags & ours:
            flags |= theirs
    # A verbose pattern may end in a comment, which would swallow what follows on its line.
    end = b"\n)\\Z" if pattern.flags & re.VERBOSE else b")\\Z"
    return regex.compile(b"(?:" + pattern.pattern + end, flags)


def partial_start(pattern: re.Pattern[bytes], body: bytes) -> int | None:
    """The earliest position from which the end of `body` is the beginning of a match of
    `pattern` that reads all of it (None: nowhere).  A match may be complete already there."""
    found = _at_the_end(pattern).search(body, partial=True)
    if found is None or found.start() == len(body):  # any text can begin at its very end
        return None
    return found.start()
