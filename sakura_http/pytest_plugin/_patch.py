"""``patch_clients``: the one place sakura-http patches client classes.

While a `ClientPatch` is installed, every httpx and httpx2 client, sync and async, whose
transport for a request is the library's own ``HTTPTransport`` / ``AsyncHTTPTransport`` (the
default, or passed explicitly as the anthropic and openai SDKs do; proxy mounts included) sends
that request through one `RecordingTransport`, with the client's own transport as the outer one
when recording.  Clients with any other transport (``MockTransport``, a respx router, a
`RecordingTransport`, a custom class) are left alone.

The hook is the private ``Client._transport_for_url(url)``, the one method both libraries' clients
call to pick the transport of each request (in ``_send_single_request``).  Wrapping it, rather than
``__init__``, changes no client's state: clients built before the test (a module-level client
in the app) are recorded too, and once the patch is removed every client is exactly as it was,
its own transport never closed by sakura-http.  If a library renames the method, installing
the patch raises a `RuntimeError` that says so, rather than silently recording nothing.

requests and aiohttp (those installed) are covered the same way, by one method each, on the
same cassette through their own front ends (built on first use, handed to ``track``):

* ``requests.Session.get_adapter(url)``, which ``Session.send`` calls for every request (each
  hop of a redirect, the module-level ``requests.get`` & co. included): when it gives
  requests' own ``HTTPAdapter`` (or a subclass: retries configured on it), the request goes
  through one `sakura_http.requests.RecordingAdapter`, the session's adapter being the outer
  one when recording.  Other adapters (requests-mock's, a `RecordingAdapter`) are left alone.
* ``aiohttp.ClientSession._request``, the coroutine behind ``get``, ``post``, ``request`` and
  the others: one `sakura_http.aiohttp.RecordingMiddleware` is added as the innermost of the
  request's middlewares (the session's, or the request's own ``middlewares=``), so the app's
  middlewares run as they do live and a replay opens no connection.  A request whose
  middlewares already hold a `RecordingMiddleware` (the ``sakura_aiohttp`` fixture's) is left
  alone.

Like ``_transport_for_url``, neither hook changes a session: sessions built before the test are
covered, and once the patch is removed they are exactly as they were.

The anthropic and openai SDKs retry a failed request twice, with backoff, whatever the cause.
A sakura-http error (a miss) is the same on every attempt, so while the patch is installed the
SDKs' private ``_sleep_for_retry`` (the one method both call, in their sync and async clients,
before retrying) re-raises the failure at once when it holds a `CassetteError`: a miss costs
one attempt, and the app's own ``max_retries`` still governs retries of the responses a
cassette holds (a recorded 529 followed by its retry).  An SDK release without that method is
left alone: its misses are retried as before, slower but with the same outcome.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import inspect
import sys
import threading
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, NoReturn

from .._exceptions import CassetteError, hidden_in_tracebacks
from .._transport import RecordingTransport
from ._caught import raised_in

__all__ = ["ClientPatch"]

# A sakura-http error passing through the patched clients' frames is shown under pytest without
# them, as through the transport's own (`hidden_in_tracebacks`).
__tracebackhide__ = hidden_in_tracebacks

_HOOK = "_transport_for_url"

#: The SDK clients whose retries stop at a sakura-http error, and the method they retry through.
_SDK_CLIENTS = {"anthropic": ("Anthropic", "AsyncAnthropic"), "openai": ("OpenAI", "AsyncOpenAI")}
_SDK_RETRY = "_sleep_for_retry"

#: The client's own transport for the request in flight, read by `_ClientsOwnTransport`.
_OWN: contextvars.ContextVar[Any] = contextvars.ContextVar("sakura_http_own_transport")


class _ClientsOwnTransport:
    """The recording transport's outer: the patched client's own transport for this request.

    The clients own their transports, so closing this closes nothing.
    """

    def handle_request(self, request: Any) -> Any:
        return _OWN.get().handle_request(request)

    async def handle_async_request(self, request: Any) -> Any:
        return await _OWN.get().handle_async_request(request)

    def __repr__(self) -> str:
        return "<sakura_http: the patched client's own transport>"


class _Through:
    """What a patched client's ``_transport_for_url`` returns: `recording`, with `own` as the
    outer transport while this request is sent."""

    def __init__(self, recording: RecordingTransport, own: Any) -> None:
        self._recording = recording
        self._own = own

    def handle_request(self, request: Any) -> Any:
        token = _OWN.set(self._own)
        try:
            return self._recording.handle_request(request)
        finally:
            _OWN.reset(token)

    async def handle_async_request(self, request: Any) -> Any:
        token = _OWN.set(self._own)
        try:
            return await self._recording.handle_async_request(request)
        finally:
            _OWN.reset(token)


class _SessionsOwnAdapter:
    """The patching `RecordingAdapter`'s outer: the patched requests session's own adapter for
    the request in flight.  The session owns it, so closing this closes nothing."""

    def send(self, request: Any, **kwargs: Any) -> Any:
        return _OWN.get().send(request, **kwargs)

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return "<sakura_http: the patched session's own adapter>"


class _SentThrough:
    """What a patched ``Session.get_adapter`` gives: an adapter sending through `recording`,
    with `own` (the session's adapter) as the outer one while this request is sent."""

    def __init__(self, recording: Any, own: Any) -> None:
        self._recording = recording
        self._own = own

    def send(self, request: Any, **kwargs: Any) -> Any:
        token = _OWN.set(self._own)
        try:
            return self._recording.send(request, **kwargs)
        finally:
            _OWN.reset(token)

    def close(self) -> None:  # the session closes its own adapters, never this
        pass


def _optional(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:  # requests and aiohttp are optional
        return None


def _libraries() -> list[ModuleType]:
    found = []
    for name in ("httpx", "httpx2"):
        try:
            found.append(importlib.import_module(name))
        except ImportError:  # httpx2 is optional
            continue
    return found


def _sdk_retry_owners() -> list[type]:
    """The classes of the installed SDKs that define `_SDK_RETRY` (their sync and async base
    clients), found through the public client classes' MRO."""
    owners: list[type] = []
    for name, class_names in _SDK_CLIENTS.items():
        try:
            sdk = importlib.import_module(name)
        except ImportError:  # the SDKs are optional
            continue
        for class_name in class_names:
            client_class = getattr(sdk, class_name, None)
            for cls in getattr(client_class, "__mro__", ()):
                if _SDK_RETRY in cls.__dict__:
                    if cls not in owners:
                        owners.append(cls)
                    break
    return owners


def _raise_a_miss(response: Any) -> None:
    """Re-raise the failure being retried if it holds a `CassetteError` (it would fail the same
    way again).  A retry of a response (`response` given) is the app's to decide."""
    failure = sys.exc_info()[1]
    if response is not None or failure is None:
        return
    if any(isinstance(error, CassetteError) for error in raised_in(failure)):
        raise failure


def _no_retry_after_a_miss(original: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(original):

        async def _sleep_for_retry(client: Any, *args: Any, **kwargs: Any) -> Any:
            _raise_a_miss(kwargs.get("response"))
            return await original(client, *args, **kwargs)

    else:

        def _sleep_for_retry(client: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
            _raise_a_miss(kwargs.get("response"))
            return original(client, *args, **kwargs)

    _sleep_for_retry.__wrapped__ = original  # type: ignore[attr-defined]
    return _sleep_for_retry


class ClientPatch:
    """Send the requests of network-bound httpx / httpx2 clients through `recording`.

    Build the recording transport with ``outer=ClientPatch.outer()``.  `installed()` patches
    both libraries (those importable) for the duration of a ``with`` block and restores them
    on the way out, whatever happens inside.
    """

    def __init__(
        self, recording: RecordingTransport, *, track: Callable[[Any], None] | None = None
    ) -> None:
        self.recording = recording
        #: The requests adapter and aiohttp middleware opened on the recording transport's
        #: cassette (on first use), in the order opened.
        self.opened: list[Any] = []
        self._track = track
        self._lock = threading.Lock()
        self._front_ends: dict[str, Any] = {}

    @staticmethod
    def outer() -> Any:
        """The outer transport a patching `RecordingTransport` must be built with."""
        return _ClientsOwnTransport()

    def _wrap(self, library: ModuleType, original: Callable[[Any, Any], Any]) -> Any:
        network = (library.HTTPTransport, library.AsyncHTTPTransport)
        recording = self.recording

        def _transport_for_url(client: Any, url: Any) -> Any:
            transport = original(client, url)
            if isinstance(transport, network):
                return _Through(recording, transport)
            return transport

        _transport_for_url.__wrapped__ = original  # type: ignore[attr-defined]
        return _transport_for_url

    def _front_end(self, name: str) -> Any:
        """The front end `name` on the recording transport's cassette and configuration, opened
        once (handed to ``track``, which closes it; else the block of `installed()` does)."""
        with self._lock:
            opened = self._front_ends.get(name)
            if opened is None:
                recording = self.recording
                if name == "requests":
                    from ..requests import RecordingAdapter

                    opened = RecordingAdapter(
                        recording.path,
                        outer=_SessionsOwnAdapter(),  # type: ignore[arg-type]
                        config=recording.config,
                        environ={},
                    )
                else:
                    from ..aiohttp import RecordingMiddleware

                    opened = RecordingMiddleware(
                        recording.path, config=recording.config, environ={}
                    )
                self._front_ends[name] = opened
                self.opened.append(opened)
                if self._track is not None:
                    self._track(opened)
            return opened

    def _wrap_get_adapter(self, requests: ModuleType, original: Callable[..., Any]) -> Any:
        network = requests.adapters.HTTPAdapter

        def get_adapter(session: Any, url: str) -> Any:
            adapter = original(session, url)
            if isinstance(adapter, network):
                return _SentThrough(self._front_end("requests"), adapter)
            return adapter

        get_adapter.__wrapped__ = original  # type: ignore[attr-defined]
        return get_adapter

    def _wrap_request(self, original: Callable[..., Any]) -> Any:
        from ..aiohttp import RecordingMiddleware

        async def _request(
            session: Any, method: str, url: Any, *, middlewares: Any = None, **kwargs: Any
        ) -> Any:
            chain = tuple(session._middlewares if middlewares is None else middlewares)
            if not any(isinstance(m, RecordingMiddleware) for m in chain):
                middlewares = (*chain, self._front_end("aiohttp"))  # innermost
            return await original(session, method, url, middlewares=middlewares, **kwargs)

        _request.__wrapped__ = original  # type: ignore[attr-defined]
        return _request

    def _hooks(self) -> Iterator[tuple[type, str, Any]]:
        """(class, method name, replacement) for every installed client library."""
        for library in _libraries():
            for cls in (library.Client, library.AsyncClient):
                original = cls.__dict__.get(_HOOK)
                if original is None:
                    _renamed(library, cls, _HOOK, "transport=sakura_transport")
                yield cls, _HOOK, self._wrap(library, original)
        requests = _optional("requests")
        if requests is not None:
            session = requests.Session
            original = session.__dict__.get("get_adapter")
            if original is None:
                _renamed(requests, session, "get_adapter", "the sakura_requests fixture")
            yield session, "get_adapter", self._wrap_get_adapter(requests, original)
        aiohttp = _optional("aiohttp")
        if aiohttp is not None:
            session = aiohttp.ClientSession
            original = session.__dict__.get("_request")
            if original is None or "middlewares" not in inspect.signature(original).parameters:
                _renamed(
                    aiohttp, session, "_request(middlewares=...)", "the sakura_aiohttp fixture"
                )
            yield session, "_request", self._wrap_request(original)

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Patch the client classes (and the SDKs' retries) for the block; they are restored
        even if it raises.  The front ends opened in the block that no ``track`` took are
        closed at its end."""
        originals: list[tuple[type, str, Any]] = []
        failed = True
        try:
            for owner in _sdk_retry_owners():
                retry = owner.__dict__[_SDK_RETRY]
                originals.append((owner, _SDK_RETRY, retry))
                setattr(owner, _SDK_RETRY, _no_retry_after_a_miss(retry))
            for cls, name, replacement in self._hooks():
                originals.append((cls, name, cls.__dict__[name]))
                setattr(cls, name, replacement)
            yield
            failed = False
        finally:
            for cls, name, original in reversed(originals):
                setattr(cls, name, original)
            if self._track is None:
                for opened in self.opened:
                    opened.close(failed=failed)


def _renamed(library: ModuleType, cls: type, hook: str, instead: str) -> NoReturn:
    raise RuntimeError(
        f"patch_clients needs {library.__name__}.{cls.__name__}.{hook}, which "
        f"{library.__name__} {library.__version__} does not have: give the client its "
        f"transport instead ({instead})"
    )
