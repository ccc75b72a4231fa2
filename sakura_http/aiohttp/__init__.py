"""sakura-http for aiohttp: `RecordingMiddleware`, a client middleware for
``aiohttp.ClientSession(middlewares=[...])`` (aiohttp 3.12 and later), replaying and recording
through the same cassettes and engine as the httpx transport.

Needs the ``aiohttp`` extra (``pip install sakura-http[aiohttp]``).  `docs/aiohttp.md`
documents it.
"""

from __future__ import annotations

from ._advice import AiohttpAdvice
from ._middleware import RecordingMiddleware

__all__ = ["AiohttpAdvice", "RecordingMiddleware"]
