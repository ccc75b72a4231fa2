"""Values written in place of a secret or of personal data: the one list of placeholders.

Before a cassette is committed, other tools and people put something in place of what must not
be shared: vcrpy's and pytest-recording's filters, hand edits, copied docs.  ``REDACTED``,
``FILTERED``, ``scrubbed``, ``<API_KEY>``, ``YOUR_API_KEY``, ``test_api_key``,
``os.environ['X_API_KEY']``, ``${TOKEN}``, ``xxxxxxxx``...  Such a value
holds no secret.  `is_placeholder` is the one test of that: `sakura-http lint` reports no
credential, cookie or personal value that is one, and redaction need not search responses for a
request value that is one (searching for ``REDACTED`` would rewrite ``REDACTED-RAY`` too).

The list errs towards "not a placeholder": a value is one only when all of it is one of these
shapes, or when it holds one of the marker words (`PLACEHOLDER_MARKERS`) that no credential
holds.  The fakes of test suites (``sk-ant-fake-test-000...``) are not placeholders: they have
a credential's shape, and lint is meant to find such shapes.
"""

from __future__ import annotations

import functools
import re

__all__ = ["PLACEHOLDER_MARKERS", "PLACEHOLDER_WORDS", "is_placeholder"]

#: Words that make any value holding them a placeholder (``sk-ant-REDACTED``, ``[FILTERED]``,
#: ``req_<redacted>``), compared in lower case.
PLACEHOLDER_MARKERS = ("redacted", "filtered", "scrubbed", "sanitized", "censored", "placeholder")

#: Values that are placeholders when they are the whole value (in lower case, ``-`` and ``_``
#: aside): what tools and docs write for a secret, and the names of what it stands for.
PLACEHOLDER_WORDS = frozenset(
    {
        "removed",
        "hidden",
        "masked",
        "omitted",
        "secret",
        "dummy",
        "changeme",
        "none",
        "null",
        "nil",
        "undefined",
        "key",
        "apikey",
        "token",
        "accesstoken",
        "authtoken",
        "password",
        "passwd",
        "credential",
        "credentials",
        "bearer",
    }
)

# Whole values, in this order of appearance in the docstring above.
_SHAPES = (
    r"<[^<>]*>",  # <API_KEY>, <redacted>
    r"\[[^\[\]]*\]",  # [hidden]
    r"\{\{[^{}]*\}\}",  # {{ api_key }}
    r"\$\{[^{}]*\}",  # ${TOKEN}
    r"\$[A-Za-z_][A-Za-z0-9_]*",  # $API_KEY
    r"%[A-Za-z_][A-Za-z0-9_]*%",  # %API_KEY%
    # an environment lookup in code: os.environ['X'], os.environ.get("X"), os.getenv(...),
    # process.env.X, ENV["X"] (also cut short at a quote, as a pattern matching up to one sees it)
    r"(?:os\.environ|os\.getenv|process\.env|ENV\[|getenv\().*",
    r"(?:your|my)[_-][A-Za-z0-9_-]*",  # YOUR_API_KEY, your-token-here
    # test_api_key, fake-key, dummy_token, example-secret, mock_openai_api_key
    r"(?:test|fake|dummy|mock|example|sample|demo)[_-]?(?:[a-z]+[_-])?(?:api[_-]?)?"
    r"(?:key|token|secret|password|pass|pwd)",
    r"(.)\1{2,}",  # xxx, ********, 000000
)
# A cookie in a list of them: a name (an HTTP token) and "=" (and a value, maybe none).
_COOKIE = r"\s*[A-Za-z0-9_.!#$%&'*+^`|~-]+=.*"
# An authorization scheme, then the placeholder: "Bearer REDACTED", "Basic <credentials>".
_SCHEME = r"(?:bearer|basic|token|bot|apikey|api-key|digest)\s+"


@functools.cache
def _patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    # Compiled on first use: only lint and redaction of a recording with secrets ask.
    shapes = re.compile("|".join(f"(?:{shape})" for shape in _SHAPES), re.IGNORECASE | re.DOTALL)
    markers = re.compile("|".join(PLACEHOLDER_MARKERS), re.IGNORECASE)
    return shapes, markers


def is_placeholder(value: str) -> bool:
    """Whether `value` stands in for a secret or personal value rather than being one.

    True for a value that holds a marker word anywhere (`PLACEHOLDER_MARKERS`), or that, with
    surrounding quotes and spaces and a leading authorization scheme (``Bearer ``) set aside,
    is wholly one of `PLACEHOLDER_WORDS` or of the shapes in the module docstring.  A list of
    cookies (``a=REDACTED; b=xxx``) is a placeholder when each of its values is.  An empty
    value is not one (it holds nothing to replace).
    """
    shapes, markers = _patterns()
    text = value.strip().strip("\"'`").strip()
    if not text:
        return False
    pairs = [pair for pair in text.split(";") if pair.strip()]
    if all(re.fullmatch(_COOKIE, pair) for pair in pairs):  # each cookie on its own
        return all(is_placeholder(pair.partition("=")[2]) for pair in pairs)
    if markers.search(text):
        return True
    scheme = re.match(_SCHEME, text, re.IGNORECASE)
    if scheme is not None:
        text = text[scheme.end() :]
    if text.lower().replace("-", "").replace("_", "") in PLACEHOLDER_WORDS:
        return True
    return shapes.fullmatch(text) is not None
