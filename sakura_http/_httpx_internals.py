"""The private names of httpx and httpx2 sakura-http relies on: the one module that reads them.

Each is read or written by one named function here, or, where a replayed request reads it,
named by a constant here that the replay path reads it by (`getattr`, `hasattr`: a Python call
fewer each; benchmark row "1. The same, sakura-http and the floor alternating in one process,
async (asyncio)", <= 1.10x: in A/B runs in one moment 1.098x with a function per name, 1.076x
without, `be319ab` 1.072x).  `tests/test_libraries.py` probes each one against the installed
httpx and httpx2 (a probe per name, failing with what changed and what depends on it), so a
release that renames one is noticed by the test suite, not by users.  docs/architecture.md
lists them.  Where a name is gone, the caller falls back to the public
API (slower, never wrong), except `httpx._decoders`, without which nothing is decoded the way
httpx decodes.

* `Headers._list` (`HEADER_ENTRIES`, `headers_from_entries`): request headers read as text
  without a copy; replayed headers built without checking each name again;
* `Headers._encoding` (`header_encoding`, `headers_from_entries`): replayed headers as bytes,
  no charset guessed;
* `URL._uri_reference` (`uri_reference`): a URL's canonical form from the parts httpx parsed;
* `Response._content`, `Response._num_bytes_downloaded` (`RESPONSE_CONTENT`, `set_content`): a
  replayed body taken whole by `read()`;
* `Response._decoder` (`RESPONSE_DECODER`): state left out when two reads are compared;
* `BoundSyncStream._stream`, `BoundAsyncStream._stream` (`WRAPPED_STREAM`): the replay stream
  under the client's wrapper;
* `httpx._decoders` (`httpx_decoders`): which content-encodings httpx decodes, with which
  modules.

`Client._transport_for_url`, which `patch_clients` wraps, is named in `pytest_plugin/_patch.py`
(it is the patch itself), and probed in `tests/test_libraries.py` too.

This module imports nothing of sakura-http, so any module may use it (`_decoding` does, which
`_libraries` cannot serve: it sits above the session that decodes).
"""

from __future__ import annotations

import functools
import importlib
import operator
from collections.abc import Callable
from types import ModuleType
from typing import Any, NamedTuple

__all__ = [
    "HEADER_ENTRIES",
    "RESPONSE_CONTENT",
    "RESPONSE_DECODER",
    "WRAPPED_STREAM",
    "HttpxDecoders",
    "header_encoding",
    "headers_from_entries",
    "httpx_decoders",
    "set_content",
    "uri_reference",
]

RESPONSE_DECODER = "_decoder"
"""The name of the content decoder a `Response` creates as it is read (state that differs
between two reads of the same body, so compared reads leave it out)."""

HEADER_ENTRIES = "_list"
"""The name of the entries a `Headers` keeps, ``[(name, lower-case name, value), ...]`` as
bytes: ``getattr(headers, HEADER_ENTRIES, default)``."""

RESPONSE_CONTENT = "_content"
"""The name of a `Response`'s body once read: ``hasattr(response, RESPONSE_CONTENT)`` says
whether it is (`set_content` sets it)."""

WRAPPED_STREAM = "_stream"
"""The name of the stream a client's `BoundSyncStream` / `BoundAsyncStream` wraps (the
transport's own): ``getattr(stream, WRAPPED_STREAM, None)``."""


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


#: The parts httpx parsed a `URL` into (``URL._uri_reference``): scheme, userinfo, host
#: (ASCII), port (None when the scheme's default), path and query (percent-encoded), fragment.
#: Raises `AttributeError` for a URL that does not keep them (unpacked, a `ValueError` for one
#: that keeps other parts).  A C getter, no Python call: the replay path reads every request's
#: URL by it (see the module's docstring).
uri_reference: Callable[[Any], tuple[str, str, str, int | None, str, str | None, str | None]] = (
    operator.attrgetter("_uri_reference")
)


def set_content(response: Any, content: bytes) -> None:
    """Mark a `Response` read with `content` as its body, as its own `read()` would
    (``_content`` and ``_num_bytes_downloaded``)."""
    response._num_bytes_downloaded = len(content)
    response._content = content


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
