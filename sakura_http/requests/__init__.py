"""sakura-http for requests: `RecordingAdapter`, a transport adapter a `requests.Session`
mounts, replaying and recording through the same cassettes and engine as the httpx transport.

Needs the ``requests`` extra (``pip install sakura-http[requests]``).  `docs/requests.md`
documents it.
"""

from __future__ import annotations

from ._adapter import RecordingAdapter
from ._advice import RequestsAdvice

__all__ = ["RecordingAdapter", "RequestsAdvice"]
