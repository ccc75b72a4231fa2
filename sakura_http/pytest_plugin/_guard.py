"""The network guard: the one module that patches the `socket` module.

While a `NetworkGuard` is installed, resolving any name but a loopback one, and connecting or
sending to any address but a loopback one, is refused before the real function runs, so no DNS
query and no packet leaves the machine, unless the host is allowed (the pytest plugin allows
`sakura_record_hosts` under `pytest --record`).  So is creating a socket of any family but
`AF_INET`, `AF_INET6` and `AF_UNIX`: the others (`AF_PACKET`, `AF_CAN`, `AF_BLUETOOTH`,
`AF_VSOCK`, ...) send without an IP address the guard could check.  Two layers, one decision
(`check_resolve`, `check_address`, `check_family`):

* the `socket` module's entry points are wrapped: `getaddrinfo`, `gethostbyname`,
  `gethostbyname_ex`, `gethostbyaddr`, `getnameinfo` (unless it is asked for numbers only),
  `socket.socket.connect` / `connect_ex` / `sendto` / `sendmsg`, `socket.socket.__init__` (a
  socket wrapping a descriptor, `socket.socket(fileno=...)` and `socket.fromfd`, is checked for
  the family the descriptor really has) and `_socket.socketpair` (which `socket.socketpair`
  calls); `socket.create_connection`, `getfqdn`, asyncio, trio and anyio all go through them;
* an audit hook (`sys.addaudithook`) sees what bypasses those wrappers, because CPython's
  `_socket` raises an audit event before it resolves, sends or creates a socket:
  `_socket.getaddrinfo`, `_socket.socket(...).connect`, `super(socket.socket, s).connect`,
  `_socket.socket(AF_PACKET, ...)` and the like.  Audit hooks cannot be removed, so the hook is
  added once per process and does nothing while no guard is installed.

Names under `.localhost` (RFC 6761) resolve to 127.0.0.1 and ::1 without the system resolver,
which could otherwise send them to a DNS server.

Each refusal raises `NetworkBlocked` and is also kept in `NetworkGuard.blocked`, so the pytest
plugin can fail the test at teardown even when the code under test caught the error (an SDK
that wraps transport errors and retries, for example).

Out of reach: subprocesses (another interpreter, with no guard), C code that opens sockets
without going through Python's `socket` module (libcurl through pycurl, `ctypes` calling
`socket(2)`), sockets that already exist when the guard is installed, and
`_socket.socket(fileno=...)` wrapping a descriptor of another family that one of those made.
"""

from __future__ import annotations

import _socket
import contextlib
import ipaddress
import socket
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .._exceptions import NetworkBlocked
from .._hosts import split_host_entry

__all__ = ["NetworkBlocked", "NetworkGuard", "is_loopback"]

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
# The families a socket may be created with while a guard is installed: IP (checked by address
# on connect and send) and Unix sockets (which stay on the machine).
_FAMILIES = frozenset(
    family
    for family in (socket.AF_INET, socket.AF_INET6, getattr(socket, "AF_UNIX", None))
    if family is not None
)


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


def _is_localhost_name(host: Any) -> bool:
    """A name under `.localhost`, which resolves to loopback without asking any resolver."""
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    return isinstance(host, str) and host.lower().rstrip(".").endswith(".localhost")


def _text(host: Any) -> str:
    return host.decode("idna") if isinstance(host, bytes) else str(host)


def _family_name(family: int) -> str:
    try:
        return socket.AddressFamily(family).name
    except ValueError:
        return f"family-{family}"


def _real_family(fileno: Any) -> int | None:
    """The family of the socket behind descriptor `fileno`, or None when it cannot be told
    (not a socket, not a number): the real function then raises its own error."""
    try:
        with _approved():
            probe = _socket.socket(fileno=fileno)  # asks the kernel, whatever family is claimed
    except (OSError, TypeError, ValueError, OverflowError):
        return None
    family: int = probe.family
    probe.detach()  # the descriptor stays open: it is not the probe's
    return family


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

    def check_family(self, family: int) -> None:
        """Raise `NetworkBlocked` unless creating a socket of `family` is allowed.

        -1 is allowed: it means AF_INET, or "the family of the descriptor given", which
        `socket.socket.__init__`'s wrapper checks.
        """
        if family != -1 and family not in _FAMILIES:
            name = _family_name(family)
            error = NetworkBlocked(
                f"sakura-http blocked creating an {name} socket: this test runs offline, and "
                "only AF_INET, AF_INET6 and AF_UNIX sockets may be created (another family "
                f"sends without an address the guard can check). {self.reason}",
                host=name,
                port=None,
            )
            with self._lock:
                self.blocked.append(error)
            raise error

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
        """Patch the socket module for the duration of the block (see the module docstring)."""
        real = {name: getattr(socket, name) for name in _RESOLVERS}
        cls = socket.socket
        real_methods = {name: getattr(cls, name) for name in (*_SENDERS, "__init__")}
        real_socketpair = getattr(_socket, "socketpair", None)
        guard = self

        def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
            if _is_localhost_name(host):
                return _localhost_addrinfo(real["getaddrinfo"], host, port, *args, **kwargs)
            guard.check_resolve(host, port)
            with _approved():
                result = real["getaddrinfo"](host, port, *args, **kwargs)
            if host is not None and not is_loopback(_text(host)):
                with guard._lock:  # an allowed record host: its addresses may be connected to
                    guard._addresses.update(str(info[4][0]).lower() for info in result)
            return result

        def gethostbyname(host: Any) -> Any:
            if _is_localhost_name(host):
                return "127.0.0.1"
            guard.check_resolve(host, None)
            with _approved():
                return real["gethostbyname"](host)

        def gethostbyname_ex(host: Any) -> Any:
            if _is_localhost_name(host):
                return _text(host), [], ["127.0.0.1"]
            guard.check_resolve(host, None)
            with _approved():
                return real["gethostbyname_ex"](host)

        def gethostbyaddr(host: Any) -> Any:
            if _is_localhost_name(host):
                return _text(host), [], ["127.0.0.1"]
            guard.check_resolve(host, None)
            with _approved():
                return real["gethostbyaddr"](host)

        def getnameinfo(sockaddr: Any, flags: int) -> Any:
            if not flags & socket.NI_NUMERICHOST:  # a reverse lookup of the address
                host = sockaddr[0] if isinstance(sockaddr, tuple) and sockaddr else None
                guard.check_resolve(host, sockaddr[1] if host is not None else None)
            with _approved():
                return real["getnameinfo"](sockaddr, flags)

        def connect(sock: socket.socket, address: Any) -> None:
            guard.check_address(sock.family, address)
            with _approved():
                real_methods["connect"](sock, address)

        def connect_ex(sock: socket.socket, address: Any) -> int:
            guard.check_address(sock.family, address)
            with _approved():
                result: int = real_methods["connect_ex"](sock, address)
            return result

        def sendto(sock: socket.socket, data: Any, *args: Any) -> int:
            guard.check_address(sock.family, args[-1] if args else None)
            with _approved():
                result: int = real_methods["sendto"](sock, data, *args)
            return result

        def sendmsg(sock: socket.socket, buffers: Any, *args: Any, **kwargs: Any) -> int:
            address = kwargs.get("address", args[2] if len(args) > 2 else None)
            if address is not None:
                guard.check_address(sock.family, address)
            with _approved():
                result: int = real_methods["sendmsg"](sock, buffers, *args, **kwargs)
            return result

        def init(
            sock: socket.socket,
            family: int = -1,
            type: int = -1,  # socket.socket's own parameter names: callers pass them
            proto: int = -1,
            fileno: Any = None,
        ) -> None:
            if fileno is not None:  # the family claimed may not be the descriptor's
                real_family = _real_family(fileno)
                if real_family is not None:
                    guard.check_family(real_family)
            real_methods["__init__"](sock, family, type, proto, fileno)

        def socketpair(*args: Any) -> Any:  # positional only, as _socket's own
            if args:  # the default family is AF_UNIX
                guard.check_family(args[0])
            assert real_socketpair is not None
            return real_socketpair(*args)

        wrappers: dict[str, Callable[..., Any]] = {
            "getaddrinfo": getaddrinfo,
            "gethostbyname": gethostbyname,
            "gethostbyname_ex": gethostbyname_ex,
            "gethostbyaddr": gethostbyaddr,
            "getnameinfo": getnameinfo,
            "connect": connect,
            "connect_ex": connect_ex,
            "sendto": sendto,
            "sendmsg": sendmsg,
            "__init__": init,
        }
        patches: list[tuple[Any, str, Callable[..., Any]]] = [
            (socket if name in _RESOLVERS else cls, name, wrapper)
            for name, wrapper in wrappers.items()
            if hasattr(socket if name in _RESOLVERS else cls, name)  # sendmsg: not on Windows
        ]
        if real_socketpair is not None:  # socket.socketpair calls _socket.socketpair
            patches.append((_socket, "socketpair", socketpair))
        saved = [(owner, name, owner.__dict__.get(name)) for owner, name, _ in patches]
        _install_audit_hook()
        for owner, name, replacement in patches:
            setattr(owner, name, replacement)
        with _ACTIVE_LOCK:
            _ACTIVE.append(self)
        try:
            yield self
        finally:
            with _ACTIVE_LOCK:
                _ACTIVE.remove(self)
            for owner, name, original in saved:
                if original is None:
                    delattr(owner, name)  # it was inherited (from _socket.socket)
                else:
                    setattr(owner, name, original)

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        """Check one `socket.*` audit event that did not come through the wrappers."""
        if event == "socket.getaddrinfo" or event == "socket.gethostbyname":
            self._check_system_resolve(args[0], args[1] if len(args) > 1 else None)
        elif event == "socket.gethostbyaddr":
            self._check_system_resolve(args[0], None)
        elif event == "socket.getnameinfo":
            sockaddr = args[0]
            if isinstance(sockaddr, tuple) and sockaddr:
                self._check_system_resolve(sockaddr[0], sockaddr[1] if len(sockaddr) > 1 else None)
        elif event == "socket.__new__":
            self.check_family(args[1])
        elif event in ("socket.connect", "socket.sendto", "socket.sendmsg"):
            sock, address = args[0], args[1]
            if address is not None:
                self.check_address(getattr(sock, "family", socket.AF_INET), address)

    def _check_system_resolve(self, host: Any, port: Any) -> None:
        if _is_localhost_name(host):
            # Only the wrappers resolve these without the system resolver.
            raise self._refuse("resolving (through the system resolver)", _text(host), None)
        self.check_resolve(host, port)


_RESOLVERS = ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr", "getnameinfo")
_SENDERS = ("connect", "connect_ex", "sendto", "sendmsg")

_ACTIVE: list[NetworkGuard] = []  # installed guards, innermost last
_ACTIVE_LOCK = threading.Lock()
_HOOK_INSTALLED = False
_STATE = threading.local()  # .approved: > 0 while a wrapper runs the real function


@contextlib.contextmanager
def _approved() -> Iterator[None]:
    """The wrapper has checked this call: the audit event it raises is not checked again."""
    _STATE.approved = getattr(_STATE, "approved", 0) + 1
    try:
        yield
    finally:
        _STATE.approved -= 1


def _audit_hook(event: str, args: tuple[Any, ...]) -> None:
    # Called for every audit event of the process: return at once for all but socket ones.
    if not _ACTIVE or not event.startswith("socket."):
        return
    approved: int = getattr(_STATE, "approved", 0)
    for guard in _ACTIVE[-1:]:  # a slice: the guard may be uninstalled meanwhile
        if not approved:
            guard.audit(event, args)


def _install_audit_hook() -> None:
    """Add the audit hook once per process (audit hooks cannot be removed)."""
    global _HOOK_INSTALLED
    with _ACTIVE_LOCK:
        if not _HOOK_INSTALLED:
            sys.addaudithook(_audit_hook)
            _HOOK_INSTALLED = True


def _localhost_addrinfo(
    real: Callable[..., Any], host: Any, port: Any, *args: Any, **kwargs: Any
) -> Any:
    """`getaddrinfo` for a `.localhost` name: the loopback addresses of the family asked for,
    looked up as numbers, so no resolver ever sees the name."""
    results: list[Any] = []
    for address in ("127.0.0.1", "::1"):
        with contextlib.suppress(socket.gaierror), _approved():
            results += real(address, port, *args, **kwargs)
    if not results:
        raise socket.gaierror(socket.EAI_NONAME, f"no loopback address for {_text(host)}")
    return results
