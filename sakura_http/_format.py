"""The on-disk cassette format: JSON Lines, schema 1.x.

This module owns the format and nothing else: the header line, the version check, and
encoding/decoding one exchange.  It does no file I/O (see `_cassette.py` for that), so the
CLI, the transport and the proxy all read and write cassettes through the same functions.

Layout::

    {"schema_version":"1.0","kind":"cassette"}                       <- line 1, the header
    {"method":"GET","url":"...","headers":[["accept","*/*"]],"body":"",
     "status":200,"response_headers":[...],"response_body":"..."}    <- one exchange per line

A body that is not valid UTF-8 is stored base64-encoded under `body_b64` /
`response_body_b64`.  Response header values are bytes on the wire: they are written as their
UTF-8 text, or, when one of them is not valid UTF-8, all as their Latin-1 text with
`"response_header_charset":"latin-1"` (a 1.x addition), so replay sends the very bytes recorded.
Optional fields (`id`, `error`, `chunks`, `truncated`, `timings_ms`, `response_header_charset`)
follow the required ones; unknown fields that a later 1.x version may add are kept verbatim in
`Exchange.extra` and written back unchanged.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from ._exceptions import CassetteFormatError

__all__ = [
    "SCHEMA_VERSION",
    "CassetteContent",
    "Exchange",
    "FaultInfo",
    "Headers",
    "decode_exchange",
    "decode_header",
    "encode_exchange",
    "encode_header",
    "header_bytes",
    "header_text",
    "iter_lines",
    "parse_cassette",
    "torn_tail",
]

SCHEMA_VERSION = "1.0"
RERECORD_HINT = "re-record it with `pytest --record-all` (or delete it and run `pytest --record`)"

Headers = tuple[tuple[str, str], ...]

#: How response header values are spelled as text: UTF-8 unless a value is not valid UTF-8.
_CHARSETS = ("utf-8", "latin-1")

# The fields this version reads with meaning, in the order they are written.
_KNOWN_FIELDS = frozenset(
    {
        "method", "url", "headers", "body", "body_b64",
        "status", "response_headers", "response_body", "response_body_b64",
        "id", "error", "chunks", "truncated", "timings_ms", "response_header_charset",
    }
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class FaultInfo:
    """A recorded transport failure: `type` names an httpx.TransportError subclass."""

    type: str
    message: str


@dataclass(frozen=True, slots=True)
class Exchange:
    """One recorded request and its response (or its transport failure).

    Header names are lower-case; order and repeats are kept.  `status` is None only for a
    fault exchange (`error` set).  `chunks` holds the sizes of the chunks the response body
    arrived in, `timings_ms` their arrival offsets; `truncated` marks a stream the caller closed
    before its end.  `response_header_charset` says how the response header values spell their
    bytes ("utf-8", or "latin-1" when one of them is not UTF-8; see `header_bytes`).  `extra`
    holds fields this version does not know, written back unchanged.
    """

    method: str
    url: str
    headers: Headers = ()
    body: bytes = b""
    status: int | None = 200
    response_headers: Headers = ()
    response_body: bytes = b""
    error: FaultInfo | None = None
    id: str | None = None
    chunks: tuple[int, ...] | None = None
    truncated: bool = False
    timings_ms: tuple[float, ...] | None = None
    response_header_charset: str = "utf-8"
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class CassetteContent:
    """A parsed cassette: its header object, exchanges and the line number of each."""

    header: dict[str, Any]
    exchanges: list[Exchange]
    line_numbers: list[int]


def header_text(raw: Iterable[tuple[bytes, bytes]]) -> tuple[Headers, str]:
    """Raw response header pairs as text, and the charset that spells them: UTF-8 when every
    value is valid UTF-8 (the file stays readable), else Latin-1 for all (lossless for any bytes).
    Names are lower-cased."""
    pairs = [(name.decode("latin-1").lower(), value) for name, value in raw]
    try:
        return tuple((name, value.decode("utf-8")) for name, value in pairs), "utf-8"
    except UnicodeDecodeError:
        return tuple((name, value.decode("latin-1")) for name, value in pairs), "latin-1"


def header_bytes(headers: Headers, charset: str) -> list[tuple[bytes, bytes]]:
    """The bytes `header_text` was given back: what a replay sends."""
    return [(name.encode("latin-1"), value.encode(charset)) for name, value in headers]


# --- encoding -----------------------------------------------------------------------------


def encode_header(extra: Mapping[str, Any] | None = None) -> bytes:
    """The header line (with newline); `extra` informational keys follow the two fixed ones."""
    header: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "kind": "cassette"}
    for key, value in (extra or {}).items():
        if key not in header:
            header[key] = value
    return orjson.dumps(header) + b"\n"


def _put_body(obj: dict[str, Any], key: str, body: bytes) -> None:
    try:
        obj[key] = body.decode("utf-8")
    except UnicodeDecodeError:
        obj[key + "_b64"] = base64.b64encode(body).decode("ascii")


def encode_exchange(exchange: Exchange) -> bytes:
    """One complete cassette line for `exchange`, newline included, keys in fixed order."""
    obj: dict[str, Any] = {
        "method": exchange.method,
        "url": exchange.url,
        "headers": exchange.headers,
    }
    _put_body(obj, "body", exchange.body)
    if exchange.error is None or exchange.status is not None:
        obj["status"] = exchange.status
        obj["response_headers"] = exchange.response_headers
        _put_body(obj, "response_body", exchange.response_body)
        if exchange.response_header_charset != "utf-8":
            if exchange.response_header_charset not in _CHARSETS:
                raise ValueError(
                    f"response_header_charset must be one of {_CHARSETS}, "
                    f"not {exchange.response_header_charset!r}"
                )
            header_bytes(exchange.response_headers, "latin-1")  # a value it cannot spell raises
            obj["response_header_charset"] = exchange.response_header_charset
    if exchange.id is not None:
        obj["id"] = exchange.id
    if exchange.error is not None:
        obj["error"] = {"type": exchange.error.type, "message": exchange.error.message}
    if exchange.chunks is not None:
        obj["chunks"] = exchange.chunks
    if exchange.truncated:
        obj["truncated"] = True
    if exchange.timings_ms is not None:
        obj["timings_ms"] = exchange.timings_ms
    for key, value in exchange.extra.items():
        if key not in obj:
            obj[key] = value
    return orjson.dumps(obj) + b"\n"


# --- decoding -----------------------------------------------------------------------------


class _Bad(Exception):
    """A field problem inside one line; turned into CassetteFormatError with the line number."""


def torn_tail(data: bytes) -> bytes:
    """The torn last line of `data` (a crash mid-append): what follows the last newline when it
    is not blank, else b"".  The one definition the loader, `lint`, `repair` and appending
    share: blank space after the last newline is not torn (it reads as a blank line, and an
    append starts a fresh line after it); a whitespace-only file is an empty cassette."""
    tail = data[data.rfind(b"\n") + 1 :]
    return tail if tail.strip() else b""


def iter_lines(data: bytes, path: str | os.PathLike[str]) -> Iterator[tuple[int, bytes]]:
    """Yield `(line_number, line)` for every non-blank line of `data`.

    A last line without its newline is a torn write (a crash mid-append) and raises
    `CassetteFormatError` naming that line; nothing before it is hidden.
    """
    lines = data.split(b"\n")
    tail = lines.pop()  # what follows the last newline: nothing, unless a write was torn
    for number, line in enumerate(lines, 1):
        if line and not line.isspace():  # isspace() stops at the first byte of a JSON line
            yield number, line
    if torn_tail(tail):
        raise CassetteFormatError(
            path,
            len(lines) + 1,
            "the last line is incomplete (no trailing newline): a recording was "
            "interrupted mid-write. Run `sakura-http repair` on the file to drop it "
            "(a backup is kept), then record again",
        )


def _load_json(line: bytes) -> Any:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise _Bad(f"not valid JSON ({exc})") from None


def decode_header(line: bytes, path: str | os.PathLike[str], number: int) -> dict[str, Any]:
    """Check the header line; a missing `schema_version` or a major version other than 1 fails."""
    try:
        obj = _load_json(line)
    except _Bad as exc:
        raise CassetteFormatError(
            path, number, f"the header line is {exc}; {RERECORD_HINT}"
        ) from None
    if not isinstance(obj, dict) or "schema_version" not in obj:
        raise CassetteFormatError(
            path,
            number,
            "the first line is not a sakura-http cassette header (no schema_version); "
            f"this is not a sakura-http cassette or predates the format: {RERECORD_HINT}",
        )
    version = obj["schema_version"]
    if not isinstance(version, str) or version.split(".", 1)[0] != "1":
        raise CassetteFormatError(
            path,
            number,
            f"schema_version {version!r} is not supported (this sakura-http reads 1.x); "
            f"{RERECORD_HINT}",
        )
    if obj.get("kind", "cassette") != "cassette":
        raise CassetteFormatError(
            path, number, f"kind {obj.get('kind')!r} is not 'cassette'; {RERECORD_HINT}"
        )
    return obj


def _str(obj: dict[str, Any], key: str) -> str:
    if key not in obj:
        raise _Bad(f"missing field {key!r}")
    value = obj[key]
    if not isinstance(value, str):
        raise _Bad(f"field {key!r} must be a string, not {type(value).__name__}")
    return value


def _headers(obj: dict[str, Any], key: str) -> Headers:
    if key not in obj:
        raise _Bad(f"missing field {key!r}")
    value = obj[key]
    if not isinstance(value, list):
        raise _Bad(f"field {key!r} must be a list of [name, value] pairs")
    pairs = []
    for item in value:
        if (
            not isinstance(item, list)
            or len(item) != 2
            or not isinstance(item[0], str)
            or not isinstance(item[1], str)
        ):
            raise _Bad(f"field {key!r} must be a list of [name, value] string pairs, got {item!r}")
        pairs.append((item[0].lower(), item[1]))
    return tuple(pairs)


def _body(obj: dict[str, Any], key: str) -> bytes:
    b64 = key + "_b64"
    if key in obj and b64 in obj:
        raise _Bad(f"fields {key!r} and {b64!r} are both present; keep one")
    if b64 in obj:
        value = obj[b64]
        if not isinstance(value, str):
            raise _Bad(f"field {b64!r} must be a base64 string")
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise _Bad(f"field {b64!r} is not valid base64") from None
    return _str(obj, key).encode("utf-8")


def _numbers(
    obj: dict[str, Any], key: str, kind: type | tuple[type, ...]
) -> tuple[Any, ...] | None:
    if key not in obj:
        return None
    value = obj[key]
    if not isinstance(value, list) or not all(
        isinstance(n, kind) and not isinstance(n, bool) and n >= 0  # type: ignore[operator]
        for n in value
    ):
        raise _Bad(f"field {key!r} must be a list of non-negative numbers")
    return tuple(value)


def _check_latin1(charset: Any, headers: Headers) -> None:
    if charset != "latin-1":
        raise _Bad(
            f"field 'response_header_charset' must be \"latin-1\" if present, not {charset!r}"
        )
    for name, value in headers:
        try:
            value.encode("latin-1")
        except UnicodeEncodeError:
            raise _Bad(
                f"response header {name!r} has a character outside Latin-1, which "
                "'response_header_charset': 'latin-1' cannot spell"
            ) from None


def _exchange(obj: Any) -> Exchange:
    if not isinstance(obj, dict):
        raise _Bad(f"an exchange must be a JSON object, not {type(obj).__name__}")
    error: FaultInfo | None = None
    if "error" in obj:
        raw = obj["error"]
        if not (
            isinstance(raw, dict)
            and isinstance(raw.get("type"), str)
            and isinstance(raw.get("message"), str)
        ):
            raise _Bad('field "error" must be {"type": "<httpx error class>", "message": "..."}')
        error = FaultInfo(raw["type"], raw["message"])
    has_response = error is None or "status" in obj
    status: int | None = None
    response_headers: Headers = ()
    response_body = b""
    if has_response:
        if "status" not in obj:
            raise _Bad("missing field 'status'")
        status = obj["status"]
        if not isinstance(status, int) or isinstance(status, bool) or not 100 <= status <= 999:
            raise _Bad(f"field 'status' must be an HTTP status code, got {status!r}")
        response_headers = _headers(obj, "response_headers")
        response_body = _body(obj, "response_body")
    charset = obj.get("response_header_charset", "utf-8")
    if charset != "utf-8":
        _check_latin1(charset, response_headers)
    exchange_id = obj.get("id")
    if exchange_id is not None and not isinstance(exchange_id, str):
        raise _Bad("field 'id' must be a string")
    truncated = obj.get("truncated", False)
    if not isinstance(truncated, bool):
        raise _Bad("field 'truncated' must be true or false")
    chunks = _numbers(obj, "chunks", int)
    if chunks is not None and sum(chunks) != len(response_body):
        raise _Bad(
            f"field 'chunks' adds up to {sum(chunks)} bytes but the response body has "
            f"{len(response_body)}"
        )
    timings = _numbers(obj, "timings_ms", (int, float))
    if timings is not None and (chunks is None or len(timings) != len(chunks)):
        raise _Bad("field 'timings_ms' needs one entry per entry of 'chunks'")
    return Exchange(
        method=_str(obj, "method"),
        url=_str(obj, "url"),
        headers=_headers(obj, "headers"),
        body=_body(obj, "body"),
        status=status,
        response_headers=response_headers,
        response_body=response_body,
        error=error,
        id=exchange_id,
        chunks=chunks,
        truncated=truncated,
        timings_ms=timings,
        response_header_charset=charset,
        extra={k: v for k, v in obj.items() if k not in _KNOWN_FIELDS},
    )


# The common shape of an exchange line, decoded with checks done by C-level set operations
# instead of one Python test per value.  It accepts exactly what `_exchange` accepts for lines of
# that shape (tests/test_format.py checks the two agree); anything else -- a fault, a base64
# body, a header charset, an unknown field, or any problem at all -- returns None and goes
# through `_exchange`, which names the problem.
_FAST_FIELDS = frozenset(
    {
        "method", "url", "headers", "body", "status", "response_headers", "response_body",
        "id", "chunks", "truncated", "timings_ms",
    }
)  # fmt: skip
_FAST_REQUIRED = frozenset(
    {"method", "url", "headers", "body", "status", "response_headers", "response_body"}
)
_LIST = {list}
_INT: set[type[Any]] = {int}
_NUMBER: set[type[Any]] = {int, float}


def _fast_pairs(value: Any) -> Headers | None:
    if type(value) is not list:
        return None
    try:
        # Unpacking checks each item has two parts, .lower() that a name is a string (no other
        # JSON value has it), the filter that a value is; the set that every item is a list.
        pairs = tuple([(name.lower(), text) for name, text in value if type(text) is str])
    except (ValueError, TypeError, AttributeError):
        return None
    if len(pairs) != len(value) or (value and {*map(type, value)} != _LIST):
        return None
    return pairs


def _fast_numbers(obj: dict[str, Any], key: str, kinds: set[type[Any]]) -> tuple[Any, ...]:
    value = obj[key]
    if type(value) is not list or (value and ({*map(type, value)} > kinds or min(value) < 0)):
        raise _Bad(key)  # the caller falls back to `_exchange`, which words the problem
    return tuple(value)


def _fast_exchange(obj: Any, shared: dict[Headers, Headers]) -> Exchange | None:
    if type(obj) is not dict:
        return None
    keys = obj.keys()
    if not (keys <= _FAST_FIELDS and keys >= _FAST_REQUIRED):
        return None
    method, url, body = obj["method"], obj["url"], obj["body"]
    response_body, status = obj["response_body"], obj["status"]
    if (
        type(method) is not str
        or type(url) is not str
        or type(body) is not str
        or type(response_body) is not str
        or type(status) is not int
        or not 100 <= status <= 999
    ):
        return None
    headers = _fast_pairs(obj["headers"])
    if headers is not None:
        # A client sends the same request headers again and again: keep one tuple of each, so
        # the cassette holds one copy and matching computes each tuple's match headers once.
        headers = shared.setdefault(headers, headers)
    response_headers = _fast_pairs(obj["response_headers"])
    exchange_id = obj.get("id")
    truncated = obj.get("truncated", False)
    if (
        headers is None
        or response_headers is None
        or (exchange_id is not None and type(exchange_id) is not str)
        or type(truncated) is not bool
    ):
        return None
    payload = response_body.encode("utf-8")
    chunks = timings = None
    try:
        if "chunks" in obj:
            chunks = _fast_numbers(obj, "chunks", _INT)
            if sum(chunks) != len(payload):
                return None
        if "timings_ms" in obj:
            timings = _fast_numbers(obj, "timings_ms", _NUMBER)
            if chunks is None or len(timings) != len(chunks):
                return None
    except _Bad:
        return None
    return Exchange(
        method=method,
        url=url,
        headers=headers,
        body=body.encode("utf-8"),
        status=status,
        response_headers=response_headers,
        response_body=payload,
        id=exchange_id,
        chunks=chunks,
        truncated=truncated,
        timings_ms=timings,
        extra={},
    )


def decode_exchange(line: bytes, path: str | os.PathLike[str], number: int) -> Exchange:
    """Decode one exchange line; any problem raises `CassetteFormatError` naming the line."""
    try:
        return _exchange(_load_json(line))
    except _Bad as exc:
        raise CassetteFormatError(path, number, f"{exc}; fix the line or {RERECORD_HINT}") from None


def parse_cassette(data: bytes, path: str | os.PathLike[str]) -> CassetteContent:
    """Parse a whole cassette.  Empty data is an empty cassette; every other problem raises."""
    lines = iter_lines(data, path)
    first = next(lines, None)
    if first is None:
        return CassetteContent(header={}, exchanges=[], line_numbers=[])
    header = decode_header(first[1], path, first[0])
    exchanges: list[Exchange] = []
    numbers: list[int] = []
    shared: dict[Headers, Headers] = {}
    for number, line in lines:
        try:
            exchange = _fast_exchange(orjson.loads(line), shared)
        except orjson.JSONDecodeError:
            exchange = None
        if exchange is None:  # an unusual or malformed line: the strict path words it
            exchange = decode_exchange(line, path, number)
        exchanges.append(exchange)
        numbers.append(number)
    return CassetteContent(header=header, exchanges=exchanges, line_numbers=numbers)
