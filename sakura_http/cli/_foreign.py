"""Reading cassettes written by other recorders (vcrpy, cassetter): the parsing half of
`sakura-http convert`, and the sniffing `sakura-http lint` uses to give the right advice.

Two formats are read, each into plain `SourceExchange`s (what the source says was sent and
received, nothing decided yet):

* **vcrpy** (format version 1), YAML or JSON: ``{"version": 1, "interactions": [...]}``, each
  interaction ``request: {method, uri, body, headers: {name: [value, ...]}}`` and
  ``response: {status: {code, message}, headers, body: {string}}``.  Variants seen in real
  cassettes are read too: a bare integer ``status``; the old httpx layout
  (``status_code``/``content``); pydantic-ai's serializer (``parsed_body`` instead of a body);
  and aiohttp request bodies stored as a mapping (encoded as the request's content type says),
  with the ``accept: */*`` aiohttp sent but its vcrpy stub never saw.
* **cassetter** (format version 1), YAML or TOML: ``body: {type, content}`` (YAML) or
  ``body_type``/``body_content`` (TOML), ``type`` one of none, text, json, binary (hex).

Anything else is refused with `VcrImportError`, naming the file, the interaction and the key:
a body convert cannot find is never written empty, a header value that is not text is never
turned into a Python repr.

YAML is read with a safe loader (libyaml's `CSafeLoader` when PyYAML has it, 30 times faster
than the pure-Python one): it builds plain data only, refuses Python tags, and refuses aliases
that would expand the file far beyond its size (a YAML "billion laughs").  PyYAML is optional
(the `vcr` extra) and imported only when a YAML file is read.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import importlib
import json
import math
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from .._exchange import is_json_type, media_type
from .._format import Headers
from .._policy import names_a_secret, shown_value

__all__ = [
    "ForeignCassette",
    "SourceExchange",
    "VcrImportError",
    "load_vcr",
    "read_foreign",
    "sniff",
]

VCR_EXTRA_HINT = 'pip install "sakura-http[vcr]"'


class VcrImportError(Exception):
    """A foreign cassette cannot be imported; the message names the file and what to do.

    Deliberately not a `CassetteError`: the file at fault is not a sakura-http cassette.
    """


@dataclass(frozen=True, slots=True)
class SourceExchange:
    """One interaction as the source file describes it.

    `number` is its 1-based position in the file; header names are lower-cased, values kept as
    text; `response_body` is the body as stored (it may still be content-encoded);
    `recorded_at` the UTC day of the interaction's ``recorded_at`` (None: it has none).
    """

    number: int
    method: str
    url: str
    headers: Headers
    body: bytes
    status: int
    response_headers: Headers
    response_body: bytes
    recorded_at: datetime.date | None = None


@dataclass(frozen=True, slots=True)
class ForeignCassette:
    """A parsed foreign cassette: `kind` is "vcrpy" or "cassetter"."""

    kind: str
    exchanges: tuple[SourceExchange, ...]


# --- sniffing ----------------------------------------------------------------------------------

# What only one of the two writes, seen in the text (`_evidence` looks at the parsed file).
_CASSETTER_MARKS = re.compile(
    r"^\s*(?:\[\[interactions\]\]|body_type\s*=|-?\s*recorded_at:|"
    r"(?:grpc|ws)_interactions:|type:\s*(?:none|text|json|binary)\s*$)",
    re.M,
)
_VCRPY_MARKS = re.compile(r'^\s*(?:string|code|status_code):|"(?:string|code)"\s*:', re.M)
_INTERACTIONS = re.compile(r'^interactions:|"interactions"\s*:|^\[\[interactions\]\]', re.M)


def sniff(data: bytes) -> str | None:
    """ "vcrpy" or "cassetter" when `data` looks like such a cassette, else None.

    A cheap textual look at the start of the file (no YAML parser needed), for advice only:
    cassetter's when something only cassetter writes is there and nothing only vcrpy writes
    (a response body's ``string:``, a status ``code:``), so an aiohttp request body
    ``{type: text}`` in a vcrpy file does not make it cassetter's.
    """
    text = data[: 1 << 16].decode("utf-8", "replace")
    if not _INTERACTIONS.search(text):
        return None
    if _CASSETTER_MARKS.search(text) and not _VCRPY_MARKS.search(text):
        return "cassetter"
    return "vcrpy"


# --- parsing -------------------------------------------------------------------------------------


#: The tag of a plain (unquoted, untagged) YAML scalar while a file is read: what it means
#: depends on the format, which is known only once the whole file is read.  vcrpy reads YAML
#: 1.1 (PyYAML's safe loader: ``yes`` is true, ``12:30:45`` is 45045, dates are dates);
#: cassetter reads YAML 1.2 (saphyr: those three are strings).
_PLAIN = "tag:sakura-http.invalid,2026:plain"


class _Plain(str):
    """The text of a plain YAML scalar in a cassetter file, read as cassetter reads it where it
    is used: `_core_scalar` in bodies and fields, as text in header values."""

    __slots__ = ()


_CORE_NULL = frozenset({"", "~", "null", "Null", "NULL"})
_CORE_BOOL = {
    **dict.fromkeys(("true", "True", "TRUE"), True),
    **dict.fromkeys(("false", "False", "FALSE"), False),
}
_CORE_INT = re.compile(
    r"[-+]?(?:0|[1-9](?:_?[0-9])*"
    r"|0[xX][0-9a-fA-F](?:_?[0-9a-fA-F])*|0[oO][0-7](?:_?[0-7])*|0[bB][01](?:_?[01])*)"
)
_CORE_FLOAT = re.compile(
    r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)"
)
_BASES = {"x": 16, "o": 8, "b": 2}


class _NotFinite(Exception):
    """A plain scalar cassetter refuses: a number with no JSON form (.inf, .nan, 1e400)."""


def _core_scalar(text: str) -> Any:
    """A plain YAML scalar as cassetter 0.16 reads it (YAML 1.2's core schema as its saphyr
    parser applies it): null, true/false in three casings, integers (``_`` between digits,
    0x/0o/0b; past 64 bits a decimal becomes a float and the others stay text), floats (a
    leading zero makes ``017`` the float 17.0); everything else is text.  Raises `_NotFinite`
    for a float with no finite value, which cassetter refuses to load."""
    if text in _CORE_NULL:
        return None
    if text in _CORE_BOOL:
        return _CORE_BOOL[text]
    if _CORE_INT.fullmatch(text):
        digits = text.replace("_", "")
        unsigned = digits.lstrip("+-")
        base = _BASES.get(unsigned[1:2].lower(), 10)  # 0x.., 0o.., 0b..; else decimal
        number = int(unsigned[2:] if base != 10 else unsigned, base)
        number = -number if digits[0] == "-" else number
        if -(1 << 63) <= number < (1 << 64):
            return number
        return float(digits) if base == 10 else text
    if _CORE_FLOAT.fullmatch(text):
        if text.lstrip("+-").lower() in (".inf", ".nan"):
            raise _NotFinite(text)
        real = float(text)
        if not math.isfinite(real):  # 1e400
            raise _NotFinite(text)
        return real
    return text


class _PythonTag(Exception):
    def __init__(self, tag: str, line: int) -> None:
        self.tag = tag
        self.line = line


class _AliasBomb(Exception):
    def __init__(self, line: int, cyclic: bool) -> None:
        self.line = line
        self.cyclic = cyclic


def _expanded_size(root: Any, yaml: Any, limit: int) -> None:
    """Raise `_AliasBomb` when the node graph, with every alias expanded, is over `limit`
    characters (or refers to itself).  Linear in the number of distinct nodes: aliases are
    shared nodes, so each size is computed once."""
    sizes: dict[int, int] = {}
    active: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            active.discard(key)
            if isinstance(node, yaml.MappingNode):
                children = [child for pair in node.value for child in pair]
            else:
                children = node.value
            sizes[key] = 1 + sum(sizes[id(child)] for child in children)
            if sizes[key] > limit:
                raise _AliasBomb(node.start_mark.line + 1, cyclic=False)
            continue
        if key in sizes:
            continue
        if key in active:
            raise _AliasBomb(node.start_mark.line + 1, cyclic=True)
        if isinstance(node, yaml.ScalarNode):
            sizes[key] = 1 + len(node.value)
            continue
        active.add(key)
        stack.append((node, True))
        if isinstance(node, yaml.MappingNode):
            stack.extend((child, False) for pair in node.value for child in pair)
        else:
            stack.extend((child, False) for child in node.value)


@functools.cache
def _yaml_loader() -> tuple[Any, type[Any]]:
    """(the yaml module, a safe loader class); libyaml's CSafeLoader when present."""
    try:
        import yaml
    except ImportError:
        raise VcrImportError(
            f"reading YAML cassettes needs PyYAML, which is not installed: {VCR_EXTRA_HINT}"
        ) from None
    base = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader

    def refuse_python_tag(loader: Any, suffix: str, node: Any) -> Any:
        raise _PythonTag(f"!!python/{suffix}", node.start_mark.line + 1)

    def get_single_data(self: Any) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        # Before constructing anything: aliases share nodes, so a tiny file can describe an
        # exponentially large document that every later walk over the data would expand.
        _expanded_size(node, yaml, self.expansion_limit)
        data = self.construct_document(node)  # plain scalars as `_Plain` text
        if _kind_of(data) == "cassetter":
            return data  # read as YAML 1.2 where cassetter reads it (`_core_scalar`)
        _resolve_plain(node, self, yaml)  # vcrpy reads YAML 1.1
        return self.construct_document(node)

    def resolve(self: Any, kind: Any, value: str, implicit: tuple[bool, bool]) -> str:
        # A plain scalar waits for the format (`_resolve_plain`); "<<" stays a merge key.
        if kind is yaml.ScalarNode and implicit[0] and value != "<<":
            return _PLAIN
        return str(base.resolve(self, kind, value, implicit))

    members = {"get_single_data": get_single_data, "resolve": resolve}
    loader: Any = type("_CassetteLoader", (base,), members)
    loader.add_multi_constructor("tag:yaml.org,2002:python/", refuse_python_tag)
    loader.add_constructor(_PLAIN, lambda loader, node: _Plain(node.value))
    return yaml, loader


def _resolve_plain(root: Any, loader: Any, yaml: Any) -> None:
    """Give each plain scalar of the node graph the tag YAML 1.1 gives it, as PyYAML's own
    resolver (which vcrpy reads with) does."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            if node.tag == _PLAIN:
                node.tag = yaml.resolver.Resolver.resolve(
                    loader, yaml.ScalarNode, node.value, (True, False)
                )
        elif isinstance(node, yaml.MappingNode):
            stack.extend(child for pair in node.value for child in pair)
        else:
            stack.extend(node.value)


def _load_yaml(text: str, name: str) -> Any:
    try:
        yaml, loader_class = _yaml_loader()
    except VcrImportError as exc:
        raise VcrImportError(f"{name}: {exc}") from None
    loader = loader_class(text)
    # Generous for real files (vcrpy shares header lists), far below an alias bomb.
    loader.expansion_limit = 4 * len(text) + (1 << 20)
    try:
        return loader.get_single_data()
    except _PythonTag as exc:
        raise VcrImportError(
            f"{name}:{exc.line}: the YAML tag {exc.tag} would construct a Python object; "
            "sakura-http reads cassettes with a safe loader only. Re-record the cassette with a "
            "current vcrpy (which writes plain YAML), or replace the tagged value by hand"
        ) from None
    except _AliasBomb as exc:
        what = (
            "a YAML alias that refers to itself"
            if exc.cyclic
            else f"YAML aliases that expand the {len(text):,}-character file past "
            f"{loader.expansion_limit:,} characters"
        )
        raise VcrImportError(
            f"{name}:{exc.line}: refused {what} (a YAML alias bomb?); nothing was expanded. "
            "Replace the aliases (*name) by the values they stand for if the file is genuine"
        ) from None
    except RecursionError:
        raise VcrImportError(f"{name}: the YAML is nested too deeply to be a cassette") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{name}:{mark.line + 1}" if mark is not None else name
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise VcrImportError(
            f"{where}: not a readable YAML or JSON vcrpy cassette ({problem})"
        ) from None
    finally:
        loader.dispose()


def _load_toml(text: str, name: str) -> Any:
    try:
        tomllib: Any = importlib.import_module("tomllib")
    except ImportError:  # Python 3.10
        raise VcrImportError(
            f"{name}: reading a TOML cassette needs Python 3.11 or newer (tomllib); run the "
            "conversion with a newer Python, or save the cassette as YAML with cassetter first"
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise VcrImportError(f"{name}: not a readable TOML cassette ({exc})") from None


def load_vcr(text: str, name: str) -> Any:
    """Parse a foreign cassette's text: JSON, TOML (a `.toml` name, or `[[interactions]]`)
    or YAML (`name` is used in messages and to recognise TOML).

    Raises `VcrImportError` for a syntax error, a Python-specific YAML tag, a YAML alias bomb,
    or YAML when PyYAML is not installed.
    """
    if text.lstrip().startswith(("{", "[")):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass  # YAML flow style also starts with "{"; let the YAML parser report it
    if name.endswith(".toml") or re.search(r"^\[\[interactions\]\]", text, re.M):
        return _load_toml(text, name)
    return _load_yaml(text, name)


# --- interpreting ----------------------------------------------------------------------------


class _Bad(Exception):
    """A problem inside one interaction; turned into VcrImportError with its number."""


def _keys(mapping: Mapping[Any, Any]) -> str:
    return ", ".join(sorted(map(str, mapping))) or "none"


def _header_value(value: Any, what: str, name: str) -> str | None:
    if isinstance(value, _Plain):  # cassetter reads a plain scalar as its text; null as none
        return None if value in _CORE_NULL else str(value)
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("latin-1")
    raise _Bad(
        f"{what} {shown_value(name)} has a {type(value).__name__} value "
        f"({shown_value(value, hidden=names_a_secret(name))}), not text; "
        "sakura-http will not guess how it was sent. Fix the value in the source"
    )


def _headers(value: Any, what: str) -> Headers:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise _Bad(f"{what} must be a mapping of name to a list of values")
    pairs: list[tuple[str, str]] = []
    for name, values in value.items():
        if not isinstance(name, str):
            raise _Bad(f"{what} has a {type(name).__name__} name ({shown_value(name)}), not text")
        if not isinstance(values, list):
            values = [values]  # old vcrpy httpx cassettes stored one value per name
        for v in values:
            text = _header_value(v, what[:-1], name)
            if text is not None:
                pairs.append((name.lower(), text))
    return tuple(pairs)


def _text_or_bytes(value: Any, what: str) -> bytes:
    if value is None:
        return b""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise _Bad(f"{what} must be text, !!binary bytes or null, not {type(value).__name__}")


def _mapping_request_body(body: Mapping[Any, Any], headers: Headers) -> bytes:
    """vcrpy's aiohttp stub stores `data=`/`json=` arguments as the mapping itself."""
    mime = media_type(headers)
    if is_json_type(mime):
        return json.dumps(body).encode("utf-8")  # as aiohttp serializes json=
    if mime == "application/x-www-form-urlencoded":
        return urllib.parse.urlencode(list(body.items()), doseq=True).encode("ascii")
    raise _Bad(
        f"the request body is a mapping (keys: {_keys(body)}), as vcrpy's aiohttp support "
        "stores data=/json= arguments, and the request has no content-type saying how aiohttp "
        "encoded it. Add a content-type request header (application/json or "
        "application/x-www-form-urlencoded) to this interaction and convert again"
    )


def _vcr_request_body(request: Mapping[str, Any], headers: Headers) -> bytes:
    if "parsed_body" in request:  # pydantic-ai's serializer
        return json.dumps(request["parsed_body"]).encode("utf-8")
    if "body" not in request:
        raise _Bad(f"the request has no 'body' key (its keys: {_keys(request)})")
    body = request["body"]
    if isinstance(body, Mapping):
        if set(body) == {"string"}:
            return _text_or_bytes(body["string"], "the request body's 'string'")
        return _mapping_request_body(body, headers)
    return _text_or_bytes(body, "the request body")


def _vcr_response_body(response: Mapping[str, Any]) -> bytes:
    if "parsed_body" in response:  # pydantic-ai's serializer: what its deserializer gives vcrpy
        return json.dumps(response["parsed_body"]).encode("utf-8")
    if "body" in response:
        body = response["body"]
        if not isinstance(body, Mapping):
            raise _Bad(
                "the response 'body' must be a mapping with a 'string' key, not "
                + shown_value(body)
            )
        if "string" not in body:
            raise _Bad(
                f"the response body has no 'string' key (its keys: {_keys(body)}): written by a "
                "serializer convert does not know, so the body cannot be found. Nothing was "
                "written; turn the body into body: {string: ...} and convert again"
            )
        return _text_or_bytes(body["string"], "the response body's 'string'")
    if "content" in response:  # the old vcrpy httpx layout
        return _text_or_bytes(response["content"], "the response 'content'")
    raise _Bad(
        f"the response has no body: no 'body', 'content' or 'parsed_body' key (its keys: "
        f"{_keys(response)})"
    )


def _status(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 100 <= value <= 999:
        raise _Bad(f"the response status code must be an HTTP status, got {shown_value(value)}")
    return value


def _vcr_status(response: Mapping[str, Any]) -> int:
    status = response.get("status")
    if isinstance(status, Mapping):
        return _status(status.get("code"))
    if status is not None:
        return _status(status)  # a bare integer, as some writers emit
    return _status(response.get("status_code"))  # the old vcrpy httpx layout


def _scalar(value: Any, what: str) -> Any:
    """A field's value as cassetter reads it: a plain YAML scalar by YAML 1.2's core schema."""
    if not isinstance(value, _Plain):
        return value
    try:
        return _core_scalar(value)
    except _NotFinite:
        raise _Bad(
            f"the {what} holds the number {value}, which cassetter refuses to load (it has no "
            "finite value, so no JSON form); quote it if it is text"
        ) from None


def _json_value(value: Any, what: str) -> Any:
    """The JSON value cassetter reads from a YAML body's content (plain scalars by YAML 1.2)."""
    if isinstance(value, _Plain):
        return _scalar(value, what)
    if isinstance(value, Mapping):
        return {str(key): _json_value(item, what) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_value(item, what) for item in value]
    if (
        value is None
        or isinstance(value, (str, int))
        or (isinstance(value, float) and math.isfinite(value))
    ):
        return value
    raise _Bad(
        f"the {what} holds a {type(value).__name__} (a YAML tag such as !!timestamp or "
        "!!binary), which cassetter does not read as JSON; write the value as a string"
    )


class _NotJson(Exception):
    """What cassetter's JSON parser (Rust's serde_json) refuses and Python's json accepts."""


def _not_json(text: str) -> Any:
    raise _NotJson(f"{text} is not a JSON number")


def _finite(text: str) -> float:
    real = float(text)
    if not math.isfinite(real):
        raise _NotJson(f"the number {text} is out of range")
    return real


def _integer(text: str) -> int | float:
    # serde_json: -0 is the float -0.0; past 64 bits an integer is a float.
    number = int(text)
    if text == "-0" or not -(1 << 63) <= number < (1 << 64):
        return _finite(text)
    return number


def _json_text(text: str, what: str) -> Any:
    """The JSON value cassetter reads from a TOML body_content: JSON text as serde_json parses
    it (no NaN or Infinity, numbers in range, no lone surrogate escapes)."""
    problem = ""
    try:
        value = json.loads(text, parse_constant=_not_json, parse_float=_finite, parse_int=_integer)
        if "\\u" in text:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
    except json.JSONDecodeError as exc:
        problem = f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    except _NotJson as exc:
        problem = str(exc)
    except UnicodeEncodeError:
        problem = "it escapes a lone surrogate (\\ud800 to \\udfff without its pair)"
    except RecursionError:
        problem = "it is nested too deeply"
    if problem:
        raise _Bad(
            f"the {what} of type json is not JSON ({problem}), so cassetter refuses to load it"
        )
    return value


def _cassetter_body(side: Mapping[str, Any], what: str) -> bytes:
    if "body" in side:
        body = side["body"]
        if not isinstance(body, Mapping) or "type" not in body:
            raise _Bad(f"the {what} 'body' must be a mapping with a 'type'")
        kind, content, key = body["type"], body.get("content"), "body.content"
    elif "body_type" in side:
        kind, content, key = side["body_type"], side.get("body_content"), "body_content"
    else:
        raise _Bad(f"the {what} has no body ('body' or 'body_type'; its keys: {_keys(side)})")
    if isinstance(content, _Plain) and kind in ("text", "binary"):
        value = _scalar(content, f"{what} body")
        if value is not None and not isinstance(value, str):
            raise _Bad(
                f"the {what} {key} of type {kind} is the plain YAML scalar {content}, which "
                f"cassetter reads as a {type(value).__name__} and replays as an empty body; "
                f"quote it ('{content}') if it is the body"
            )
        content = value
    if kind == "none" or (kind == "text" and content is None):
        return b""
    if kind == "text" and isinstance(content, str):
        return content.encode("utf-8")
    if kind == "json":
        # cassetter keeps a JSON body parsed and replays json.dumps of it (`body_to_bytes`):
        # ", " and ": ", non-ASCII escaped, whatever the file's text.  TOML holds JSON text;
        # YAML holds the value itself (a quoted string is a JSON string).
        if key == "body_content":
            if not isinstance(content, str):
                raise _Bad(f"the {what} body_content of type json must be JSON text")
            value = _json_text(content, f"{what} body_content")
        else:
            value = _json_value(content, f"{what} body")
        return json.dumps(value).encode("ascii")
    if kind == "binary" and isinstance(content, str):
        try:
            return bytes.fromhex(content)
        except ValueError:
            raise _Bad(f"the {what} {key} of type binary is not hex") from None
    raise _Bad(
        f"the {what} body of type {kind!r} with a {type(content).__name__} {key} is not a form "
        "convert understands (none, text, json, or binary as hex)"
    )


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _Bad(f"an interaction must have a {what!r} mapping")
    return value


def _source(number: int, interaction: Any, kind: str) -> SourceExchange:
    if not isinstance(interaction, Mapping):
        raise _Bad("an interaction must be a mapping with 'request' and 'response'")
    request = _mapping(interaction.get("request"), "request")
    response = _mapping(interaction.get("response"), "response")
    method, uri = request.get("method"), request.get("uri")
    if not isinstance(method, str) or not isinstance(uri, str):
        raise _Bad("the request needs a string 'method' and 'uri'")
    headers = _headers(request.get("headers"), "request headers")
    response_headers = _headers(response.get("headers"), "response headers")
    if kind == "cassetter":
        body = _cassetter_body(request, "request")
        status = _status(_scalar(response.get("status"), "response status"))
        response_body = _cassetter_body(response, "response")
    else:
        body = _vcr_request_body(request, headers)
        status = _vcr_status(response)
        response_body = _vcr_response_body(response)
        if "url" in response:
            headers = _with_aiohttp_defaults(headers)
    return SourceExchange(
        number,
        method.upper(),
        str(uri),
        headers,
        body,
        status,
        response_headers,
        response_body,
        _recorded_day(interaction),
    )


#: An RFC 3339 timestamp (or a bare date), as cassetter writes `recorded_at`.
_TIMESTAMP = re.compile(
    r"([0-9]{4}-[0-9]{2}-[0-9]{2})"
    r"(?:[Tt ]([0-9]{2}:[0-9]{2}:[0-9]{2})(?:\.([0-9]+))?([Zz]|[+-][0-9]{2}:[0-9]{2})?)?\Z"
)


def _recorded_day(interaction: Mapping[str, Any]) -> datetime.date | None:
    """The UTC day of an interaction's ``recorded_at`` (None when it has none)."""
    if "recorded_at" not in interaction:
        return None
    value = interaction["recorded_at"]
    if isinstance(value, str) and (match := _TIMESTAMP.match(value.strip())):
        day, time, fraction, offset = match.groups()
        if time is None:
            text = day
        else:  # (Python 3.10's fromisoformat needs 6 digits of fraction and no "Z")
            micro = (fraction or "")[:6].ljust(6, "0")
            zone = "+00:00" if offset in (None, "Z", "z") else offset
            text = f"{day}T{time}.{micro}{zone}"
        with contextlib.suppress(ValueError):
            value = datetime.datetime.fromisoformat(text)
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(datetime.timezone.utc)
        return value.date()
    if isinstance(value, datetime.date):
        return value
    raise _Bad(
        "'recorded_at' must be a date or an RFC 3339 timestamp (such as "
        f"2026-01-01T00:00:00Z), not {shown_value(value)}; fix it or delete the key"
    )


def _with_aiohttp_defaults(headers: Headers) -> Headers:
    """The request headers of an interaction vcrpy's aiohttp stub wrote (the only writer of a
    response ``url``), with the ``accept: */*`` aiohttp adds to every request unless one is
    given: the stub stores the headers the caller passed, never aiohttp's own, and a request
    the aiohttp front end replays has it.  (aiohttp's other defaults, accept-encoding and
    user-agent, are never compared.)"""
    if any(name == "accept" for name, _ in headers):
        return headers
    return (*headers, ("accept", "*/*"))


def _evidence(interaction: Any) -> tuple[str | None, str | None]:
    """(what in `interaction` only vcrpy writes, what only cassetter writes); None for none.

    A request body alone is no evidence: vcrpy's aiohttp support stores a ``json=`` argument
    as the mapping itself, so ``{type: text}`` may be either."""
    if not isinstance(interaction, Mapping):
        return None, None
    request, response = interaction.get("request"), interaction.get("response")
    request = request if isinstance(request, Mapping) else {}
    response = response if isinstance(response, Mapping) else {}
    body = response.get("body")
    vcrpy = cassetter = None
    if isinstance(body, Mapping) and "string" in body:
        vcrpy = "a response body with 'string'"
    elif isinstance(response.get("status"), Mapping):
        vcrpy = "a status with 'code'"
    elif "status_code" in response or "content" in response:
        vcrpy = "the old httpx layout, 'status_code' and 'content'"
    elif "parsed_body" in response or "parsed_body" in request:
        vcrpy = "pydantic-ai's 'parsed_body'"
    elif "body" in request and not isinstance(request["body"], Mapping):
        vcrpy = "a request body that is text or null"
    if "recorded_at" in interaction:
        cassetter = "recorded_at"
    elif "body_type" in request or "body_type" in response:
        cassetter = "body_type"
    elif isinstance(body, Mapping) and "type" in body and "string" not in body:
        cassetter = "a response body with 'type'"
    return vcrpy, cassetter


class _Mixed(Exception):
    """A file whose interactions are written in both formats."""


def _kind(data: Mapping[str, Any]) -> str:
    """ "vcrpy" or "cassetter", from the file as a whole: every interaction is searched for what
    only one of the two writes (`_evidence`).  cassetter's gRPC and WebSocket lists, or only
    cassetter's marks, make it cassetter's; a file with no mark either way is vcrpy's.  Raises
    `_Mixed` naming the first interaction of each when both formats are found."""
    if "grpc_interactions" in data or "ws_interactions" in data:
        return "cassetter"
    first: dict[str, tuple[int, str]] = {}
    for number, interaction in enumerate(data["interactions"], start=1):
        for kind, mark in zip(("vcrpy", "cassetter"), _evidence(interaction), strict=True):
            if mark is not None:
                first.setdefault(kind, (number, mark))
        if len(first) == 2:
            found = sorted((n, k, m) for k, (n, m) in first.items())
            said = " and ".join(f"interaction {n} as {k} writes it ({m})" for n, k, m in found)
            a, b = found[0][0], found[1][0]
            where = f"interaction {a} is" if a == b else f"interactions {a} and {b} are"
            raise _Mixed(
                f"{where} written in two formats: {said}; convert reads a file "
                "as one format, as the tool that replays it does. Move the odd interactions "
                "into a file of their own, or fix them"
            )
    return "cassetter" if "cassetter" in first else "vcrpy"


def _kind_of(data: Any) -> str:
    """`_kind` of what may not be a cassette at all (`read_foreign` then says what is wrong)."""
    if isinstance(data, Mapping) and isinstance(data.get("interactions", []), list):
        try:
            return _kind({"interactions": [], **data})
        except _Mixed:
            return "vcrpy"
    return "vcrpy"


def read_foreign(data: Any, name: str) -> ForeignCassette:
    """Interpret a parsed foreign cassette (see `load_vcr`).

    Raises `VcrImportError` naming the interaction and the key for a structure it cannot
    read, a pre-1.0 vcrpy list, an unknown version, or cassetter gRPC/WebSocket interactions
    (sakura-http records HTTP only; dropping them would convert wrongly).
    """
    if isinstance(data, list):
        raise VcrImportError(
            f"{name}: this is a pre-1.0 vcrpy cassette (a bare list); migrate it with vcrpy's "
            "migration script first, or re-record it"
        )
    lists = ("interactions", "grpc_interactions", "ws_interactions")
    if (
        not isinstance(data, Mapping)
        or not any(key in data for key in lists)
        or not isinstance(data.get("interactions", []), list)
    ):
        raise VcrImportError(
            f"{name}: not a vcrpy or cassetter cassette (expected a mapping with an "
            "'interactions' list)"
        )
    data = {"interactions": [], **data}  # a cassetter file may hold only gRPC/WebSocket
    try:
        kind = _kind(data)
    except _Mixed as exc:
        raise VcrImportError(f"{name}: {exc}") from None
    version = data.get("version", 1)
    if isinstance(version, _Plain):
        version = _core_scalar(version) if _CORE_INT.fullmatch(version) else str(version)
    if version != 1:
        raise VcrImportError(
            f"{name}: {kind} cassette version {shown_value(version)} is not supported (this "
            "reads version 1)"
        )
    others = [
        f"{len(data[key])} {label}"
        for key, label in (("grpc_interactions", "gRPC"), ("ws_interactions", "WebSocket"))
        if isinstance(data.get(key), list) and data[key]
    ]
    if others:
        raise VcrImportError(
            f"{name}: this cassetter cassette also holds {' and '.join(others)} interaction(s); "
            "sakura-http records HTTP only, so converting would silently drop them. Keep those "
            "tests on cassetter, or move the HTTP interactions into a cassette of their own"
        )
    exchanges = []
    for number, interaction in enumerate(data["interactions"], start=1):
        try:
            exchanges.append(_source(number, interaction, kind))
        except _Bad as exc:
            raise VcrImportError(f"{name}: interaction {number}: {exc}") from None
        except RecursionError:
            raise VcrImportError(
                f"{name}: interaction {number}: a body is nested too deeply to be read"
            ) from None
    return ForeignCassette(kind, tuple(exchanges))
