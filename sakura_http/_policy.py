"""Everything that guards the disk: credential refusal, redaction, body limits, content decoding.

These rules run in one place, before anything can reach the cassette file or the matcher:

* a request whose ordinary headers carry a credential header (`CREDENTIAL_HEADERS`) that is not
  declared in `secret_headers` is refused with `CredentialHeaderError`;
* declared secret headers are forwarded but never written, and a secret value that a server
  echoes back in a response header or body is replaced by `<redacted>` before writing;
* `set-cookie` response headers are stored as `<redacted>`;
* bodies are capped at `max_body_bytes` (16 MiB by default); reading and decoding stop there;
* content-encoded responses are stored decoded (gzip, deflate, and br/zstd when their decoder is
  installed), bounded by the same limit, so a small gzip bomb fails cleanly.
"""

from __future__ import annotations

import importlib
import zlib
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from ._exceptions import BodyTooLargeError, CredentialHeaderError
from ._format import Headers

__all__ = [
    "CREDENTIAL_HEADERS",
    "DEFAULT_MAX_BODY_BYTES",
    "REDACTED",
    "BodyDecoder",
    "Redactor",
    "check_body_size",
    "drop_secret_headers",
    "refuse_credentials",
]

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
REDACTED = "<redacted>"

#: Request headers that carry credentials; they must be declared in `secret_headers`.
CREDENTIAL_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "api-key", "x-auth-token", "cookie"}
)

# Secrets shorter than this are still dropped from request headers, but not searched for in
# response bodies: replacing every "1" in a body would destroy it without protecting anything.
_MIN_ECHO_LENGTH = 4


def refuse_credentials(headers: Iterable[tuple[str, str]], secret_headers: frozenset[str]) -> None:
    """Raise `CredentialHeaderError` for the first credential header not declared secret."""
    for name, value in headers:
        if name in CREDENTIAL_HEADERS and name not in secret_headers:
            raise CredentialHeaderError(name, value)


def drop_secret_headers(headers: Headers, secret_headers: frozenset[str]) -> Headers:
    """The request headers as written to disk: declared secrets left out entirely."""
    return tuple((name, value) for name, value in headers if name not in secret_headers)


def check_body_size(size: int, limit: int, side: str) -> None:
    """Raise `BodyTooLargeError` when `size` bytes is over `limit`."""
    if size > limit:
        raise BodyTooLargeError(side, limit)


class Redactor:
    """Replaces the values of declared secret headers wherever a response echoes them.

    Built from the live request's headers; for `Bearer <token>`-style values the token alone is
    searched for too, since servers often echo only the token.
    """

    __slots__ = ("_needles",)

    def __init__(self, headers: Iterable[tuple[str, str]], secret_headers: frozenset[str]) -> None:
        needles: set[str] = set()
        for name, value in headers:
            if name not in secret_headers:
                continue
            for candidate in (value, value.partition(" ")[2]):
                candidate = candidate.strip()
                if len(candidate) >= _MIN_ECHO_LENGTH:
                    needles.add(candidate)
        # Longest first, so a whole "Bearer xyz" is replaced before its "xyz" part.
        self._needles = sorted(needles, key=len, reverse=True)

    def __bool__(self) -> bool:
        return bool(self._needles)

    def text(self, value: str) -> str:
        for needle in self._needles:
            value = value.replace(needle, REDACTED)
        return value

    def body(self, body: bytes) -> bytes:
        for needle in self._needles:
            body = body.replace(needle.encode("utf-8"), REDACTED.encode("ascii"))
        return body

    def response_headers(self, headers: Iterable[tuple[str, str]]) -> Headers:
        """Response headers as written: `set-cookie` redacted, echoed secrets replaced."""
        return tuple(
            (name, REDACTED if name == "set-cookie" else self.text(value))
            for name, value in headers
        )


# --- bounded content decoding -------------------------------------------------------------


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
    def __init__(self, module: Any) -> None:
        self._obj = module.Decompressor()

    def feed(self, data: bytes, room: int) -> bytes:
        out = bytes(self._obj.process(data, output_buffer_limit=room + 1))
        if len(out) > room or not self._obj.can_accept_more_data():
            raise _OverLimit
        return out

    def flush(self, room: int) -> bytes:
        return b""


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


def _optional_decoder(module_name: str, build: Callable[[Any], _Decoder]) -> _Decoder | None:
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None
    if module_name == "brotli" and not hasattr(module.Decompressor, "can_accept_more_data"):
        return None  # brotli < 1.2 cannot bound its output; store such bodies raw instead
    return build(module)


def _decoder_for(encoding: str) -> _Decoder | None:
    if encoding in ("gzip", "x-gzip", "deflate"):
        return _ZlibDecoder(encoding)
    if encoding == "br":
        return _optional_decoder("brotli", _BrotliDecoder)
    if encoding == "zstd":
        return _optional_decoder("zstandard", _ZstdDecoder)
    return None


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
        encodings = [
            e.strip().lower()
            for name, value in headers
            if name == "content-encoding"
            for e in value.split(",")
            if e.strip() and e.strip().lower() != "identity"
        ]
        decoders = [_decoder_for(e) for e in reversed(encodings)]
        self._decoders: list[_Decoder] | None = (
            [d for d in decoders if d is not None] if all(decoders) else None
        )
        self.decoded = bool(encodings) and self._decoders is not None
        self.raw_fallback = False

    def _room(self) -> int:
        return self._limit - self._decoded_size

    def feed(self, raw: bytes) -> bytes:
        self._raw_size += len(raw)
        check_body_size(self._raw_size, self._limit, "response")
        if not self.decoded:
            return raw
        self._raw.append(raw)
        return self._run(lambda d, data, room: d.feed(data, room), raw)

    def finish(self) -> bytes:
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
        except Exception:
            # Corrupt or unsupported data: fall back to storing the raw bytes as received.
            self.decoded = False
            self.raw_fallback = True
            return b""
        self._decoded_size += len(data)
        return data

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
