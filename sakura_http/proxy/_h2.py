"""The proxy's one answer to an HTTP/2 client: a refusal it can read, in HTTP/2 frames.

The proxy speaks HTTP/1.1 only (its TLS certificates offer ``http/1.1`` alone by ALPN).  A client
that speaks HTTP/2 without asking ("prior knowledge": ``curl --http2-prior-knowledge``, gRPC)
opens with the connection preface ``PRI * HTTP/2.0``; an HTTP/1.1 answer to it is noise to such a
client, which would show an empty reply.  So the proxy answers it in its own protocol: its
SETTINGS, a ``501`` on the client's first stream with the proxy's usual error headers and a text
body, then GOAWAY (RFC 9113).  Sans-I/O: this module only reads and builds bytes; `Wire` sends.

The header block uses HPACK's "literal header field without indexing" representation with a new
name and no Huffman coding (RFC 7541, section 6.2.2), which every decoder reads and which needs
no table: the one piece of HPACK a server answering once has to write.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

__all__ = [
    "CLIENT_PREFACE_REST",
    "first_stream",
    "is_prior_knowledge",
    "refusal",
]

#: What follows ``PRI * HTTP/2.0\r\n\r\n`` (which h11 reads as a request) in the preface.
CLIENT_PREFACE_REST = b"SM\r\n\r\n"

_DATA, _HEADERS, _SETTINGS, _GOAWAY = 0x0, 0x1, 0x4, 0x7
_END_STREAM, _ACK, _END_HEADERS = 0x1, 0x1, 0x4
_NO_ERROR = 0x0
_FRAME_HEAD = 9
_MAX_FRAME = 16_384  # SETTINGS_MAX_FRAME_SIZE's initial value: every client accepts this size


def is_prior_knowledge(method: bytes, target: bytes, http_version: bytes) -> bool:
    """Whether an h11 request is in fact the start of the HTTP/2 connection preface."""
    return method == b"PRI" and target == b"*" and http_version == b"2.0"


def first_stream(data: bytes) -> int | None:
    """The stream of the first HEADERS frame in `data` (the bytes after ``PRI * HTTP/2.0``
    and its blank line), or None while it has not arrived (or never will: the rest of the
    preface is wrong, and the caller stops waiting at its timeout)."""
    if not data.startswith(CLIENT_PREFACE_REST):
        return None
    at = len(CLIENT_PREFACE_REST)
    while len(data) - at >= _FRAME_HEAD:
        length = int.from_bytes(data[at : at + 3], "big")
        kind = data[at + 3]
        stream = int.from_bytes(data[at + 5 : at + 9], "big") & 0x7FFF_FFFF
        if kind == _HEADERS and stream:
            return stream
        at += _FRAME_HEAD + length
    return None


def _integer(value: int, prefix_bits: int) -> bytes:
    """An HPACK integer with an N-bit prefix (RFC 7541, section 5.1), first byte's flags 0."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([value])
    out = [limit]
    value -= limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def _literal(name: bytes, value: bytes) -> bytes:
    return b"\x00" + _integer(len(name), 7) + name + _integer(len(value), 7) + value


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        len(payload).to_bytes(3, "big") + bytes([kind, flags]) + struct.pack(">I", stream) + payload
    )


def refusal(
    stream: int | None, status: int, headers: Iterable[tuple[bytes, bytes]], body: bytes
) -> bytes:
    """The bytes that answer an HTTP/2 client: SETTINGS (none changed) and the ACK of its own,
    then, on `stream`, a response of `status` with `headers` and `body`, then GOAWAY.  Without a
    stream (no request came), only the settings and a GOAWAY carrying `body` as its debug text.
    """
    out = [_frame(_SETTINGS, 0, 0), _frame(_SETTINGS, _ACK, 0)]
    last = 0
    if stream is not None:
        last = stream
        block = _literal(b":status", str(status).encode("ascii"))
        block += _literal(b"content-length", str(len(body)).encode("ascii"))
        for name, value in headers:
            block += _literal(name.lower(), value)
        out.append(_frame(_HEADERS, _END_HEADERS, stream, block))
        chunks = [body[i : i + _MAX_FRAME] for i in range(0, len(body), _MAX_FRAME)] or [b""]
        for i, chunk in enumerate(chunks):
            out.append(_frame(_DATA, _END_STREAM if i == len(chunks) - 1 else 0, stream, chunk))
    debug = body[: _MAX_FRAME - 8]
    out.append(_frame(_GOAWAY, 0, 0, struct.pack(">II", last, _NO_ERROR) + debug))
    return b"".join(out)
