"""`partial_start`: where the end of a body cut short could be the beginning of a match."""

from __future__ import annotations

import os
import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sakura_http import EMAIL_PATTERN
from sakura_http._partial_match import partial_start

LONG = os.environ.get("SAKURA_HTTP_LONG_TESTS") == "1"  # the long attack runs (opt-in)

PATTERNS = [
    rb"sk-[A-Za-z0-9]{20,}",
    rb"tok_[a-f0-9]{24}",
    EMAIL_PATTERN.encode(),
    rb"(?i)bearer\s+[\w.-]{8,}",
    rb"\d{3}-\d{2}-\d{4}",
    rb"secret\[[^\]\n]*\]",
    rb"(?:foo|ba[rz])+baz\d+",
    rb"x{2,3}y?z",
    rb"(a|bc)*d",
    rb"(?P<q>['\"])key=\w+(?P=q)",
    rb"(?s)BEGIN.*?END",
    rb"\bid-(?!0)\d{4,}\b",
    rb"[^\W\d]{3}\d{70,}",  # a repeat longer than is unrolled
    rb"(?x) ab  # comment\n c",
]


@pytest.mark.parametrize(
    ("pattern", "body", "start"),
    [
        (rb"sk-[A-Za-z0-9]{20,}", b"key sk-abcDEF1", 4),
        (rb"sk-[A-Za-z0-9]{20,}", b"key s", 4),
        (rb"sk-[A-Za-z0-9]{20,}", b"key sx", None),
        (rb"sk-[A-Za-z0-9]{20,}", b"", None),
        (EMAIL_PATTERN.encode(), b"hello bob@exa", 6),
        (rb"(?i)bearer\s+\S+", b"x BEAR", 2),
        (rb"secret\[[^\]]*\]", b"a secret[abc\n\ndef", 2),
        (rb"secret\[[^\]]*\]", b"a secret[abc]", 2),  # complete (scrubbed before this is asked)
        (rb"x{2,3}y", b"qxxx", 1),
        (rb"x{2,3}y", b"qxxxx", 2),
        (rb"abc", b"zzab", 2),
        (rb"abc", b"zzabc", 2),  # a match may be complete already
        (rb"a(?=b)", b"xa", 1),  # the lookahead may still see b
        (rb"(a)\1x", b"zaq", None),  # the backreference cannot match q
    ],
)
def test_partial_start(pattern: bytes, body: bytes, start: int | None) -> None:
    assert partial_start(re.compile(pattern), body) == start


@settings(max_examples=5000 if LONG else 300, deadline=None)
@given(data=st.data())
def test_property_a_match_cut_anywhere_is_found(data: st.DataObject) -> None:
    pattern = re.compile(data.draw(st.sampled_from(PATTERNS)))
    match = data.draw(st.from_regex(pattern, fullmatch=True))
    before = data.draw(st.binary(max_size=12))
    cut = data.draw(st.integers(1, max(1, len(match))))
    body = before + match[:cut]
    whole = pattern.match(before + match, len(before))
    # Only a value the scrub would have found, whole, in its context (a word boundary or a
    # lookbehind may refuse it after `before`) must be cut when it arrives in part.
    assume(match and whole is not None and whole.end() == len(before) + len(match))
    start = partial_start(pattern, body)
    assert start is not None and start <= len(before), (pattern, body)
