"""Building an `aiohttp.ClientResponse` without a connection: the one module of the aiohttp
front end that touches aiohttp's private state.

aiohttp documents client middlewares that answer a request without calling the handler, but
not how to make the `ClientResponse` they answer with; its constructor and the attributes
``ClientResponse.start()`` sets from a parsed response (status line, header lists, cookies,
``content``) are what this module fills in, as aiohttp itself does after reading a response
from a socket.  ``content`` is a `StreamReader` that takes the next recorded chunk when a
reader waits for data (`_ReplayReader`), so ``iter_any()`` and ``iter_chunks()`` yield the
recorded chunks and ``readline()``, ``read()``, ``json()`` and ``text()`` work on them.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import aiohttp
from aiohttp.http import HttpVersion11
from multidict import CIMultiDict, CIMultiDictProxy

from .._format import Headers

__all__ = ["replayed_response"]

_READ_LIMIT = 2**16  # aiohttp's own default read buffer


class _NoConnection:
    """The protocol a replayed `StreamReader` reports to: always connected, never paused."""

    connected = True
    _reading_paused = False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self, resume_parser: bool = True) -> None:
        pass


class _Sent:
    """What a response asks of the writer of a request already sent: how much it wrote."""

    output_size = 0


class _ReplayReader(aiohttp.StreamReader):
    """A `StreamReader` fed one recorded chunk (as one HTTP chunk) each time a reader waits
    for data, and its end after the last."""

    def __init__(self, chunks: AsyncIterable[bytes], loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(_NoConnection(), _READ_LIMIT, loop=loop)  # type: ignore[arg-type]
        self._pending: AsyncIterator[bytes] = chunks.__aiter__()
        self.begin_http_chunk_receiving()

    async def _wait(self, func_name: str) -> None:
        try:
            chunk = await self._pending.__anext__()
        except StopAsyncIteration:
            self.feed_eof()
            return
        self.feed_data(chunk)
        self.end_http_chunk_receiving()


_ACCEPTS = frozenset(inspect.signature(aiohttp.ClientResponse.__init__).parameters)


def replayed_response(
    request: aiohttp.ClientRequest,
    status: int,
    reason: str,
    headers: Headers,
    charset: str,
    chunks: AsyncIterable[bytes],
) -> aiohttp.ClientResponse:
    """The `ClientResponse` aiohttp would have read for `request` from a server answering
    this status line, header list (text spelled in `charset`, repeats kept) and body."""
    loop = asyncio.get_running_loop()
    options: dict[str, Any] = {
        "writer": None,
        "continue100": None,
        "timer": None,
        "request_info": request.request_info,
        "traces": [],
        "loop": loop,
        "session": request.session,
    }
    if "stream_writer" in _ACCEPTS:
        options["stream_writer"] = _Sent()
    response = aiohttp.ClientResponse(request.method, request.original_url, **options)
    raw = tuple((name.encode("latin-1"), value.encode(charset)) for name, value in headers)
    # aiohttp's parser reads header values as UTF-8, keeping undecodable bytes as surrogates.
    text = [(n.decode("latin-1"), v.decode("utf-8", "surrogateescape")) for n, v in raw]
    response.version = HttpVersion11
    response.status = status
    response.reason = reason
    response._headers = CIMultiDictProxy(CIMultiDict(text))
    response._raw_headers = raw
    cookies = tuple(value for name, value in text if name.lower() == "set-cookie")
    if cookies:
        response._raw_cookie_headers = cookies
    response.content = _ReplayReader(chunks, loop)
    response._closed = False
    return response
