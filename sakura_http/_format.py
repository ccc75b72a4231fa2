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
Optional fields (`id`, `error`, `chunks`, `truncated`, `timings_ms`, `response_header_charset`,
`recorded_at`: the UTC day, ``"2026-12-01"``) follow the required ones; unknown fields that a
later 1.x version may add are kept verbatim in `Exchange.extra` and written back unchanged.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from ._exceptions import CassetteFormatError, UnwritableExchangeError
from ._exchange import (
    Exchange,
    FaultInfo,
    FieldError,
    Headers,
    check_chunks,
    check_names,
    check_timings,
    unspellable_name,
)
from ._shown import shown_value

if TYPE_CHECKING:
    from ._format_fast import Line

__all__ = [
    "SCHEMA_VERSION",
    "CassetteContent",
    "CassetteParser",
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
    "read_back",
    "torn_tail",
]

SCHEMA_VERSION = "1.0"
RERECORD_HINT = "re-record it with `pytest --record-all` (or delete it and run `pytest --record`)"

#: How response header values are spelled as text: UTF-8 unless a value is not valid UTF-8.
_CHARSETS = ("utf-8", "latin-1")

# The fields this version reads with meaning, in the order they are written.
_KNOWN_FIELDS = frozenset(
    {
        "method", "url", "headers", "body", "body_b64",
        "status", "response_headers", "response_body", "response_body_b64",
        "id", "error", "chunks", "truncated", "timings_ms", "response_header_charset",
        "recorded_at",
    }
)  # fmt: skip


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
    pairs = list(raw)
    try:
        return tuple(
            [(name.decode("latin-1").lower(), value.decode("utf-8")) for name, value in pairs]
        ), "utf-8"
    except UnicodeDecodeError:
        return tuple(
            [(name.decode("latin-1").lower(), value.decode("latin-1")) for name, value in pairs]
        ), "latin-1"


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
        name = unspellable_name(exchange.response_headers)
        if name is not None:
            raise ValueError(
                f"response header name {shown_value(name)} has a character outside Latin-1, "
                "which no HTTP response can carry"
            )
        if exchange.response_header_charset != "utf-8":
            if exchange.response_header_charset not in _CHARSETS:
                raise ValueError(
                    f"response_header_charset must be one of {_CHARSETS}, "
                    f"not {shown_value(exchange.response_header_charset)}"
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
    day = exchange.recorded_at
    if day is not None:
        # A datetime is a date too, but written as a timestamp, which the loader refuses.
        if type(day) is not datetime.date:
            raise ValueError(
                f"recorded_at must be a datetime.date (the UTC day), not {type(day).__name__}"
            )
        obj["recorded_at"] = day  # orjson writes a date as the loader reads it: "2026-12-01"
    for key, value in exchange.extra.items():
        if key not in obj:
            obj[key] = value
    return orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE)


# --- decoding -----------------------------------------------------------------------------


def torn_tail(data: bytes) -> bytes:
    """The torn last line of `data` (a crash mid-append): what follows the last newline when it
    is not blank, else b"".  The one definition the loader, `lint`, `repair` and appending
    share: blank space after the last newline is not torn (it reads as a blank line, and an
    append starts a fresh line after it); a whitespace-only file is an empty cassette."""
    tail = data[data.rfind(b"\n") + 1 :]
    return tail if tail.strip() else b""


def _torn_line(path: str | os.PathLike[str], number: int) -> CassetteFormatError:
    return CassetteFormatError(
        path,
        number,
        "the last line is incomplete (no trailing newline): a recording was interrupted "
        "mid-write. Run `sakura-http repair` on the file to drop it (a backup is kept), then "
        "record again",
    )


def _line_spans(data: bytes, path: str | os.PathLike[str]) -> Iterator[tuple[int, int, int]]:
    """`(line_number, start, end)` of every non-blank line of `data`; see `iter_lines`."""
    start = 0
    number = 0
    size = len(data)
    while start < size:
        number += 1
        end = data.find(b"\n", start)
        if end == -1:
            if torn_tail(data):
                raise _torn_line(path, number)
            return
        # A JSON line starts with "{" (or "["): only an odd line pays for a copy to strip.
        if data[start] in _JSON_START or data[start:end].strip():
            yield number, start, end
        start = end + 1


_JSON_START = frozenset(b"{[")


def iter_lines(data: bytes, path: str | os.PathLike[str]) -> Iterator[tuple[int, bytes]]:
    """Yield `(line_number, line)` for every non-blank line of `data`.

    A last line without its newline is a torn write (a crash mid-append) and raises
    `CassetteFormatError` naming that line; nothing before it is hidden.
    """
    for number, start, end in _line_spans(data, path):
        yield number, data[start:end]


def _load_json(line: bytes | memoryview) -> Any:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise FieldError(f"not valid JSON ({exc})") from None


def decode_header(
    line: bytes | memoryview, path: str | os.PathLike[str], number: int
) -> dict[str, Any]:
    """Check the header line; a missing `schema_version` or a major version other than 1 fails."""
    try:
        obj = _load_json(line)
    except FieldError as exc:
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
    major = version.split(".", 1)[0] if isinstance(version, str) else ""
    if major != "1":
        # A newer major is a good recording this release cannot read: re-recording or deleting
        # it would lose it.
        fix = (
            "it was written by a newer sakura-http: upgrade sakura-http to read it"
            if major.isdigit() and int(major) > 1
            else RERECORD_HINT
        )
        raise CassetteFormatError(
            path,
            number,
            f"schema_version {shown_value(version)} is not supported (this sakura-http reads 1.x); "
            f"{fix}",
        )
    if obj.get("kind", "cassette") != "cassette":
        raise CassetteFormatError(
            path, number, f"kind {shown_value(obj.get('kind'))} is not 'cassette'; {RERECORD_HINT}"
        )
    return obj


def _str(obj: dict[str, Any], key: str) -> str:
    if key not in obj:
        raise FieldError(f"missing field {key!r}")
    value = obj[key]
    if not isinstance(value, str):
        raise FieldError(f"field {key!r} must be a string, not {type(value).__name__}")
    return value


def _headers(obj: dict[str, Any], key: str) -> Headers:
    if key not in obj:
        raise FieldError(f"missing field {key!r}")
    value = obj[key]
    if not isinstance(value, list):
        raise FieldError(f"field {key!r} must be a list of [name, value] pairs")
    pairs = []
    for item in value:
        if (
            not isinstance(item, list)
            or len(item) != 2
            or not isinstance(item[0], str)
            or not isinstance(item[1], str)
        ):
            raise FieldError(
                f"field {key!r} must be a list of [name, value] string pairs, "
                f"got {shown_value(item)}"
            )
        pairs.append((item[0].lower(), item[1]))
    return tuple(pairs)


def _body(obj: dict[str, Any], key: str) -> bytes:
    b64 = key + "_b64"
    if key in obj and b64 in obj:
        raise FieldError(f"fields {key!r} and {b64!r} are both present; keep one")
    if b64 in obj:
        value = obj[b64]
        if not isinstance(value, str):
            raise FieldError(f"field {b64!r} must be a base64 string")
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise FieldError(f"field {b64!r} is not valid base64") from None
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
        raise FieldError(f"field {key!r} must be a list of non-negative numbers")
    return tuple(value)


#: The one spelling of `recorded_at`: an ISO 8601 calendar date in its extended form.
_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}\Z")


def _recorded_at(obj: dict[str, Any]) -> datetime.date | None:
    if "recorded_at" not in obj:
        return None
    value = obj["recorded_at"]
    if isinstance(value, str) and _DAY.match(value):
        try:
            return datetime.date.fromisoformat(value)
        except ValueError:
            pass
    raise FieldError(
        "field 'recorded_at' must be the UTC day the exchange was recorded, as \"YYYY-MM-DD\" "
        f'(an ISO 8601 date such as "2026-12-01"), not {shown_value(value)}'
    )


def _check_latin1(charset: Any, headers: Headers) -> None:
    if charset != "latin-1":
        raise FieldError(
            "field 'response_header_charset' must be \"latin-1\" if present, not "
            + shown_value(charset)
        )
    for name, value in headers:
        try:
            value.encode("latin-1")
        except UnicodeEncodeError:
            raise FieldError(
                f"response header {shown_value(name)} has a character outside Latin-1, which "
                "'response_header_charset': 'latin-1' cannot spell"
            ) from None


def _exchange(obj: Any) -> Exchange:
    if not isinstance(obj, dict):
        raise FieldError(f"an exchange must be a JSON object, not {type(obj).__name__}")
    error: FaultInfo | None = None
    if "error" in obj:
        raw = obj["error"]
        if not (
            isinstance(raw, dict)
            and isinstance(raw.get("type"), str)
            and isinstance(raw.get("message"), str)
        ):
            raise FieldError(
                'field "error" must be {"type": "<httpx error class>", "message": "..."}'
            )
        error = FaultInfo(raw["type"], raw["message"])
    has_response = error is None or "status" in obj
    status: int | None = None
    response_headers: Headers = ()
    response_body = b""
    if has_response:
        if "status" not in obj:
            raise FieldError("missing field 'status'")
        status = obj["status"]
        if not isinstance(status, int) or isinstance(status, bool) or not 100 <= status <= 999:
            raise FieldError(
                f"field 'status' must be an HTTP status code, got {shown_value(status)}"
            )
        response_headers = _headers(obj, "response_headers")
        check_names(response_headers)
        response_body = _body(obj, "response_body")
    charset = obj.get("response_header_charset", "utf-8")
    if charset != "utf-8":
        _check_latin1(charset, response_headers)
    exchange_id = obj.get("id")
    if exchange_id is not None and not isinstance(exchange_id, str):
        raise FieldError("field 'id' must be a string")
    truncated = obj.get("truncated", False)
    if not isinstance(truncated, bool):
        raise FieldError("field 'truncated' must be true or false")
    chunks = _numbers(obj, "chunks", int)
    if chunks is not None:
        check_chunks(chunks, response_body)
    timings = _numbers(obj, "timings_ms", (int, float))
    if timings is not None:
        check_timings(timings, chunks)
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
        recorded_at=_recorded_at(obj),
        extra=_extra(obj),
    )


def _extra(obj: dict[str, Any]) -> dict[str, Any]:
    """The fields this version keeps without reading them: `secret_headers` (checked: verify
    reads it), `notes` and any unknown field, as written."""
    names = obj.get("secret_headers", [])
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise FieldError(
            "field 'secret_headers' must be a list of header names (the declared secret headers "
            f"left out of the request), not {shown_value(names)}"
        )
    return {k: v for k, v in obj.items() if k not in _KNOWN_FIELDS}


def _line_error(path: str | os.PathLike[str], number: int, exc: FieldError) -> CassetteFormatError:
    return CassetteFormatError(path, number, f"{exc}; fix the line or {RERECORD_HINT}")


def decode_exchange(
    line: bytes | memoryview, path: str | os.PathLike[str], number: int
) -> Exchange:
    """Decode one exchange line; any problem raises `CassetteFormatError` naming the line."""
    try:
        return _exchange(_load_json(line))
    except FieldError as exc:
        raise _line_error(path, number, exc) from None


def read_back(exchange: Exchange) -> Exchange:
    """`exchange` as the loader reads back the line `encode_exchange` writes for it: header
    names lower-cased, lists made tuples, every field checked by the loader's own rules (the
    line is encoded and decoded, so no rule is written twice).  For an exchange the recording
    path did not build itself, such as a `before_record` hook's result.

    Raises `UnwritableExchangeError` for an exchange the loader would refuse (or that cannot be
    written at all), naming the first field at fault: the one whose value, put in place of a
    plain exchange's after the fields before it, makes the loader refuse it (`error` is put
    first, since whether a status is needed depends on it).
    """
    try:
        return _written_and_read(exchange)
    except FieldError:
        pass
    plain = Exchange("GET", "http://sakura-http.invalid/")
    names = ["error", *(f.name for f in dataclasses.fields(Exchange) if f.name != "error")]
    for count, name in enumerate(names, 1):
        partial = dataclasses.replace(plain, **{n: getattr(exchange, n) for n in names[:count]})
        try:
            _written_and_read(partial)
        except FieldError as exc:
            raise UnwritableExchangeError(name, str(exc)) from None
    raise AssertionError("the whole exchange was refused, so one of its fields is")


def _written_and_read(exchange: Exchange) -> Exchange:
    try:
        line = encode_exchange(exchange)
    except Exception as exc:  # any value a caller may have put in any field
        raise FieldError(f"it cannot be written as JSON ({type(exc).__name__}: {exc})") from None
    return _exchange(_load_json(line))


#: A line held past this many bytes is looked at for a long string to cut out (CassetteParser).
_LONG_STRING = 1 << 20


class CassetteParser:
    """Parse a cassette from its bytes, fed in pieces of any size as they are read.

    Sans I/O: the caller reads (`load_cassette` a block at a time, under the file's shared
    lock) and calls `feed(data)`, then `close()`, which returns the `CassetteContent`.  A line is
    decoded as soon as its newline arrives.  Every problem raises `CassetteFormatError` naming
    the line, in the order of the lines; `close()` reports a last line without its newline (a
    torn write), as `iter_lines` does.

    A large text body is held once: given `read_at(offset, size)` (the file's bytes there), a
    line that grows past `long_string` bytes while inside a string with no escape so far is held
    without that string, which is read from the file as the body's bytes once the line ends (a
    JSON string with no escape is its text's UTF-8); the rest of the line is decoded with a
    marker in the string's place.  Anything unusual about such a line (an escape after all, the
    string in a field other than a body, a line the fast decoder refuses) reads the line again
    whole and decodes it as any other, so the result and every error are the same as without
    `read_at` (tests/test_format.py).  A line is looked at once when it passes `long_string`
    bytes, and again after each string cut out of it.  Any other long line (a body with escapes,
    a base64 one, or no `read_at`) is held whole, then with its text, then with its bodies' bytes.
    """

    __slots__ = (
        "_checked", "_decode_line", "_exchanges", "_fed", "_from_line", "_header", "_holes",
        "_in_string", "_is_string_content", "_line_start", "_long", "_marker", "_number",
        "_numbers", "_open_string", "_path", "_pending", "_pending_size", "_read_at", "_refused",
        "_reread", "_shared", "_tail",
    )  # fmt: skip

    def __init__(
        self,
        path: str | os.PathLike[str],
        read_at: Callable[[int, int], bytes] | None = None,
        *,
        long_string: int = _LONG_STRING,
    ) -> None:
        from ._format_fast import (
            DecodeError,
            decode_line,
            from_line,
            is_string_content,
            open_string,
        )

        self._decode_line = decode_line
        self._from_line = from_line
        self._is_string_content = is_string_content
        self._open_string = open_string
        self._refused = DecodeError
        self._path = path
        self._read_at = read_at
        self._long = long_string
        self._number = 0  # lines seen whole
        self._fed = 0  # bytes fed before the current piece: the file offset of its first byte
        self._pending: list[bytes | memoryview] = []  # a line whose newline has not come yet
        self._pending_size = 0  # its bytes since its last string cut out
        self._tail = 0  # where those start in `_pending` (after the part already looked at)
        self._line_start = 0  # its file offset
        self._checked = False  # looked at for a string to cut out (since the last cut out)
        self._in_string = -1  # the file offset of the string being cut out, or -1
        self._holes: list[tuple[int, int]] = []  # the (offset, size) of each string cut out
        self._reread = False  # the pending line is read again whole from the file when it ends
        # The text put in place of a string cut out: one no line holds (a random marker).
        self._marker = "\x00sakura-http:" + os.urandom(8).hex() + ":"
        self._header: dict[str, Any] | None = None
        self._exchanges: list[Exchange] = []
        self._numbers: list[int] = []
        self._shared: dict[Headers, Headers] = {}

    def feed(self, data: bytes) -> None:
        """Parse the lines `data` completes; `data` must not change afterwards."""
        if not data:
            return
        view = memoryview(data)
        start = 0
        if self._pending or self._reread:  # a line begun in earlier data
            start = self._continue(data, view)
            if start == -1:
                self._fed += len(data)
                return
        number = self._number
        find = data.find
        while (end := find(b"\n", start)) != -1:
            number += 1
            # A JSON line starts with "{" (or "["): only an odd line pays for a copy to strip.
            if data[start] in _JSON_START or data[start:end].strip():
                self._add(self._decode(view[start:end], number), number)
            start = end + 1
        self._number = number
        if start < len(data):
            self._pending.append(view[start:])
            self._pending_size = len(data) - start
            self._line_start = self._fed + start
        self._fed += len(data)

    def close(self) -> CassetteContent:
        """The parsed cassette; a last line without its newline raises `CassetteFormatError`."""
        if self._reread or b"".join(self._pending).strip():
            raise _torn_line(self._path, self._number + 1)
        return CassetteContent(
            header=self._header or {}, exchanges=self._exchanges, line_numbers=self._numbers
        )

    def _continue(self, data: bytes, view: memoryview) -> int:
        """Go on with the pending line: where the rest of `data` starts, -1 if it goes on."""
        start = 0
        if self._in_string != -1:
            quote = data.find(b'"')
            inside = len(data) if quote == -1 else quote
            if data.find(b"\\", 0, inside) != -1 or data.find(b"\n", 0, inside) != -1:
                self._pending, self._holes, self._in_string, self._tail = [], [], -1, 0
                self._reread = True  # an escape after all (or no end): read the line again
            elif quote == -1:
                return -1
            else:
                self._holes.append((self._in_string, self._fed + quote - self._in_string))
                self._in_string = -1
                self._checked = False
                self._pending_size = 0
                self._tail = len(self._pending)  # from the string's closing quote on
                start = quote
        end = data.find(b"\n", start)
        if end == -1:
            if not self._reread:
                self._pending.append(view[start:])
                self._pending_size += len(data) - start
                if self._pending_size > self._long and not self._checked:
                    self._cut_string(self._fed + len(data))
            return -1
        self._number += 1
        holes, self._holes = self._holes, []
        span = (self._line_start, self._fed + end - self._line_start)
        if self._reread:
            self._reread = False
            line = self._read_span(span)
        else:
            self._pending.append(view[start:end])
            line = b"".join(self._pending)
        self._pending = []
        self._tail = 0
        self._checked = False
        if line[0] in _JSON_START or line.strip():
            if holes:
                self._add_cut(line, holes, span)
            else:
                item = self._decode(line, self._number)
                del line  # a long line is freed before `_add` encodes its bodies
                self._add(item, self._number)
        return end + 1

    def _cut_string(self, end: int) -> None:
        """If the pending line (ending at file offset `end`) is inside a string with no escape
        so far, hold it without the string from now on (see the class).  Only the part since
        the last string cut out is looked at (it starts at that string's closing quote), so a
        line with many long strings costs no more than one."""
        self._checked = True
        if self._read_at is None or self._header is None:  # (the header line is kept whole)
            return
        tail = b"".join(self._pending[self._tail :])
        del self._pending[self._tail :]
        quote = self._open_string(tail, 1 if self._tail else 0)
        if quote == -1:
            self._pending.append(tail)
            return
        self._in_string = end - (len(tail) - quote - 1)
        marker = orjson.dumps(self._marker + str(len(self._holes)))[1:-1]
        self._pending += [tail[: quote + 1], marker]

    def _add_cut(self, line: bytes, holes: list[tuple[int, int]], span: tuple[int, int]) -> None:
        """Finish a line held without its long strings (see the class)."""
        try:
            item: Line | None = self._decode_line(line)
        except self._refused:
            item = None
        del line
        bodies = None if item is None else self._bodies(item, holes)
        if item is not None and bodies is not None:
            self._add(item, self._number, bodies.get("body"), bodies.get("response_body"))
            return
        # Anything unusual: the line again, whole, decoded (and any problem named) as any line.
        whole = self._decode(self._read_span(span), self._number)
        self._add(whole, self._number)

    def _bodies(self, item: Line, holes: list[tuple[int, int]]) -> dict[str, bytes] | None:
        """The bodies the strings cut out of `item`'s line are, by field; None when one of them
        is not a body, or its bytes are not its text's UTF-8."""
        bodies = {}
        for index, span in enumerate(holes):
            marker = f"{self._marker}{index}"
            if item.body == marker:
                field = "body"
            elif item.response_body == marker:
                field = "response_body"
            else:
                return None
            string = self._read_span(span)
            if len(string) != span[1] or not self._is_string_content(string):
                return None
            bodies[field] = string
        return bodies

    def _read_span(self, span: tuple[int, int]) -> bytes:
        """The file's bytes at `span` (offset, size): a line, or a string cut out of one."""
        assert self._read_at is not None  # a line is only cut with a reader
        return self._read_at(*span)

    def _decode(self, line: bytes | memoryview, number: int) -> Line | Exchange | None:
        """Check the header line (None), or decode an exchange line: a common one by msgspec
        (`_format_fast.decode_line`, finished by `_add`), any other or malformed one by the
        strict decoder, which names its problem."""
        if self._header is None:
            self._header = decode_header(line, self._path, number)
            return None
        try:
            return self._decode_line(line)
        except self._refused:  # an unusual or malformed line
            return decode_exchange(line, self._path, number)

    def _add(
        self,
        item: Line | Exchange | None,
        number: int,
        body: bytes | None = None,
        payload: bytes | None = None,
    ) -> None:
        if item is None:
            return
        if not isinstance(item, Exchange):
            try:
                item = self._from_line(item, self._shared, body, payload)
            except FieldError as exc:
                raise _line_error(self._path, number, exc) from None
        self._exchanges.append(item)
        self._numbers.append(number)


def parse_cassette(data: bytes, path: str | os.PathLike[str]) -> CassetteContent:
    """Parse a whole cassette.  Empty data is an empty cassette; every other problem raises."""
    parser = CassetteParser(path)
    parser.feed(data)
    return parser.close()
