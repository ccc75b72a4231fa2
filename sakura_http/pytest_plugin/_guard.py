"""The network guard: the one module that patches the `socket` module.

While a `NetworkGuard` is installed, `socket.getaddrinfo` refuses to resolve any name but
loopback ones, and `socket.socket.connect` / `connect_ex` / `sendto` refuse any address but a
loopback one, unless the host is allowed (the pytest plugin allows `sakura_record_hosts` under
`pytest --record`).  The refusal happens before the real function is called, so no DNS query
and no packet leaves the machine.  `socket.create_connection`, asyncio, trio and anyio all go
through these functions.

Each refusal raises `NetworkBlocked` and is also kept in `NetworkGuard.blocked`, so the pytest
plugin can fail the test at teardown even when the code under test caught the error (an SDK
that wraps transport errors and retries, for example).

Out of reach: C extensions that open sockets without going through Python's `socket` module,
and subprocesses.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .._exceptions import NetworkBlocked
from .._hosts import split_host_entry

__all__ = ["NetworkBlocked", "NetworkGuard", "is_loopback"]

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    """Whether `host` is a loopback name or address ("localhost", 127.0.0.0/8, ::1)."""
    name = host.strip("[]").lower().rstrip(".")
    if name in _LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def _port_of(value: Any) -> int | None:
    if isinstance(value, int):
        return value
    if isinstance(value, (str, bytes)):
        text = value.decode() if isinstance(value, bytes) else value
        return int(text) if text.isdigit() else socket.getservbyname(text) if text else None
    return None


class NetworkGuard:
    """Refuses non-loopback name resolution and connections while installed.

    `allowed` holds "host" or "host:port" entries that are let through as well (their resolved
    addresses are then allowed for `connect`).  `reason` ends every refusal message: it says
    why the test runs offline and what to do.  Install with `installed()`; the guard patches
    the functions that are current at that moment and restores them when the block ends.
    """

    def __init__(self, reason: str, allowed: Iterable[str] = ()) -> None:
        self.reason = reason
        self.blocked: list[NetworkBlocked] = []
        self._lock = threading.Lock()
        self._hosts: set[str] = set()
        self._host_ports: set[tuple[str, int]] = set()
        self._addresses: set[str] = set()  # addresses resolved from an allowed host
        self.allow(allowed)

    def allow(self, entries: Iterable[str]) -> None:
        """Let "host" or "host:port" entries through as well."""
        with self._lock:
            for entry in entries:
                host, port = split_host_entry(entry)
                if port is None:
                    self._hosts.add(host)
                else:
                    self._host_ports.add((host, port))

    # --- decisions ---------------------------------------------------------------------------

    def _allowed_name(self, host: str, port: int | None) -> bool:
        name = host.strip("[]").lower().rstrip(".")
        if is_loopback(name):
            return True
        with self._lock:
            if name in self._hosts or name in self._addresses:
                return True
            if port is None:
                return any(h == name for h, _ in self._host_ports)
            return (name, port) in self._host_ports

    def _refuse(self, action: str, host: str, port: int | None) -> NetworkBlocked:
        where = host if port is None else f"{host}:{port}"
        error = NetworkBlocked(
            f"sakura-http blocked {action} {where}: this test runs offline. {self.reason}",
            host=host,
            port=port,
        )
        with self._lock:
            self.blocked.append(error)
        return error

    def check_resolve(self, host: Any, port: Any) -> None:
        """Raise `NetworkBlocked` unless resolving `host` is allowed."""
        if host is None:
            return  # a passive (bind) lookup: nothing leaves the machine
        name = host.decode("idna") if isinstance(host, bytes) else str(host)
        if not name:
            return
        try:
            number = _port_of(port)
        except OSError:
            number = None
        if not self._allowed_name(name, number):
            raise self._refuse("resolving", name, number)

    def check_address(self, family: int, address: Any) -> None:
        """Raise `NetworkBlocked` unless connecting or sending to `address` is allowed."""
        if family not in (socket.AF_INET, socket.AF_INET6):
            return  # Unix sockets and friends stay on the machine
        if not isinstance(address, tuple) or not address:
            return
        host = address[0]
        name = host.decode("idna") if isinstance(host, bytes) else str(host)
        port = address[1] if len(address) > 1 and isinstance(address[1], int) else None
        if not self._allowed_name(name, port):
            raise self._refuse("a connection to", name, port)

    # --- patching ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def installed(self) -> Iterator[NetworkGuard]:
        """Patch the socket module for the duration of the block."""
        real_getaddrinfo = socket.getaddrinfo
        cls = socket.socket
        real_connect = cls.connect
        real_connect_ex = cls.connect_ex
        real_sendto = cls.sendto
        guard = self

        def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
            guard.check_resolve(host, port)
            result = real_getaddrinfo(host, port, *args, **kwargs)
            if host is not None and not is_loopback(str(host)):
                with guard._lock:  # an allowed record host: its addresses may be connected to
                    guard._addresses.update(str(info[4][0]).lower() for info in result)
            return result

        def connect(sock: socket.socket, address: Any) -> None:
            guard.check_address(sock.family, address)
            real_connect(sock, address)

        def connect_ex(sock: socket.socket, address: Any) -> int:
            guard.check_address(sock.family, address)
            return real_connect_ex(sock, address)

        def sendto(sock: socket.socket, data: Any, *args: Any) -> int:
            guard.check_address(sock.family, args[-1] if args else None)
            result: int = real_sendto(sock, data, *args)
            return result

        patches: list[tuple[Any, str, Callable[..., Any]]] = [
            (socket, "getaddrinfo", getaddrinfo),
            (cls, "connect", connect),
            (cls, "connect_ex", connect_ex),
            (cls, "sendto", sendto),
        ]
        saved = [(owner, name, owner.__dict__.get(name)) for owner, name, _ in patches]
        for owner, name, replacement in patches:
            setattr(owner, name, replacement)
        try:
            yield self
        finally:
            for owner, name, original in saved:
                if original is None:
                    delattr(owner, name)  # it was inherited (from _socket.socket)
                else:
                    setattr(owner, name, original)
