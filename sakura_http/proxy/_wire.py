"""One client connection of the proxy: h11 over a byte stream, the timeouts that keep a client
from holding it, the answers the proxy gives on its own (bad input, a timeout, an error), and the
header rules.  The connection loop that drives it is `ProxyServer` (`_server.py`).

Which request headers are recorded and which are forwarded (the rule that makes a cassette
recorded through the proxy byte-identical to one recorded in-process):

* recorded: every header the client sent, in its order, except those addressed to the proxy
  itself (`TO_PROXY`: ``proxy-connection``, ``proxy-authorization``, and ``expect``, which the
  proxy answers); ``host`` is set to the authority of the recorded URL (the upstream's in reverse
  mode), as an httpx client sets it from the URL;
* forwarded: the recorded headers less the hop-by-hop ones (`HOP_BY_HOP` and any named in
  ``connection``) and ``content-length``, which httpx sets from the body it sends;
* answered: the recorded response headers less the hop-by-hop ones; h11 frames the body
  (``content-length`` when the recorded one still holds, else chunked, one chunk per recorded
  chunk).
"""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import anyio
import anyio.abc
import h11
import httpx
from anyio.streams.tls import TLSStream

from .._exceptions import (
    BodyTooLargeError,
    CassetteError,
    CassetteFormatError,
    CassetteMiss,
    CredentialHeaderError,
    RecordingForbidden,
)
from .._exchange import reason_phrase
from .._format import Headers
from .._matching import HOP_BY_HOP_HEADERS
from ._h2 import CLIENT_PREFACE_REST, first_stream, refusal

__all__ = [
    "ERROR_NAMES",
    "HOP_BY_HOP",
    "MAX_HEAD_BYTES",
    "TO_PROXY",
    "Abort",
    "ClientGone",
    "Prepended",
    "TimedOut",
    "Timeouts",
    "Wire",
    "client_headers",
    "error_name",
    "forwarded_headers",
    "framing_problem",
    "peer_name",
    "reason_phrase",
    "recorded_headers",
]

logger = logging.getLogger("sakura_http.proxy")

#: Headers that concern one connection only (RFC 9110 7.6.1): never forwarded or answered,
#: as they are never matched (the engine's one list).
HOP_BY_HOP = HOP_BY_HOP_HEADERS
#: Request headers addressed to the proxy: neither recorded nor forwarded.
TO_PROXY = frozenset({"proxy-connection", "proxy-authorization", "expect"})

#: The ``x-sakura-http-error`` value of each error answer, most specific class first.
ERROR_NAMES: Mapping[type[BaseException], str] = {
    CassetteMiss: "miss",
    CredentialHeaderError: "credential",
    BodyTooLargeError: "body-too-large",
    RecordingForbidden: "recording-forbidden",
    CassetteFormatError: "cassette-format",
    CassetteError: "cassette-error",
    httpx.TransportError: "upstream",
}

#: Largest request head (request line and headers) accepted; larger ones answer 431.
MAX_HEAD_BYTES = 64 * 1024
_READ_SIZE = 65_536
# How much of a whole body one write hands the socket (a slice of it, not a copy), and how
# much of it goes with the head (copied: one write for a small answer).
_WHOLE_BODY_SLICE = 1024 * 1024
_WITH_HEAD = 256 * 1024
_LINGER_SECONDS = 2.0
_LINGER_BYTES = 16 * 1024 * 1024
_CLIENT_GONE = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError)


def error_name(exc: BaseException) -> str:
    """The ``x-sakura-http-error`` value for `exc` (see `ERROR_NAMES`); "error" otherwise."""
    for cls in type(exc).__mro__:
        name = ERROR_NAMES.get(cls)
        if name is not None:
            return name
    return "error"


def framing_problem(request: h11.Request) -> str | None:
    """Why the end of `request`'s body is ambiguous, or None when it is not.

    h11 already refuses differing ``content-length`` values (two headers or a list) and any
    transfer coding but ``chunked``.  It lets through, and settles by ``transfer-encoding``
    alone, what RFC 9112 section 6.3 calls a smuggling attempt: both headers at once; and
    section 6.1 says a ``transfer-encoding`` in an HTTP/1.0 request means the framing is
    faulty.  A client, or a proxy in front of this one, may have framed such a request the
    other way, so the bytes after it could be read as a request nobody sent: the proxy
    refuses it and closes the connection.
    """
    names = {name for name, _ in request.headers}  # lower-cased by h11
    if b"transfer-encoding" not in names:
        return None
    if b"content-length" in names:
        return (
            "both Content-Length and Transfer-Encoding: the body's end is ambiguous, which is "
            "how requests are smuggled (RFC 9112, section 6.3); send one of them"
        )
    if request.http_version < b"1.1":
        return (
            "Transfer-Encoding in an HTTP/1.0 request, whose framing it cannot change "
            "(RFC 9112, section 6.1); send Content-Length, or speak HTTP/1.1"
        )
    return None


class Abort(Exception):
    """Close this connection now, without an answer (the reason is logged already)."""


class ClientGone(Abort):
    """The client closed the connection, or sending to it failed."""


class TimedOut(Abort):
    """The client took longer than a timeout allows (`Timeouts`); the message says what it
    failed to do in time.  `cut_off` is True when it was in the middle of a request (it is
    then answered 408 if the answer can still be sent) and False when it had sent nothing of
    the next one (the connection is just closed, as HTTP/1.1 lets a server do)."""

    def __init__(self, text: str, *, cut_off: bool) -> None:
        super().__init__(text)
        self.cut_off = cut_off


@dataclass(frozen=True, slots=True)
class Timeouts:
    """How long a client may take: to send a request head, and to stay silent otherwise."""

    header: float
    idle: float


def _connection_listed(headers: Iterable[tuple[str, str]]) -> set[str]:
    return {
        token.strip().lower()
        for name, value in headers
        if name == "connection"
        for token in value.split(",")
        if token.strip()
    }


def client_headers(
    headers: Headers, *, bodiless: bool, body_length: int | None, charset: str = "utf-8"
) -> list[tuple[bytes, bytes]]:
    """Response headers for the client: hop-by-hop headers dropped, and ``content-length``
    dropped when it no longer describes the body (h11 then sends it chunked).  Values are sent
    as the bytes they were received as (`charset`, see `_format.header_text`)."""
    hop = HOP_BY_HOP | _connection_listed(headers)
    out = []
    for name, value in headers:
        if name in hop:
            continue
        if (
            name == "content-length"
            and not bodiless
            and body_length is not None
            and value.strip() != str(body_length)
        ):
            continue
        out.append((name.encode("ascii"), value.encode(charset)))
    return out


def recorded_headers(
    raw: Iterable[tuple[bytes, bytes]], authority: bytes
) -> list[tuple[bytes, bytes]]:
    """The request headers as recorded (see the module docstring): `TO_PROXY` dropped, ``host``
    set to `authority` (first, if the client sent none)."""
    out = []
    has_host = False
    for name, value in raw:
        lower = name.lower()
        if lower.decode("latin-1") in TO_PROXY:
            continue
        if lower == b"host":
            has_host = True
            value = authority
        out.append((name, value))
    if not has_host:
        out.insert(0, (b"Host", authority))
    return out


def forwarded_headers(raw: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The recorded headers less hop-by-hop ones and ``content-length`` (httpx sets it)."""
    pairs = list(raw)
    listed = _connection_listed(
        (n.lower().decode("latin-1"), v.decode("latin-1")) for n, v in pairs
    )
    drop = HOP_BY_HOP | listed | {"content-length"}
    return [(n, v) for n, v in pairs if n.lower().decode("latin-1") not in drop]


class Prepended(anyio.abc.ByteStream):
    """A byte stream that first yields bytes already read (a TLS hello sent with CONNECT)."""

    def __init__(self, stream: anyio.abc.ByteStream, data: bytes) -> None:
        self._stream = stream
        self._data = data

    async def receive(self, max_bytes: int = _READ_SIZE) -> bytes:
        if self._data:
            data, self._data = self._data[:max_bytes], self._data[max_bytes:]
            return data
        return await self._stream.receive(max_bytes)

    async def send(self, item: bytes) -> None:
        await self._stream.send(item)

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def aclose(self) -> None:
        await self._stream.aclose()

    @property
    def extra_attributes(self) -> Mapping[Any, Any]:
        return self._stream.extra_attributes


class Wire:
    """One client connection: its byte stream, its h11 state machine, and the timeouts that
    keep a client from holding it: every wait on the client ends in `TimedOut` (or, for a
    send, `ClientGone`) when the client takes too long."""

    def __init__(self, stream: anyio.abc.ByteStream, peer: str, timeouts: Timeouts) -> None:
        self.stream = stream
        self.peer = peer
        self.timeouts = timeouts
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        # The first request's head is due `header` seconds after the connection opens; a
        # later one's, `header` seconds after its first byte (until then the connection idles).
        self._head_due: float | None = anyio.current_time() + timeouts.header

    async def next_request(self) -> Any:
        """The event that starts the next request: a `Request`, or `ConnectionClosed`.

        Waits up to `idle` seconds for the first byte of a request on a kept-alive connection,
        then up to `header` seconds from it for the whole head; a trickle of bytes does not
        extend it, so a slowloris client is closed like a silent one."""
        due, self._head_due = self._head_due, None
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            started = bool(self.h11.trailing_data[0])
            if due is None and started:
                due = anyio.current_time() + self.timeouts.header
            if due is None:
                why = f"sent no new request for {self.timeouts.idle:g} s"
                due_now = anyio.current_time() + self.timeouts.idle
                data = await self._receive(due_now, why, cut_off=False)
            else:
                why = f"sent no complete request head within {self.timeouts.header:g} s"
                data = await self._receive(due, why, cut_off=started)
            self.h11.receive_data(data)

    async def next_event(self) -> Any:
        """The next event in the middle of a request (its body): the client may stay silent
        for up to `idle` seconds at a time."""
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            due = anyio.current_time() + self.timeouts.idle
            why = f"sent nothing for {self.timeouts.idle:g} s in the middle of a request"
            self.h11.receive_data(await self._receive(due, why, cut_off=True))

    async def _receive(self, due: float, why: str, *, cut_off: bool) -> bytes:
        """The next bytes from the client (b"" once it closed), or `TimedOut(why)` at `due`."""
        with anyio.CancelScope(deadline=due):
            try:
                return await self.stream.receive(_READ_SIZE)
            except (anyio.EndOfStream, anyio.BrokenResourceError, ssl.SSLError, OSError):
                return b""
        raise TimedOut(why, cut_off=cut_off)

    async def send(self, event: Any) -> None:
        data = self.h11.send(event)
        if data:
            await self._write(data)

    async def send_whole(self, response: h11.Response, body: bytes) -> None:
        """Send `response` and its whole `body`, framed by the ``content-length`` of its head
        (or bodiless: an answer to HEAD, a 204 or a 304, with ``b""``), in as few writes as can
        be: each write costs a system call and wakes the client, which on a busy machine costs
        more than the bytes.  The head goes with the start of the body (a small answer is one
        write); the rest goes as memoryview slices of `body`, never copied, each with its own
        `idle` allowance, so a slow but steady reader is not cut off."""
        head = self.h11.send(response)
        view = memoryview(body)
        if view:
            # h11 counts the body against the content-length and hands it back as it is (its
            # hints say bytes; any bytes-like object passes through).
            framed = self.h11.send_with_data_passthrough(h11.Data(data=cast(bytes, view)))
            assert framed is not None and len(framed) == 1 and framed[0] is view, (
                "not framed by length"
            )
        end = self.h11.send(h11.EndOfMessage())  # nothing, under a content-length
        assert head is not None and not end
        await self._write(head + view[:_WITH_HEAD])
        for start in range(_WITH_HEAD, len(view), _WHOLE_BODY_SLICE):
            await self._write(view[start : start + _WHOLE_BODY_SLICE])

    async def _write(self, data: Any) -> None:
        # A client that reads nothing for `idle` seconds is not reading at all.
        with anyio.move_on_after(self.timeouts.idle):
            try:
                await self.stream.send(data)
            except _CLIENT_GONE as exc:
                self.h11.send_failed()
                raise ClientGone(str(exc) or type(exc).__name__) from None
            return
        self.h11.send_failed()
        raise ClientGone(f"it left its answer unread for {self.timeouts.idle:g} s")

    async def until_closed(self) -> None:
        """Return once the client has closed the connection, and wait for ever while it stays.

        The end of the stream means the client is gone (one that shuts down only its sending
        side counts as gone too, as it does for nginx and Go's server).  Bytes it sends
        meanwhile (a pipelined request) are kept for h11's next cycle, and watching stops
        there.  Inside a TLS tunnel nothing is watched: reading there while the answer is
        being prepared could interleave with TLS's own messages, so a client that leaves is
        noticed when its answer cannot be sent."""
        if isinstance(self.stream, TLSStream):
            await anyio.sleep_forever()
        try:
            data = await self.stream.receive(_READ_SIZE)
        except _CLIENT_GONE:
            return
        self.h11.receive_data(data)
        await anyio.sleep_forever()

    async def linger(self) -> None:
        """Close gently after an early answer: stop sending, then read and drop what the client
        still sends (briefly, bounded), so closing with unread data does not reset the
        connection before the client has read the answer."""
        with contextlib.suppress(Exception):
            await self.stream.send_eof()
        with anyio.move_on_after(_LINGER_SECONDS):
            left = _LINGER_BYTES
            with contextlib.suppress(Exception):
                while left > 0:
                    left -= len(await self.stream.receive(_READ_SIZE))

    def reusable(self) -> bool:
        return self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE

    # --- the proxy's own answers --------------------------------------------------------------

    async def answer(self, status: int, name: str, text: str, *, closing: bool = False) -> None:
        """A short text/plain answer; `closing` says the connection closes after it."""
        body = text.encode("utf-8")
        headers = _error_headers(name)
        headers.insert(1, (b"content-length", str(len(body)).encode()))
        if closing or self.h11.their_state is h11.SEND_BODY:
            # Answered before the request body was read (or after bad input): the connection
            # closes after this answer, and says so, or a client could send its next request
            # on it before it sees the close, and have that request dropped unanswered.
            headers.append((b"connection", b"close"))
        await self.send(
            h11.Response(status_code=status, headers=headers, reason=reason_phrase(status))
        )
        await self.send(h11.Data(data=body))
        await self.send(h11.EndOfMessage())

    async def refuse_http2(self, text: str) -> None:
        """Answer a client that opened with the HTTP/2 preface ``PRI * HTTP/2.0`` (h11 read it
        as a request) in HTTP/2: ``501`` with `text`, the error name ``unsupported``, on the
        stream of its first request (`_h2`), then close.  Waits up to `header` seconds for
        that request; without one, the client gets the text in a GOAWAY frame only."""
        data = self.h11.trailing_data[0]
        rest = CLIENT_PREFACE_REST
        stream = first_stream(data)
        due = anyio.current_time() + self.timeouts.header
        while stream is None and len(data) < MAX_HEAD_BYTES:
            if len(data) >= len(rest) and not data.startswith(rest):
                break  # not HTTP/2 after all: nothing will be understood
            try:
                more = await self._receive(due, "sent no HTTP/2 request", cut_off=False)
            except TimedOut:
                break
            if not more:
                return  # gone
            data += more
            stream = first_stream(data)
        answer = refusal(stream, 501, _error_headers("unsupported"), text.encode("utf-8"))
        with anyio.move_on_after(self.timeouts.idle), contextlib.suppress(*_CLIENT_GONE):
            await self.stream.send(answer)
            await self.linger()

    async def bad_input(self, exc: h11.RemoteProtocolError) -> None:
        """Answer input h11 refused (with the status it suggests) and close gently."""
        status = exc.error_status_hint
        logger.warning("sakura-http proxy: bad request from %s: %s", self.peer, exc)
        if self.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            with contextlib.suppress(h11.LocalProtocolError, ClientGone):
                await self.answer(status, "bad-request", f"bad request: {exc}\n", closing=True)
                await self.linger()

    async def timed_out(self, exc: TimedOut) -> None:
        """Close a connection whose client took too long; tell it (408) if it was cut off in
        the middle of a request and the answer can still be sent."""
        if not exc.cut_off:
            return  # nothing of a request came: close quietly, as an idle connection may be
        logger.warning("sakura-http proxy: closing the connection from %s: it %s", self.peer, exc)
        if self.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            with contextlib.suppress(h11.LocalProtocolError, ClientGone):
                text = f"request timeout: the client {exc}\n"
                await self.answer(408, "request-timeout", text, closing=True)
                await self.linger()


def _error_headers(name: str) -> list[tuple[bytes, bytes]]:
    """The headers of every answer the proxy gives on its own, less its length."""
    return [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"x-sakura-http-error", name.encode("ascii")),
        (b"x-should-retry", b"false"),
    ]


def peer_name(stream: anyio.abc.ByteStream) -> str:
    """The client's address as "host:port", for log lines."""
    with contextlib.suppress(Exception):
        address = stream.extra(anyio.abc.SocketAttribute.remote_address)
        if isinstance(address, tuple):
            return f"{address[0]}:{address[1]}"
        return str(address)
    return "a client"
