"""Run one test body against sync and async clients of httpx and httpx2.

A `Driver` hides whether a request goes through `Client` or `AsyncClient` (on asyncio or trio),
so each behaviour test is written once and runs in every combination.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

import anyio

from sakura_http import RecordingTransport


class Driver:
    def __init__(self, lib: ModuleType, flavor: str) -> None:
        self.lib = lib
        self.flavor = flavor  # "sync", "asyncio" or "trio"

    @property
    def is_async(self) -> bool:
        return self.flavor != "sync"

    def __repr__(self) -> str:
        return f"{self.lib.__name__}-{self.flavor}"

    def real_outer(self) -> Any:
        """A real network transport of the right library and kind.

        Each async request runs in its own event loop here, so no connection is kept alive
        from one loop to the next.
        """
        if self.is_async:
            return self.lib.AsyncHTTPTransport(limits=self.lib.Limits(max_keepalive_connections=0))
        return self.lib.HTTPTransport()

    def mock(self, handler: Any) -> Any:
        """A scripted outer transport (MockTransport serves sync and async)."""
        return self.lib.MockTransport(handler)

    def transport(self, path: str | os.PathLike[str], **options: Any) -> RecordingTransport:
        return RecordingTransport(path, **options)

    def send(self, transport: Any, method: str, url: str, **kwargs: Any) -> Any:
        """Send one request through `transport` and return the read response."""
        if not self.is_async:
            client = self.lib.Client(transport=transport)
            response = client.request(method, url, **kwargs)
            return response

        async def go() -> Any:
            client = self.lib.AsyncClient(transport=transport)
            return await client.request(method, url, **kwargs)

        return anyio.run(go, backend=self.flavor)

    def close(self, transport: Any) -> None:
        if not self.is_async:
            transport.close()
        else:
            anyio.run(transport.aclose, backend=self.flavor)
