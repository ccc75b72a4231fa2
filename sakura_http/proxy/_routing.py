"""Where a request goes: the URL it is sent upstream and recorded under.

Reverse mode serves path-form requests (``GET /v1/items``) for one upstream, or for several
named ones, each under its own path prefix (``/NAME/...``); forward mode serves the
absolute-form requests of a client with ``HTTP_PROXY`` set, and inside a ``CONNECT`` tunnel the
path-form requests for the tunnel's origin.  A request that does not fit the mode is a
`BadRequest`, answered 400 with its message.  Sans I/O: nothing here reads or writes a socket.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import httpx

from .._policy import shown_url

__all__ = ["BadRequest", "Routing"]


class BadRequest(Exception):
    """A request the proxy cannot serve in its mode; answered 400 with this message."""


class Routing:
    """Where requests go: reverse mode when `upstream` (one base URL) or `routes` (names to base
    URLs, ``/NAME/path`` going to ``routes[NAME] + /path``) is given, forward mode otherwise.
    Messages show a URL's secret query values (`secret_query_params`) as their length only."""

    def __init__(
        self,
        upstream: httpx.URL | None,
        routes: Mapping[str, httpx.URL] | None,
        secret_query_params: frozenset[str],
    ) -> None:
        self.upstream = upstream
        self.routes = dict(routes or {})
        self._secret_query_params = secret_query_params

    @property
    def reverse(self) -> bool:
        """Whether the proxy stands in for its upstream(s) (reverse mode)."""
        return self.upstream is not None or bool(self.routes)

    def url(self, target: str, origin: httpx.URL | None) -> httpx.URL:
        """The URL a request for `target` (its request target, as sent) goes to: under the
        upstream in reverse mode, under `origin` inside a tunnel, `target` itself in forward
        mode.  `BadRequest` if `target` does not fit the mode; `httpx.InvalidURL` if it is no
        URL."""
        absolute = not target.startswith("/")
        if self.upstream is not None or self.routes:
            if absolute:
                raise BadRequest(
                    f"this proxy runs in reverse mode ({self.reverse_flags()}): send "
                    f"requests for paths (GET /path), not {self._shown(target)!r}"
                )
            base, target = self._route(target)
            return httpx.URL(str(base).rstrip("/") + target)
        if origin is not None and not absolute:
            return httpx.URL(str(origin) + target)
        if not absolute:
            raise BadRequest(
                f"this proxy runs in forward mode: send absolute-form requests (GET "
                f"http://host/path, as clients do with HTTP_PROXY set) or CONNECT, not "
                f"{self._shown(target)!r}; to stand in for one server, start it with --upstream URL"
            )
        url = httpx.URL(target)
        if url.scheme not in ("http", "https") or not url.host:
            raise BadRequest(
                f"cannot proxy {self._shown(target)!r}: only http:// and https:// URLs"
            )
        return url

    def reverse_flags(self) -> str:
        """The flags that started reverse mode, as the messages quote them."""
        if self.upstream is not None:
            return f"--upstream {self.upstream}"
        return " ".join(f"--upstream {name}={url}" for name, url in self.routes.items())

    def _route(self, target: str) -> tuple[httpx.URL, str]:
        """The upstream a path-form `target` goes to, and the target to send it."""
        if self.upstream is not None:
            return self.upstream, target
        match = re.match(r"/([^/?]*)(.*)", target, flags=re.S)
        assert match is not None  # reverse mode reaches here with "/..." targets only
        name, rest = match.groups()
        base = self.routes.get(name)
        if base is None:
            served = ", ".join(f"/{n}/... for {url}" for n, url in self.routes.items())
            raise BadRequest(
                f"no upstream is named {name!r} (in {self._shown(target)!r}): this proxy serves "
                f"{served}; "
                "send the request under one of these prefixes, or start the proxy with "
                "another --upstream NAME=URL"
            )
        return base, rest if rest.startswith("/") else "/" + rest

    def _shown(self, target: str) -> str:
        return shown_url(target, self._secret_query_params)
