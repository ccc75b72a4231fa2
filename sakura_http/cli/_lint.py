"""Checking cassette files before they are committed: the checks behind `sakura-http lint`.

Errors are problems that break replay or put a credential on disk:

* a format or version error (with its line number), a torn last line, duplicate `id`s; a
  vcrpy or cassetter cassette gets the advice to import it with `sakura-http convert`;
* credentials in the URL before the host (`user:password@`), which recording never writes;
* a credential header in the recorded request headers (`is_credential_header`, the rule
  recording applies); a name that only has a credential's shape (not one of
  `CREDENTIAL_HEADERS` or `PROVIDER_CREDENTIAL_HEADERS`) is a warning, since it may have been
  recorded on purpose with `allow_headers`;
* a `set-cookie` or `set-cookie2` response header whose value is not exactly `<redacted>`;
* a body over 16 MiB (`DEFAULT_MAX_BODY_BYTES`).

With `--max-age` (`max_age=`), exchanges recorded on a UTC day wholly before that long ago
(`_age.is_older`) are one warning per file (`age`), and exchanges without `recorded_at` (from
before the field: their age is unknown) another (`age-unknown`); both come after the others.

Warnings are values that look like credentials anywhere in a URL, a header or a body: bearer
and basic credentials, JWTs, common provider key shapes (`SECRET_SHAPES`), private-key
blocks, credential-named query parameters (`key=`, `api_key=`, `token=`, `sig=`, ..., and the
signatures of signed URLs: `DEFAULT_SECRET_QUERY_PARAMS`) and body
fields (`api_key=`, `"client_secret": ...`) whose value is not `<redacted>`; and values that
look like e-mail addresses or long random tokens, with the `Scrub` that would keep them out
(not base64 payloads, UUIDs or placeholders).  A value that is a placeholder another tool
wrote (`is_placeholder`: ``REDACTED``, ``YOUR_API_KEY``...) is never reported.  The values
of one kind at one field path of a file are one warning, with their count and lines.  A
warning shows a masked excerpt (`mask()`), never the whole value.

Linting keeps going after a problem wherever it can: every bad line of a file is reported, not
only the first.  Only a bad header line stops a file, since the header decides how the rest
is read.  The checks do no printing; the end of the module is the `lint` subcommand itself
(its parser and handler, `add_lint_command`), which prints the `Finding`s.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, unquote_plus, urlsplit

import orjson

from .._age import age_text, is_older, parse_max_age
from .._config import DEFAULT_SECRET_QUERY_PARAMS
from .._exceptions import CassetteFormatError
from .._format import Exchange, Headers, decode_exchange, decode_header, iter_lines
from .._placeholders import is_placeholder
from .._policy import (
    DEFAULT_MAX_BODY_BYTES,
    REDACTED,
    REDACTED_RESPONSE_HEADERS,
    is_credential_header,
    is_known_credential_header,
    shown_value,
)
from .._rules import EMAIL_PATTERN
from ._foreign import sniff
from ._usage import (
    EXIT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    PROG,
    AddCommand,
    dump_json,
    err,
    out,
    plural,
)

__all__ = [
    "SECRET_SHAPES",
    "Finding",
    "SecretShape",
    "add_lint_command",
    "credential_headers",
    "find_secrets",
    "lint_bytes",
    "lint_exchange",
    "lint_file",
    "mask",
    "not_a_cassette",
]

Severity = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem in a cassette file.

    `line` is the 1-based line number (None when the problem is the file as a whole), `check`
    a short stable name (`format`, `header`, `torn-line`, `duplicate-id`, `credential-header`,
    `set-cookie`, `body-size`, `secret`), `field` the part of the exchange concerned (`url`,
    `headers.<name>`, `response_headers.<name>`, `body`, `response_body`, `error.message`) and
    `excerpt` a masked excerpt of the offending value, when there is one.

    A `secret` or `scrub` warning of `lint_bytes` stands for every value of its kind at one
    field path of the file (`excerpt` shows the first): `count` says how many, `lines` on
    which lines (`line` is the first).  Any other finding is one value on one line.
    """

    path: str
    line: int | None
    severity: Severity
    check: str
    message: str
    field: str | None = None
    excerpt: str | None = None
    count: int = 1
    lines: tuple[int, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The finding as a JSON-ready dict (the shape of `sakura-http lint --json`)."""
        return {
            "path": self.path,
            "line": self.line,
            "severity": self.severity,
            "check": self.check,
            "field": self.field,
            "message": self.message,
            "excerpt": self.excerpt,
            "count": self.count,
            "lines": list(self.lines or ([] if self.line is None else [self.line])),
        }

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{where}: {self.severity}: {self.message} [{self.check}]"


@dataclass(frozen=True, slots=True)
class SecretShape:
    """A kind of credential recognised by its shape; the `secret` group, if any, is the value.

    `needles` are lower-case strings one of which every match holds: a text holding none of
    them is not searched (a regular expression starting with a look-behind is tried at every
    position of a body; a substring search is not).  Empty: always searched."""

    name: str
    pattern: re.Pattern[str]
    needles: tuple[str, ...] = ()


# These patterns describe shapes, not values.  They are deliberately a little loose (a warning
# is cheap to dismiss, a leaked key is not) but anchored so that words such as "task-" or
# "Bearer realm=..." do not match.
SECRET_SHAPES: tuple[SecretShape, ...] = (
    SecretShape(
        "a private key block",
        re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----"),
        ("-----begin",),
    ),
    SecretShape(
        "an Anthropic API key",
        re.compile(r"(?<![A-Za-z0-9_-])sk-ant-[A-Za-z0-9_-]{16,}"),
        ("sk-ant-",),
    ),
    SecretShape(
        "an API secret key (sk-...)",
        re.compile(r"(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]{16,}"),
        ("sk-",),
    ),
    SecretShape(
        "an AWS access key id",
        re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
        ("akia", "asia"),
    ),
    SecretShape(
        "a GitHub token",
        re.compile(r"(?<![A-Za-z0-9_])gh[pousr]_[A-Za-z0-9]{20,}"),
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    ),
    SecretShape(
        "a GitHub token",
        re.compile(r"(?<![A-Za-z0-9_])github_pat_[A-Za-z0-9_]{22,}"),
        ("github_pat_",),
    ),
    SecretShape(
        "a GitLab token", re.compile(r"(?<![A-Za-z0-9_-])glpat-[A-Za-z0-9_-]{20,}"), ("glpat-",)
    ),
    SecretShape(
        "a Google API key", re.compile(r"(?<![A-Za-z0-9_-])AIza[0-9A-Za-z_-]{35}"), ("aiza",)
    ),
    SecretShape(
        "a Slack token", re.compile(r"(?<![A-Za-z0-9])xox[abposre]-[A-Za-z0-9-]{10,}"), ("xox",)
    ),
    SecretShape(
        "a Stripe key",
        re.compile(r"(?<![A-Za-z0-9_])(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}"),
        ("_live_", "_test_"),
    ),
    SecretShape(
        "a Hugging Face token", re.compile(r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{30,}"), ("hf_",)
    ),
    SecretShape("an npm token", re.compile(r"(?<![A-Za-z0-9_])npm_[A-Za-z0-9]{36}"), ("npm_",)),
    SecretShape(
        "a Google OAuth access token",
        re.compile(r"(?<![A-Za-z0-9_.-])ya29\.[0-9A-Za-z_-]{20,}"),
        ("ya29.",),
    ),
    SecretShape("a Groq API key", re.compile(r"(?<![A-Za-z0-9_])gsk_[A-Za-z0-9]{40,}"), ("gsk_",)),
    SecretShape("an xAI API key", re.compile(r"(?<![A-Za-z0-9_-])xai-[A-Za-z0-9]{40,}"), ("xai-",)),
    SecretShape(
        "a Perplexity API key", re.compile(r"(?<![A-Za-z0-9_-])pplx-[A-Za-z0-9]{40,}"), ("pplx-",)
    ),
    SecretShape("a Replicate token", re.compile(r"(?<![A-Za-z0-9_])r8_[A-Za-z0-9]{30,}"), ("r8_",)),
    SecretShape(
        "a JSON Web Token",
        re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"),
        ("eyj",),
    ),
    # A token or credential made of letters only is almost surely a word ("Basic
    # Authentication"), so these two ask for at least one digit or symbol.
    SecretShape(
        "a bearer token",
        re.compile(r"(?i)\bbearer\s+(?P<secret>(?=[A-Za-z]*[0-9._~+/=-])[A-Za-z0-9._~+/-]{16,}=*)"),
        ("bearer",),
    ),
    SecretShape(
        "basic auth credentials",
        re.compile(r"(?i)\bbasic\s+(?P<secret>(?=[A-Za-z]*[0-9+/=])[A-Za-z0-9+/]{12,}={0,2})"),
        ("basic",),
    ),
    # Credentials by name (the names recording redacts by default): recording writes them as
    # <redacted>, which these never match.
    SecretShape(
        "a credential query parameter",
        re.compile(
            rf"(?i)[?&;#](?:{'|'.join(sorted(map(re.escape, DEFAULT_SECRET_QUERY_PARAMS)))})="
            r"(?P<secret>[^&#\s\"'<>]+)"
        ),
        ("=",),
    ),
    SecretShape(
        "a credential field",
        re.compile(
            r"(?i)(?:^|(?<=[&\s{,\"']))[\"']?(?:api_key|apikey|api-key|client_secret|access_token"
            r"|refresh_token|password)[\"']?\s*[=:]\s*[\"']?(?P<secret>[^&\"'\s,}<]{4,})"
        ),
        (
            "api_key",
            "apikey",
            "api-key",
            "client_secret",
            "access_token",
            "refresh_token",
            "password",
        ),
    ),
)

_USERINFO = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://(?P<userinfo>[^/?#@]*)@")


def credential_headers(headers: Headers) -> list[str]:
    """The names among `headers` that recording refuses unless they are declared secret
    (`is_credential_header`, the recording rule itself), in order, each once; lint and convert
    keep no list of their own."""
    return [name for name in dict.fromkeys(n for n, _ in headers) if is_credential_header(name)]


def mask(secret: str) -> str:
    """A safe excerpt of `secret`: at most its first 8 characters (a quarter of it, for short
    values) and its length, so a reader can find it without the value being repeated."""
    keep = min(8, len(secret) // 4)
    return f"{secret[:keep]}...({len(secret)} chars)"


def find_secrets(text: str) -> Iterator[tuple[SecretShape, str]]:
    """Yield `(shape, value)` for every credential-looking value in `text`.

    Shapes are tried in `SECRET_SHAPES` order and a value is reported once, by the first shape
    that covers it (a JWT inside a bearer header is reported as the bearer token).  A value
    that is a placeholder other tools write (`is_placeholder`: ``REDACTED``,
    ``YOUR_API_KEY``, ``os.environ['X_API_KEY']``...) is not reported.
    """
    taken: list[tuple[int, int]] = []
    lowered = text.lower()
    for shape in SECRET_SHAPES:
        if shape.needles and not any(needle in lowered for needle in shape.needles):
            continue
        for match in shape.pattern.finditer(text):
            start, end = match.span()
            if any(start < t_end and t_start < end for t_start, t_end in taken):
                continue
            secret = match.groupdict().get("secret") or match.group(0)
            if is_placeholder(unquote_plus(secret)):
                continue
            taken.append((start, end))
            yield shape, secret


def _text(body: bytes) -> str:
    # Latin-1 maps every byte to one character, so binary bodies are scanned too and the
    # (ASCII-only) patterns match exactly the bytes on disk.
    return body.decode("latin-1")


@dataclass(frozen=True, slots=True)
class _Hit:
    """A value a warning is about, before `lint_bytes` groups the values of a file: those of
    one `key` (check, field, what it looks like, JSON path) become one finding."""

    line: int
    check: str
    field: str
    key: tuple[str, ...]
    head: str  # "<field> contains what looks like <what> (<excerpt>)"
    where: str  # " at <json path>", or ""
    advice: str
    excerpt: str

    def finding(self, path: str, lines: list[int], count: int) -> Finding:
        shown = ", ".join(map(str, lines[:5])) + (", ..." if len(lines) > 5 else "")
        counted = (
            f"; {count} such values{self.where}, on {plural(len(lines), 'line')} ({shown})"
            if count > 1
            else ""
        )
        return Finding(
            path,
            self.line,
            "warning",
            self.check,
            f"{self.head}{counted}; {self.advice}",
            self.field,
            self.excerpt,
            count,
            tuple(lines) if count > 1 else (),
        )


def lint_exchange(exchange: Exchange, path: str, line: int) -> list[Finding]:
    """Every error and warning for one decoded exchange, each warning one value (duplicate ids
    are checked, and warnings grouped, by `lint_bytes`, which sees the whole file)."""
    findings, hits = _check_exchange(exchange, path, line)
    return findings + [hit.finding(path, [line], 1) for hit in hits]


def _check_exchange(exchange: Exchange, path: str, line: int) -> tuple[list[Finding], list[_Hit]]:
    """The errors of one exchange, and the values its warnings are about."""
    findings: list[Finding] = []

    def add(severity: Severity, check: str, message: str, field: str, excerpt: str | None) -> None:
        findings.append(Finding(path, line, severity, check, message, field, excerpt))

    credential_fields: set[str] = set()
    userinfo = _USERINFO.match(exchange.url)
    if userinfo and userinfo["userinfo"]:
        credential_fields.add("url")
        secret = userinfo["userinfo"]
        add(
            "error",
            "url-credentials",
            f"url carries credentials before the host ({mask(secret)}@): recording never writes "
            "them (httpx sends them as an authorization header). Delete them from this line "
            "(and rotate them if they are real)",
            "url",
            mask(secret),
        )
    credentials = set(credential_headers(exchange.headers))
    for name, value in exchange.headers:
        if name in credentials and not is_placeholder(value):  # "Bearer REDACTED" holds none
            field = f"headers.{name}"
            credential_fields.add(field)
            # A name of credential shape only may have been recorded on purpose (allow_headers).
            known = is_known_credential_header(name)
            add(
                "error" if known else "warning",
                "credential-header",
                f"request header {name} is recorded ({mask(value)}): credentials must never be "
                f"in a cassette. Delete it from this line (and rotate the credential if it is "
                f'real); record with RecordingTransport(..., secret_headers=["{name}"])'
                + ("" if known else "; if it is not a credential, it was allowed on purpose"),
                field,
                mask(value),
            )
    for name, value in exchange.response_headers:
        if name in REDACTED_RESPONSE_HEADERS and not is_placeholder(value.split(";")[0]):
            field = f"response_headers.{name}"
            credential_fields.add(field)
            add(
                "error",
                "set-cookie",
                f"response header {name} is not redacted ({mask(value)}): replace its value "
                f'with "{REDACTED}", as recording does',
                field,
                mask(value),
            )
    for field, size in (
        ("body", len(exchange.body)),
        ("response_body", len(exchange.response_body)),
    ):
        if size > DEFAULT_MAX_BODY_BYTES:
            add(
                "error",
                "body-size",
                f"{field} is {size:,} bytes, over the 16 MiB limit "
                f"({DEFAULT_MAX_BODY_BYTES:,} bytes) that recording enforces; trim it or "
                "record a smaller response",
                field,
                None,
            )

    hits: list[_Hit] = []
    scanned: list[tuple[str, str]] = [("url", exchange.url)]
    scanned += [(f"headers.{name}", value) for name, value in exchange.headers]
    scanned += [(f"response_headers.{name}", value) for name, value in exchange.response_headers]
    scanned += [("body", _text(exchange.body)), ("response_body", _text(exchange.response_body))]
    if exchange.error is not None:
        scanned.append(("error.message", exchange.error.message))
    for field, text in scanned:
        if field in credential_fields:
            continue  # already an error for this field
        secrets = set()
        for shape, secret in find_secrets(text):
            secrets.add(secret)
            hits.append(
                _Hit(
                    line,
                    "secret",
                    field,
                    ("secret", field, shape.name),
                    f"{field} contains what looks like {shape.name} ({mask(secret)})",
                    "",
                    _SECRET_ADVICE
                    if shape.name != _QUERY_SHAPE
                    else _SECRET_IN_QUERY_ADVICE
                    if field == "url"
                    else _SECRET_IN_QUERY_ADVICE + _ECHO_OR_MADE,
                    mask(secret),
                )
            )
        json_body = {"body": exchange.body, "response_body": exchange.response_body}.get(field)
        for what, value, where, scrub in _scrub_candidates(text, json_body, field):
            if any(value in secret or secret in value for secret in secrets):
                continue  # already a warning as a credential
            hits.append(
                _Hit(
                    line,
                    "scrub",
                    field,
                    ("scrub", field, what, where or ""),
                    f"{field} contains what looks like {what} ({mask(value)})",
                    f" at {where}" if where else "",
                    "to keep such values out of the cassette, re-record with "
                    f"Rules(scrub=[{scrub}])",
                    mask(value),
                )
            )
    return findings, hits


# --- the scrub check: personal data and session tokens -------------------------------------------
#
# Values worth scrubbing are e-mail addresses and long random tokens (session ids, opaque
# keys).  Payloads that only look random are not: a base64 blob (an embedding, an image) is a
# run of the base64 alphabet far longer than any token; a UUID (or an id made of a prefix and
# one) names a record; a placeholder (`is_placeholder`) holds nothing.  A JSON body is looked
# at string by string, so each value has its path and the suggestion is `Scrub.json(path)`.

# Whole runs of 32 characters or more, tried only where a run starts: each character is
# looked at a bounded number of times (linear), and the many short words are never matches.
_TOKEN = r"(?<![A-Za-z0-9_-])[A-Za-z0-9_-]{32,}"
_TOKEN_LENGTHS = range(32, 257)
_BLOB = r"[A-Za-z0-9+/_-]{257,}=*"  # longer than any token: a base64 payload
_UUID = (
    r"(?:[A-Za-z][A-Za-z0-9]*[_-])?[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[1-8][0-9a-fA-F]{3}-?"
    r"[89abAB][0-9a-fA-F]{3}-?[0-9a-fA-F]{12}"
)
_SCANNED = 16 << 20  # a body over the recording limit is an error already: its start will do


def _random_looking(token: str) -> bool:
    """Mixing letters and digits, and not a word: a key, session token or opaque id."""
    has_digit = any(c.isdigit() for c in token)
    has_letter = any(c.isalpha() for c in token)
    return has_digit and has_letter and len(set(token)) >= 12


def _strings(value: Any) -> Iterator[tuple[str | None, str]]:
    """(JSON path, string) for every string of a JSON value, in document order, list items
    written ``[*]``; the path is None where `Scrub.json` cannot spell it (the value itself, a
    list at the top, an empty key, a key holding ``.``, ``[`` or ``]``)."""
    stack: list[tuple[Any, str | None]] = [(value, "")]  # "": the top, None: unspellable
    while stack:
        node, where = stack.pop()
        if isinstance(node, str):
            yield where or None, node
        elif isinstance(node, dict):
            children: list[tuple[Any, str | None]] = []
            for key, item in node.items():
                if where is None or not key or "." in key or "[" in key or "]" in key:
                    children.append((item, None))
                else:
                    children.append((item, f"{where}.{key}" if where else key))
            stack.extend(reversed(children))
        elif isinstance(node, list):
            child = f"{where}[*]" if where else None
            stack.extend((item, child) for item in reversed(node))


def _scrub_candidates(
    text: str, json_body: bytes | None, field: str = ""
) -> Iterator[tuple[str, str, str | None, str]]:
    """(what it looks like, the value, where it is or None, the `Scrub` that keeps it out)
    for each e-mail address and long random token of `text` (the `field` of an exchange),
    each value once.  Where it is: its JSON path, or the query parameter of the URL holding
    it.  The warnings of one place are grouped, so the `Scrub` must keep out every value
    there, not only this one: `Scrub.json(path)`, `Scrub.query(name)`,
    `Scrub.response_header(name)`, or a pattern from a token's fixed prefix (``sess_``)."""
    pieces: Iterable[tuple[str | None, str]] = [(None, text[:_SCANNED])]
    if json_body:
        with contextlib.suppress(orjson.JSONDecodeError):  # not JSON: scanned as text
            pieces = _strings(orjson.loads(json_body[:_SCANNED]))
    seen: set[str] = set()
    email = re.compile(EMAIL_PATTERN, re.ASCII)
    token, blob, uuid = (re.compile(p) for p in (_TOKEN, _BLOB, _UUID))
    for where, piece in pieces:
        if len(piece) < _TOKEN_LENGTHS.start and "@" not in piece:
            continue  # the most of a JSON body: short values
        found = [("an e-mail address", m) for m in email.finditer(piece)] if "@" in piece else []
        blobs = [m.span() for m in blob.finditer(piece)]
        for match in token.finditer(piece):
            if len(match.group()) in _TOKEN_LENGTHS and not any(
                start <= match.start() < end for start, end in blobs
            ):
                found.append(("a long random token", match))
        for what, match in sorted(found, key=lambda pair: pair[1].start()):
            value = match.group()
            if value in seen or is_placeholder(value):
                continue
            if what != "an e-mail address" and (
                not _random_looking(value) or uuid.fullmatch(value)
            ):
                continue
            seen.add(value)
            place = where
            # (a redirect's location too: Scrub.query reaches it and the URL it leads to)
            query = _query_name(text, value) if field in _URL_FIELDS else None
            if where:
                scrub = f"Scrub.json({_quoted(where)})"
            elif query is not None:
                place, scrub = f"query parameter {query}", f"Scrub.query({_quoted(query)})"
            elif field.startswith("response_headers."):
                scrub = f"Scrub.response_header({_quoted(field.partition('.')[2])})"
            elif what == "an e-mail address":
                scrub = 'Scrub.regex(sakura_http.EMAIL_PATTERN, "<email>")'
            else:
                prefix = _TOKEN_PREFIX.match(value)
                fixed = prefix.group() if prefix else value[:6]
                scrub = f'Scrub.regex(r"{re.escape(fixed)}[A-Za-z0-9_-]+")'
            yield what, value, place, scrub


def _quoted(text: str) -> str:
    """`text` as a Python string literal in double quotes, for advice meant to be pasted (a
    JSON key or query parameter name may hold a quote or a backslash)."""
    return orjson.dumps(text).decode()


_URL_FIELDS = frozenset({"url", "response_headers.location", "response_headers.content-location"})
_TOKEN_PREFIX = re.compile(r"[A-Za-z]{2,12}[_-]")  # sess_, tok-: the same in every token
_QUERY_SHAPE = "a credential query parameter"
_SECRET_ADVICE = "if it is real, rotate it and re-record with the credential in secret_headers"
_SECRET_IN_QUERY_ADVICE = (
    "if it is real, rotate it and re-record: recording writes the value of a secret query "
    "parameter (secret_query_params) as <redacted>"
)
_ECHO_OR_MADE = (
    ", also where the server echoes the request's URL; a URL the server made (a signed "
    "download link) needs Rules(scrub=[Scrub.regex(...)]) or Scrub.json(path)"
)


def _query_name(url: str, value: str) -> str | None:
    """The name of the query parameter of `url` whose value holds `value`, if one does."""
    for name, held in parse_qsl(urlsplit(url).query, keep_blank_values=True):
        if value in held and name:
            return name
    return None


def _format_finding(exc: CassetteFormatError, check: str) -> Finding:
    return Finding(exc.path, exc.line, "error", check, exc.problem)


def _foreign_finding(name: str, kind: str) -> Finding:
    return Finding(name, None, "error", "foreign", _foreign(name, kind))


def _foreign(name: str, kind: str) -> str:
    return (
        f"this looks like a {kind} cassette, which sakura-http cannot replay as it is; import "
        f"it with `sakura-http convert {name} OUT.jsonl`"
    )


def not_a_cassette(data: bytes, name: str) -> str | None:
    """Why `data`, read from `name`, is not a sakura-http cassette at all, or None when it
    starts with a cassette header (of this format version or another).

    A vcrpy or cassetter cassette gets the advice to import it; anything else is said to be
    something else.  Never the advice to re-record it: that would overwrite a file that holds
    something other than a cassette.
    """
    kind = sniff(data)
    if kind is not None:
        return _foreign(name, kind)
    first = data.split(b"\n", 1)[0]
    try:
        header = orjson.loads(first)
    except orjson.JSONDecodeError:
        return (
            "this is not a sakura-http cassette: its first line is not JSON, so it is not a "
            "cassette header"
        )
    if isinstance(header, dict) and "schema_version" in header:
        return None
    return (
        "this is not a sakura-http cassette: its first line is not a cassette header "
        "(a JSON object with a schema_version)"
    )


def lint_bytes(
    data: bytes,
    path: str | os.PathLike[str],
    *,
    max_age: datetime.timedelta | None = None,
    now: datetime.datetime | None = None,
) -> list[Finding]:
    """Every finding for the cassette `data` read from `path`, in line order.

    Empty data is a valid empty cassette (no findings).  A bad header line is reported and ends
    the file's checks; a bad exchange line is reported and the next line is checked; a torn
    last line is reported after the lines before it.  The values of one kind at one field path
    (`secret` and `scrub` warnings) are one finding, at the line of the first, with their
    count and lines: a cassette of a thousand exchanges each holding an e-mail address at
    ``user.email`` gets one warning, not a thousand.

    With `max_age`, the exchanges recorded more than that long before `now` (default: the
    current time) are one `age` warning, and those without a `recorded_at` one `age-unknown`
    warning, after the other findings.
    """
    name = os.fspath(path)
    findings: list[Finding | tuple[str, ...]] = []  # a tuple: the place of a group's finding
    groups: dict[tuple[str, ...], _Group] = {}
    ages = None
    if max_age is not None:
        ages = _Ages(max_age, now or datetime.datetime.now(datetime.timezone.utc))
    with contextlib.suppress(_Done):
        _lint_lines(data, name, findings, groups, ages)
    return [
        found if isinstance(found, Finding) else groups[found].finding(name) for found in findings
    ] + (ages.findings(name) if ages is not None else [])


@dataclass(slots=True)
class _Ages:
    """The exchanges of one file older than `max_age` at `now`, and those without a day."""

    max_age: datetime.timedelta
    now: datetime.datetime
    old: list[int] = field(default_factory=list)
    oldest: datetime.date | None = None
    undated: list[int] = field(default_factory=list)

    def add(self, exchange: Exchange, line: int) -> None:
        day = exchange.recorded_at
        if day is None:
            self.undated.append(line)
        elif is_older(day, self.max_age, self.now):
            self.old.append(line)
            self.oldest = day if self.oldest is None else min(self.oldest, day)

    def findings(self, path: str) -> list[Finding]:
        found = []
        if self.old:
            limit = (self.now.astimezone(datetime.timezone.utc) - self.max_age).date()
            count = len(self.old)
            what = "1 exchange was" if count == 1 else f"{count} exchanges were"
            found.append(
                Finding(
                    path,
                    self.old[0],
                    "warning",
                    "age",
                    f"{what} recorded more than {age_text(self.max_age)} ago (before {limit}), "
                    f"the oldest on {self.oldest}, {_on_lines(self.old)}: the API may have "
                    f"changed since. Check it with `sakura-http verify {path} --record-host "
                    "HOST`, or re-record it (`pytest --record-all`)",
                    "recorded_at",
                    None,
                    count,
                    tuple(self.old),
                )
            )
        if self.undated:
            count = len(self.undated)
            what = "1 exchange has" if count == 1 else f"{count} exchanges have"
            found.append(
                Finding(
                    path,
                    self.undated[0],
                    "warning",
                    "age-unknown",
                    f"{what} no recorded_at (recorded before sakura-http dated exchanges), so "
                    f"{'its' if count == 1 else 'their'} age is unknown, "
                    f"{_on_lines(self.undated)}: re-record the cassette (`pytest --record-all`) "
                    f"to date {'it' if count == 1 else 'them'}",
                    "recorded_at",
                    None,
                    count,
                    tuple(self.undated),
                )
            )
        return found


def _on_lines(lines: list[int]) -> str:
    shown = ", ".join(map(str, lines[:5])) + (", ..." if len(lines) > 5 else "")
    return f"on {'line' if len(lines) == 1 else 'lines'} {shown}"


@dataclass(slots=True)
class _Group:
    """The values of one kind at one field path of a file: the first, and where they all are."""

    first: _Hit
    lines: list[int]
    count: int = 0

    def add(self, line: int) -> None:
        if not self.lines or self.lines[-1] != line:
            self.lines.append(line)
        self.count += 1

    def finding(self, path: str) -> Finding:
        return self.first.finding(path, self.lines, self.count)


class _Done(Exception):
    """The rest of the file cannot be read (a bad header line)."""


def _lint_lines(
    data: bytes,
    name: str,
    findings: list[Finding | tuple[str, ...]],
    groups: dict[tuple[str, ...], _Group],
    ages: _Ages | None = None,
) -> None:
    first_line_of_id: dict[str, int] = {}
    header_seen = False
    try:
        for number, line in iter_lines(data, name):
            if not header_seen:
                header_seen = True
                try:
                    decode_header(line, name, number)
                except CassetteFormatError as exc:
                    kind = sniff(data)
                    if kind is not None:
                        findings.append(_foreign_finding(name, kind))
                        raise _Done from None
                    other = not_a_cassette(data, name)
                    if other is None:  # a cassette header of another version, say
                        findings.append(_format_finding(exc, "header"))
                    else:
                        findings.append(Finding(name, number, "error", "header", other))
                    raise _Done from None
                continue
            try:
                exchange = decode_exchange(line, name, number)
            except CassetteFormatError as exc:
                findings.append(_format_finding(exc, "format"))
                continue
            if ages is not None:
                ages.add(exchange, number)
            errors, hits = _check_exchange(exchange, name, number)
            findings.extend(errors)
            for hit in hits:
                if hit.key not in groups:
                    groups[hit.key] = _Group(hit, [])
                    findings.append(hit.key)
                groups[hit.key].add(number)
            if exchange.id is not None:
                first = first_line_of_id.setdefault(exchange.id, number)
                if first != number:
                    findings.append(
                        Finding(
                            name,
                            number,
                            "error",
                            "duplicate-id",
                            f"id {shown_value(exchange.id)} is already used by line {first}; "
                            "ids must be unique within a cassette: rename or delete one of them",
                            "id",
                        )
                    )
    except CassetteFormatError as exc:  # raised by iter_lines for a torn last line
        kind = None if header_seen else sniff(data)
        if kind is None:
            findings.append(_format_finding(exc, "torn-line"))
        else:  # a one-line foreign file (JSON without a final newline)
            findings.append(_foreign_finding(name, kind))


def lint_file(
    path: str | os.PathLike[str],
    *,
    max_age: datetime.timedelta | None = None,
    now: datetime.datetime | None = None,
) -> list[Finding]:
    """Read and lint one cassette file (`max_age`, `now`: as for `lint_bytes`).

    A missing or unreadable file raises `OSError` (a directory raises `IsADirectoryError`):
    unlike loading for replay, a file named for linting must exist.
    """
    return lint_bytes(Path(path).read_bytes(), path, max_age=max_age, now=now)


# --- the command -----------------------------------------------------------------------------


def _lint(args: argparse.Namespace) -> int:
    findings: list[Finding] = []
    unreadable: list[dict[str, str]] = []
    for name in args.cassettes:
        try:
            findings.extend(lint_file(name, max_age=args.max_age))
        except OSError as exc:
            reason = "no such file" if isinstance(exc, FileNotFoundError) else exc.strerror
            unreadable.append({"path": name, "reason": f"cannot read it ({reason or exc})"})
    errors = sum(f.severity == "error" for f in findings)
    warnings = len(findings) - errors
    if args.json:
        dump_json(
            {
                "files": list(args.cassettes),
                "errors": errors,
                "warnings": warnings,
                "findings": [f.as_dict() for f in findings],
                "unreadable": unreadable,
            }
        )
    else:
        for finding in findings:
            out(str(finding))
        checked = plural(len(args.cassettes) - len(unreadable), "file")
        out(f"{checked} checked: {plural(errors, 'error')}, {plural(warnings, 'warning')}")
    for problem in unreadable:
        err(f"{PROG} lint: error: {problem['path']}: {problem['reason']}")
    if unreadable:
        return EXIT_USAGE
    if errors or (args.strict and warnings):
        return EXIT_FOUND
    return EXIT_OK


def add_lint_command(command: AddCommand) -> None:
    """Register `lint` through the CLI's registrar."""
    lint = command(
        "lint",
        _lint,
        "Check cassettes for format errors, credentials and unredacted cookies. "
        "Exit 1 on an error (or, with --strict, a warning).",
    )
    lint.add_argument("cassettes", metavar="CASSETTE", nargs="+")
    lint.add_argument("--strict", action="store_true", help="fail on warnings too")
    lint.add_argument("--json", action="store_true", help="print the findings as JSON")
    lint.add_argument(
        "--max-age",
        type=_max_age,
        metavar="AGE",
        help="warn on exchanges recorded longer ago than AGE: a whole number and a unit, h "
        "(hours), d (days) or w (weeks), such as 90d; also on exchanges without a date",
    )


def _max_age(text: str) -> datetime.timedelta:
    try:
        return parse_max_age(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
