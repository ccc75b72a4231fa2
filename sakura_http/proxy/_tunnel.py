"""``CONNECT`` tunnels in forward mode: TLS interception, and plain HTTP in a tunnel.

A tunnel is accepted (``200 Connection established``), then its first bytes tell TLS from
plain HTTP: a TLS client is answered with a certificate for the tunnel's host, signed by the
proxy's CA (`_ca.py`); either way the requests inside are served as requests for the tunnel's
origin, by the server's connection loop.  Each tunnel sends its requests upstream over a
connection of its own (`TUNNEL_UPSTREAM`), closed with the tunnel.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import ssl
from collections.abc import Awaitable, Callable

import anyio
import h11
import httpx
from anyio.streams.tls import TLSStream

from .._hosts import split_host_entry
from ._ca import CertificateAuthority
from ._routing import Routing
from ._wire import Prepended, Timeouts, Wire

__all__ = ["TUNNEL_UPSTREAM", "ServeHTTP", "Tunnels"]

logger = logging.getLogger("sakura_http.proxy")

# The first byte of a TLS record that starts a handshake: a tunnel that opens otherwise carries
# plain HTTP.
_TLS_HANDSHAKE = b"\x16"
_GONE = (anyio.EndOfStream, anyio.BrokenResourceError, OSError)

# The upstream transport of the CONNECT tunnel being served, if any (`Tunnels._serve`).  A
# tunnel is one client connection to one origin: it gets an upstream connection of its own,
# closed with it, as mitmproxy does.  One pool for every tunnel made each request look over
# every idle connection in it (httpcore checks each for expiry, a poll through anyio's TLS
# stream): with 32 clients recording over https, that cost three times the CPU per request.
TUNNEL_UPSTREAM: contextvars.ContextVar[httpx.AsyncHTTPTransport | None] = contextvars.ContextVar(
    "sakura_http_tunnel_upstream", default=None
)

#: Serves the requests of one connection, all for `origin` (the server's connection loop).
ServeHTTP = Callable[[Wire, httpx.URL], Awaitable[None]]


class Tunnels:
    """Answers ``CONNECT`` requests: refused in reverse mode (`routing`) or without a `ca`;
    otherwise each tunnel's requests are served by `serve_http`, sent upstream over a
    transport of the tunnel's own checking the upstream's certificate with `upstream_tls`."""

    def __init__(
        self,
        routing: Routing,
        ca: CertificateAuthority | None,
        timeouts: Timeouts,
        upstream_tls: ssl.SSLContext,
        serve_http: ServeHTTP,
    ) -> None:
        self._routing = routing
        self._ca = ca
        self._timeouts = timeouts
        self._upstream_tls = upstream_tls
        self._serve_http = serve_http

    async def serve(self, wire: Wire, request: h11.Request) -> None:
        """Accept a CONNECT, then serve HTTP inside TLS with a certificate for its host."""
        authority = request.target.decode("ascii")
        ca = self._ca
        if self._routing.reverse or ca is None:
            await wire.answer(
                400,
                "bad-request",
                f"this proxy runs in reverse mode ({self._routing.reverse_flags()}): it does not "
                f"open tunnels (CONNECT {authority}); point the client's base URL at it\n",
            )
            return
        host, port = split_host_entry(authority)
        while not isinstance(await wire.next_event(), h11.EndOfMessage):
            pass
        await wire.send(h11.Response(status_code=200, headers=[], reason=b"Connection established"))
        buffered, _ = wire.h11.trailing_data
        deadline = anyio.current_time() + self._timeouts.header
        if not buffered:  # the first bytes tell TLS from plain HTTP
            with anyio.CancelScope(deadline=deadline) as waiting, contextlib.suppress(*_GONE):
                buffered = await wire.stream.receive()
            if waiting.cancelled_caught:
                logger.warning(
                    "sakura-http proxy: closing the tunnel from %s for %s: no TLS handshake or "
                    "request within %g s",
                    wire.peer,
                    authority,
                    self._timeouts.header,
                )
            if not buffered:
                return
        stream = Prepended(wire.stream, buffered)
        if buffered[:1] != _TLS_HANDSHAKE:
            # Plain HTTP in the tunnel (undici's EnvHttpProxyAgent tunnels http:// URLs too):
            # served as the requests for http://host:port a client sends in absolute form.
            origin = httpx.URL(scheme="http", host=host, port=port or 80)
            await self._serve(Wire(stream, wire.peer, self._timeouts), origin)
            return
        context = await anyio.to_thread.run_sync(ca.context_for, host)
        try:
            with anyio.fail_after(max(deadline - anyio.current_time(), 0)):
                tls = await TLSStream.wrap(
                    stream, server_side=True, ssl_context=context, standard_compatible=False
                )
        except TimeoutError:
            logger.warning(
                "sakura-http proxy: closing the tunnel from %s for %s: no TLS handshake within "
                "%g s",
                wire.peer,
                authority,
                self._timeouts.header,
            )
            return
        except (ssl.SSLError, anyio.BrokenResourceError, anyio.EndOfStream, OSError) as exc:
            logger.warning(
                "sakura-http proxy: TLS handshake with %s for %s failed (%s); does the client "
                "trust the proxy's CA? `sakura-http ca` says how",
                wire.peer,
                authority,
                exc,
            )
            return
        origin = httpx.URL(scheme="https", host=host, port=port or 443)
        await self._serve(Wire(tls, wire.peer, self._timeouts), origin)

    async def _serve(self, wire: Wire, origin: httpx.URL) -> None:
        """Serve the requests of a tunnel to `origin`, sent upstream over a connection of the
        tunnel's own (`TUNNEL_UPSTREAM`), closed with it."""
        upstream = httpx.AsyncHTTPTransport(verify=self._upstream_tls, retries=0)
        token = TUNNEL_UPSTREAM.set(upstream)
        try:
            await self._serve_http(wire, origin)
        finally:
            TUNNEL_UPSTREAM.reset(token)
            with anyio.CancelScope(shield=True):
                await upstream.aclose()
