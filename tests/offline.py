"""The test process never reaches the network: a sentinel under every guard.

`install()` (run by tests/conftest.py before any test) replaces `socket.getaddrinfo` and the
`connect` / `connect_ex` of `socket.socket` with versions that pass loopback through and refuse
everything else as a name that does not resolve (`socket.gaierror`) or a refused connection,
which is what the reserved names the tests use (``*.example``, ``*.invalid``, ``*.test``) come
to anyway; no query or packet leaves, whatever the code under test or a broken guard does.  Each
refused host is noted in `ATTEMPTS`, and a test that tried to reach a host that is not reserved
fails (conftest's `_offline` fixture), so a real hostname cannot creep into the suite.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

__all__ = ["ATTEMPTS", "install", "is_reserved"]

RESERVED_SUFFIXES = (".example", ".invalid", ".test", ".localhost")
# Documentation ranges (RFC 5737, RFC 3849): addresses no network routes to.
DOCUMENTATION = tuple(
    ipaddress.ip_network(n)
    for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32")
)

#: Every non-loopback host something in this process tried to resolve or connect to.
ATTEMPTS: list[str] = []

_REAL = {
    "getaddrinfo": socket.getaddrinfo,
    "connect": socket.socket.connect,
    "connect_ex": socket.socket.connect_ex,
}


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%")[0])
    except ValueError:
        return None


def _is_loopback(host: str) -> bool:
    address = _address(host)
    return host.lower() == "localhost" if address is None else address.is_loopback


def is_reserved(host: str) -> bool:
    """A name under a reserved top-level domain, or a documentation address."""
    address = _address(host)
    if address is None:
        return host.lower().rstrip(".").endswith(RESERVED_SUFFIXES)
    return any(address in network for network in DOCUMENTATION)


def _text(host: Any) -> str:
    return host.decode("idna") if isinstance(host, bytes) else str(host)


def _getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    if host is not None and not _is_loopback(_text(host)):
        ATTEMPTS.append(_text(host))
        raise socket.gaierror(socket.EAI_NONAME, f"offline tests: {host} is not loopback")
    return _REAL["getaddrinfo"](host, *args, **kwargs)


def _refusing(name: str) -> Any:
    def method(sock: socket.socket, address: Any) -> Any:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(_text(address[0])):
            ATTEMPTS.append(_text(address[0]))
            raise ConnectionRefusedError(f"offline tests: {address[0]} is not loopback")
        return _REAL[name](sock, address)

    return method


def install() -> None:
    socket.getaddrinfo = _getaddrinfo
    socket.socket.connect = _refusing("connect")  # type: ignore[method-assign]
    socket.socket.connect_ex = _refusing("connect_ex")  # type: ignore[method-assign]
