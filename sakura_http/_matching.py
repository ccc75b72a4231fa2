"""Matching a request against recorded exchanges, and explaining a miss.

A request matches a recorded exchange when these are equal:

1. the method, case-insensitively;
2. the URL in canonical form (`canonical_url`): scheme and host lower-cased, IDNA hosts in
   ASCII, default ports dropped, percent-encoding normalized, no userinfo, and the values of
   secret query parameters replaced by ``<redacted>``; path and query order are kept as sent;
3. the ordinary headers as a multiset of (lower-case name, value): everything except the declared
   secret headers and the ignored (volatile) headers, `DEFAULT_IGNORE_HEADERS` by default;
4. the body: equal bytes, or equal parsed JSON values with object key order ignored when the
   content type is JSON, or equal parts with the random boundary ignored for multipart/form-data.

Everything is folded into a hashable `MatchKey`, so looking a request up costs one dict access
whatever the size of the cassette.  `explain_miss()` is only called on a miss; it is the one
place that scans the whole cassette.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import idna
import orjson

from ._format import Exchange, Headers
from ._policy import shown_header_value
from ._rules import Rules

__all__ = [
    "DEFAULT_IGNORE_HEADERS",
    "REDACTED",
    "MatchKey",
    "MatchRules",
    "RequestData",
    "canonical_url",
    "explain_miss",
]

#: Headers httpx or the SDKs set per machine or per run: recorded, never compared.
#: An entry ending in "*" is a prefix.
DEFAULT_IGNORE_HEADERS = frozenset(
    {
        "user-agent",
        "accept-encoding",
        "content-length",
        "host",
        "connection",
        "traceparent",
        "tracestate",
        "baggage",
        "x-stainless-*",
        "idempotency-key",
        "x-idempotency-key",
    }
)

_BOUNDARY_TOKEN = b"<boundary>"

#: What a secret value is written as.
REDACTED = "<redacted>"

_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def _normalize_escape(match: re.Match[str]) -> str:
    byte = int(match.group(1), 16)
    return chr(byte) if byte in _UNRESERVED else f"%{byte:02X}"


def _ascii_host(host: str) -> str:
    if host.isascii():
        return host
    try:
        return idna.encode(host, uts46=True).decode("ascii")
    except idna.IDNAError:
        return host.encode("idna").decode("ascii")


@functools.lru_cache(maxsize=8192)
def canonical_url(url: str, secret_params: frozenset[str] = frozenset()) -> str:
    """The form of `url` that is matched and written.

    Scheme and host are lower-cased, an IDNA host is written in ASCII (punycode), the scheme's
    default port is dropped, ``%xx`` escapes of unreserved characters are decoded and the others
    upper-cased, and userinfo (``user:password@``) is left out: httpx already sends it as an
    ``authorization`` header, which the safety rules govern.  The value of every query parameter
    named in `secret_params` (case-insensitively) becomes ``<redacted>``.  Path, query order and
    repeated parameters are kept as sent.  A URL that cannot be parsed is returned unchanged.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return url
    scheme = parts.scheme.lower()
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else _ascii_host(host)  # IPv6 addresses in brackets
    netloc = host if port is None or _DEFAULT_PORTS.get(scheme) == port else f"{host}:{port}"
    path = _ESCAPE.sub(_normalize_escape, parts.path)
    query = _ESCAPE.sub(_normalize_escape, parts.query)
    if secret_params and query:
        items = []
        for item in query.split("&"):
            name, eq, _value = item.partition("=")
            items.append(f"{name}={REDACTED}" if eq and name.lower() in secret_params else item)
        query = "&".join(items)
    text = f"{scheme}://{netloc}{path}"
    if query or url.endswith("?"):
        text += f"?{query}"
    if parts.fragment:
        text += f"#{parts.fragment}"
    return text


@dataclass(frozen=True, slots=True)
class RequestData:
    """The parts of a live request that matching and recording need, library-neutral."""

    method: str
    url: str
    headers: Headers
    body: bytes
    host: str
    port: int | None


MatchKey = tuple[str, str, Headers, bytes]


def _content_type(headers: Iterable[tuple[str, str]]) -> str:
    for name, value in headers:
        if name == "content-type":
            return value
    return ""


def _boundary(content_type: str) -> str | None:
    mime, _, params = content_type.partition(";")
    if mime.strip().lower() != "multipart/form-data":
        return None
    for param in params.split(";"):
        key, _, value = param.strip().partition("=")
        if key.strip().lower() == "boundary" and value:
            return value.strip().strip('"')
    return None


def _is_json(content_type: str) -> bool:
    mime = content_type.partition(";")[0].strip().lower()
    return mime == "application/json" or mime.endswith("+json")


def normalized_body(headers: Iterable[tuple[str, str]], body: bytes) -> bytes:
    """The body as compared: canonical JSON, or multipart with its boundary replaced."""
    content_type = _content_type(headers)
    if body and _is_json(content_type):
        try:
            return orjson.dumps(orjson.loads(body), option=orjson.OPT_SORT_KEYS)
        except (orjson.JSONDecodeError, TypeError):
            return body
    boundary = _boundary(content_type)
    if boundary:
        return body.replace(boundary.encode("latin-1"), _BOUNDARY_TOKEN)
    return body


@dataclass(frozen=True, slots=True)
class MatchRules:
    """Which headers take part in matching.  `ignore` entries ending in "*" are prefixes."""

    ignore: frozenset[str]
    secret: frozenset[str]
    secret_query: frozenset[str] = frozenset()
    #: Ignored query parameters and JSON paths, and scrubs applied before comparing.
    rules: Rules = field(default_factory=Rules)

    def _ignored(self, name: str) -> bool:
        if name in self.ignore or name in self.secret:
            return True
        return any(p.endswith("*") and name.startswith(p[:-1]) for p in self.ignore)

    def ordinary_headers(self, headers: Iterable[tuple[str, str]]) -> Headers:
        """Compared headers, sorted into a multiset; a multipart boundary is blanked out."""
        kept = []
        for name, value in headers:
            if self._ignored(name):
                continue
            if name == "content-type":
                boundary = _boundary(value)
                if boundary:
                    value = value.replace(boundary, _BOUNDARY_TOKEN.decode())
            kept.append((name, value))
        return tuple(sorted(kept))

    def url(self, url: str) -> str:
        """The URL as compared: canonical, secrets redacted, then the rules applied."""
        url = canonical_url(url, self.secret_query)
        return self.rules.match_url(url) if self.rules else url

    def body(self, headers: Headers, body: bytes) -> bytes:
        """The body as compared (see `normalized_body`), after the rules."""
        if self.rules:
            body = self.rules.match_body(headers, body)
        return normalized_body(headers, body)

    def key(self, method: str, url: str, headers: Headers, body: bytes) -> MatchKey:
        if self.rules:
            headers = self.rules.scrub_request_headers(headers)
        digest = hashlib.blake2b(self.body(headers, body), digest_size=16).digest()
        return (method.upper(), self.url(url), self.ordinary_headers(headers), digest)

    def key_of_request(self, request: RequestData) -> MatchKey:
        return self.key(request.method, request.url, request.headers, request.body)

    def key_of_exchange(self, exchange: Exchange) -> MatchKey:
        return self.key(exchange.method, exchange.url, exchange.headers, exchange.body)


# --- explaining a miss ----------------------------------------------------------------------


def _by_name(headers: Headers) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, value in headers:
        out.setdefault(name, []).append(value)
    return out


def _differing_headers(request: Headers, recorded: Headers) -> list[str]:
    mine, theirs = _by_name(request), _by_name(recorded)
    return sorted(n for n in mine.keys() | theirs.keys() if mine.get(n) != theirs.get(n))


def _shown(headers: Headers, secret: frozenset[str]) -> dict[str, list[str]]:
    # A credential's value is never printed (`shown_header_value`): a miss goes to CI logs.
    return {
        n: [shown_header_value(n, v, secret) for v in vs] for n, vs in _by_name(headers).items()
    }


def _header_differences(request: Headers, recorded: Headers, secret: frozenset[str]) -> list[str]:
    mine, theirs = _shown(request, secret), _shown(recorded, secret)
    out = []
    for name in _differing_headers(request, recorded):
        a, b = mine.get(name), theirs.get(name)
        if b is None:
            out.append(f"header {name}: only in the request ({_short(', '.join(a or []))})")
        elif a is None:
            out.append(f"header {name}: only in the recording ({_short(', '.join(b))})")
        else:
            out.append(
                f"header {name}: request {_short(', '.join(a))}, recorded {_short(', '.join(b))}"
            )
    return out


def _short(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _pretty(headers: Headers, body: bytes) -> list[str]:
    if _is_json(_content_type(headers)):
        try:
            text = orjson.dumps(
                orjson.loads(body), option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2
            ).decode()
            return text.splitlines()
        except (orjson.JSONDecodeError, TypeError):
            pass
    return body.decode("utf-8", "replace").splitlines() or [""]


def body_diff(
    request_headers: Headers,
    request_body: bytes,
    headers: Headers,
    body: bytes,
    lines: int = 12,
    labels: tuple[str, str] = ("recorded", "request"),
) -> list[str]:
    """A short unified diff of two bodies (JSON pretty-printed), recorded (---) against the
    request (+++) unless `labels` names the sides otherwise; cut to `lines` lines."""
    diff = list(
        difflib.unified_diff(
            _pretty(headers, body),
            _pretty(request_headers, request_body),
            *labels,
            n=1,
            lineterm="",
        )
    )
    if len(diff) > lines:
        diff = [*diff[:lines], f"... ({len(diff) - lines} more diff lines)"]
    return diff


def differences(request: RequestData, exchange: Exchange, rules: MatchRules) -> list[str]:
    """Which parts of `request` differ from a recorded exchange, one line per part."""
    out = []
    if request.method.upper() != exchange.method.upper():
        out.append(f"method: request {request.method}, recorded {exchange.method}")
    if request.url != exchange.url:
        out.append(f"url: request {request.url}, recorded {exchange.url}")
    out.extend(
        _header_differences(
            rules.ordinary_headers(request.headers),
            rules.ordinary_headers(exchange.headers),
            rules.secret,
        )
    )
    if normalized_body(request.headers, request.body) != normalized_body(
        exchange.headers, exchange.body
    ):
        out.append("body differs:")
        out.extend(
            "    " + line
            for line in body_diff(request.headers, request.body, exchange.headers, exchange.body)
        )
    return out


# Body similarity is computed for this many candidates at most, on at most this many lines (or
# characters of a one-line body) of each, so explaining a miss stays fast at any size.
_SIMILARITY_CANDIDATES = 50
_SIMILARITY_LINES = 200
_SIMILARITY_CHARS = 1024


def _distance(key: MatchKey, other: MatchKey) -> tuple[bool, int]:
    """(whether the method or the path differs, how many parts differ: the method, the URL,
    each header name, the body)."""
    method = other[0] != key[0]
    path = other[1].split("?", 1)[0] != key[1].split("?", 1)[0]
    parts = method + (other[1] != key[1]) + len(_differing_headers(key[2], other[2]))
    return method or path, parts + (other[3] != key[3])


def _similarity(request: RequestData, exchange: Exchange) -> float:
    """How alike the two bodies are, 0 to 1 (JSON compared line by line, pretty-printed)."""
    mine: Sequence[str] = _pretty(request.headers, request.body)[:_SIMILARITY_LINES]
    theirs: Sequence[str] = _pretty(exchange.headers, exchange.body)[:_SIMILARITY_LINES]
    if len(mine) == 1 and len(theirs) == 1:
        mine, theirs = mine[0][:_SIMILARITY_CHARS], theirs[0][:_SIMILARITY_CHARS]
    return difflib.SequenceMatcher(None, mine, theirs, autojunk=False).ratio()


def explain_miss(
    request: RequestData, exchanges: Sequence[Exchange], rules: MatchRules, limit: int = 3
) -> list[tuple[int, Exchange, list[str]]]:
    """The `limit` recorded exchanges closest to `request`: (index, exchange, differences).

    Exchanges with the request's method and path come first, ranked by how many parts differ
    (method, URL, each header, body), then by how similar their body is to the request's, then
    by position in the cassette.
    """
    key = rules.key_of_request(request)
    scored = sorted(
        (*_distance(key, rules.key_of_exchange(exchange)), index)
        for index, exchange in enumerate(exchanges)
    )[:_SIMILARITY_CANDIDATES]
    ranked = sorted(
        scored, key=lambda s: (s[0], s[1], -_similarity(request, exchanges[s[2]]), s[2])
    )
    return [
        (i, exchanges[i], differences(request, exchanges[i], rules)) for _, _, i in ranked[:limit]
    ]
