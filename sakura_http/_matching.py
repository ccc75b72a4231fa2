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

import functools
import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple
from urllib.parse import urlsplit

import idna
import orjson

from ._format import Exchange, Headers
from ._policy import shown_header_value
from ._rules import Rules
from ._value import Value

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
_MEMO_SIZE = 4096

#: What a secret value is written as.
REDACTED = "<redacted>"

_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
_ESCAPE = r"%([0-9A-Fa-f]{2})"  # compiled on first use (`re`'s cache), not on import
# Decoded in the canonical form: the unreserved characters, and "<" and ">", which httpx escapes
# but which carry no meaning in a URL, so the `<redacted>` a cassette holds matches the
# `%3Credacted%3E` a client sends after following a redacted redirect.
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~<>")


def _normalize_escape(match: re.Match[str]) -> str:
    byte = int(match.group(1), 16)
    return chr(byte) if byte in _UNRESERVED else f"%{byte:02X}"


def _ascii_host(host: str) -> str:
    if host.isascii():
        return host
    try:
        return idna.encode(host, uts46=True).decode("ascii")
    except idna.IDNAError:
        try:
            return host.encode("idna").decode("ascii")
        except UnicodeError:  # not a valid name at all: compared as written
            return host


# A URL this matches is its own canonical form (lower-case ASCII host, no escapes, no userinfo,
# no fragment); with the port and secret checks in `canonical_url` it skips parsing, which would
# otherwise be most of the cost of indexing a large cassette or replaying one request.
_PLAIN_URL = re.compile(
    r"(https?)://[a-z0-9.-]+(?::([1-9][0-9]*))?(?:/[!-\x22$&->@-~]*)?(?:\?([!-\x22$&-~]*))?"
)


def canonical_url(url: str, secret_params: frozenset[str] = frozenset()) -> str:
    """The form of `url` that is matched and written.

    Scheme and host are lower-cased, an IDNA host is written in ASCII (punycode), the scheme's
    default port is dropped, ``%xx`` escapes of unreserved characters (and of ``<`` and ``>``)
    are decoded and the others upper-cased, and userinfo (``user:password@``) is left out:
    httpx already sends it as an ``authorization`` header, which the safety rules govern.  The
    value of every query parameter named in `secret_params` (case-insensitively) becomes
    ``<redacted>``.  Path, query order and repeated parameters are kept as sent.  A URL that
    cannot be parsed is returned unchanged.
    """
    plain = _PLAIN_URL.fullmatch(url)
    if plain is not None:
        scheme, port, query = plain.groups()
        if (port is None or int(port) != _DEFAULT_PORTS[scheme]) and not (
            query is not None and secret_params
        ):
            return url
    return _canonical_url(url, secret_params)


@functools.lru_cache(maxsize=8192)
def _canonical_url(url: str, secret_params: frozenset[str]) -> str:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return url
    scheme = parts.scheme.lower()
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else _ascii_host(host)  # IPv6 addresses in brackets
    netloc = host if port is None or _DEFAULT_PORTS.get(scheme) == port else f"{host}:{port}"
    escape = re.compile(_ESCAPE)
    path = escape.sub(_normalize_escape, parts.path)
    query = escape.sub(_normalize_escape, parts.query)
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


class RequestData(NamedTuple):
    """The parts of a live request that matching and recording need, library-neutral.  `url`
    is in its canonical form (`canonical_url`, with the secret query parameters redacted).

    A named tuple (immutable, like the frozen dataclasses elsewhere) because one is built for
    every request: it is the cheapest record Python makes."""

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
    if not body:
        return body
    content_type = _content_type(headers)
    if _is_json(content_type):
        try:
            return orjson.dumps(orjson.loads(body), option=orjson.OPT_SORT_KEYS)
        except (orjson.JSONDecodeError, TypeError):
            return body
    boundary = _boundary(content_type)
    if boundary:
        # The header is text but the body is bytes: a client may have encoded a non-ASCII
        # boundary either way, and one outside Latin-1 has only its UTF-8 form.
        for encoding in ("utf-8", "latin-1"):
            try:
                body = body.replace(boundary.encode(encoding), _BOUNDARY_TOKEN)
            except UnicodeEncodeError:
                continue
    return body


@dataclass(frozen=True, slots=True, eq=False, repr=False)  # ==, repr: Value's; its own hash
class MatchRules(Value):
    """Which headers take part in matching.  `ignore` entries ending in "*" are prefixes."""

    ignore: frozenset[str]
    secret: frozenset[str]
    secret_query: frozenset[str] = frozenset()
    #: Ignored query parameters and JSON paths, and scrubs applied before comparing.
    rules: Rules = field(default_factory=Rules)
    # A key is computed for every exchange when a cassette opens and for every request, over
    # header lists that recur (one client, one set of headers): remember what each name and
    # each header tuple came to.  Bounded, for clients that make up names or values.
    _ignored_names: dict[str, bool] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _ordinary: dict[Headers, Headers] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    # The rules key a session's indexes and are looked up on every request: hash them once,
    # and say once whether `rules` has anything to apply (asked three times per key).
    _hash: int = field(default=0, init=False, repr=False, compare=False)
    _has_rules: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "_hash", hash((self.ignore, self.secret, self.secret_query, self.rules))
        )
        object.__setattr__(self, "_has_rules", bool(self.rules))

    def __hash__(self) -> int:
        return self._hash

    def _ignored(self, name: str) -> bool:
        if name in self.ignore or name in self.secret:
            return True
        return any(p.endswith("*") and name.startswith(p[:-1]) for p in self.ignore)

    def ordinary_headers(self, headers: Iterable[tuple[str, str]]) -> Headers:
        """Compared headers, sorted into a multiset; a multipart boundary is blanked out."""
        if type(headers) is not tuple:
            return self._ordinary_headers(headers)
        ordinary = self._ordinary.get(headers)
        if ordinary is None:
            ordinary = self._ordinary_headers(headers)
            if len(self._ordinary) < _MEMO_SIZE:
                self._ordinary[headers] = ordinary
        return ordinary

    def _ordinary_headers(self, headers: Iterable[tuple[str, str]]) -> Headers:
        known = self._ignored_names
        kept = []
        for name, value in headers:
            ignored = known.get(name)
            if ignored is None:
                ignored = self._ignored(name)
                if len(known) < _MEMO_SIZE:
                    known[name] = ignored
            if ignored:
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
        return self.rules.match_url(url) if self._has_rules else url

    def body(self, headers: Headers, body: bytes) -> bytes:
        """The body as compared (see `normalized_body`), after the rules."""
        if self._has_rules:
            body = self.rules.match_body(headers, body)
        return normalized_body(headers, body)

    def key(self, method: str, url: str, headers: Headers, body: bytes) -> MatchKey:
        """The match key of a request or exchange with these parts."""
        return self._key(method, canonical_url(url, self.secret_query), headers, body)

    def _key(self, method: str, url: str, headers: Headers, body: bytes) -> MatchKey:
        # `url` is canonical already.  The common case (no rules, no body) costs no calls.
        if self._has_rules:
            headers = self.rules.scrub_request_headers(headers)
            url = self.rules.match_url(url)
        compared = self.body(headers, body) if body or self._has_rules else body
        digest = hashlib.blake2b(compared, digest_size=16).digest() if compared else b""
        return (method.upper(), url, self.ordinary_headers(headers), digest)

    def key_of_request(self, request: RequestData) -> MatchKey:
        # A request's URL is canonical by construction (see `RequestData`).
        return self._key(request.method, request.url, request.headers, request.body)

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


def pretty_body(headers: Headers, body: bytes) -> list[str]:
    """`body` as lines for people: JSON pretty-printed with sorted keys, other text as it is
    (undecodable bytes replaced).  The one pretty-printer of miss messages and the CLI."""
    return _pretty(headers, body)


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
    import difflib  # only a miss or the CLI explains a difference: kept off the import path

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


class Compared(NamedTuple):
    """One side of a miss as matching sees it: after the secrets, the scrubs and the ignores of
    the rules, so an ignored or scrubbed value is never shown as a difference."""

    method: str
    url: str
    headers: Headers  # the scrubbed header list (its content type says how to read the body)
    ordinary: Headers  # the compared headers
    body: bytes  # the body as compared


def compared(rules: MatchRules, method: str, url: str, headers: Headers, body: bytes) -> Compared:
    """The parts of a request or exchange as `rules` compare them (see `MatchRules.key`)."""
    if rules._has_rules:
        headers = rules.rules.scrub_request_headers(headers)
    return Compared(
        method.upper(),
        rules.url(url),
        headers,
        rules.ordinary_headers(headers),
        rules.body(headers, body),
    )


def differences(request: RequestData, exchange: Exchange, rules: MatchRules) -> list[str]:
    """Which parts of `request` differ from a recorded exchange, one line per part, after the
    matching rules are applied to both sides; ends with the rule that would make them match,
    when one would."""
    mine = compared(rules, request.method, request.url, request.headers, request.body)
    theirs = compared(rules, exchange.method, exchange.url, exchange.headers, exchange.body)
    out = []
    if mine.method != theirs.method:
        out.append(f"method: request {request.method}, recorded {exchange.method}")
    if mine.url != theirs.url:
        out.append(f"url: request {mine.url}, recorded {theirs.url}")
    header_lines = _header_differences(mine.ordinary, theirs.ordinary, rules.secret)
    out.extend(header_lines)
    body_differs = mine.body != theirs.body
    if body_differs:
        out.append("body differs:")
        diff = body_diff(mine.headers, mine.body, theirs.headers, theirs.body)
        out.extend("    " + line for line in diff)
    out.extend(
        _rule_hints(
            mine,
            theirs,
            url_differs=mine.url != theirs.url,
            headers=[line.split(":", 1)[0].removeprefix("header ") for line in header_lines],
            body_differs=body_differs,
            method_differs=mine.method != theirs.method,
        )
    )
    return out


#: Request headers that carry the API version an SDK asks for, and the client option pinning it.
VERSION_HEADERS = {"anthropic-version": "Anthropic", "openai-version": "OpenAI"}


def _rule_hints(
    request: Compared,
    exchange: Compared,
    *,
    url_differs: bool,
    headers: list[str],
    body_differs: bool,
    method_differs: bool,
) -> list[str]:
    """What to do when only one kind of part differs: the rule or fix that makes it match."""
    parts = [url_differs, bool(headers), body_differs, method_differs]
    if sum(parts) != 1:
        return []
    if headers and all(name in VERSION_HEADERS for name in headers):
        name = headers[0]
        recorded = dict(exchange.headers).get(name, "")
        return [
            f"only {name} differs: it is the API version the {VERSION_HEADERS[name]} SDK asks "
            "for, so an SDK upgrade changed it. Re-record the cassette, or pin the header in "
            f'the client: default_headers={{"{name}": "{recorded}"}}'
        ]
    if url_differs:
        names = _differing_query(request.url, exchange.url)
        if names is not None:
            shown = ", ".join(f"`{n}`" for n in names)
            listed = ", ".join(f'"{n}"' for n in names)
            return [
                f"only query parameter {shown} differs; if it changes on every run, ignore it "
                f"with Rules(ignore_query=[{listed}])"
            ]
    if body_differs:
        paths = _differing_json(request.headers, request.body, exchange.headers, exchange.body)
        if paths:
            shown = ", ".join(f"`{p}`" for p in paths)
            listed = ", ".join(f'"{p}"' for p in paths)
            return [
                f"only {shown} differs; if it changes on every run, ignore it with "
                f"Rules(ignore_json=[{listed}])"
            ]
    return []


def _differing_query(url: str, other: str) -> list[str] | None:
    """The query parameters two URLs with the same base differ in (None: the bases differ)."""
    base, _, query = url.partition("?")
    other_base, _, other_query = other.partition("?")
    if base != other_base:
        return None

    def parse(text: str) -> dict[str, list[str]]:
        fields: dict[str, list[str]] = {}
        for item in text.split("&") if text else []:
            name, _, value = item.partition("=")
            fields.setdefault(name, []).append(value)
        return fields

    mine, theirs = parse(query), parse(other_query)
    names = sorted(n for n in mine.keys() | theirs.keys() if mine.get(n) != theirs.get(n))
    return names or None


def _differing_json(
    headers: Headers, body: bytes, other_headers: Headers, other_body: bytes, limit: int = 3
) -> list[str]:
    """The JSON paths two bodies differ at, when they are few (else [])."""
    if not (_is_json(_content_type(headers)) and _is_json(_content_type(other_headers))):
        return []
    try:
        mine, theirs = orjson.loads(body), orjson.loads(other_body)
    except orjson.JSONDecodeError:
        return []
    paths: list[str] = []

    def walk(a: object, b: object, path: str) -> None:
        if len(paths) > limit:
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(a.keys() | b.keys()):
                walk(a.get(key, _MISSING), b.get(key, _MISSING), f"{path}.{key}" if path else key)
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                walk(x, y, f"{path}[{i}]")
        elif a != b:
            paths.append(path or "(the whole body)")

    walk(mine, theirs, "")
    return paths if 0 < len(paths) <= limit and "(the whole body)" not in paths else []


_MISSING = object()


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
    import difflib  # see body_diff

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
