"""The proxy's words for what to do next: its command-line flags, or `serve()`'s arguments.

A miss answered by ``sakura-http proxy`` ends with "restart the proxy with --mode new_episodes";
the same miss from `sakura_http.proxy.serve()` in Python code names ``mode="new_episodes"``.
Under pytest the ``sakura_proxy`` fixture uses the plugin's advice instead.
"""

from __future__ import annotations

from .._advice import Advice

__all__ = ["CommandAdvice", "ServeAdvice"]


class CommandAdvice(Advice):
    """Fixes worded for ``sakura-http proxy`` and its flags.  (`give_outer` is never needed:
    the proxy always has the network.)"""

    front_end = "sakura-http proxy"

    def record_missing(self) -> str:
        return (
            "to record it, restart the proxy with `--mode new_episodes`; if the request "
            f"changed on purpose, re-record with {self.rerecord()}"
        )

    def rerecord(self) -> str:
        return "`--mode all`"

    def declare_secret(self, header: str) -> str:
        return f"restart the proxy with `--secret-header {header}`"

    def allow_header(self, header: str) -> str:
        return f"restart it with `--allow-header {header}` instead"

    def raise_body_limit(self, side: str, suggested: int) -> str:
        return f"restart the proxy with `--max-body-bytes {suggested}`"

    def add_record_host(self, host: str) -> str:
        return f"restart the proxy with `--record-host {host}`"


class ServeAdvice(Advice):
    """Fixes worded for `sakura_http.proxy.serve()` (and `start()`) in Python code."""

    front_end = "sakura_http.proxy.serve()"

    def record_missing(self) -> str:
        return (
            'to record it, pass mode="new_episodes" to serve() (or run `sakura-http proxy` '
            "with `--mode new_episodes`); if the request changed on purpose, re-record with "
            f"{self.rerecord()}"
        )

    def rerecord(self) -> str:
        return 'mode="all"'

    def declare_secret(self, header: str) -> str:
        return f'serve(..., secret_headers=["{header}"])'

    def raise_body_limit(self, side: str, suggested: int) -> str:
        return f"raise the limit with serve(..., max_body_bytes={suggested})"

    def add_record_host(self, host: str) -> str:
        return f'serve(..., record_hosts=["{host}"])'
