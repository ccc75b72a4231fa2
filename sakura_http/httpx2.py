"""`RecordingTransport` typed for httpx2 clients.

`sakura_http.RecordingTransport` serves clients of both libraries at run time, but it derives
from httpx's transport base classes only, so a type checker rejects it in an ``httpx2.Client``.
This module's `RecordingTransport` is the same transport, also derived from httpx2's base
classes; import it where the client is an httpx2 one (the anthropic and openai SDKs use httpx2)::

    import httpx2
    from sakura_http.httpx2 import RecordingTransport

    client = httpx2.Client(transport=RecordingTransport("tests/fixtures/chat.jsonl"))

Importing this module imports httpx2 (``pip install "sakura-http[httpx2]"``).
"""

from __future__ import annotations

import httpx2

from ._transport import RecordingTransport as _RecordingTransport

__all__ = ["RecordingTransport"]


class RecordingTransport(_RecordingTransport, httpx2.BaseTransport, httpx2.AsyncBaseTransport):
    """`sakura_http.RecordingTransport`, typed as an httpx2 transport as well."""
