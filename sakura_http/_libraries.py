"""httpx and httpx2: the one module that knows there are two libraries.

A client of one library asserts that a response stream is its own library's
`SyncByteStream`/`AsyncByteStream`, so a response must be built from the library of the request
it answers.  `library_of(request)` picks the `HttpLibrary` for a request; each holds that
library's `Response` class, its flavour of the replay and tee streams, and its exception classes.
httpx2 is optional and imported only when a request of it arrives.
"""

from __future__ import annotations

import copyreg
import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any, NamedTuple

from ._exchange import RequestData
from ._format import Exchange, FaultInfo, Headers, header_bytes, header_text
from ._hosts import DEFAULT_PORTS
from ._httpx_internals import (
    HEADER_ENTRIES,
    RESPONSE_CONTENT,
    RESPONSE_DECODER,
    WRAPPED_STREAM,
    header_encoding,
    headers_from_entries,
    set_content,
    uri_reference,
)
from ._matching import canonical_url
from ._streams import ReplayStream, TeeStream

__all__ = ["DefaultOuter", "HttpLibrary", "library_of", "url_host_port"]


class HttpLibrary(NamedTuple):
    """The parts of httpx (or httpx2) a transport needs."""

    name: str
    module: ModuleType
    replay_stream: type[ReplayStream]
    tee_stream: type[TeeStream]
    #: Response headers of this library from header text and its charset (see `_headers_of`).
    headers: Callable[[Headers, str], Any]
    #: The response class a replay answers with (see `_response_class`).
    response: type

    def host_port(self, request: Any) -> tuple[str, int | None]:
        """The request's host and port, the scheme's default port when the URL has none."""
        return url_host_port(request.url)

    def request_data(
        self, request: Any, secret_params: frozenset[str] = frozenset()
    ) -> RequestData:
        """The library-neutral view of a request whose body has been read, its URL in the
        canonical form that is matched and written (`canonical_url`)."""
        url, host, port = _url_view(request.url, secret_params)
        headers = _request_headers(request.headers)
        return RequestData(request.method, url, headers, request.content, host, port)

    def response_headers(self, response: Any) -> tuple[Headers, str]:
        """A live response's headers as text and their charset, losslessly (see `header_text`)."""
        return header_text(response.headers.raw)

    def replay(self, exchange: Exchange, request: Any, chunk_size: int, latency: float) -> Any:
        """Replay `exchange` for `request`: a response of this library carrying the recorded
        status and header bytes, its body streamed, or the recorded fault raised."""
        if exchange.error is not None:
            raise self.fault(exchange.error, request)
        assert exchange.status is not None
        return self._respond(
            exchange.status,
            self.headers(exchange.response_headers, exchange.response_header_charset),
            self.replay_stream(exchange, chunk_size, latency),
            request,
            None,
        )

    def handed_on(
        self, live: Any, request: Any, stream: Any, headers: Headers | None, charset: str
    ) -> Any:
        """The response handed to the caller while recording: the live response's status and
        extensions (reason phrase, HTTP version), its headers as received (`headers` None) or
        `headers` spelled in `charset` (the body was decoded), and `stream` as its body."""
        headers = live.headers if headers is None else self.headers(headers, charset)
        if isinstance(stream, ReplayStream):
            return self._respond(live.status_code, headers, stream, request, live.extensions)
        return self.module.Response(
            live.status_code,
            headers=headers,
            stream=stream,
            request=request,
            extensions=live.extensions,
        )

    def _respond(
        self, status: int, headers: Any, stream: ReplayStream, request: Any, extensions: Any
    ) -> Any:
        """A response whose body `stream` replays, which `read()` takes whole when that is
        what reading it chunk by chunk would give (see `_response_class`)."""
        response = self.response(
            status, headers=headers, stream=stream, request=request, extensions=extensions
        )
        content = stream.content
        if content is not None and self.response is not self.module.Response:
            response._replayed = (stream, content)
        return response

    def fault(self, fault: FaultInfo, request: Any) -> Exception:
        """The httpx exception a fault exchange names, bound to the live request."""
        cls = getattr(self.module, fault.type, None)
        if not (isinstance(cls, type) and issubclass(cls, self.module.TransportError)):
            # A hand-written cassette may name a class this library lacks: stay a TransportError
            # so the code under test sees a network failure, and say what was asked for.
            return self.module.TransportError(  # type: ignore[no-any-return]
                f"{fault.message} (recorded as {fault.type}, which {self.name} does not have)",
                request=request,
            )
        return cls(fault.message, request=request)  # type: ignore[no-any-return]

    def is_transport_error(self, error: BaseException) -> bool:
        return isinstance(error, self.module.TransportError)


def _load(name: str) -> HttpLibrary:
    module = importlib.import_module(name)
    bases = (module.SyncByteStream, module.AsyncByteStream)
    return HttpLibrary(
        name=name,
        module=module,
        replay_stream=type("ReplayStream", (ReplayStream, *bases), {"__module__": __name__}),
        tee_stream=type("TeeStream", (TeeStream, *bases), {"__module__": __name__}),
        headers=_headers_of(module),
        response=_response_class(module),
    )


def _headers_of(module: ModuleType) -> Callable[[Headers, str], Any]:
    """How a replay gives this library its response headers: the bytes `header_bytes` spells,
    as a `Headers` object built straight from its entries, (name, lower-case name, value).

    Given a list, `Headers` would check each name and value in Python code and ask whether the
    list is a `Mapping` (an abstract class check); given a `Headers` object, it copies its
    entries.  A library whose `Headers` keeps other entries than the ones probed for is given
    the list.  (A property test holds both ways equal.)"""
    cls = module.Headers
    probe = cls([(b"Probe-Name", b"value")])
    if getattr(probe, HEADER_ENTRIES, None) != [(b"Probe-Name", b"probe-name", b"value")] or (
        header_encoding(probe, False) is not None
    ):
        return header_bytes

    def headers(text: Headers, charset: str) -> Any:
        return headers_from_entries(
            cls,
            [
                (raw := name.encode("latin-1"), raw.lower(), value.encode(charset))
                for name, value in text
            ],
        )

    return headers


def _response_class(module: ModuleType) -> type:
    """The library's `Response`, with `read()` and `aread()` taking a replayed body whole.

    A replay answers with a streamed response, so that `iter_raw()` and `aiter_bytes()` on a
    `client.stream()` response work as they do live and `elapsed` is set when it closes.  Read
    whole (what a client does for a request sent without ``stream=True``), such a body goes
    through four layers of generators and two context managers in httpx, to join chunks that
    are the recorded body itself: a sixth of a replayed request's time.  A response given
    `_replayed` = (its stream, the body) by `HttpLibrary._respond` takes the body at once
    instead and closes as reading to the end would (which sets `elapsed`), leaving the
    response exactly as the library's own `read()` would.  It closes the stream as the
    library's `close()` / `aclose()` does, without the context manager around it that names
    the request in an error the stream raises: the replay's stream, and the client's wrapper
    around it, raise none (benchmark row "1. The same, sakura-http and the floor alternating
    in one process": 1.8 microseconds a request; 1.071x -> 1.035x sync in one A/B).  Async, a
    body of several chunks is a checkpoint first, as reading it chunk by chunk is (other tasks
    run; a cancellation is delivered).  Anything else reads as usual: a response already read,
    consumed or closed, one read from the wrong side (sync or async), one whose stream is no
    longer the replay's (the client's `Bound*Stream` wraps it), and one whose headers, as they
    are when it is read (an event hook may change them), name a content-encoding for httpx to
    decode.

    The response pickles (and copies) as the library's own `Response`, with no reference to
    sakura-http.  A probe holds the two reads to the same result when the library is loaded; a
    library whose `Response` keeps other state is given its own class, read the usual way.
    """
    base: Any = module.Response
    sync_stream, async_stream = module.SyncByteStream, module.AsyncByteStream

    def take(response: Any, kind: type) -> bytes | None:
        """The body, when `response` may take it whole, marked read; else None."""
        replayed = response._replayed
        if (
            replayed is None
            or hasattr(response, RESPONSE_CONTENT)
            or response.is_stream_consumed
            or response.is_closed
        ):
            return None
        stream, content = replayed
        current = response.stream
        if not isinstance(current, kind) or (
            current is not stream and getattr(current, WRAPPED_STREAM, None) is not stream
        ):
            return None
        # The headers' entries are (name, lower-case name, value), as `_headers_of` probes.
        for entry in getattr(response.headers, HEADER_ENTRIES, _UNKNOWN):
            if entry[1] == b"content-encoding":
                return None
        response.is_stream_consumed = True
        set_content(response, content)
        return content  # type: ignore[no-any-return]

    class Response(base):  # type: ignore[misc]
        __module__ = __name__
        __qualname__ = "Response"
        _replayed: tuple[Any, bytes] | None = None

        def read(self) -> bytes:
            content = take(self, sync_stream)
            if content is None:
                return base.read(self)  # type: ignore[no-any-return]
            self.is_closed = True  # closed as `close()` closes it, less its error context
            self.stream.close()
            return content

        async def aread(self) -> bytes:
            replayed = self._replayed
            if replayed is not None and replayed[0].several_chunks:
                import anyio.lowlevel  # imported by the async paths only (see _streams)

                await anyio.lowlevel.checkpoint()
            content = take(self, async_stream)
            if content is None:
                return await base.aread(self)  # type: ignore[no-any-return]
            self.is_closed = True  # closed as `aclose()` closes it, less its error context
            await self.stream.aclose()
            return content

        def __getstate__(self) -> dict[str, Any]:
            state: dict[str, Any] = base.__getstate__(self)
            state.pop("_replayed", None)
            return state

        def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
            # Rebuilt as the library's own class, then given its state (`__setstate__`), by
            # the function the standard library rebuilds any plain object with.
            rebuild = copyreg._reconstructor  # type: ignore[attr-defined]
            return rebuild, (base, object, None), self.__getstate__()

    def state(response: Any) -> dict[str, Any]:
        return {
            name: value
            for name, value in vars(response).items()
            if name not in ("stream", RESPONSE_DECODER, "_replayed")
        }

    try:
        usual = base(200, headers=[("probe", "1")], stream=module.ByteStream(b"probe"))
        usual.read()
        taken = Response(200, headers=[("probe", "1")], stream=module.ByteStream(b"probe"))
        taken._replayed = (taken.stream, b"probe")
        taken.read()
    except Exception:  # a library unlike the one this was written for: read the usual way
        return base  # type: ignore[no-any-return]
    return Response if state(taken) == state(usual) else base


_UNKNOWN = ((b"", b"content-encoding", b""),)  # headers kept otherwise: never taken whole


def url_host_port(url: Any) -> tuple[str, int | None]:
    """An httpx URL's host and port, the scheme's default port when none is written."""
    return url.host, url.port or DEFAULT_PORTS.get(url.scheme)


def _url_view(url: Any, secret_params: frozenset[str]) -> tuple[str, str, int | None]:
    """An httpx URL's canonical form (`canonical_url`), host and port (as `host_port`).

    Built from the parts httpx parsed the URL into, not from its text: httpx has already
    lower-cased the scheme and host, written the host in ASCII, dropped a default port and
    percent-encoded the path and query, so a URL with no escape, no secret query, no userinfo,
    no fragment and no IPv6 host is its own canonical form, and its text is put together once
    instead of being built by httpx and then parsed again.  Every other URL goes through
    `canonical_url`.  (A property test holds both ways equal for any URL httpx accepts.)
    """
    try:
        scheme, userinfo, host, port, path, query, fragment = uri_reference(url)
    except (AttributeError, ValueError):  # not the httpx URL this was written for
        return canonical_url(str(url), secret_params), *url_host_port(url)
    shown_host = url.host if host.startswith("xn--") else host  # httpx decodes an IDNA host
    default_port = DEFAULT_PORTS.get(scheme)
    if userinfo or fragment is not None or ":" in host:
        return canonical_url(str(url), secret_params), shown_host, port or default_port
    text = f"{scheme}://{host}{path}" if port is None else f"{scheme}://{host}:{port}{path}"
    if query is not None:
        text = f"{text}?{query}"
    if "%" in text or (query and secret_params):
        text = canonical_url(text, secret_params)
    return text, shown_host, port or default_port


def _request_headers(headers: Any) -> Headers:
    """Request headers as text, as httpx presents them (`multi_items()`): ASCII when every byte
    is, which is what nearly every request sends, decoded here without httpx's per-call guess.

    A client sends the same header list over and over: each list's text is remembered (bounded),
    and the same tuple object is returned for it, so the checks and match keys memoized on it
    downstream find it by identity.  The memo is keyed by the entries httpx keeps, (name,
    lower-case name, value), which `Headers.raw` would copy into a new list first; headers that
    do not keep them are asked for `raw`, (name, value)."""
    kept = getattr(headers, HEADER_ENTRIES, None)
    entries = tuple(headers.raw if kept is None else kept)
    text = _HEADER_TEXT.get(entries)
    if text is None:
        try:
            text = tuple(
                [(entry[0].decode("ascii").lower(), entry[-1].decode("ascii")) for entry in entries]
            )
        except UnicodeDecodeError:
            text = tuple((name.lower(), value) for name, value in headers.multi_items())
        if len(_HEADER_TEXT) < _HEADER_TEXT_MEMO:
            _HEADER_TEXT[entries] = text
    return text


# Kept for benchmark row "1. The same, sakura-http and the floor alternating in one process"
# (replay, <= 1.10x): decoding every request's headers cost 16,500 instructions more, 2.6% of the
# floor's 624,000 (docs/performance.md, "Plain code").
_HEADER_TEXT: dict[tuple[tuple[bytes, ...], ...], Headers] = {}
_HEADER_TEXT_MEMO = 4096


_LIBRARIES: dict[str, HttpLibrary] = {}


def library_of(request: Any) -> HttpLibrary:
    """The library a request object belongs to ("httpx" or "httpx2")."""
    library = _BY_TYPE.get(type(request))
    if library is None:
        name = type(request).__module__.partition(".")[0]
        library = _LIBRARIES.get(name)
        if library is None:
            if name not in ("httpx", "httpx2"):
                raise TypeError(
                    f"RecordingTransport serves httpx and httpx2 requests, not {type(request)!r}"
                )
            library = _LIBRARIES[name] = _load(name)
        _BY_TYPE[type(request)] = library
    return library


_BY_TYPE: dict[type, HttpLibrary] = {}  # asked for every request: one lookup by its type


class DefaultOuter:
    """An outer transport that reaches the network with the request's own library.

    It forwards to a real transport of the request's library, created on first use:
    ``HTTPTransport()`` for a sync client, ``AsyncHTTPTransport()`` for an async one (of httpx or
    httpx2).  Nothing is created while a cassette only replays.  `aclose()` closes all of them;
    `close()` closes the sync ones (the async ones belong to their event loop: close the async
    client, e.g. with ``async with``, so they close there).
    """

    def __init__(self) -> None:
        self._sync: dict[str, Any] = {}
        self._async: dict[str, Any] = {}

    def handle_request(self, request: Any) -> Any:
        library = library_of(request)
        transport = self._sync.get(library.name)
        if transport is None:
            transport = self._sync[library.name] = library.module.HTTPTransport()
        return transport.handle_request(request)

    async def handle_async_request(self, request: Any) -> Any:
        library = library_of(request)
        transport = self._async.get(library.name)
        if transport is None:
            transport = self._async[library.name] = library.module.AsyncHTTPTransport()
        return await transport.handle_async_request(request)

    def close(self) -> None:
        transports, self._sync = list(self._sync.values()), {}
        for transport in transports:
            transport.close()

    async def aclose(self) -> None:
        transports, self._async = list(self._async.values()), {}
        for transport in transports:
            await transport.aclose()
        self.close()

    def __repr__(self) -> str:
        return "<sakura_http DefaultOuter>"
