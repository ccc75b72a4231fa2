"""`RecordingAdapter`: a requests transport adapter over the cassette engine.

A `requests.Session` hands every prepared request to the adapter mounted for its URL prefix.
The adapter drives the cassette's `CassetteUser` through the steps every front end takes
(docs/architecture.md): passthrough? -> read the body -> `plan` (the safety checks, then the
decision) -> replay the planned exchange, or record it: the step sequence every front end drives
(`_steps.record_steps`), sending through `outer` (an ``HTTPAdapter``) with `_RequestsIO`, and
hand the caller the live response.

A response, replayed or live, is what requests itself builds from urllib3: a
`requests.Response` over a `urllib3.HTTPResponse` whose body is a file of the chunks to
deliver (`_Chunks`), with the header list in ``raw._original_response.msg`` where requests'
cookie handling reads ``set-cookie``.  So ``iter_content``, ``iter_lines``, ``raw.read()``,
cookies, ``elapsed`` and redirects (which `requests.Session` follows, one `send` per hop) work
as they do live.  The one thing added to urllib3's response is `_ReplayedRaw.stream`:
``iter_content(None)`` yields each recorded chunk as it was received, as it does live for a
chunked response (urllib3 would read the whole body as one piece).
"""

from __future__ import annotations

import http.client
import io
import os
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

import requests
import requests.adapters
import requests.exceptions
from requests.cookies import extract_cookies_to_jar
from requests.structures import CaseInsensitiveDict
from requests.utils import get_encoding_from_headers
from urllib3 import HTTPResponse
from urllib3.exceptions import ProtocolError, ReadTimeoutError
from urllib3.exceptions import SSLError as Urllib3SSLError

from .._config import DEFAULT_CHUNK_SIZE, CassetteConfig, CassetteOptions, resolve_config
from .._exceptions import CassetteError, hidden_in_tracebacks
from .._exchange import RequestData, reason_phrase
from .._format import Exchange, FaultInfo, Headers, header_text
from .._front_end import CassetteFrontEnd
from .._hosts import DEFAULT_PORTS
from .._matching import canonical_url
from .._session import Plan
from .._steps import record_steps, run_steps
from .._streams import ReplayStream, TeeStream
from ._advice import RequestsAdvice

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack from Python 3.11 on

__all__ = ["RecordingAdapter"]

# A sakura-http error passing through this module's frames is shown under pytest without them
# (the test's own frames and the message say it all); a bug keeps them (`hidden_in_tracebacks`).
__tracebackhide__ = hidden_in_tracebacks


#: What requests raises for a failed connection or exchange: recorded as a fault
#: (``record_errors=True``), as httpx's `TransportError` is.
_TRANSPORT_ERRORS = (requests.exceptions.ConnectionError, requests.exceptions.Timeout)

#: The requests exception a fault recorded by another client (httpx, aiohttp) replays as.
_FAULTS: dict[str, type[requests.exceptions.RequestException]] = {
    "ConnectError": requests.exceptions.ConnectionError,
    "ConnectTimeout": requests.exceptions.ConnectTimeout,
    "ReadTimeout": requests.exceptions.ReadTimeout,
    "WriteTimeout": requests.exceptions.Timeout,
    "PoolTimeout": requests.exceptions.ConnectionError,
    "TimeoutException": requests.exceptions.Timeout,
    "ReadError": requests.exceptions.ConnectionError,
    "WriteError": requests.exceptions.ConnectionError,
    "RemoteProtocolError": requests.exceptions.ConnectionError,
    "NetworkError": requests.exceptions.ConnectionError,
    "TransportError": requests.exceptions.ConnectionError,
    "ProxyError": requests.exceptions.ProxyError,
    "ClientConnectorError": requests.exceptions.ConnectionError,
    "ServerDisconnectedError": requests.exceptions.ConnectionError,
    "ServerTimeoutError": requests.exceptions.Timeout,
    "ClientOSError": requests.exceptions.ConnectionError,
}


class RecordingAdapter(CassetteFrontEnd, requests.adapters.BaseAdapter):
    """A requests transport adapter that replays exchanges from a cassette and records new ones.

    Mount it on a session for the URL prefixes it serves::

        session = requests.Session()
        adapter = RecordingAdapter("tests/cassettes/api.jsonl")
        session.mount("https://", adapter)
        session.mount("http://", adapter)

    ``outer`` is the adapter a request to record is sent through: a plain
    ``requests.adapters.HTTPAdapter()`` (made on first use) by default.  The options are those
    of `RecordingTransport` (``mode``, ``secret_headers``, ``record_hosts``, ``rules``, ...,
    or one ``config=``), validated by the same `CassetteConfig`; every transport, adapter,
    fixture and proxy on one cassette file in one process shares its session (one index, one
    play order).  The cassette is read here: a missing or empty file is an empty cassette, an
    unreadable one raises `CassetteFormatError` and is never written to.

    A replay answers with the recorded status, header list (repeats kept) and body, streamed
    in its recorded chunks (``iter_content(None)``); a recorded fault raises the requests
    exception it names (one recorded by another client: the nearest requests exception).
    While recording, the caller gets the live response as the server sent it (decoded);
    only what is written is redacted.  A body requests streams (a generator, a file) is read
    before it is checked and sent, up to ``max_body_bytes``.

    `close()` (which ``Session.close()`` calls) leaves the session and closes ``outer``;
    `close(failed=True)`, and a ``with`` block left by an exception, keep the old cassette in
    mode "all".  After closing, a request raises `RuntimeError`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        outer: requests.adapters.BaseAdapter | None = None,
        config: CassetteConfig | None = None,
        environ: Mapping[str, str] | None = None,
        **options: Unpack[CassetteOptions],
    ) -> None:
        super().__init__()
        if config is None and "advice" not in options:
            options["advice"] = RequestsAdvice()
        config = resolve_config("RecordingAdapter()", config, options, environ)
        self._open(path, config, can_record=True)
        self._outer = outer

    # --- public state ----------------------------------------------------------------------

    @property
    def outer(self) -> requests.adapters.BaseAdapter:
        """The adapter requests to record (and passthrough requests) are sent through."""
        if self._outer is None:
            self._outer = requests.adapters.HTTPAdapter()
        return self._outer

    def __repr__(self) -> str:
        return f"<RecordingAdapter {self.path!r} mode={self.mode.value!r}>"

    # --- sending ---------------------------------------------------------------------------

    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: Any = None,
        verify: bool | str = True,
        cert: Any = None,
        proxies: Mapping[str, str] | None = None,
    ) -> requests.Response:
        """Replay or record `request` (what `requests.Session` calls for each request, and for
        each hop of a redirect it follows)."""
        sending = {"timeout": timeout, "verify": verify, "cert": cert, "proxies": proxies}
        url = _text_url(request.url)
        user = self._user
        if user.has_passthrough and user.is_passthrough(*_host_port(url)):
            self.passed_through += 1
            return self.outer.send(request, stream=stream, **sending)
        if self._closed:
            raise RuntimeError(f"{self!r} is closed; build a new adapter to send requests")
        try:
            config = self._config
            body = _body_bytes(request.body, config.max_body_bytes)
            if request.body is not None and not isinstance(request.body, (bytes, str)):
                request.body = body  # a generator or file is read once: send what was read
            data = request_data(request, url, body, config.secret_query_params)
            plan = user.plan(data, url)
            if plan.exchange is not None:
                return self._replay(plan.exchange, request)
            return self._record(request, url, data, plan, sending)
        except CassetteError as exc:
            self._note_error(exc)
            raise

    def _replay(self, exchange: Exchange, request: requests.PreparedRequest) -> requests.Response:
        if exchange.error is not None:
            raise _fault(exchange.error, request)
        assert exchange.status is not None
        config = self._config
        stream = ReplayStream(exchange, config.replay_chunk_size, config.replay_latency)
        return _response(
            request,
            exchange.status,
            reason_phrase(exchange.status),
            exchange.response_headers,
            exchange.response_header_charset,
            _Chunks(stream),
        )

    def _record(
        self,
        request: requests.PreparedRequest,
        url: str,
        data: RequestData,
        plan: Plan,
        sending: dict[str, Any],
    ) -> requests.Response:
        io = _RequestsIO(self.outer, sending)
        steps = record_steps(self._user, data, request, url, plan, io)
        answer = run_steps(steps, io)
        live = answer.response
        if answer.live is None:  # stream_through: the body is recorded as the caller reads it
            tee = TeeStream(steps, io, self._note_error)
            body = _Chunks(tee, tee.close)
        else:
            body = _Chunks(ReplayStream(answer.live, self._config.replay_chunk_size, 0.0))
        return _response(
            request, live.status_code, live.reason, answer.headers, answer.charset, body
        )

    # --- closing ---------------------------------------------------------------------------

    def close(self, *, failed: bool = False) -> None:
        """Leave the cassette's session and close ``outer`` (see the class docstring); closing
        again does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            self._user.close(failed=failed)
        finally:
            if self._outer is not None:
                self._outer.close()

    def __enter__(self) -> RecordingAdapter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        self.close(failed=exc_type is not None)


# --- requests -------------------------------------------------------------------------------


def _text_url(url: str | bytes | None) -> str:
    return url.decode("utf-8") if isinstance(url, bytes) else url or ""


def _host_port(url: str) -> tuple[str, int | None]:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    return parts.hostname or "", port or DEFAULT_PORTS.get(parts.scheme)


def _header_value(value: str | bytes) -> str:
    # A value given as bytes is sent as those bytes: Latin-1 spells each byte as one character.
    return value.decode("latin-1") if isinstance(value, bytes) else value


def request_data(
    request: requests.PreparedRequest, url: str, body: bytes, secret_params: frozenset[str]
) -> RequestData:
    """The library-neutral view of a prepared request (`body` read by `_body_bytes`), its URL
    in the canonical form that is matched and written."""
    host, port = _host_port(url)
    headers = tuple(
        (str(name).lower(), _header_value(value)) for name, value in request.headers.items()
    )
    method = request.method or "GET"
    return RequestData(method, canonical_url(url, secret_params), headers, body, host, port)


def _body_bytes(body: Any, limit: int) -> bytes:
    """A prepared request's body as the bytes urllib3 sends: a string as UTF-8, a file or an
    iterable of pieces read to its end, but never more than `limit` + 1 bytes (the safety
    check then refuses it before anything is sent)."""
    if body is None:
        return b""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, (bytearray, memoryview)):
        return bytes(body)
    if hasattr(body, "read"):
        read = body.read
        pieces: Iterable[Any] = iter(lambda: read(DEFAULT_CHUNK_SIZE), None)
    else:
        pieces = body
    parts = []
    size = 0
    for piece in pieces:
        if not piece:
            if hasattr(body, "read"):
                break  # the end of a file
            continue
        part = piece.encode("utf-8") if isinstance(piece, str) else bytes(piece)
        parts.append(part)
        size += len(part)
        if size > limit:
            break
    return b"".join(parts)


def _fault(fault: FaultInfo, request: requests.PreparedRequest) -> Exception:
    """The requests exception a recorded fault names, bound to the request."""
    cls = getattr(requests.exceptions, fault.type, None)
    if isinstance(cls, type) and issubclass(cls, _TRANSPORT_ERRORS):
        return cls(fault.message, request=request)
    known = _FAULTS.get(fault.type)
    if known is not None:
        return known(f"{fault.message} (recorded as {fault.type})", request=request)
    return requests.exceptions.ConnectionError(
        f"{fault.message} (recorded as {fault.type}, which requests does not raise)",
        request=request,
    )


class _RequestsIO:
    """The I/O of recording one request through `outer` (a requests adapter), for the step
    sequence (`_steps.record_steps`): the live response is read raw from urllib3, chunk by
    chunk as it arrives."""

    def __init__(self, outer: requests.adapters.BaseAdapter, sending: dict[str, Any]) -> None:
        self._outer = outer
        self._sending = sending
        self._chunks: Iterator[bytes] | None = None

    def head(self, live: requests.Response) -> tuple[int, Headers, str]:
        return (live.status_code, *header_text(_raw_headers(live.raw)))

    def is_transport_error(self, error: BaseException) -> bool:
        return isinstance(error, _TRANSPORT_ERRORS)

    def send(self, request: requests.PreparedRequest) -> requests.Response:
        return self._outer.send(request, stream=True, **self._sending)

    def read(self, live: requests.Response) -> bytes | None:
        if self._chunks is None:
            self._chunks = _live_chunks(live.raw)
        return next(self._chunks, None)

    def close(self, live: requests.Response) -> None:
        live.close()


# --- urllib3 --------------------------------------------------------------------------------


def _raw_headers(raw: Any) -> list[tuple[bytes, bytes]]:
    """A live urllib3 response's header list as bytes (repeats kept): http.client decoded
    each line as Latin-1, which gives the bytes back exactly."""
    return [(n.encode("latin-1"), v.encode("latin-1")) for n, v in raw.headers.items()]


def _live_chunks(raw: Any) -> Iterator[bytes]:
    """A live urllib3 response's body as it arrives, still content-encoded: each HTTP chunk
    of a chunked body (up to 64 KiB), else what each read of the socket gives.  urllib3's
    errors become requests' own, as ``iter_content`` raises them."""
    try:
        read1 = getattr(raw, "read1", None)
        if (raw.chunked and raw.supports_chunked_reads()) or read1 is None:
            yield from raw.stream(DEFAULT_CHUNK_SIZE, decode_content=False)
        else:
            while chunk := read1(DEFAULT_CHUNK_SIZE, decode_content=False):
                yield chunk
    except ProtocolError as exc:
        raise requests.exceptions.ChunkedEncodingError(exc) from exc
    except ReadTimeoutError as exc:
        raise requests.exceptions.ConnectionError(exc) from exc
    except Urllib3SSLError as exc:
        raise requests.exceptions.SSLError(exc) from exc


class _Chunks(io.RawIOBase):
    """A read-only file over the chunks of a body (a `ReplayStream`, or a `TeeStream` of a
    live response): `read(n)` gives n bytes as a socket would, `read1()` the next chunk as it
    was received.  `on_close` runs once, when it is closed (urllib3 closes it at the end)."""

    def __init__(self, chunks: Iterable[bytes], on_close: Callable[[], None] | None = None):
        super().__init__()
        self._chunks = iter(chunks)
        self._left: memoryview | bytes = b""
        self._on_close = on_close

    def readable(self) -> bool:
        return True

    def read1(self, size: int = -1, /) -> bytes:
        piece = self._left
        if not piece:
            if self.closed:
                return b""
            piece = next(self._chunks, b"")
        if 0 <= size < len(piece):
            view = memoryview(piece)
            self._left = view[size:]
            return bytes(view[:size])
        self._left = b""
        return piece if isinstance(piece, bytes) else bytes(piece)

    def read(self, size: int | None = -1, /) -> bytes:
        if size is None or size < 0:
            return b"".join(iter(self.read1, b""))
        parts = []
        while size > 0:
            piece = self.read1(size)
            if not piece:
                break
            parts.append(piece)
            size -= len(piece)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def readinto(self, buffer: Any, /) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if self.closed:
            return
        super().close()
        if self._on_close is not None:
            self._on_close()


class _Original:
    """What urllib3 keeps of the http.client response it wraps (``_original_response``):
    requests reads a response's cookies from its header list, ``msg``."""

    def __init__(self, msg: http.client.HTTPMessage) -> None:
        self.msg = msg

    def isclosed(self) -> bool:
        return True

    def close(self) -> None:
        pass


class _ReplayedRaw(HTTPResponse):
    """A urllib3 response over `_Chunks`, whose ``stream(None)`` (what
    ``iter_content(None)`` asks for) yields each chunk as it was received."""

    def stream(
        self, amt: int | None = 2**16, decode_content: bool | None = None
    ) -> Generator[bytes]:
        if amt is not None or not hasattr(HTTPResponse, "read1"):
            yield from super().stream(amt, decode_content)
            return
        while data := self.read1(decode_content=decode_content):
            yield data


def _response(
    request: requests.PreparedRequest,
    status: int,
    reason: str | None,
    headers: Headers,
    charset: str,
    body: _Chunks,
) -> requests.Response:
    """The `requests.Response` requests' own ``HTTPAdapter.build_response`` makes of a urllib3
    response with this status line, header list (as text spelled in `charset`) and body."""
    # http.client gives urllib3 each header as Latin-1 text of its bytes.
    pairs = [
        (name, value if value.isascii() else value.encode(charset).decode("latin-1"))
        for name, value in headers
    ]
    msg = http.client.HTTPMessage()
    for name, value in pairs:
        msg[name] = value  # (adds a line: repeats are kept)
    raw = _ReplayedRaw(
        body=body,
        headers=cast(Any, pairs),  # urllib3 keeps a list of pairs as a multi-dict, repeats kept
        status=status,
        version=11,
        version_string="HTTP/1.1",
        reason=reason,
        preload_content=False,
        decode_content=True,
        original_response=cast(Any, _Original(msg)),
        enforce_content_length=False,  # the recorded body is the body, whatever a header says
        request_method=request.method,
        request_url=request.url,
    )
    response = requests.Response()
    response.status_code = status
    response.headers = CaseInsensitiveDict(raw.headers)
    response.encoding = get_encoding_from_headers(response.headers)
    response.raw = raw
    response.reason = cast(str, reason)
    response.url = _text_url(request.url)
    extract_cookies_to_jar(response.cookies, request, raw)
    response.request = request
    return response
