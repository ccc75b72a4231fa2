"""How messages quote values read from a cassette or a request (a format error, a miss, `show`,
`diff`, `lint`): the one rule, so that no message prints a credential or a wall of text.

Kept apart from `_policy` so that the format (`_format`), which quotes values in its errors,
imports it without importing the redaction rules, which import the format.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from urllib.parse import unquote_plus

from ._credentials import (
    REDACTED,
    REDACTED_FORMS,
    REDACTED_RESPONSE_HEADERS,
    is_credential_header,
)

__all__ = [
    "SHOWN_CHARS",
    "SHOWN_HEAD",
    "names_a_secret",
    "shown_header_value",
    "shown_url",
    "shown_value",
]

#: A value a message quotes (a format error, a miss, `diff`) is quoted whole up to this many
#: characters; a longer one by its first `SHOWN_HEAD` characters and its length.
SHOWN_CHARS = 40
SHOWN_HEAD = 12
_SHOWN_ITEMS = 6  # items of a list or dict quoted before the rest is only counted
_SHOWN_DEPTH = 3  # levels of nesting quoted before a list or dict is only counted


def names_a_secret(name: str, secret_headers: Collection[str] = ()) -> bool:
    """Whether a header named `name` holds a value no message may print: a credential header
    (`is_credential_header`), a declared secret, or a cookie the server sets
    (`REDACTED_RESPONSE_HEADERS`)."""
    name = name.lower()
    return name in secret_headers or name in REDACTED_RESPONSE_HEADERS or is_credential_header(name)


def shown_header_value(name: str, value: str, secret_headers: Collection[str] = ()) -> str:
    """`value` as a message (a miss, `show`, `diff`) prints a header's value: the value of a
    header that `names_a_secret` is replaced by its length, so logs never hold it (the
    `REDACTED` marker itself is shown as it is); any other value is printed as it is."""
    if value != REDACTED and names_a_secret(name, secret_headers):
        return _hidden(value)
    if "?" in value:  # a URL (location, link, referer): its secret query values hidden
        return shown_url(value)
    return value


def shown_value(value: object, *, hidden: bool = False) -> str:
    """How a message quotes `value`, read from a cassette or a request: the one place that
    decides it, so that no message prints a credential or a wall of text into a CI log.

    * `hidden` (the value of a credential header, a secret query parameter): its length only,
      ``<hidden, 27 chars>``;
    * a string or bytes of at most `SHOWN_CHARS` characters: its `repr`; a longer one: the
      `repr` of its first `SHOWN_HEAD` characters and its length, ``'Bearer sk-an'... (87
      chars)``;
    * a list: its items quoted so, except that after a first item that `names_a_secret` the
      other items are hidden (a malformed ``["authorization", "Bearer ...", "extra"]`` shows no
      token); a dict: its keys and values, the values of keys that `names_a_secret` hidden;
      past `_SHOWN_ITEMS` items or `_SHOWN_DEPTH` levels the rest is only counted;
    * anything else: its `repr`, elided like a string.
    """
    return _shown(value, hidden, 0)


def _hidden(value: object) -> str:
    if isinstance(value, str):
        return f"<hidden, {len(value)} chars>"
    if isinstance(value, bytes):
        return f"<hidden, {len(value)} bytes>"
    return f"<hidden {type(value).__name__}>"


def _shown(value: object, hidden: bool, depth: int) -> str:
    if hidden:
        return _hidden(value)
    if isinstance(value, str | bytes):
        if len(value) <= SHOWN_CHARS:
            return repr(value)
        unit = "chars" if isinstance(value, str) else "bytes"
        return f"{value[:SHOWN_HEAD]!r}... ({len(value):,} {unit})"
    if isinstance(value, list | tuple | dict):
        if depth >= _SHOWN_DEPTH:
            return f"<{type(value).__name__} of {len(value)}>"
        if isinstance(value, dict):
            parts = [
                f"{_shown(k, False, depth + 1)}: "
                + _shown(v, isinstance(k, str) and names_a_secret(k), depth + 1)
                for k, v in list(value.items())[:_SHOWN_ITEMS]
            ]
        else:
            secret = bool(value) and isinstance(value[0], str) and names_a_secret(value[0])
            parts = [
                _shown(item, secret and i > 0, depth + 1)
                for i, item in enumerate(value[:_SHOWN_ITEMS])
            ]
        if len(value) > _SHOWN_ITEMS:
            parts.append(f"... {len(value) - _SHOWN_ITEMS:,} more")
        inside = ", ".join(parts)
        return f"{{{inside}}}" if isinstance(value, dict) else f"[{inside}]"
    try:
        text = repr(value)
    except ValueError:  # an int of more digits than Python turns into text
        return f"<{type(value).__name__} too long to show>"
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_HEAD]}... ({len(text):,} chars)"


_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)([^/?#@]*)@")


def shown_url(url: str, secret_params: Collection[str] = ()) -> str:
    """`url` as a message prints it: the value of each query parameter that is secret -- named
    in `secret_params` (lower-case; pass the configured `secret_query_params`) or of credential
    shape (the rule for header names: ``password``, ``x_token``, ``key``...) -- and a
    ``user:password@`` part (or a token as the user) replaced by their length (`shown_value`);
    the rest as it is, a URL being what a reader of a miss or a diff needs whole.  Values
    already redacted stay."""
    url = _USERINFO.sub(lambda m: f"{m[1]}{_hidden(m[2])}@", url)
    base, mark, rest = url.partition("?")
    if not mark or not rest:
        return url
    query, hash_, fragment = rest.partition("#")
    items = []
    for item in query.split("&"):
        name, eq, value = item.partition("=")
        if eq and value and value not in REDACTED_FORMS and _secret_param(name, secret_params):
            item = f"{name}={_hidden(value)}"
        items.append(item)
    return f"{base}?{'&'.join(items)}{hash_}{fragment}"


def _secret_param(name: str, secret_params: Collection[str]) -> bool:
    name = unquote_plus(name).lower()
    return name in secret_params or is_credential_header(name)
