"""The private names of httpx and httpx2 sakura-http relies on: the one module that reads them.

Each is read or written by one named function here, and `tests/test_libraries.py` probes each
one against the installed httpx and httpx2 (a probe per name, failing with what changed and
what depends on it), so a release that renames one is noticed by the test suite, not by users.
docs/architecture.md lists them.  Where a name is gone, the caller falls back to the public
API (slower, never wrong), except `httpx._decoders`, without which nothing is decoded the way
httpx decodes.

* `Headers._list` (`header_entries`, `headers_from_entries`): request headers read as text
  without a copy; replayed headers built without checking each name again;
* `Headers._encoding` (`header_encoding`, `headers_from_entries`): replayed headers as bytes,
  no charset guessed;
* `URL._uri_reference` (`uri_reference`): a URL's canonical form from the parts httpx parsed;
* `Response._content`, `Response._num_bytes_downloaded` (`has_content`, `set_content`): a
  replayed body taken whole by `read()`;
* `Response._decoder` (`RESPONSE_DECODER`): state left out when two reads are compared;
* `BoundSyncStream._stream`, `BoundAsyncStream._stream` (`wrapped_stream`): the replay stream
  under the client's wrapper;
* `httpx._decoders` (`httpx_decoders`): which content-encodings httpx decodes, with which
  modules.

`Client._transport_for_url`, which `patch_clients` wraps, is named in `pytest_plugin/_patch.py`
(it is the patch itself) and probed here too.

This module imports nothing of sakura-http, so any module may use it (`_decoding` does, which
`_libraries` cannot serve: it sits above the session that decodes).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any, NamedTuple

__all__ = [
    "RESPONSE_DECODER",
    "HttpxDecoders",
    "has_content",
    "header_encoding",
    "header_entries",
    "headers_from_entries",
    "httpx_decoders",
    "set_content",
    "uri_reference",
    "wrapped_stream",
]

RESPONSE_DECODER = "_decoder"
"""The name of the content decoder a `Response` creates as it is read (state that differs
between two reads of the same body, so compared reads leave it out)."""


def header_entries(headers: Any, default: Any) -> Any:
    """The entries a `Headers` keeps, ``[(name, lower-case name, value), ...]`` as bytes
    (``Headers._list``), or `default` when it keeps none under that name."""
    return getattr(headers, "_list", default)


def header_encoding(headers: Any, default: Any) -> Any:
    """The charset a `Headers` decodes its values with (``Headers._encoding``; None until one
    is guessed), or `default` when it keeps none under that name."""
    return getattr(headers, "_encoding", default)


def headers_from_entries(cls: Any, entries: list[tuple[bytes, bytes, bytes]]) -> Any:
    """A `cls` (the library's `Headers`) holding `entries` as they are, (name, lower-case name,
    value) bytes, its charset not guessed: no name or value is checked again."""
    built: Any = cls.__new__(cls)
    built._list = entries
    built._encoding = None
    return built


def uri_reference(url: Any) -> tuple[str, str, str, int | None, str, str | None, str | None]:
    """The parts httpx parsed a `URL` into (``URL._uri_reference``): scheme, userinfo, host
    (ASCII), port (None when the scheme's default), path and query (percent-encoded), fragment.
    Raises `AttributeError` or `ValueError` for a URL that does not keep them so."""
    scheme, userinfo, host, port, path, query, fragment = url._uri_reference
    return scheme, userinfo, host, port, path, query, fragment


def has_content(response: Any) -> bool:
    """Whether a `Response` has its body read (``Response._content`` is set)."""
    return hasattr(response, "_content")


def set_content(response: Any, content: bytes) -> None:
    """Mark a `Response` read with `content` as its body, as its own `read()` would
    (``_content`` and ``_num_bytes_downloaded``)."""
    response._num_bytes_downloaded = len(content)
    response._content = content


def wrapped_stream(stream: Any) -> Any:
    """The stream a client's `BoundSyncStream` / `BoundAsyncStream` wraps (``_stream``): the
    transport's own, or None for a stream that wraps none."""
    return getattr(stream, "_stream", None)


class HttpxDecoders(NamedTuple):
    """What httpx can decode, and with what: a recorded body is stored decoded exactly when
    httpx would hand it to its caller decoded (`_decoding`)."""

    #: The content-encodings httpx decodes (`identity`, `gzip`, `deflate`, and `br` or `zstd`
    #: when their module is installed).
    encodings: frozenset[str]
    #: The brotli module httpx picked (`brotli` or `brotlicffi`), None when neither is installed.
    brotli: ModuleType | None
    #: httpx's own brotli decoder class (`decode(data)`, `flush()`), for a brotli module that
    #: cannot cap its output.
    brotli_decoder: Callable[[], Any]
    #: The `zstandard` module httpx picked, None when it is not installed.
    zstandard: ModuleType | None


@functools.cache
def httpx_decoders() -> HttpxDecoders:
    """httpx's decoders, read once from its private ``httpx._decoders``: `SUPPORTED_DECODERS`,
    the `brotli` and `zstandard` modules it imported, and its `BrotliDecoder`.  (httpx2 decodes
    with the same libraries; httpx is the one sakura-http depends on.)"""
    module: Any = importlib.import_module("httpx._decoders")
    return HttpxDecoders(
        encodings=frozenset(module.SUPPORTED_DECODERS),
        brotli=getattr(module, "brotli", None),
        brotli_decoder=module.BrotliDecoder,
        zstandard=getattr(module, "zstandard", None),
    )
