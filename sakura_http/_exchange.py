"""The exchange, as data: `Exchange` (one recorded request and its response, or its transport
failure, `FaultInfo`), `Headers`, `RequestData` (a live request, as matching and recording
see it, whichever library sent it), and the rules its fields keep whoever decodes them: both
decoders of the format, `_format` and its fast path `_format_fast`, check them here (a broken
one raises `FieldError`, which the decoder turns into a `CassetteFormatError` naming the line).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, NamedTuple

from ._shown import shown_value

__all__ = [
    "Exchange",
    "FaultInfo",
    "FieldError",
    "Headers",
    "RequestData",
    "check_chunks",
    "check_names",
    "check_timings",
    "is_json_type",
    "media_type",
    "new_exchange",
    "reason_phrase",
    "unspellable_name",
]

Headers = tuple[tuple[str, str], ...]


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
    bytes ("utf-8", or "latin-1" when one of them is not UTF-8; see `header_bytes`).
    `recorded_at` is the UTC day it was recorded (None: a cassette from before the field, or
    an exchange written by hand); it takes no part in ``==`` or ``hash()``, so an exchange
    recorded again unchanged on another day is equal to the old one.  `extra` holds fields this
    version does not know, written back unchanged.
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
    recorded_at: datetime.date | None = field(default=None, compare=False)
    extra: Mapping[str, Any] = field(default_factory=dict)


class RequestData(NamedTuple):
    """The parts of a live request that matching and recording need, library-neutral.  `url`
    is in its canonical form (`canonical_url`, with the secret query parameters redacted).

    Immutable; `_replace` makes a variant (the redactor's, with echoes of secrets redacted)."""

    method: str
    url: str
    headers: Headers
    body: bytes
    host: str
    port: int | None


def new_exchange(
    method: str,
    url: str,
    headers: Headers,
    body: bytes,
    status: int | None,
    response_headers: Headers,
    response_body: bytes,
    chunks: tuple[int, ...] | None = None,
    truncated: bool = False,
    timings_ms: tuple[float, ...] | None = None,
    response_header_charset: str = "utf-8",
    id: str | None = None,
    recorded_at: datetime.date | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Exchange:
    """`Exchange(...)` with no error, for the loader (`_format_fast`), which
    makes one per line of a cassette.  The frozen dataclass's `__init__` sets each field
    through `object.__setattr__`; the fields' own slot setters, used here, cost a fraction of
    that.  Kept for benchmark row "3. Open a 10,000-exchange cassette" (<= 1.5x the orjson
    floor): built with `Exchange(...)`, opening it took 621 million instructions instead of
    483 million, the floor's being 321 million (docs/performance.md, "Plain code").  The
    recorder builds with it for row 4 (recording), as its comment says.  Tests hold both ways
    equal."""
    exchange = _new(Exchange)
    _set_method(exchange, method)
    _set_url(exchange, url)
    _set_headers(exchange, headers)
    _set_body(exchange, body)
    _set_status(exchange, status)
    _set_response_headers(exchange, response_headers)
    _set_response_body(exchange, response_body)
    _set_error(exchange, None)
    _set_id(exchange, id)
    _set_chunks(exchange, chunks)
    _set_truncated(exchange, truncated)
    _set_timings_ms(exchange, timings_ms)
    _set_response_header_charset(exchange, response_header_charset)
    _set_recorded_at(exchange, recorded_at)
    _set_extra(exchange, {} if extra is None else extra)
    return exchange


_new = object.__new__
(
    _set_method,
    _set_url,
    _set_headers,
    _set_body,
    _set_status,
    _set_response_headers,
    _set_response_body,
    _set_error,
    _set_id,
    _set_chunks,
    _set_truncated,
    _set_timings_ms,
    _set_response_header_charset,
    _set_recorded_at,
    _set_extra,
) = (getattr(Exchange, field.name).__set__ for field in dataclasses.fields(Exchange))


class FieldError(Exception):
    """A field problem inside one line; turned into CassetteFormatError with the line number."""


def unspellable_name(headers: Headers) -> str | None:
    """The first header name with a character outside Latin-1 (None: there is none).  A replay
    sends names as Latin-1 bytes (`header_bytes`), so no response may hold such a name."""
    if "".join([name for name, _ in headers]).isascii():
        return None
    for name, _ in headers:
        try:
            name.encode("latin-1")
        except UnicodeEncodeError:
            return name
    return None


def check_names(headers: Headers) -> None:
    name = unspellable_name(headers)
    if name is not None:
        raise FieldError(
            f"response header name {shown_value(name)} has a character outside Latin-1, which no "
            "HTTP response can carry"
        )


def check_chunks(chunks: tuple[int, ...], body: bytes) -> None:
    if sum(chunks) != len(body):
        raise FieldError(
            f"field 'chunks' adds up to {sum(chunks)} bytes but the response body has {len(body)}"
        )


def check_timings(timings: tuple[float, ...], chunks: tuple[int, ...] | None) -> None:
    if chunks is None or len(timings) != len(chunks):
        raise FieldError("field 'timings_ms' needs one entry per entry of 'chunks'")


def reason_phrase(status: int) -> str:
    """The reason phrase of `status` ("Not Found" for 404), as the standard library's
    `http.HTTPStatus` names it; "" for a status it does not name (a 299, a 599), which HTTP
    allows.  A cassette stores no phrase: every front end answering with a recorded status (the
    requests adapter, the aiohttp middleware, the proxy) writes this one."""
    return _PHRASES.get(status, "")


# (A dict lookup on every replayed answer of the requests, aiohttp and proxy front ends, not an
# enum call and a caught ValueError: benchmark rows 7 and 9.)
_PHRASES = {status.value: status.phrase for status in HTTPStatus}


def media_type(headers: Iterable[tuple[str, str]]) -> str:
    """The media type of the first ``content-type`` header (names lower-case, as `Headers`
    holds them), lower-case and without its parameters: "" when there is none."""
    for name, value in headers:
        if name == "content-type":
            return value.partition(";")[0].strip().lower()
    return ""


def is_json_type(content_type: str) -> bool:
    """Whether a ``content-type`` value (its parameters allowed) says JSON:
    ``application/json`` or a ``+json`` type such as ``application/problem+json``.  Matching,
    scrubbing, the drift check and convert all ask this."""
    mime = content_type.partition(";")[0].strip().lower()
    return mime == "application/json" or mime.endswith("+json")
