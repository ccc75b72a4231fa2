"""The fast path of loading a cassette: the common exchange line, decoded by msgspec, and the
long strings `CassetteParser` reads apart from their line.  Benchmark row "3. Open a
10,000-exchange cassette" (<= 1.5x reading it with orjson) holds it to its speed, and row "5.
Peak RSS over the baseline, opening / replaying the 16 MiB body" to its memory.

Part of `_format.py` (which owns the format), kept apart so that msgspec is imported when the
first cassette is opened, not with the package.  `CassetteParser` decodes each exchange line with
`decode_line` and finishes it with `from_line`; a line `decode_line` refuses goes to the strict
decoder (`_format._exchange`), which names the problem.
"""

from __future__ import annotations

import datetime
import operator
import re
from typing import Annotated

import msgspec
from msgspec import DecodeError

from ._exchange import Exchange, Headers, check_chunks, check_names, check_timings, new_exchange

__all__ = ["DecodeError", "Line", "decode_line", "from_line", "is_string_content", "open_string"]

#: An integer msgspec holds as orjson does: orjson reads one beyond 64 bits as a float, which
#: the strict decoder refuses as a chunk size, so the fast path leaves any beyond 63 bits to it.
Count = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]


class Line(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """The common shape of an exchange line, type-checked by msgspec as it decodes, in C.

    It accepts exactly what the strict decoder (`_format._exchange`) accepts for lines of this
    shape, and decodes them alike (tests/test_format.py checks the two agree on any spelling of
    a line); anything else -- a fault, a base64 body, a header charset, an unknown field, any
    wrong value or JSON -- fails to decode and goes to the strict decoder, which names the
    problem.  `UNSET` (not None) marks an absent `chunks`, `timings_ms` or `recorded_at`, so
    that a null one is refused, as the strict decoder refuses it.  (No field is left undecoded
    as `msgspec.Raw`: msgspec does not check the UTF-8 of what it skips, and a key given twice
    would let the first value through unchecked.)
    """

    method: str
    url: str
    headers: Headers
    body: str
    status: Annotated[int, msgspec.Meta(ge=100, le=999)]
    response_headers: Headers
    response_body: str
    id: str | None = None
    chunks: tuple[Count, ...] | msgspec.UnsetType = msgspec.UNSET
    truncated: bool = False
    timings_ms: tuple[Count | Annotated[float, msgspec.Meta(ge=0)], ...] | msgspec.UnsetType = (
        msgspec.UNSET
    )
    # msgspec reads exactly "YYYY-MM-DD", a real day, as the strict decoder does.
    recorded_at: datetime.date | msgspec.UnsetType = msgspec.UNSET
    # The names of the declared secret headers left out: on every line of an LLM cassette.
    secret_headers: list[Annotated[str, msgspec.Meta(min_length=1)]] | msgspec.UnsetType = (
        msgspec.UNSET
    )


decode_line = msgspec.json.Decoder(Line).decode


def _lower(pairs: Headers, names: str | None = None) -> Headers:
    """`pairs` with lower-case names: as they are when they already are (they are as written).
    `names`: the names joined, when the caller has them."""
    if names is None:
        names = "".join(map(_name, pairs))
    # Lowering is per character (a final sigma's context only decides what a capital becomes):
    # the names together are unchanged exactly when each is.
    if names == names.lower():
        return pairs
    return tuple([(name.lower(), value) for name, value in pairs])


_name = operator.itemgetter(0)


def from_line(
    line: Line,
    shared: dict[Headers, Headers],
    body: bytes | None = None,
    payload: bytes | None = None,
) -> Exchange:
    """The exchange of a line `decode_line` accepted; raises `FieldError` where
    `_format._exchange` would.

    A client sends the same request headers again and again: `shared` keeps one tuple of each,
    so the cassette holds one copy and matching computes each tuple's match headers once.
    `body` and `payload`, when given, are the request and response bodies (the UTF-8 of the
    line's `body` and `response_body`), read apart from the line (`CassetteParser`)."""
    headers = shared.get(line.headers)
    if headers is None:
        headers = shared[line.headers] = _lower(line.headers)
    names = "".join(map(_name, line.response_headers))
    response_headers = _lower(line.response_headers, names)
    if not names.isascii():  # (an ASCII name is ASCII lower-cased: a replay can send it)
        check_names(response_headers)
    if payload is None:
        payload = line.response_body.encode()
    chunks = timings = None
    if line.chunks is not msgspec.UNSET:
        chunks = line.chunks
        check_chunks(chunks, payload)
    if line.timings_ms is not msgspec.UNSET:
        timings = line.timings_ms
        check_timings(timings, chunks)
    return new_exchange(
        line.method,
        line.url,
        headers,
        line.body.encode() if body is None else body,
        line.status,
        response_headers,
        payload,
        chunks,
        line.truncated,
        timings,
        "utf-8",
        line.id,
        None if line.recorded_at is msgspec.UNSET else line.recorded_at,
        {} if line.secret_headers is msgspec.UNSET else {"secret_headers": line.secret_headers},
    )


_decode_string = msgspec.json.Decoder(str).decode
_PIECE = 1 << 20


def is_string_content(data: bytes) -> bool:
    """Whether `data` is, as it is, the inside of a JSON string: no escape, no quote, no control
    character, valid UTF-8 (as `decode_line` checks a string).  Its text is then exactly its
    UTF-8.  Checked a piece at a time, so no text of the whole is ever made."""
    if b"\\" in data or b'"' in data:
        return False
    view = memoryview(data)
    start, size = 0, len(data)
    while start < size:
        end = min(start + _PIECE, size)
        for _ in range(3):  # a piece ends where a character starts (continuation bytes: 10xxxxxx)
            if end < size and 0x80 <= data[end] < 0xC0:
                end += 1
        try:
            _decode_string(b'"' + view[start:end] + b'"')
        except DecodeError:
            return False
        start = end
    return True


_WHITESPACE = frozenset(b" \t\r\n")
_COLON = ord(":")
#: A JSON string (its escapes included), as it starts at a quote.  Each run of plain characters
#: is matched once, as a lookahead's group (`(?=(...))\1`, an atomic group): a string that does
#: not end where the match may look fails at once, where backtracking would cost each character.
_STRING = re.compile(rb'"(?=([^"\\]*))\1(?:\\.(?=([^"\\]*))\2)*"', re.DOTALL)


def open_string(line: bytes, start: int = 0) -> int:
    """Where the string with no escape that `line` ends inside of opens (its quote), or -1
    (also when that string is not a member's value, so cannot be a body); `line` is read from
    `start`, where it is outside every string.

    Such a string holds no quote, so it opens at the last quote, and only the part before it is
    tokenized: outside a string a quote opens one, inside one an unescaped quote closes it.  A
    value's quote follows a colon: the last quote of a long line with escapes (a JSON body's
    `\\"`) is refused by that alone, before the line is tokenized."""
    last = line.rfind(b'"', start)
    if last == -1 or line.find(b"\\", last) != -1:
        return -1
    before = last - 1
    while before >= start and line[before] in _WHITESPACE:
        before -= 1
    if before < start or line[before] != _COLON:
        return -1
    while (quote := line.find(b'"', start, last)) != -1:
        string = _STRING.match(line, quote, last)  # a string closed before the last quote
        if string is None:
            return -1  # the last quote closes a string (or is escaped): not one with no escape
        start = string.end()
    return last
