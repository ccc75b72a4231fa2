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
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from .._exceptions import CassetteError
from .._transport import RecordingTransport
from . import _raised_in

__all__ = ["ClientPatch"]

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
    if any(isinstance(error, CassetteError) for error in _raised_in(failure)):
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

    def __init__(self, recording: RecordingTransport) -> None:
        self.recording = recording

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

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Patch the client classes (and the SDKs' retries) for the block; they are restored
        even if it raises."""
        originals: list[tuple[type, str, Any]] = []
        try:
            for owner in _sdk_retry_owners():
                retry = owner.__dict__[_SDK_RETRY]
                originals.append((owner, _SDK_RETRY, retry))
                setattr(owner, _SDK_RETRY, _no_retry_after_a_miss(retry))
            for library in _libraries():
                for cls in (library.Client, library.AsyncClient):
                    original = cls.__dict__.get(_HOOK)
                    if original is None:
                        raise RuntimeError(
                            f"patch_clients needs {library.__name__}.{cls.__name__}.{_HOOK}, "
                            f"which {library.__name__} {library.__version__} does not have: "
                            "give the client its transport instead (transport=sakura_transport)"
                        )
                    originals.append((cls, _HOOK, original))
                    setattr(cls, _HOOK, self._wrap(library, original))
            yield
        finally:
            for cls, name, original in reversed(originals):
                setattr(cls, name, original)
