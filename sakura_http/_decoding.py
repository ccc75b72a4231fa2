"""Bounded content decoding: a response body is stored decoded, exactly when httpx can decode
it and with the libraries httpx uses, and never past `max_body_bytes`.

`BodyDecoder` decodes a body as it arrives (gzip, deflate, br, zstd, stacked as the
`content-encoding` header lists them), each step capped at the room left under the limit, so a
small bomb fails cleanly with `BodyTooLargeError`.  An encoding httpx cannot decode here, or
corrupt data, leaves the body raw with its `content-encoding`; `check_redactable` then refuses
to write it when it may hold a secret (`UndecodableBodyError`), since no redaction can search
it.  Which encodings httpx decodes, and with which brotli and zstandard modules, is asked of
`_httpx_internals.httpx_decoders`, the one module that reads httpx's internals.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any, Protocol

from ._exceptions import BodyTooLargeError, UndecodableBodyError
from ._format import Headers
from ._httpx_internals import httpx_decoders
from ._policy import Redactor, check_body_size

__all__ = ["BodyDecoder", "check_redactable"]


class _Decoder(Protocol):
    def feed(self, data: bytes, room: int) -> bytes: ...

    def flush(self, room: int) -> bytes: ...


class _ZlibDecoder:
    """gzip or deflate; `room` caps the output so a bomb never expands past the limit."""

    def __init__(self, encoding: str) -> None:
        self._gzip = encoding in ("gzip", "x-gzip")
        self._first = True
        self._obj = zlib.decompressobj(zlib.MAX_WBITS | 16 if self._gzip else zlib.MAX_WBITS)

    def feed(self, data: bytes, room: int) -> bytes:
        try:
            out = self._obj.decompress(data, room + 1)
        except zlib.error:
            if self._gzip or not self._first:
                raise
            # Some servers send raw deflate without the zlib wrapper (httpx accepts both).
            self._obj = zlib.decompressobj(-zlib.MAX_WBITS)
            out = self._obj.decompress(data, room + 1)
        self._first = False
        if len(out) > room:
            raise _OverLimit
        if self._obj.unconsumed_tail:
            # More output is waiting than `room` allowed: the body is over the limit.
            raise _OverLimit
        return out

    def flush(self, room: int) -> bytes:
        out = self._obj.flush()
        if len(out) > room:
            raise _OverLimit
        return out


class _BrotliDecoder:
    """`brotli` >= 1.2, whose decompressor can cap its output at `room`."""

    def __init__(self, module: Any) -> None:
        self._obj = module.Decompressor()

    def feed(self, data: bytes, room: int) -> bytes:
        out = bytes(self._obj.process(data, output_buffer_limit=room + 1))
        if len(out) > room or not self._obj.can_accept_more_data():
            raise _OverLimit
        return out

    def flush(self, room: int) -> bytes:
        return b""


class _SlicedDecoder:
    """An httpx decoder that cannot cap its output (httpx's `BrotliDecoder` over `brotlicffi`
    or an older `brotli`), fed in small slices and stopped as soon as the output passes
    `room`, so a bomb overshoots the limit by at most what one slice expands to."""

    _SLICE = 64

    def __init__(self, decoder: Any) -> None:
        self._decoder = decoder

    def feed(self, data: bytes, room: int) -> bytes:
        pieces: list[bytes] = []
        size = 0
        for start in range(0, len(data), self._SLICE):
            piece: bytes = self._decoder.decode(data[start : start + self._SLICE])
            size += len(piece)
            if size > room:
                raise _OverLimit
            pieces.append(piece)
        return b"".join(pieces)

    def flush(self, room: int) -> bytes:
        out: bytes = self._decoder.flush()
        if len(out) > room:
            raise _OverLimit
        return out


class _BoundedSink:
    """The file-like object zstandard writes decoded pieces to; it refuses to grow past room."""

    def __init__(self) -> None:
        self.room = 0
        self.pieces: list[bytes] = []
        self.size = 0

    def write(self, data: bytes) -> int:
        self.size += len(data)
        if self.size > self.room:
            raise _OverLimit
        self.pieces.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass


class _ZstdDecoder:
    def __init__(self, module: Any) -> None:
        self._sink = _BoundedSink()
        self._writer = module.ZstdDecompressor().stream_writer(self._sink, write_size=65536)

    def feed(self, data: bytes, room: int) -> bytes:
        sink = self._sink
        sink.room, sink.size, sink.pieces = room, 0, []
        self._writer.write(data)
        return b"".join(sink.pieces)

    def flush(self, room: int) -> bytes:
        return b""


class _OverLimit(Exception):
    pass


def _decoder_for(encoding: str) -> _Decoder | None:
    """A bounded decoder for `encoding`, or None when it cannot be decoded here.

    br and zstd are decoded exactly when httpx can decode them, with the library httpx itself
    picked (`brotli` or `brotlicffi`; `zstandard`): what httpx would hand its caller decoded is
    what is stored decoded.
    """
    if encoding in ("gzip", "x-gzip", "deflate"):
        return _ZlibDecoder(encoding)
    httpx = httpx_decoders()
    if encoding not in httpx.encodings:
        return None
    if encoding == "br":
        module = httpx.brotli
        if module is not None and _brotli_can_bound(module):
            return _BrotliDecoder(module)
        return _SlicedDecoder(httpx.brotli_decoder())
    if encoding == "zstd":
        return _ZstdDecoder(httpx.zstandard)
    return None


def _brotli_can_bound(module: Any) -> bool:
    return hasattr(module, "Decompressor") and hasattr(module.Decompressor, "can_accept_more_data")


class BodyDecoder:
    """Incrementally decodes a response body as it arrives, bounded by `limit` bytes.

    `feed()` takes raw chunks and returns decoded chunks; `finish()` returns the last decoded
    piece.  Over the limit (raw or decoded) raises `BodyTooLargeError`.  When the encoding is
    unknown, its decoder is not installed, or the data turns out to be corrupt, the body is kept
    raw and `headers()` keeps `content-encoding`; otherwise `content-encoding` is dropped and
    `content-length` matches the decoded body.
    """

    def __init__(self, headers: Headers, limit: int) -> None:
        self._limit = limit
        self._raw_size = 0
        self._decoded_size = 0
        self._headers = headers
        self._raw: list[bytes] = []
        self._decoders: list[_Decoder] | None = []
        self.decoded = False
        self.raw_fallback = False
        #: Why the body is kept encoded (None when it is stored decoded or was not encoded).
        self.undecoded: str | None = None
        encodings = [
            e.strip().lower()
            for name, value in headers
            if name == "content-encoding"
            for e in value.split(",")
            if e.strip() and e.strip().lower() != "identity"
        ]
        if not encodings:  # what most responses say
            return
        decoders = [_decoder_for(e) for e in reversed(encodings)]
        if all(decoders):
            self._decoders = [d for d in decoders if d is not None]
            self.decoded = True
        else:
            self._decoders = None
            missing = [e for e, d in zip(reversed(encodings), decoders, strict=True) if d is None]
            self.undecoded = f"content-encoding {', '.join(missing)} cannot be decoded here"

    def _room(self) -> int:
        return self._limit - self._decoded_size

    def feed(self, raw: bytes) -> bytes:
        self._raw_size += len(raw)
        check_body_size(self._raw_size, self._limit, "response")
        if not self.decoded:
            return raw
        self._raw.append(raw)
        return self._run(lambda d, data, room: d.feed(data, room), raw)

    def tail(self) -> bytes:
        """At the end of the body: the last decoded bytes the decoders held back."""
        if not self.decoded:
            return b""
        return self._run(lambda d, data, room: d.feed(data, room) + d.flush(room), b"")

    def _run(self, step: Callable[[_Decoder, bytes, int], bytes], data: bytes) -> bytes:
        assert self._decoders is not None
        try:
            for decoder in self._decoders:
                data = step(decoder, data, self._room())
        except _OverLimit:
            raise BodyTooLargeError("response", self._limit) from None
        except Exception as exc:
            # Corrupt or unsupported data: fall back to storing the raw bytes as received.
            self.decoded = False
            self.raw_fallback = True
            self.undecoded = f"the {self._encoding_names()} body is corrupt ({exc})"
            return b""
        self._decoded_size += len(data)
        return data

    def _encoding_names(self) -> str:
        return ", ".join(v for n, v in self._headers if n == "content-encoding")

    @property
    def raw_chunks(self) -> list[bytes]:
        """The raw chunks received so far (kept only while decoding, for the raw fallback)."""
        return self._raw

    def headers(self, body_size: int | None) -> Headers:
        """Response headers to store for a body of `body_size` bytes (None: not known yet, so
        a decoded body gets no `content-length`)."""
        if not self.decoded:
            return self._headers
        kept = tuple(
            (name, value)
            for name, value in self._headers
            if name not in ("content-encoding", "content-length")
        )
        if body_size is not None and any(name == "content-length" for name, _ in self._headers):
            kept += (("content-length", str(body_size)),)
        return kept


def check_redactable(decoder: BodyDecoder, redactor: Redactor) -> None:
    """Refuse to write a body no redaction can search: kept encoded (unknown or uninstalled
    content-encoding, or corrupt data such as a gzip body with a bad CRC) while it may hold a
    secret, that is whenever the request carried a declared secret value long enough to be
    searched for (see `Redactor`).  Without one, the raw bytes are written as they arrived."""
    if decoder.undecoded is not None and redactor:
        raise UndecodableBodyError(decoder.undecoded)
