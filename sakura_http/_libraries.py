"""httpx and httpx2: the one module that knows there are two libraries.

A client of one library asserts that a response stream is its own library's
`SyncByteStream`/`AsyncByteStream`, so a response must be built from the library of the request
it answers.  `library_of(request)` picks the `HttpLibrary` for a request; each holds that
library's `Response` class, its flavour of the replay and tee streams, and its exception classes.
httpx2 is optional and imported only when a request of it arrives.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ._format import Exchange, FaultInfo
from ._matching import RequestData, canonical_url
from ._streams import ReplayStream, TeeStream

__all__ = ["HttpLibrary", "library_of"]

_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


@dataclass(frozen=True, slots=True)
class HttpLibrary:
    """The parts of httpx (or httpx2) a transport needs."""

    name: str
    module: ModuleType
    replay_stream: type[ReplayStream]
    tee_stream: type[TeeStream]

    def host_port(self, request: Any) -> tuple[str, int | None]:
        """The request's host and port, the scheme's default port when the URL has none."""
        url = request.url
        return url.host, url.port or _DEFAULT_PORTS.get(url.scheme)

    def request_data(
        self, request: Any, secret_params: frozenset[str] = frozenset()
    ) -> RequestData:
        """The library-neutral view of a request whose body has been read, its URL in the
        canonical form that is matched and written (`canonical_url`)."""
        host, port = self.host_port(request)
        return RequestData(
            method=request.method,
            url=canonical_url(str(request.url), secret_params),
            headers=tuple((name.lower(), value) for name, value in request.headers.multi_items()),
            body=request.content,
            host=host,
            port=port,
        )

    def response(self, exchange: Exchange, request: Any, stream: Any) -> Any:
        """A response of this library carrying the recorded status and headers."""
        assert exchange.status is not None
        return self.module.Response(
            exchange.status,
            headers=list(exchange.response_headers),
            stream=stream,
            request=request,
        )

    def replay(self, exchange: Exchange, request: Any, chunk_size: int, latency: float) -> Any:
        """Replay `exchange` for `request`: a streamed response, or the recorded fault raised."""
        if exchange.error is not None:
            raise self.fault(exchange.error, request)
        return self.response(exchange, request, self.replay_stream(exchange, chunk_size, latency))

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
    )


_LIBRARIES: dict[str, HttpLibrary] = {}


def library_of(request: Any) -> HttpLibrary:
    """The library a request object belongs to ("httpx" or "httpx2")."""
    name = type(request).__module__.partition(".")[0]
    library = _LIBRARIES.get(name)
    if library is None:
        if name not in ("httpx", "httpx2"):
            raise TypeError(
                f"RecordingTransport serves httpx and httpx2 requests, not {type(request)!r}"
            )
        library = _LIBRARIES[name] = _load(name)
    return library
