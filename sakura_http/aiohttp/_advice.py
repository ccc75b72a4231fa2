"""The aiohttp front end's words for what to do next: `RecordingMiddleware`'s keywords.

Under pytest the ``sakura_aiohttp`` fixture uses the plugin's advice instead.
"""

from __future__ import annotations

from .._advice import Advice

__all__ = ["AiohttpAdvice"]


class AiohttpAdvice(Advice):
    """Fixes worded for a `RecordingMiddleware` built in Python code.  (`give_outer` is never
    needed: recording goes through the session's own connector.)"""

    front_end = "sakura_http.aiohttp.RecordingMiddleware"

    def record_missing(self) -> str:
        return (
            'to record it, pass mode="new_episodes" to RecordingMiddleware (under pytest: run '
            "`pytest --record`); if the request changed on purpose, re-record with "
            f"{self.rerecord()}"
        )

    def declare_secret(self, header: str) -> str:
        return f'RecordingMiddleware(..., secret_headers=["{header}"])'

    def raise_body_limit(self, side: str, suggested: int) -> str:
        return f"raise the limit with RecordingMiddleware(..., max_body_bytes={suggested})"
