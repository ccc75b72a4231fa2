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
from urllib.parse import unquote_plus, urlsplit

import idna
import orjson

from ._advice import Advice
from ._exchange import RequestData, is_json_type
from ._format import Exchange, Headers
from ._hosts import DEFAULT_PORTS
from ._policy import is_credential_header, shown_header_value, shown_url
from ._rules import Rules, header_wildcards

__all__ = [
    "DEFAULT_IGNORE_HEADERS",
    "HOP_BY_HOP_HEADERS",
    "REDACTED",
    "MatchKey",
    "Matcher",
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

#: Headers of one connection, not of the request (RFC 9110 7.6.1): never matched, whatever the
#: rules say, and neither is any header a `connection` header names.
HOP_BY_HOP_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "http2-settings",
    }
)

_BOUNDARY_TOKEN = b"<boundary>"

#: What a secret value is written as.
REDACTED = "<redacted>"

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
# no fragment); with the port and secret checks in `canonical_url` it is kept without parsing.
# Every request of the requests and aiohttp front ends comes through here (benchmark row "9.
# requests and aiohttp", whose requests target has no room), as does every exchange of a
# cassette when its index is built.
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
        if (port is None or int(port) != DEFAULT_PORTS[scheme]) and not (
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
    netloc = host if port is None or DEFAULT_PORTS.get(scheme) == port else f"{host}:{port}"
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


def normalized_body(headers: Iterable[tuple[str, str]], body: bytes) -> bytes:
    """The body as compared: canonical JSON, or multipart with its boundary replaced."""
    if not body:
        return body
    content_type = _content_type(headers)
    if is_json_type(content_type):
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


@dataclass(frozen=True, slots=True)
class Matcher:
    """How a session compares requests: which headers take part, which query values are
    secret, and the user's `Rules`.  The headers left out are the hop-by-hop ones, the `secret`
    ones, and those `ignore` (the volatile set) or `rules.ignore_headers` name, where ``*``
    matches any run of characters (``"*"`` alone: every header)."""

    ignore: frozenset[str]
    secret: frozenset[str]
    secret_query: frozenset[str] = frozenset()
    #: Ignored query parameters and JSON paths, and scrubs applied before comparing.
    rules: Rules = field(default_factory=Rules)
    # Worked out from the fields once: whether `rules` has anything to apply to URLs and
    # bodies, the header names left out, and one pattern for the entries holding a "*" (None:
    # there are none).
    _has_rules: bool = field(init=False, repr=False, compare=False)
    _names: frozenset[str] = field(init=False, repr=False, compare=False)
    _pattern: re.Pattern[str] | None = field(init=False, repr=False, compare=False)
    # Hashed once: the session finds the index to look a request up in by its matcher, on
    # every request (benchmark row "1. The same, sakura-http and the floor alternating in one
    # process"; docs/performance.md, "Plain code").
    _hash: int = field(init=False, repr=False, compare=False)
    # What each header list comes to (`ordinary_headers`), remembered: a client sends the same
    # list request after request, and a cassette holds a few distinct ones (benchmark row "1.
    # The same, sakura-http and the floor alternating in one process", async <= 1.10x: a
    # module-level cache keyed by matcher and list hashed the matcher in Python a second time
    # per request: 1.092x against 1.077x in one A/B; docs/performance.md, "Plain code").
    _compared: dict[Headers, Headers] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ignore = self.ignore | self.rules.ignore_headers
        object.__setattr__(self, "_compared", {})
        object.__setattr__(
            self, "_hash", hash((self.ignore, self.secret, self.secret_query, self.rules))
        )
        object.__setattr__(self, "_has_rules", self.rules.changes_values())
        object.__setattr__(self, "_names", HOP_BY_HOP_HEADERS | self.secret | ignore)
        object.__setattr__(self, "_pattern", header_wildcards(ignore))

    def _ignored(self, name: str) -> bool:
        if name in self._names:
            return True
        return self._pattern is not None and self._pattern.fullmatch(name) is not None

    def __hash__(self) -> int:
        return self._hash

    def ordinary_headers(self, headers: Iterable[tuple[str, str]]) -> Headers:
        """Compared headers, sorted into a multiset; a multipart boundary is blanked out."""
        if type(headers) is not tuple:
            return self._ordinary_headers(tuple(headers))
        compared = self._compared.get(headers)
        if compared is None:
            compared = self._ordinary_headers(headers)
            if len(self._compared) < _COMPARED_MEMO:
                self._compared[headers] = compared
        return compared

    def _ordinary_headers(self, headers: Headers) -> Headers:
        # The headers a `connection` header names belong to the connection too (hop-by-hop).
        hop = {
            token.strip().lower()
            for name, value in headers
            if name == "connection"
            for token in value.split(",")
        }
        kept = []
        for name, value in headers:
            if self._ignored(name) or name in hop:
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
        # `url` is canonical already.  With no rules and no body nothing is called: the replayed
        # GETs of benchmark row "1. The same, sakura-http and the floor alternating".
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


_COMPARED_MEMO = 4096  # header lists a matcher remembers (`Matcher.ordinary_headers`)


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
    if is_json_type(_content_type(headers)):
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


def compared(matcher: Matcher, method: str, url: str, headers: Headers, body: bytes) -> Compared:
    """The parts of a request or exchange as `matcher` compares them (see `Matcher.key`)."""
    if matcher._has_rules:
        headers = matcher.rules.scrub_request_headers(headers)
    return Compared(
        method.upper(),
        matcher.url(url),
        headers,
        matcher.ordinary_headers(headers),
        matcher.body(headers, body),
    )


def differences(
    request: RequestData,
    exchange: Exchange,
    matcher: Matcher,
    advice: Advice | None = None,
    siblings: Sequence[Exchange] = (),
    *,
    hinted: bool = True,
) -> list[str]:
    """Which parts of `request` differ from a recorded exchange, one line per part, after the
    matching rules are applied to both sides; then, if `hinted`, what to do about them (see
    `hints`; `siblings` are the recorded exchanges of the same endpoint)."""
    mine = compared(matcher, request.method, request.url, request.headers, request.body)
    theirs = compared(matcher, exchange.method, exchange.url, exchange.headers, exchange.body)
    out = []
    if mine.method != theirs.method:
        out.append(f"method: request {request.method}, recorded {exchange.method}")
    if mine.url != theirs.url:
        shown = (
            shown_url(mine.url, matcher.secret_query),
            shown_url(theirs.url, matcher.secret_query),
        )
        line = f"url: request {shown[0]}, recorded {shown[1]}"
        if shown[0] == shown[1]:  # only values `shown_url` hides differ: name their parameters
            a, b = _query_fields(mine.url), _query_fields(theirs.url)
            names = [f"`{n}`" for n in dict.fromkeys([*a, *b]) if a.get(n) != b.get(n)]
            one = len(names) == 1
            line += (
                f" (the hidden value{'' if one else 's'} of query parameter{'' if one else 's'} "
                f"{', '.join(names)} {'differs' if one else 'differ'})"
            )
        out.append(line)
    out.extend(_header_differences(mine.ordinary, theirs.ordinary, matcher.secret))
    if mine.body != theirs.body:
        out.append("body differs:")
        diff = body_diff(mine.headers, mine.body, theirs.headers, theirs.body)
        out.extend("    " + line for line in diff)
    if hinted:
        out.extend(hints(mine, theirs, matcher, Advice() if advice is None else advice, siblings))
    return out


#: Request headers that carry the API version an SDK asks for, and the client option pinning it.
VERSION_HEADERS = {"anthropic-version": "Anthropic", "openai-version": "OpenAI"}


class _Part(NamedTuple):
    """One differing part of a request: a query parameter, a JSON path or a header."""

    kind: str  # "query", "json" or "header"
    name: str  # as a rule names it: the parameter, the JSON path, the header name
    request: object  # its value, `_MISSING` where the part is absent
    recorded: object
    steps: tuple[str | int, ...] = ()  # a JSON path's keys and indexes

    @property
    def shown(self) -> str:
        what = {"query": "query parameter ", "header": "header ", "json": ""}[self.kind]
        return f"{what}`{self.name}`"


_MISSING = object()
# A body differing at more JSON paths than this is named as a whole ("the body").
_HINT_PATHS = 12
# At most this many recorded exchanges are read to see whether a value changes on every call.
_HINT_SIBLINGS = 200

# What a per-run value looks like, first match wins: (what it is, the pattern its text matches
# whole).  Tokens need letters and digits, so words and small numbers never look per-run.
_PER_RUN_SHAPES = (
    ("a UUID", r"(?:[A-Za-z][\w.:-]*[:_-])?[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}"),
    ("a timestamp", r"1\d{9}(?:\d{3}|\d{6}|\d{9})?(?:\.\d+)?"),
    (
        "a timestamp",
        r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d)?",
    ),
    ("a date", r"\d{4}-\d\d-\d\d"),
    ("a date", r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT"),
    ("an id", r"[A-Za-z]{2,16}[_-](?=[A-Za-z]*\d)[A-Za-z0-9]{8,}"),  # toolu_01..., chatcmpl-...
    ("a hex value", r"(?:0x)?[0-9a-fA-F]{16,}"),
    ("a token", r"(?=[^\d]*\d)(?=[^A-Za-z]*[A-Za-z])[A-Za-z0-9+/_-]{16,}={0,2}"),  # base64, ...
)
# Names that say what they hold (compared in lower case, without "_" and "-").
_PER_RUN_NAMES = frozenset(
    {
        "nonce",
        "ts",
        "timestamp",
        "requestid",
        "traceid",
        "spanid",
        "correlationid",
        "idempotencykey",
        "cachebuster",
    }
)
# What a request says rather than how it is sent: never suggested for ignoring, whatever its
# value looks like (the last key of a JSON path, or a query parameter's name).
_CONTENT_NAMES = frozenset(
    {
        "messages",
        "message",
        "prompt",
        "system",
        "tools",
        "tool_choice",
        "functions",
        "content",
        "contents",
        "parts",
        "text",
        "input",
        "instructions",
        "query",
        "body",
    }
)
# A value a recording shows changing between calls must at least look like a token.
_TOKEN_LIKE = r"(?=[^\d]*\d)[\w.:+/=-]{6,128}"


def _base(url: str) -> str:
    return url.partition("?")[0]


def hints(
    mine: Compared,
    theirs: Compared,
    matcher: Matcher,
    advice: Advice,
    siblings: Sequence[Exchange] = (),
) -> list[str]:
    """What to do about the differences between a request and a recorded exchange of the same
    method and path: a rule for the parts that look like per-run values (`_per_run`), the
    re-record command for anything else (the request changed), and the SDK's API version when
    an SDK upgrade changed it.  Nothing for another endpoint."""
    if mine.method != theirs.method or _base(mine.url) != _base(theirs.url):
        return []
    parts = [*_query_parts(mine.url, theirs.url), *_header_parts(mine.ordinary, theirs.ordinary)]
    body_changed = False
    if mine.body != theirs.body:
        json_parts = _json_parts(mine, theirs)
        body_changed = json_parts is None
        parts += json_parts or []
    out = []
    versions = [p for p in parts if p.kind == "header" and p.name in VERSION_HEADERS]
    for part in versions:
        if part.request is _MISSING:
            continue  # the client stopped sending it: the request changed
        parts.remove(part)
        sdk = VERSION_HEADERS[part.name]
        if part.recorded is _MISSING:
            out.append(
                f"the cassette was recorded without {part.name} (filtered out, or converted "
                f"from another tool), which the {sdk} SDK sends; re-record with "
                f"{advice.rerecord()}"
            )
        else:
            only = "" if parts or body_changed or len(versions) > 1 else "only "
            out.append(
                f"{only}{part.name} differs: it is the API version the {sdk} SDK asks for, so "
                f"an SDK upgrade changed it. Re-record the cassette with {advice.rerecord()}, "
                f'or pin the header in the client: default_headers={{"{part.name}": '
                f'"{part.recorded}"}}'
            )
    sequence = _Siblings(matcher, siblings)
    volatile = {id(p): why for p in parts if (why := _per_run(p, matcher, sequence))}
    changed = [p for p in parts if id(p) not in volatile]
    if volatile:
        named = [p for p in parts if id(p) in volatile]
        one = len(named) == 1
        reasons = ", ".join(dict.fromkeys(volatile.values()))
        looks = (
            f"it looks like a per-run value ({reasons})"
            if one
            else f"they look like per-run values ({reasons})"
        )
        names = ", ".join(p.shown for p in named)
        if changed or body_changed or out:
            found = f"{names} {looks.partition(' ')[2]}"
        else:
            found = f"only {names} {'differs' if one else 'differ'}, and {looks}"
        out.append(
            f"{found}; if {'it changes' if one else 'they change'} on every run, ignore "
            f"{'it' if one else 'them'} with {_rule_text(named)}"
        )
    if changed or body_changed:
        what = [p.shown for p in changed[:5]]
        if len(changed) > 5:
            what.append(f"and {len(changed) - 5} more")
        if body_changed:
            what.append("the body")
        out.append(
            f"the request changed: {', '.join(what)} "
            f"{'differs' if len(changed) + body_changed == 1 else 'differ'}; if the change is "
            f"intended, re-record with {advice.rerecord()}"
        )
    return out


def _one(values: list[str] | None) -> object:
    return _MISSING if values is None else values[0] if len(values) == 1 else ", ".join(values)


def _query_fields(url: str) -> dict[str, list[str]]:
    query = url.partition("?")[2].partition("#")[0]
    fields: dict[str, list[str]] = {}
    for item in query.split("&") if query else []:
        name, _, value = item.partition("=")
        fields.setdefault(name, []).append(value)
    return fields


def _query_parts(url: str, other: str) -> list[_Part]:
    mine, theirs = _query_fields(url), _query_fields(other)
    return [
        _Part("query", name, _one(mine.get(name)), _one(theirs.get(name)))
        for name in sorted(mine.keys() | theirs.keys())
        if mine.get(name) != theirs.get(name)
    ]


def _header_parts(request: Headers, recorded: Headers) -> list[_Part]:
    mine, theirs = _by_name(request), _by_name(recorded)
    return [
        _Part("header", name, _one(mine.get(name)), _one(theirs.get(name)))
        for name in _differing_headers(request, recorded)
    ]


def _json(side: Compared) -> object:
    """The parsed JSON body of one side (`_MISSING` when it is not JSON)."""
    if not side.body or not is_json_type(_content_type(side.headers)):
        return _MISSING
    try:
        return orjson.loads(side.body)
    except orjson.JSONDecodeError:
        return _MISSING


def _path_text(steps: tuple[str | int, ...]) -> str:
    text = ""
    for step in steps:
        text += f"[{step}]" if isinstance(step, int) else f".{step}" if text else step
    return text


def _json_parts(mine: Compared, theirs: Compared) -> list[_Part] | None:
    """The JSON paths two bodies differ at (None: not both JSON, too many, or the whole)."""
    a, b = _json(mine), _json(theirs)
    if a is _MISSING or b is _MISSING:
        return None
    parts: list[_Part] = []

    def walk(x: object, y: object, steps: tuple[str | int, ...]) -> None:
        if len(parts) > _HINT_PATHS:
            return
        if isinstance(x, dict) and isinstance(y, dict):
            for key in sorted(x.keys() | y.keys()):
                walk(x.get(key, _MISSING), y.get(key, _MISSING), (*steps, key))
        elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
            for index, (item, other) in enumerate(zip(x, y, strict=True)):
                walk(item, other, (*steps, index))
        elif x != y or type(x) is not type(y):
            parts.append(_Part("json", _path_text(steps), x, y, steps))

    try:
        walk(a, b, ())
    except RecursionError:  # nested too deep to name a path in
        return None
    if not parts or len(parts) > _HINT_PATHS or any(not p.steps for p in parts):
        return None
    return parts


def _scalar(value: object) -> str | None:
    """The text of a value a rule could ignore: a string or a number, not a structure."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return None


def _shape(text: str) -> str | None:
    """What a value looks like, when that is something made anew on every run."""
    if len(text) > 256:
        return None
    for what, pattern in _PER_RUN_SHAPES:
        if re.fullmatch(pattern, text):
            if what == "a token" and len(set(text)) < 10:
                continue
            return what
    return None


def _name_of(part: _Part) -> str:
    if part.kind != "json":
        return part.name
    keys = [step for step in part.steps if isinstance(step, str)]
    return keys[-1] if keys else ""


def _expressible(part: _Part) -> bool:
    """Whether a rule can name the part: a JSON path's keys must be plain."""
    if part.kind != "json":
        return bool(part.name)
    return all(
        isinstance(s, int) or (s and not any(c in s for c in ".[]*")) for s in part.steps
    ) and isinstance(part.steps[0], str)


def _in_force(part: _Part, matcher: Matcher) -> bool:
    if part.kind == "query":
        return part.name in matcher.rules.ignore_query
    if part.kind == "header":
        return matcher._ignored(part.name)
    return any(str(path) == part.name for path in matcher.rules.ignore_json)


def _per_run(part: _Part, matcher: Matcher, sequence: _Siblings) -> str | None:
    """Why `part` looks like a value made anew on every run (None: it does not, so the request
    changed).  Both sides must hold it as a string or a number; what a request says (a message,
    a prompt, the system text, a tool list, the whole body) never qualifies."""
    name = _name_of(part).lower()
    if name in _CONTENT_NAMES or not _expressible(part) or _in_force(part, matcher):
        return None
    if part.kind != "json" and is_credential_header(name):
        return None  # a credential is declared secret, never merely ignored
    mine, theirs = _scalar(part.request), _scalar(part.recorded)
    if mine is None or theirs is None:
        return None
    if part.kind == "query":
        mine, theirs = unquote_plus(mine), unquote_plus(theirs)
    shape = _shape(mine)
    if shape is not None and _shape(theirs) is not None:
        return shape
    if any(c.isspace() for c in mine + theirs):
        return None  # text
    if name == "_" or re.sub(r"[_-]", "", name) in _PER_RUN_NAMES:
        return "by its name"
    if sequence.varies(part, mine):
        return "it differs in every recorded exchange"
    return None


class _Siblings:
    """The recorded exchanges of the request's endpoint, read (once) to see whether a part's
    value changes from one call to the next."""

    def __init__(self, matcher: Matcher, exchanges: Sequence[Exchange]) -> None:
        self._matcher = matcher
        self._exchanges = exchanges[:_HINT_SIBLINGS]
        self._sides: list[tuple[Compared, object]] | None = None

    def _read(self) -> list[tuple[Compared, object]]:
        if self._sides is None:
            matcher = self._matcher
            self._sides = []
            for exchange in self._exchanges:
                side = compared(
                    matcher, exchange.method, exchange.url, exchange.headers, exchange.body
                )
                self._sides.append((side, _json(side)))
        return self._sides

    def varies(self, part: _Part, value: str) -> bool:
        """Whether the recorded exchanges hold two or more values of `part`, all token-like and
        none of them `value` (which must look like a token too)."""
        if not re.fullmatch(_TOKEN_LIKE, value):
            return False
        seen: set[str] = set()
        for side, parsed in self._read():
            if part.kind == "query":
                found = _one(_query_fields(side.url).get(part.name))
            elif part.kind == "header":
                found = _one(_by_name(side.ordinary).get(part.name))
            else:
                found = _at(parsed, part.steps)
            text = _scalar(found)
            if text is None:
                continue
            if part.kind == "query":
                text = unquote_plus(text)
            if not re.fullmatch(_TOKEN_LIKE, text):
                return False
            seen.add(text)
        return len(seen) >= 2 and value not in seen


def _at(value: object, steps: tuple[str | int, ...]) -> object:
    for step in steps:
        if isinstance(value, dict) and isinstance(step, str) and step in value:
            value = value[step]
            continue
        if isinstance(value, list) and isinstance(step, int) and step < len(value):
            value = value[step]
            continue
        return _MISSING
    return value


def _rule_text(parts: Iterable[_Part]) -> str:
    """The `Rules(...)` that leaves `parts` out of matching."""
    fields = []
    chosen = list(parts)
    for kind, option in (
        ("query", "ignore_query"),
        ("json", "ignore_json"),
        ("header", "ignore_headers"),
    ):
        names = [f'"{p.name}"' for p in chosen if p.kind == kind]
        if names:
            fields.append(f"{option}=[{', '.join(names)}]")
    return f"Rules({', '.join(fields)})"


# How alike the differing values are is measured for this many candidates at most (chosen
# first by a cheaper measure over all of them), and what differs in two values is aligned
# character by character only when it is this short, so explaining a miss stays fast at any
# size.
_SIMILARITY_CANDIDATES = 50
_ALIGNED = 256


def _distance(key: MatchKey, other: MatchKey) -> tuple[int, int]:
    """(0 for the same method and path, 1 for the same path and another method, 2 for another
    path; how many parts differ: the method, the URL, each header name, the body)."""
    method = other[0] != key[0]
    path = _base(other[1]) != _base(key[1])
    parts = method + (other[1] != key[1]) + len(_differing_headers(key[2], other[2]))
    return 2 if path else int(method), parts + (other[3] != key[3])


def _shared_ends(a: bytes, b: bytes) -> tuple[int, int]:
    """The lengths of the longest common start of `a` and `b`, and of the longest common end
    of what follows it (binary searches: the slices are compared in C)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    start = low
    low, high = 0, min(len(a), len(b)) - start
    while low < high:
        middle = (low + high + 1) // 2
        if a[len(a) - middle :] == b[len(b) - middle :]:
            low = middle
        else:
            high = middle - 1
    return start, low


def _apart(a: bytes, b: bytes, *, align: bool = True) -> int:
    """How much of two values is not shared: their common start and end set aside, the bytes
    of what remains, less those a short remainder's alignment pairs (with `align`)."""
    start, end = _shared_ends(a, b)
    a, b = a[start : len(a) - end], b[start : len(b) - end]
    if not (align and a and b and len(a) <= _ALIGNED and len(b) <= _ALIGNED):
        return len(a) + len(b)
    import difflib  # see body_diff

    paired = difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()
    return len(a) + len(b) - 2 * sum(block.size for block in paired)


def _json_apart(a: object, b: object) -> int:
    """`_apart` summed over the JSON values that differ, found by walking both together."""
    if isinstance(a, dict) and isinstance(b, dict):
        return sum(
            _json_apart(a.get(key, _MISSING), b.get(key, _MISSING)) for key in a.keys() | b.keys()
        )
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return sum(_json_apart(x, y) for x, y in zip(a, b, strict=True))
    if a == b and type(a) is type(b):
        return 0
    mine = b"" if a is _MISSING else orjson.dumps(a, option=orjson.OPT_SORT_KEYS)
    theirs = b"" if b is _MISSING else orjson.dumps(b, option=orjson.OPT_SORT_KEYS)
    return _apart(mine, theirs)


def _dissimilarity(mine: Compared, theirs: Compared) -> int:
    """How far apart the values of the parts that differ are (the URL, each header, the body;
    a JSON body value by value): a small edit of one value is nearer than another value."""
    total = 0
    if mine.url != theirs.url:
        total += _apart(mine.url.encode(), theirs.url.encode())
    headers, other = _by_name(mine.ordinary), _by_name(theirs.ordinary)
    for name in _differing_headers(mine.ordinary, theirs.ordinary):
        values = "\n".join(headers.get(name, ())), "\n".join(other.get(name, ()))
        total += _apart(values[0].encode(), values[1].encode())
    if mine.body != theirs.body:
        a, b = _json(mine), _json(theirs)
        try:
            if a is _MISSING or b is _MISSING:
                raise RecursionError
            total += _json_apart(a, b)
        except RecursionError:  # not JSON, or nested too deep to walk
            total += _apart(mine.body, theirs.body)
    return total


def explain_miss(
    request: RequestData,
    exchanges: Sequence[Exchange],
    matcher: Matcher,
    limit: int = 3,
    *,
    advice: Advice | None = None,
) -> list[tuple[int, Exchange, list[str]]]:
    """The `limit` recorded exchanges closest to `request`: (index, exchange, differences).

    Exchanges with the request's method and path come first, then those with its path and
    another method; other URLs are listed only when no exchange shares the path.  Among them,
    the fewer parts differ (method, URL, each header, body) the nearer, then the more alike the
    differing values are (`_dissimilarity`: a small edit of one recorded question ranks that
    question first), then the earlier in the cassette.  The nearest one's differences end with
    what to do about them (`hints`), the re-record command worded by `advice`.
    """
    key = matcher.key_of_request(request)
    keys = [matcher.key_of_exchange(exchange) for exchange in exchanges]
    scored = [(*_distance(key, other), index) for index, other in enumerate(keys)]
    if any(tier < 2 for tier, _, _ in scored):  # some share the path: other URLs are not near
        scored = [s for s in scored if s[0] < 2]
    best = min((s[:2] for s in scored), default=None)

    def roughly(score: tuple[int, int, int]) -> tuple[int, int, int, int]:
        # Over every candidate, cheaply: how much of the bodies as sent is not shared.
        body = exchanges[score[2]].body if score[:2] == best else b""
        return score[0], score[1], _apart(request.body, body, align=False), score[2]

    mine = compared(matcher, request.method, request.url, request.headers, request.body)

    def nearness(score: tuple[int, int, int]) -> tuple[int, int, int, int]:
        exchange = exchanges[score[2]]
        theirs = compared(matcher, exchange.method, exchange.url, exchange.headers, exchange.body)
        return score[0], score[1], _dissimilarity(mine, theirs), score[2]

    candidates = sorted(scored, key=roughly)[:_SIMILARITY_CANDIDATES]
    ranked = sorted(candidates, key=nearness)
    out = []
    for position, (_, _, i) in enumerate(ranked[:limit]):
        endpoint = (keys[i][0], _base(keys[i][1]))
        siblings = [
            e for e, k in zip(exchanges, keys, strict=True) if (k[0], _base(k[1])) == endpoint
        ]
        found = differences(request, exchanges[i], matcher, advice, siblings, hinted=position == 0)
        out.append((i, exchanges[i], found))
    return out
