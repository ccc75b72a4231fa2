"""Matching rules and scrubbing: ignore what changes every run, scrub what must never be written.

`Rules` is one declarative value shared by every front end (the transport, the pytest plugin,
the proxy, the CLI):

* ``ignore_query``, ``ignore_json``, ``ignore_body``: parts of a request left out of matching
  (still recorded as sent);
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

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, AnyStr

import orjson

from ._exceptions import ConfigurationError
from ._format import Exchange, Headers
from ._value import Value

__all__ = [
    "EMAIL_PATTERN",
    "LLM_VOLATILE_RESPONSE_HEADERS",
    "JsonPath",
    "Rules",
    "Scrub",
    "apply_hook",
    "scrub_chunked",
    "scrub_suggestions",
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

#: What `scrub_suggestions` takes for an e-mail address (and `Scrub.regex` can be given).
EMAIL_PATTERN = r"[\w.+-]{1,64}@[\w-]{1,63}(?:\.[\w-]{1,63})+"
# Whole runs of token characters (linear: each character is looked at once); the length is
# checked afterwards, so a megabyte of "x" costs one match, not a backtracking search.
_TOKEN = r"[A-Za-z0-9_-]+"
_TOKEN_LENGTHS = range(32, 257)
# Suggestions are warnings: the first megabyte of a field is enough to show the shape.
_SCANNED = 1 << 20
_PLACEHOLDER = r"<[a-z-]+>"

_PATH_PART = r"\.?([^.\[\]]+)|\[(\d+|\*)\]"
# (Patterns are compiled where they are used, through `re`'s own cache: only the review
# commands and user rules use them, and compiling them cost every import a millisecond.)


@dataclass(frozen=True, slots=True, eq=False, repr=False)  # ==, hash, repr: Value's
class JsonPath(Value):
    """A parsed JSON path: a tuple of keys (str), indexes (int) and "every item" (None)."""

    text: str
    parts: tuple[str | int | None, ...]

    @classmethod
    def parse(cls, text: str) -> JsonPath:
        if not isinstance(text, str) or not text or text.startswith((".", "[")):
            raise ConfigurationError(
                f"JSON path {text!r} is malformed: start with a key, as in "
                '"metadata.user_id" or "messages[*].id"'
            )
        parts: list[str | int | None] = []
        position = 0
        while position < len(text):
            match = re.compile(_PATH_PART).match(text, position)
            if match is None or (match.group(0).startswith(".") and position == 0):
                raise ConfigurationError(
                    f"JSON path {text!r} is malformed at {text[position:]!r}: use dotted keys, "
                    '[n] and [*], as in "messages[*].content[0].text"'
                )
            key, index = match.groups()
            if key is not None:
                if position and not match.group(0).startswith(".") and text[position - 1] != "]":
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


@dataclass(frozen=True, slots=True, eq=False, repr=False)  # ==, hash: Value's; its own repr
class Scrub(Value):
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


@dataclass(frozen=True, slots=True, init=False, eq=False, repr=False)  # its own __init__
class Rules(Value):
    """What matching ignores and what is scrubbed before writing; see the module docstring."""

    ignore_query: frozenset[str] = frozenset()
    ignore_json: tuple[JsonPath, ...] = ()
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
    ) -> None:
        if isinstance(ignore_query, str) or isinstance(ignore_json, str):
            raise ConfigurationError("ignore_query and ignore_json take lists of names and paths")
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
            ignore_body=self.ignore_body or other.ignore_body,
            scrub=(*self.scrub, *(s for s in other.scrub if s not in self.scrub)),
            before_record=hook,
        )

    def __bool__(self) -> bool:
        return bool(
            self.ignore_query
            or self.ignore_json
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
        paths = [(p, s.replacement) for s in self.scrub if s.kind == "json" for p in s.paths]
        if paths and body and _is_json(headers):
            try:
                value = orjson.loads(body)
            except orjson.JSONDecodeError:
                pass
            else:
                for path, replacement in paths:
                    value = path.set(value, replacement)
                body = orjson.dumps(value)
        return _scrub_bytes(self._regexes(), body)

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
            value = fixed.get(name, value)
            out.append((name, self.scrub_text(value) if name not in fixed else value))
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
        if self.ignore_json and body and _is_json(headers):
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


def _literal(value: AnyStr) -> Callable[[re.Match[AnyStr]], AnyStr]:
    """A `re.sub` replacement inserting `value` as it is (no backslash processing)."""
    return lambda _match: value


def _replacement(rules: Rules, name: str) -> str:
    for step in rules.scrub:
        if step.kind == "query" and name in step.names:
            return step.replacement
    return SCRUBBED


def _is_json(headers: Headers) -> bool:
    for name, value in headers:
        if name == "content-type":
            mime = value.partition(";")[0].strip().lower()
            return mime == "application/json" or mime.endswith("+json")
    return False


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


def _scrub_bytes(steps: Sequence[Scrub], body: bytes) -> bytes:
    for step in steps:
        replacement = step.replacement.encode("utf-8")
        body = _bytes_pattern(step).sub(_literal(replacement), body)
    return body


def scrub_chunked(
    rules: Rules, headers: Headers, body: bytes, chunks: tuple[int, ...]
) -> tuple[bytes, tuple[int, ...]]:
    """Scrub a response body and keep its chunk boundaries where they still apply.

    Regex scrubs run over the whole body, so a value split across chunks is caught; a boundary
    inside a replaced span moves to its end, later ones shift by the change in length.  A JSON
    scrub re-serializes the body, which then replays as one chunk.
    """
    regexes = rules._regexes()
    json_steps = [s for s in rules.scrub if s.kind == "json"]
    if json_steps and body and _is_json(headers):
        scrubbed = rules.scrub_body(headers, body)
        return scrubbed, ((len(scrubbed),) if scrubbed else ())
    if not regexes:
        return body, chunks
    boundaries: list[int] = []
    position = 0
    for size in chunks:
        position += size
        boundaries.append(position)
    for step in regexes:
        pattern = _bytes_pattern(step)
        replacement = step.replacement.encode("utf-8")
        pieces: list[bytes] = []
        moved: list[int] = []
        last = 0
        spans = [m.span() for m in pattern.finditer(body)]
        if not spans:
            continue
        for start, end in spans:
            pieces += [body[last:start], replacement]
            last = end
        pieces.append(body[last:])
        for boundary in boundaries:
            shift = 0
            for start, end in spans:
                if boundary <= start:
                    break
                if boundary < end:  # inside a replaced span: move to its end
                    boundary = end
                shift += len(replacement) - (end - start)
            moved.append(boundary + shift)
        body = b"".join(pieces)
        boundaries = moved
    sizes: list[int] = []
    previous = 0
    for boundary in boundaries:
        if boundary > previous:
            sizes.append(boundary - previous)
            previous = boundary
    if previous < len(body):
        sizes.append(len(body) - previous)
    return body, tuple(sizes)


def apply_hook(rules: Rules, exchange: Exchange) -> Exchange | None:
    """Run `before_record` (None: do not record)."""
    if rules.before_record is None:
        return exchange
    result = rules.before_record(exchange)
    if result is not None and not isinstance(result, Exchange):
        raise ConfigurationError(
            f"before_record returned {type(result).__name__}; return an Exchange (use "
            "dataclasses.replace(exchange, ...)) or None to skip recording it"
        )
    return result


def _random_looking(token: str) -> bool:
    """Long, mixing letters and digits, and not a word: a key, session token or opaque id."""
    has_digit = any(c.isdigit() for c in token)
    has_upper = any(c.isupper() for c in token)
    has_lower = any(c.islower() for c in token)
    return has_digit and (has_upper or has_lower) and len(set(token)) >= 12


def _json_paths(value: Any, path: str = "") -> Iterable[tuple[str, str]]:
    """(path, string) for every string leaf of a JSON value; list indexes become ``[*]``."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _json_paths(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for item in value:
            yield from _json_paths(item, f"{path}[*]")
    elif isinstance(value, str):
        yield path, value


def scrub_suggestions(text: str, json_body: bytes | None = None) -> list[tuple[str, str, str]]:
    """Values in `text` that look like e-mail addresses or long random tokens, each as
    (what it looks like, the value, the `Scrub` that would keep it out of a cassette).

    With `json_body`, values found in its string fields are suggested as ``Scrub.json(path)``;
    others as ``Scrub.regex(...)``.  Placeholders such as ``<scrubbed>`` are never suggested.
    """
    paths: dict[str, str] = {}
    if json_body and len(json_body) <= _SCANNED:
        try:
            for path, leaf in _json_paths(orjson.loads(json_body)):
                paths.setdefault(leaf, path)
        except orjson.JSONDecodeError:
            pass
    found: list[tuple[str, str, str]] = []
    seen: set[str] = set()
    text = text[:_SCANNED]
    email, token = re.compile(EMAIL_PATTERN, re.ASCII), re.compile(_TOKEN)
    placeholder = re.compile(_PLACEHOLDER)
    for what, pattern in (("an e-mail address", email), ("a long random token", token)):
        if pattern is email and "@" not in text:
            continue
        for match in pattern.finditer(text):
            value = match.group(0)
            if value in seen or placeholder.fullmatch(value):
                continue
            if pattern is token and not (len(value) in _TOKEN_LENGTHS and _random_looking(value)):
                continue
            seen.add(value)
            where = next((p for leaf, p in paths.items() if value in leaf), None)
            if where is not None:
                scrub = f'Scrub.json("{where}")'
            elif pattern is email:
                scrub = 'Scrub.regex(sakura_http.EMAIL_PATTERN, "<email>")'
            else:
                scrub = f'Scrub.regex(r"{re.escape(value[:6])}[A-Za-z0-9_-]+")'
            found.append((what, value, scrub))
    return found
