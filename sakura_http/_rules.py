"""Matching rules and scrubbing: ignore what changes every run, scrub what must never be written.

`Rules` is one declarative value shared by every front end (the transport, the pytest plugin,
the proxy, the CLI):

* ``ignore_query``, ``ignore_json``, ``ignore_headers``, ``ignore_body``: parts of a request
  left out of matching (still recorded as sent); ``Rules.method_and_url()`` leaves out every
  header and the body, as vcrpy matches;
* ``scrub``: `Scrub` steps that rewrite values before anything is written (and the live request
  the same way before it is matched, so a scrubbed value may differ between runs);
* ``before_record``: a hook for what the declarative rules cannot express.  It sees the exchange
  after the safety rules and the scrubs; the safety rules run again on its result, so it cannot
  put a secret or an over-size body back.

JSON paths are a small syntax: dotted keys (``metadata.user_id``), list indexes (``items[0]``)
and every item of a list (``messages[*].id``).  A path that matches nothing is not an error; a
malformed path or regular expression is a `ConfigurationError` (a `ValueError`) at construction.

The caller always receives the live, unscrubbed response.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, AnyStr

import orjson

from ._exceptions import ConfigurationError
from ._exchange import is_json_type, media_type
from ._format import Exchange, Headers
from ._policy import charset_of

__all__ = [
    "EMAIL_PATTERN",
    "LLM_VOLATILE_RESPONSE_HEADERS",
    "JsonPath",
    "Rules",
    "Scrub",
    "header_wildcards",
    "scrub_chunked",
    "scrub_written",
    "with_notes",
]

SCRUBBED = "<scrubbed>"
_GONE: Any = object()  # a list item an ignored path names, until the list is swept

#: Response headers the anthropic and openai APIs (and their CDN) set anew on every call.
LLM_VOLATILE_RESPONSE_HEADERS = (
    "date",
    "request-id",
    "x-request-id",
    "cf-ray",
    "cf-cache-status",
    "server-timing",
    "openai-processing-ms",
    "openai-organization",
    "openai-project",
    "anthropic-organization-id",
    "x-envoy-upstream-service-time",
    "x-ratelimit-limit-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-requests",
    "x-ratelimit-reset-tokens",
    "anthropic-ratelimit-requests-limit",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-tokens-limit",
    "anthropic-ratelimit-tokens-remaining",
    "anthropic-ratelimit-tokens-reset",
    "anthropic-ratelimit-input-tokens-limit",
    "anthropic-ratelimit-input-tokens-remaining",
    "anthropic-ratelimit-input-tokens-reset",
    "anthropic-ratelimit-output-tokens-limit",
    "anthropic-ratelimit-output-tokens-remaining",
    "anthropic-ratelimit-output-tokens-reset",
)

#: What an e-mail address looks like: `sakura-http lint` looks for them, and `Scrub.regex` can
#: be given it to scrub them.
EMAIL_PATTERN = r"[\w.+-]{1,64}@[\w-]{1,63}(?:\.[\w-]{1,63})+"

_PATH_PART = r"\.?([^.\[\]]+)|\[(\d+|\*)\]"
_HEADER_NAME = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"  # a token (RFC 9110), where * also is a wildcard
# (Patterns are compiled where they are used, through `re`'s own cache: only the review
# commands and user rules need them, so `import sakura_http` does not compile them.)


@dataclass(frozen=True, slots=True)
class JsonPath:
    """A parsed JSON path: a tuple of keys (str), indexes (int) and "every item" (None)."""

    text: str
    parts: tuple[str | int | None, ...]

    @classmethod
    def parse(cls, text: str) -> JsonPath:
        """The path `text` names: dotted keys, [n] and [*], optionally after JSONPath's root
        ``$.`` (as vcrpy users and JSONPath write it: ``$.password`` is ``password``)."""
        if isinstance(text, str) and (text == "$" or text.startswith(("$.", "$["))):
            path = text[2:]
            if not path or path.startswith((".", "[")) or text.startswith("$["):
                raise ConfigurationError(
                    f"JSON path {text!r} is malformed: after the root $. name a key, as in "
                    '"$.metadata.user_id" (the body\'s top level must be an object)'
                )
        else:
            path = text
        if not isinstance(path, str) or not path or path.startswith((".", "[")):
            raise ConfigurationError(
                f"JSON path {text!r} is malformed: start with a key, as in "
                '"metadata.user_id" or "messages[*].id"'
            )
        parts: list[str | int | None] = []
        position = 0
        while position < len(path):
            match = re.compile(_PATH_PART).match(path, position)
            if match is None or (match.group(0).startswith(".") and position == 0):
                raise ConfigurationError(
                    f"JSON path {text!r} is malformed at {path[position:]!r}: use dotted keys, "
                    '[n] and [*], as in "messages[*].content[0].text"'
                )
            key, index = match.groups()
            if key is not None:
                if position and not match.group(0).startswith(".") and path[position - 1] != "]":
                    raise ConfigurationError(f"JSON path {text!r} is malformed")
                parts.append(key)
            else:
                parts.append(None if index == "*" else int(index))
            position = match.end()
        return cls(text, tuple(parts))

    def set(self, value: Any, new: Any) -> Any:
        """`value` with every node this path names replaced by `new` (in place where it can)."""
        return _set(value, self.parts, new)

    def __str__(self) -> str:
        return self.text


def _set(node: Any, parts: Sequence[str | int | None], new: Any) -> Any:
    if not parts:
        return new
    head, rest = parts[0], parts[1:]
    if isinstance(head, str):
        if isinstance(node, dict) and head in node:
            node[head] = _set(node[head], rest, new)
    elif isinstance(node, list):
        if head is None:
            for i, item in enumerate(node):
                node[i] = _set(item, rest, new)
        elif -len(node) <= head < len(node):
            node[head] = _set(node[head], rest, new)
    return node


def _compile(pattern: str | re.Pattern[str]) -> re.Pattern[str]:
    if isinstance(pattern, re.Pattern):
        return pattern
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ConfigurationError(f"regular expression {pattern!r} is invalid: {exc}") from None


@dataclass(frozen=True, slots=True, repr=False)  # its own repr
class Scrub:
    """One scrubbing step; build it with `Scrub.json`, `Scrub.regex`, `Scrub.query` or
    `Scrub.response_header`."""

    kind: str
    names: tuple[str, ...] = ()
    paths: tuple[JsonPath, ...] = ()
    pattern: re.Pattern[str] | None = None
    replacement: str = SCRUBBED

    @classmethod
    def json(cls, *paths: str, replacement: str = SCRUBBED) -> Scrub:
        """The value at each JSON path, in request and response bodies, is written as
        `replacement` (a string)."""
        if not paths:
            raise ConfigurationError("Scrub.json() needs at least one JSON path")
        return cls("json", paths=tuple(JsonPath.parse(p) for p in paths), replacement=replacement)

    @classmethod
    def regex(cls, pattern: str | re.Pattern[str], replacement: str = SCRUBBED) -> Scrub:
        """Every match in URLs, request and response bodies and header values is written as
        `replacement`; a match split across the chunks of a streamed body is caught too."""
        return cls("regex", pattern=_compile(pattern), replacement=replacement)

    @classmethod
    def query(cls, *names: str, replacement: str = SCRUBBED) -> Scrub:
        """The value of each named query parameter is written as `replacement`."""
        if not names:
            raise ConfigurationError("Scrub.query() needs at least one parameter name")
        return cls("query", names=tuple(names), replacement=replacement)

    @classmethod
    def response_header(cls, *names: str, replacement: str = SCRUBBED) -> Scrub:
        """Each named response header is written with the stable value `replacement`, so a
        re-recording of unchanged traffic leaves the file as it was."""
        if not names:
            raise ConfigurationError("Scrub.response_header() needs at least one header name")
        return cls(
            "response_header", names=tuple(n.lower() for n in names), replacement=replacement
        )

    def __repr__(self) -> str:
        what = (
            self.pattern.pattern
            if self.pattern
            else ", ".join(self.names or [str(p) for p in self.paths])
        )
        return f"Scrub.{self.kind}({what!r})"


@dataclass(frozen=True, slots=True, init=False)  # its own __init__
class Rules:
    """What matching ignores and what is scrubbed before writing; see the module docstring."""

    ignore_query: frozenset[str] = frozenset()
    ignore_json: tuple[JsonPath, ...] = ()
    #: Request header names (lower case) or patterns (``*`` matches any run of characters)
    #: left out of matching, on top of the volatile set; ``"*"`` alone: every ordinary header.
    ignore_headers: frozenset[str] = frozenset()
    ignore_body: bool = False
    scrub: tuple[Scrub, ...] = ()
    before_record: Callable[[Exchange], Exchange | None] | None = field(default=None)

    def __init__(
        self,
        ignore_query: Iterable[str] = (),
        ignore_json: Iterable[str | JsonPath] = (),
        ignore_body: bool = False,
        scrub: Iterable[Scrub] = (),
        before_record: Callable[[Exchange], Exchange | None] | None = None,
        ignore_headers: Iterable[str] = (),
    ) -> None:
        if isinstance(ignore_query, str) or isinstance(ignore_json, str):
            raise ConfigurationError("ignore_query and ignore_json take lists of names and paths")
        headers = _header_names(ignore_headers)
        steps = tuple(scrub)
        for step in steps:
            if not isinstance(step, Scrub):
                raise ConfigurationError(f"scrub= takes Scrub steps, not {step!r}")
        if before_record is not None and not callable(before_record):
            raise ConfigurationError(f"before_record must be callable, not {before_record!r}")
        set_ = object.__setattr__
        set_(self, "ignore_query", frozenset(ignore_query))
        set_(
            self,
            "ignore_json",
            tuple(p if isinstance(p, JsonPath) else JsonPath.parse(p) for p in ignore_json),
        )
        set_(self, "ignore_headers", headers)
        set_(self, "ignore_body", bool(ignore_body))
        set_(self, "scrub", steps)
        set_(self, "before_record", before_record)

    @classmethod
    def llm(cls, *more: Rules) -> Rules:
        """The preset for anthropic and openai cassettes: their per-call response headers
        (`LLM_VOLATILE_RESPONSE_HEADERS`: date, request ids, rate limits, ...) written as stable
        placeholders, so re-recording unchanged traffic leaves the file byte-identical."""
        preset = cls(scrub=[Scrub.response_header(*LLM_VOLATILE_RESPONSE_HEADERS)])
        for other in more:
            preset = preset | other
        return preset

    @classmethod
    def method_and_url(cls, *more: Rules) -> Rules:
        """The loose preset: match on the method and the (canonical) URL only, as vcrpy does by
        default, for cassettes migrated from another tool or recorded by a third party.  It is
        ``Rules(ignore_headers=["*"], ignore_body=True)``, combined with `more`: headers and
        bodies are still recorded in full, but a changed body or header is no longer noticed,
        and requests to one URL (every call of an LLM API) replay in recorded order whatever
        they send.  Tighten a suite test by test by dropping it."""
        preset = cls(ignore_headers=["*"], ignore_body=True)
        for other in more:
            preset = preset | other
        return preset

    def __or__(self, other: Rules) -> Rules:
        """Both rule sets: ignores and scrubs of each; `other`'s hook runs after this one's."""
        hooks = [h for h in (self.before_record, other.before_record) if h is not None]
        hook: Callable[[Exchange], Exchange | None] | None = None
        if len(hooks) == 1:
            hook = hooks[0]
        elif hooks:
            first, second = hooks

            def hook(exchange: Exchange) -> Exchange | None:
                kept = first(exchange)
                return None if kept is None else second(kept)

        return Rules(
            ignore_query=self.ignore_query | other.ignore_query,
            ignore_json=(
                *self.ignore_json,
                *(p for p in other.ignore_json if p not in self.ignore_json),
            ),
            ignore_headers=self.ignore_headers | other.ignore_headers,
            ignore_body=self.ignore_body or other.ignore_body,
            scrub=(*self.scrub, *(s for s in other.scrub if s not in self.scrub)),
            before_record=hook,
        )

    def changes_values(self) -> bool:
        """Whether matching must apply these rules to URLs and bodies: header rules only name
        what is left out, and a hook only changes what is written."""
        return bool(self.ignore_query or self.ignore_json or self.ignore_body or self.scrub)

    def __bool__(self) -> bool:
        return bool(
            self.ignore_query
            or self.ignore_json
            or self.ignore_headers
            or self.ignore_body
            or self.scrub
            or self.before_record is not None
        )

    # --- scrubbing ---------------------------------------------------------------------------

    def _regexes(self) -> list[Scrub]:
        return [s for s in self.scrub if s.kind == "regex"]

    def scrub_text(self, text: str) -> str:
        for step in self._regexes():
            assert step.pattern is not None
            text = step.pattern.sub(_literal(step.replacement), text)
        return text

    def scrub_url(self, url: str) -> str:
        names = {n for s in self.scrub if s.kind == "query" for n in s.names}
        if names:
            url = _rewrite_query(
                url, lambda name, value: _replacement(self, name) if name in names else value
            )
        return self.scrub_text(url)

    def scrub_body(self, headers: Headers, body: bytes) -> bytes:
        """`body` as written (see `scrub_written`, which also gives the notes)."""
        if not self.scrub:
            return body
        return scrub_written(self, headers, body, part="body")[0]

    def scrub_request_headers(self, headers: Headers) -> Headers:
        if not self._regexes():
            return headers
        return tuple((name, self.scrub_text(value)) for name, value in headers)

    def scrub_response_headers(self, headers: Headers) -> Headers:
        fixed = {
            n: s.replacement for s in self.scrub if s.kind == "response_header" for n in s.names
        }
        out = []
        for name, value in headers:
            if name in fixed:
                value = fixed[name]
            elif name in _URL_HEADERS:  # a redirect: scrubbed as the URL it leads to will be
                value = self.scrub_url(value)
            else:
                value = self.scrub_text(value)
            out.append((name, value))
        return tuple(out)

    # --- matching ----------------------------------------------------------------------------

    def match_url(self, url: str) -> str:
        """The URL as compared: scrubbed, with the ignored query parameters left out."""
        url = self.scrub_url(url)
        if self.ignore_query:
            url = _rewrite_query(
                url, lambda name, value: None if name in self.ignore_query else value
            )
        return url

    def match_body(self, headers: Headers, body: bytes) -> bytes:
        """The body as compared: scrubbed, with ignored JSON paths blanked (or nothing at all
        with `ignore_body`)."""
        if self.ignore_body:
            return b""
        body = self.scrub_body(headers, body)
        if self.ignore_json and body and is_json_type(media_type(headers)):
            try:
                value = orjson.loads(body)
            except orjson.JSONDecodeError:
                return body
            return orjson.dumps(_without(value, self.ignore_json), option=orjson.OPT_SORT_KEYS)
        return body


def _without(value: Any, paths: Iterable[JsonPath]) -> Any:
    """`value` without the nodes `paths` name, where they are: a key, a list item.  What is not
    there is not added, so a path present on one side only is ignored too; the objects and
    lists around a removed node stay (`g.y` ignores `y`, not whether `g` is there)."""
    lists: dict[int, list[Any]] = {}
    for path in paths:
        value = _remove(value, path.parts, lists)
    for items in lists.values():  # items are marked first, so indexes name the original items
        items[:] = [item for item in items if item is not _GONE]
    return value


def _remove(node: Any, parts: Sequence[str | int | None], lists: dict[int, list[Any]]) -> Any:
    head, rest = parts[0], parts[1:]
    if isinstance(head, str):
        if isinstance(node, dict) and head in node:
            if rest:
                node[head] = _remove(node[head], rest, lists)
            else:
                del node[head]
    elif isinstance(node, list):
        indexes = range(len(node)) if head is None else [head] if head < len(node) else []
        for i in indexes:
            if rest:
                node[i] = _remove(node[i], rest, lists)
            else:
                node[i] = _GONE
                lists[id(node)] = node
    return node


#: Response headers whose value is a URL: `Scrub.query` reaches their query parameters, so a
#: redirect leads to the URL recorded for the next hop (whose query it scrubbed too).
_URL_HEADERS = frozenset({"location", "content-location"})


def _header_names(names: Iterable[str]) -> frozenset[str]:
    """`names` as `Rules.ignore_headers` holds them: lower-case header names or patterns."""
    if isinstance(names, (str, bytes)):
        raise ConfigurationError(
            f"ignore_headers takes a list of header names, not the single string {names!r}: "
            f"write ignore_headers=[{names!r}]"
        )
    kept = set()
    for name in names:
        if not isinstance(name, str) or not re.fullmatch(_HEADER_NAME, name):
            raise ConfigurationError(
                f"ignore_headers holds {name!r}, which is not a header name (letters, digits and "
                "-, or a pattern with *, such as x-debug-*)"
            )
        kept.add(name.lower())
    return frozenset(kept)


def header_wildcards(names: Iterable[str]) -> re.Pattern[str] | None:
    """One pattern for the entries of `names` (lower-case header names, as
    `Rules.ignore_headers` holds them) that hold a ``*``, which matches any run of characters
    wherever it stands (``x-debug-*``, ``x-*-id``; ``"*"`` alone: every name): `fullmatch` a
    lower-case name against it.  None when no entry holds one.  Matching (`Matcher`) and
    verify (`_drift`, its volatile headers and ``--ignore-header``) both read patterns so."""
    patterns = sorted(entry for entry in names if "*" in entry)
    if not patterns:
        return None
    return re.compile("|".join(".*".join(map(re.escape, entry.split("*"))) for entry in patterns))


def _literal(value: AnyStr) -> Callable[[re.Match[AnyStr]], AnyStr]:
    """A `re.sub` replacement inserting `value` as it is (no backslash processing)."""
    return lambda _match: value


def _replacement(rules: Rules, name: str) -> str:
    for step in rules.scrub:
        if step.kind == "query" and name in step.names:
            return step.replacement
    return SCRUBBED


def _rewrite_query(url: str, change: Callable[[str, str], str | None]) -> str:
    base, sep, rest = url.partition("?")
    if not sep:
        return url
    query, hash_, fragment = rest.partition("#")
    fields = []
    for item in query.split("&"):
        name, eq, value = item.partition("=")
        new = change(name, value)
        if new is None:
            continue
        fields.append(f"{name}={new}" if eq or new != value else name)
    text = f"{base}?{'&'.join(fields)}" if fields else base
    return f"{text}#{fragment}" if hash_ else text


def _bytes_pattern(step: Scrub) -> re.Pattern[bytes]:
    """The step's pattern over UTF-8 bytes (bodies may be binary; ``\\w`` is ASCII there)."""
    assert step.pattern is not None
    return re.compile(step.pattern.pattern.encode("utf-8"), step.pattern.flags & ~re.UNICODE)


def scrub_chunked(
    rules: Rules, headers: Headers, body: bytes, chunks: tuple[int, ...]
) -> tuple[bytes, tuple[int, ...]]:
    """A response body as written and its chunk sizes: `scrub_written` without the notes."""
    written, sizes, _ = scrub_written(rules, headers, body, chunks)
    return written, sizes


def scrub_written(
    rules: Rules,
    headers: Headers,
    body: bytes,
    chunks: tuple[int, ...] = (),
    *,
    truncated: bool = False,
    part: str = "response body",
) -> tuple[bytes, tuple[int, ...], tuple[str, ...]]:
    """`body` as written under the scrubs of `rules`, its chunk sizes, and notes saying what
    was cut from it (for the exchange's ``notes``; each begins with `part`).

    A JSON scrub reaches whatever Python's `json` parses, whatever the content type says (a
    BOM, UTF-16, ``NaN`` and big numbers included), and each line of a stream (NDJSON, or the
    ``data:`` lines of server-sent events).  A body or line that names a scrubbed key but does
    not parse is cut where the key could begin, and nothing after it is written.  Regex scrubs
    run over the whole body, so a value split across chunks is caught; with `truncated` (the
    caller closed the stream early) the body is also cut where a match could begin.  A boundary
    inside a replaced span moves to its end, later ones shift by the change in length; a JSON
    body re-serialized whole replays as one chunk.
    """
    regexes = rules._regexes()
    paths = [(p, s.replacement) for s in rules.scrub if s.kind == "json" for p in s.paths]
    if not body or not (paths or regexes):
        return body, chunks, ()
    boundaries: list[int] = []
    for size in chunks:
        boundaries.append((boundaries[-1] if boundaries else 0) + size)
    notes: list[str] = []
    if paths:
        whole = _scrub_json_body(paths, headers, body)
        if whole is not None:
            body, boundaries = whole, [len(whole)]
        else:
            spans, cut = _scrub_json_lines(paths, body, truncated)
            if cut is not None:
                at, key = cut
                how = "is truncated and does not parse" if truncated else "is not JSON that parses"
                notes.append(
                    f"{part}: cut at byte {at} of {len(body)}: it {how}, and `{key}` of "
                    "Scrub.json could begin there"
                )
                spans.append((at, len(body), b""))
            body, boundaries = _edit(body, boundaries, spans)
    wide = _wide_codec(body, headers) if regexes else None
    if wide is not None:
        scrubbed = _scrub_wide(regexes, body, wide, truncated, part)
        if scrubbed is not None:  # (None: no text after all; scrubbed as bytes below)
            body, wide_notes = scrubbed
            boundaries = [len(body)]  # (matched on the text: one chunk, as a JSON scrub's)
            notes += wide_notes
            regexes = []
    for step in regexes:
        replacement = step.replacement.encode("utf-8")
        spans = [(*m.span(), replacement) for m in _bytes_pattern(step).finditer(body)]
        body, boundaries = _edit(body, boundaries, spans)
    if truncated and regexes and body:
        from ._partial_match import partial_start  # only a stream closed early needs it

        starts = [(partial_start(_bytes_pattern(step), body), step) for step in regexes]
        found = [(at, step) for at, step in starts if at is not None]
        if found:
            at, step = min(found, key=lambda f: f[0])
            notes.append(
                f"{part}: cut at byte {at} of {len(body)}: it is truncated where a match of "
                f"{step!r} could begin"
            )
            body, boundaries = _edit(body, boundaries, [(at, len(body), b"")])
    sizes: list[int] = []
    previous = 0
    for boundary in boundaries:
        if boundary > previous:
            sizes.append(boundary - previous)
            previous = boundary
    if previous < len(body):
        sizes.append(len(body) - previous)
    return body, tuple(sizes), tuple(notes)


def with_notes(extra: Mapping[str, Any], notes: Iterable[str]) -> dict[str, Any]:
    """An exchange's `extra` fields with `notes` added to its ``notes`` (an optional field of
    the format, a list of sentences: what was left out of the exchange as written, and why)."""
    return {**extra, "notes": [*extra.get("notes", ()), *notes]}


def _edit(
    body: bytes, boundaries: list[int], spans: list[tuple[int, int, bytes]]
) -> tuple[bytes, list[int]]:
    """`body` with each (start, end) span, in order and apart, replaced by its bytes; the
    chunk boundaries moved with it (a boundary inside a span moves to its end)."""
    if not spans:
        return body, boundaries
    pieces: list[bytes] = []
    last = 0
    for start, end, replacement in spans:
        pieces += [body[last:start], replacement]
        last = end
    pieces.append(body[last:])
    moved = []
    for boundary in boundaries:
        shift = 0
        for start, end, replacement in spans:
            if boundary <= start:
                break
            if boundary < end:  # inside a replaced span: move to its end
                boundary = end
            shift += len(replacement) - (end - start)
        moved.append(boundary + shift)
    return b"".join(pieces), moved


# --- JSON scrubs ----------------------------------------------------------------------------
# A scrubbed value sits under a key (the last key of its path), and a key comes before its
# value: where a body names no scrubbed key, there is nothing to scrub; where it names one but
# does not parse, nothing from that place on is written.

_BOM = b"\xef\xbb\xbf"
_QUOTES = re.compile(r"[\"']")
_LONG_NUMBER = re.compile(rb"[0-9]{20}")
_ESCAPES = {'"': '"', "'": "'", "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n",
            "r": "\r", "t": "\t"}  # fmt: skip


def _keys(paths: Iterable[tuple[JsonPath, str]]) -> list[str]:
    """The key each path's value sits under (a path starts with a key, so it has one)."""
    return list(
        dict.fromkeys(
            next(p for p in reversed(path.parts) if isinstance(p, str)) for path, _ in paths
        )
    )


def _parsed(data: bytes) -> tuple[Any, bool, str] | None:
    """`data` as Python's `json` reads it, whether orjson read it (then orjson writes it back),
    and the codec it is written in; None where it does not parse."""
    if _LONG_NUMBER.search(data) is None:  # (orjson reads a number past 64 bits as a float)
        try:
            return orjson.loads(data), True, "utf-8"
        except orjson.JSONDecodeError:
            pass
    import json  # only a body orjson refuses (NaN, a BOM, UTF-16, a big number) needs it

    try:
        codec = json.detect_encoding(data)
        return json.loads(data.decode(codec)), False, codec
    except (ValueError, RecursionError):  # (UnicodeDecodeError is a ValueError)
        return None


def _dumped(value: Any, by_orjson: bool, codec: str) -> bytes:
    if by_orjson:
        return orjson.dumps(value)
    import json

    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))  # NaN stays NaN
    try:
        return text.encode(codec)
    except UnicodeEncodeError:  # a lone surrogate: escaped, as it was read
        return json.dumps(value, separators=(",", ":")).encode(codec)


def _scrubbed(parsed: tuple[Any, bool, str], paths: Iterable[tuple[JsonPath, str]]) -> bytes:
    value, by_orjson, codec = parsed
    for path, replacement in paths:
        value = path.set(value, replacement)
    return _dumped(value, by_orjson, codec)


def _scrub_json_body(
    paths: list[tuple[JsonPath, str]], headers: Headers, body: bytes
) -> bytes | None:
    """The whole body re-serialized with the paths scrubbed, or None when it is not one JSON
    document naming a scrubbed key (see `_scrub_json_lines`).  A body a JSON content type
    announces is re-serialized whenever orjson reads it, as it always was."""
    if is_json_type(media_type(headers)):
        parsed = _parsed(body)
        if parsed is not None:
            return _scrubbed(parsed, paths)
    wide = _wide_codec(body)
    if wide is None:
        if _key_start(body, _keys(paths), at_end=False) is None:
            return None
    elif not any(key in body.decode(wide, "replace") for key in _keys(paths)):
        return None
    parsed = _parsed(body)
    return None if parsed is None else _scrubbed(parsed, paths)


def _wide_codec(body: bytes, headers: Headers = ()) -> str | None:
    """The codec of a body in UTF-16 or UTF-32 (as `json` detects it, or as `headers` declare
    it), else None."""
    if body[:1] in (b"\x00", b"\xff", b"\xfe") or body[1:2] == b"\x00":
        import json

        codec = json.detect_encoding(body)
        return None if codec.startswith("utf-8") else codec
    declared = _declared_charset(headers)
    return declared if declared in ("utf-16", "utf-32") else None


def _declared_charset(headers: Headers) -> str | None:
    charset = charset_of(headers)
    if charset is None:
        return None
    try:
        return codecs.lookup(charset).name
    except LookupError:
        return None


#: The byte order marks (little-endian, big-endian) of the wide codecs.
_WIDE = {
    "utf-16": (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE),
    "utf-32": (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE),
}


def _scrub_wide(
    regexes: list[Scrub], body: bytes, codec: str, truncated: bool, part: str
) -> tuple[bytes, list[str]] | None:
    """A UTF-16 or UTF-32 `body` under the regex scrubs, matched on its text and written back
    in its codec, byte order and byte order mark kept, and the notes; with `truncated`, cut
    where a match could begin (and before a last code unit that did not arrive whole).  None
    for a body that does not decode (binary data whose first bytes look wide)."""
    family = codec[:6]  # utf-16 or utf-32
    little, big = _WIDE[family]
    bom = b""
    if codec == family:  # a byte order mark, or a declared charset without a byte order
        if body.startswith(big):
            bom, codec = big, family + "-be"
        else:
            bom, codec = (little if body.startswith(little) else b""), family + "-le"
    unit = 2 if family == "utf-16" else 4
    data = body[len(bom) :]
    whole = len(data) - len(data) % unit
    try:
        text = data[:whole].decode(codec, "surrogatepass")
    except UnicodeDecodeError:
        return None
    for step in regexes:
        assert step.pattern is not None
        text = step.pattern.sub(_literal(step.replacement), text)
    tail = data[whole:]  # a body that ends inside a code unit: kept as it came, unless cut short
    notes = []
    if truncated:
        from ._partial_match import partial_start  # only a stream closed early needs it

        tail = b""
        utf8 = text.encode("utf-8", "surrogatepass")
        starts = [(partial_start(_bytes_pattern(step), utf8), step) for step in regexes]
        found = [(at, step) for at, step in starts if at is not None]
        if found:
            at, step = min(found, key=lambda f: f[0])
            kept = len(utf8[:at].decode("utf-8", "ignore"))
            size = len(bom) + len(text[:kept].encode(codec, "surrogatepass"))
            notes.append(
                f"{part}: cut at byte {size} of {len(body)}: it is truncated where a match of "
                f"{step!r} could begin"
            )
            text = text[:kept]
    return bom + text.encode(codec, "surrogatepass") + tail, notes


def _scrub_json_lines(
    paths: list[tuple[JsonPath, str]], body: bytes, truncated: bool
) -> tuple[list[tuple[int, int, bytes]], tuple[int, str] | None]:
    """Each line that names a scrubbed key, as a JSON document (after a ``data:`` field name,
    for server-sent events), re-serialized with the paths scrubbed: the (start, end, new bytes)
    spans, and (where, key) for the first line that names one but does not parse, where the
    body is cut."""
    keys = _keys(paths)
    wide = _wide_codec(body)
    if wide is not None:  # not parsed whole: its lines are not UTF-8 lines, so none of it
        text = body.decode(wide, "replace")
        named = [key for key in keys if key in text]
        if named or (truncated and ('"' in text or "'" in text)):
            return [], (0, (named or keys)[0])
        return [], None
    if not _may_name(body, keys):  # no line names a key: only the last may begin one
        last = body.rfind(b"\n") + 1
        found = _key_start(body[last:], keys, at_end=True) if truncated else None
        return [], None if found is None else (last + found[0], found[1])
    spans: list[tuple[int, int, bytes]] = []
    position = 0
    lines = body.split(b"\n")
    for number, line in enumerate(lines):
        at_end = truncated and number == len(lines) - 1  # the line that was cut short
        content = line[:-1] if line.endswith(b"\r") else line
        found = _key_start(content, keys, at_end)
        if found is not None:
            offset = len(_BOM) if number == 0 and content.startswith(_BOM) else 0
            if content.startswith(b"data:", offset):
                offset += 6 if content[offset + 5 : offset + 6] == b" " else 5
            parsed = _parsed(content[offset:])
            if parsed is None or not isinstance(parsed[0], (dict, list)):
                return spans, (position + found[0], found[1])
            spans.append((position + offset, position + len(content), _scrubbed(parsed, paths)))
        position += len(line) + 1
    return spans, None


def _key_start(data: bytes, keys: list[str], at_end: bool) -> tuple[int, str] | None:
    """Where in `data` the first quoted string naming one of `keys` begins (its escapes read as
    JSON reads them, single quotes taken too), and the key; with `at_end`, a string `data` ends
    in the middle of counts where what arrived could be the beginning of a key."""
    if not at_end and not _may_name(data, keys):
        return None
    text = data.decode("utf-8", "surrogateescape")
    for quote in _QUOTES.finditer(text):
        for key in keys:
            if _names(text, quote.start(), key, at_end):
                at = len(text[: quote.start()].encode("utf-8", "surrogateescape"))
                return at, key
    return None


def _may_name(data: bytes, keys: list[str]) -> bool:
    """False when no key is in `data` in any spelling (the common case, found at C speed)."""
    return b"\\" in data or any(key.encode("utf-8") in data for key in keys)


def _names(text: str, start: int, key: str, at_end: bool) -> bool:
    """Whether the string literal opened by the quote at `start` reads as `key` (or, with
    `at_end`, as the beginning of it when `text` ends before the literal does)."""
    quote, position, matched = text[start], start + 1, 0
    end = len(text)
    while True:
        if position >= end:
            return at_end
        char = text[position]
        if char == quote:
            return matched == len(key)
        if char == "\\":
            escape = text[position + 1 : position + 2]
            if escape == "u":
                digits = text[position + 2 : position + 6]
                if len(digits) < 4 or position + 6 > end:
                    return at_end and all(d in "0123456789abcdefABCDEF" for d in digits)
                try:
                    code = int(digits, 16)
                except ValueError:
                    return False
                position += 6
                if 0xD800 <= code < 0xDC00:  # the first half of a pair
                    if position >= end - 5:
                        return at_end
                    if text[position : position + 2] == "\\u":
                        try:
                            low = int(text[position + 2 : position + 6], 16)
                        except ValueError:
                            return False
                        if 0xDC00 <= low < 0xE000:
                            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                            position += 6
                char = chr(code)
            elif not escape:
                return at_end
            elif escape in _ESCAPES:
                char = _ESCAPES[escape]
                position += 2
            else:
                return False
        else:
            if "\udc80" <= char <= "\udcff" and at_end and position >= end - 3:
                return True  # an undecodable byte at the very end: part of a UTF-8 character
            position += 1
        if matched >= len(key) or key[matched] != char:
            return False
        matched += 1
