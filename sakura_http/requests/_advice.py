"""The requests front end's words for what to do next: `RecordingAdapter`'s keywords.

Under pytest the ``sakura_requests`` fixture uses the plugin's advice instead.
"""

from __future__ import annotations

from .._advice import Advice

__all__ = ["RequestsAdvice"]


class RequestsAdvice(Advice):
    """Fixes worded for a `RecordingAdapter` built in Python code.  (`give_outer` is never
    needed: the adapter always has an outer adapter.)"""

    front_end = "sakura_http.requests.RecordingAdapter"

    def record_missing(self) -> str:
        return (
            'to record it, pass mode="new_episodes" to RecordingAdapter (under pytest: run '
            "`pytest --record`); if the request changed on purpose, re-record with "
            f"{self.rerecord()}"
        )

    def declare_secret(self, header: str) -> str:
        return f'RecordingAdapter(..., secret_headers=["{header}"])'

    def raise_body_limit(self, side: str, suggested: int) -> str:
        return f"raise the limit with RecordingAdapter(..., max_body_bytes={suggested})"
