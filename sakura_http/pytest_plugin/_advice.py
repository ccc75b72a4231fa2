"""`PytestAdvice`: the last sentence of sakura-http's messages under pytest, naming the plugin's
flags and ini options."""

from __future__ import annotations

from .._advice import Advice

__all__ = ["PytestAdvice"]


class PytestAdvice(Advice):
    """Error messages under pytest name the plugin's command-line flags and ini options."""

    front_end = "the sakura-http pytest plugin"

    def record_missing(self) -> str:
        return (
            "to record it, run `pytest --record` (mode new_episodes); if the request changed "
            f"on purpose, re-record with {self.rerecord()}"
        )

    def rerecord(self) -> str:
        return "`pytest --record --prune` (or `pytest --record-all`)"

    def declare_secret(self, header: str) -> str:
        return (
            f"add {header} to the ini option sakura_secret_headers (for every cassette), or pass "
            f'sakura_recording(..., secret_headers=["{header}"]) for one cassette'
        )

    def allow_header(self, header: str) -> str:
        return f"add {header} to the ini option sakura_allow_headers"

    def raise_body_limit(self, side: str, suggested: int) -> str:
        return (
            f"raise the limit for this cassette with @pytest.mark.cassette(max_body_bytes="
            f"{suggested}) or sakura_recording(..., max_body_bytes={suggested})"
        )

    def add_record_host(self, host: str) -> str:
        return f'add "{host}" to sakura_record_hosts in the pytest ini options'

    def give_outer(self) -> str:
        return (
            "leave outer= unset to let the plugin forward to the network, or pass the real "
            "transport as outer="
        )
