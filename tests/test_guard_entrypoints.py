"""Every entry point of `socket` / `_socket` that resolves a name, sends to an address or
creates a socket of a family that bypasses IP (`AF_PACKET` and the like) is refused by the
network guard; `.localhost` names never reach the system resolver.

Nothing here may reach the network even if the guard were broken.  The tests run in a pytest
subprocess whose conftest adds a *sentinel* audit hook after the guard's own: CPython's
`_socket` raises an audit event before it resolves a name, sends a packet or creates a socket,
so the sentinel sees every such attempt the guard let through, logs it and raises instead of
letting it proceed.  The guard's hook runs first, so a working guard refuses before the
sentinel is reached.  Names are reserved (`.invalid`); addresses are from the documentation
ranges (192.0.2.0/24, 2001:db8::/32).  No test sends anything on a socket of another family:
they only try to create one.  The one such socket that is created, before a guard is
installed, is an `AF_NETLINK` socket (Linux), which talks to the local kernel only.
"""

from __future__ import annotations

import socket

import pytest

# The families other than AF_INET, AF_INET6 and AF_UNIX that Python knows on this platform.
_NAMES = ("AF_PACKET", "AF_NETLINK", "AF_CAN", "AF_BLUETOOTH", "AF_TIPC", "AF_VSOCK", "AF_ALG")
_NAMES += ("AF_RDS", "AF_QIPCRTR", "AF_SYSTEM", "AF_LINK", "AF_ROUTE", "AF_APPLETALK", "AF_IPX")
OTHER_FAMILIES = sorted({getattr(socket, name) for name in _NAMES if hasattr(socket, name)})

SENTINEL = '''
import ipaddress
import socket
import sys
from pathlib import Path

from sakura_http.pytest_plugin import _guard

_guard._install_audit_hook()  # the guard's hook first, so it decides before the sentinel

LOG = Path(__file__).with_name("sentinel.log")
# Families a socket may be created with: -1 is "the default" (AF_INET) or "the family of the
# descriptor given"; AF_NETLINK talks to the local kernel only (the tests create one before a
# guard is installed, to wrap it under the guard).
CREATABLE = {-1, socket.AF_INET, socket.AF_INET6, getattr(socket, "AF_UNIX", None)}
CREATABLE.add(getattr(socket, "AF_NETLINK", None))


class SentinelReached(BaseException):
    """Raised instead of resolving or sending; a BaseException so nothing swallows it."""


def loopback(host):
    if isinstance(host, bytes):
        host = host.decode()
    host = str(host).strip("[]")
    if host == "localhost":  # but not *.localhost: those must never reach the resolver
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def sentinel(event, args):
    if event in ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr"):
        target = args[0]
    elif event == "socket.getnameinfo":
        target = args[0][0]
    elif event in ("socket.connect", "socket.sendto", "socket.sendmsg"):
        family = getattr(args[0], "family", None)
        if args[1] is None or family not in (socket.AF_INET, socket.AF_INET6):
            return
        target = args[1][0]
    elif event == "socket.__new__":
        if args[1] in CREATABLE:
            return
        target = f"family {args[1]}"
    else:
        return
    if target is not None and not loopback(target):
        with LOG.open("a") as log:
            log.write(f"{event} {target}\\n")
        raise SentinelReached(f"{event} {target}")


sys.addaudithook(sentinel)
'''

ENTRY_POINTS = """
import _socket
import socket

import pytest

from sakura_http.pytest_plugin._guard import NetworkBlocked, NetworkGuard

NAME = "api.example.invalid"
V4 = ("192.0.2.1", 443)
V6 = ("2001:db8::1", 443)


# Every family Python knows on this platform that bypasses IP (AF_PACKET, AF_CAN, ...).
_NAMES = ("AF_PACKET", "AF_NETLINK", "AF_CAN", "AF_BLUETOOTH", "AF_TIPC", "AF_VSOCK", "AF_ALG")
_NAMES += ("AF_RDS", "AF_QIPCRTR", "AF_SYSTEM", "AF_LINK", "AF_ROUTE", "AF_APPLETALK", "AF_IPX")
OTHER_FAMILIES = sorted({getattr(socket, name) for name in _NAMES if hasattr(socket, name)})
# A family the sentinel refuses too, so the control test creates nothing.
RAW = getattr(socket, "AF_PACKET", OTHER_FAMILIES[0])


def tcp(family=socket.AF_INET):
    return socket.socket(family, socket.SOCK_STREAM)


def udp():
    return socket.socket(socket.AF_INET, socket.SOCK_DGRAM)


CALLS = {
    "getaddrinfo": lambda: socket.getaddrinfo(NAME, 443),
    "gethostbyname": lambda: socket.gethostbyname(NAME),
    "gethostbyname_ex": lambda: socket.gethostbyname_ex(NAME),
    "gethostbyaddr": lambda: socket.gethostbyaddr(V4[0]),
    "getnameinfo": lambda: socket.getnameinfo(V4, 0),
    "create_connection": lambda: socket.create_connection((NAME, 443)),
    "connect": lambda: tcp().connect(V4),
    "connect-v6": lambda: tcp(socket.AF_INET6).connect(V6),
    "connect_ex": lambda: tcp().connect_ex(V4),
    "sendto": lambda: udp().sendto(b"x", V4),
    "sendmsg": lambda: udp().sendmsg([b"x"], [], 0, V4),
    "_socket.getaddrinfo": lambda: _socket.getaddrinfo(NAME, 443),
    "_socket.gethostbyname": lambda: _socket.gethostbyname(NAME),
    "_socket.gethostbyname_ex": lambda: _socket.gethostbyname_ex(NAME),
    "_socket.gethostbyaddr": lambda: _socket.gethostbyaddr(V4[0]),
    "_socket.getnameinfo": lambda: _socket.getnameinfo(V4, 0),
    "_socket.socket.connect": lambda: _socket.socket().connect(V4),
    "_socket.socket.connect_ex": lambda: _socket.socket().connect_ex(V4),
    "_socket.socket.sendto": lambda: _socket.socket(
        socket.AF_INET, socket.SOCK_DGRAM
    ).sendto(b"x", V4),
    "_socket.socket.sendmsg": lambda: _socket.socket(
        socket.AF_INET, socket.SOCK_DGRAM
    ).sendmsg([b"x"], [], 0, V4),
    "super().connect": lambda: super(socket.socket, tcp()).connect(V4),
    "_socket.getaddrinfo(.localhost)": lambda: _socket.getaddrinfo("app.localhost", 443),
}


def claimed(family):
    # socket.fromfd trusts the family it is given: an AF_UNIX descriptor claimed as another.
    with socket.socket(socket.AF_UNIX) as unix:
        return socket.fromfd(unix.fileno(), family, socket.SOCK_RAW)


CREATIONS = {
    "socket.socket": lambda family: socket.socket(family, socket.SOCK_RAW),
    "socket.socket(family=)": lambda family: socket.socket(family=family, type=socket.SOCK_DGRAM),
    "_socket.socket": lambda family: _socket.socket(family, socket.SOCK_RAW),
    "socket.socketpair": lambda family: socket.socketpair(family),
    "_socket.socketpair": lambda family: _socket.socketpair(family),
    "socket.fromfd": claimed,
}


@pytest.mark.parametrize("name", list(CREATIONS))
def test_creating_a_socket_of_another_family_is_refused(name):
    guard = NetworkGuard("guarded.")
    with guard.installed():
        for family in OTHER_FAMILIES:
            with pytest.raises(NetworkBlocked, match=f"blocked creating an {family.name} socket"):
                CREATIONS[name](family)
    assert [b.host for b in guard.blocked] == [f.name for f in OTHER_FAMILIES]


@pytest.fixture
def netlink():
    # A socket of another family that exists before the guard: only the kernel's routing
    # tables answer it, and nothing is ever sent on it.
    if not hasattr(socket, "AF_NETLINK"):
        pytest.skip("AF_NETLINK is Linux's")
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0) as sock:
        yield sock


WRAPPINGS = {
    "socket.socket(fileno=)": lambda fd: socket.socket(fileno=socket.dup(fd)),
    "socket.fromfd (as its own family)": lambda fd: socket.fromfd(
        fd, socket.AF_NETLINK, socket.SOCK_RAW
    ),
    "socket.fromfd (claimed as AF_INET)": lambda fd: socket.fromfd(
        fd, socket.AF_INET, socket.SOCK_STREAM
    ),
}


@pytest.mark.parametrize("name", list(WRAPPINGS))
def test_wrapping_a_socket_of_another_family_is_refused(name, netlink):
    guard = NetworkGuard("guarded.")
    with guard.installed(), pytest.raises(NetworkBlocked, match="blocked creating an AF_NETLINK"):
        WRAPPINGS[name](netlink.fileno())
    assert [b.host for b in guard.blocked] == ["AF_NETLINK"]
    assert netlink.fileno() >= 0  # the descriptor given is left as it was


@pytest.mark.parametrize("name", list(CALLS))
def test_refused(name):
    guard = NetworkGuard("guarded.")
    with guard.installed(), pytest.raises(NetworkBlocked, match="runs offline. guarded."):
        CALLS[name]()
    assert len(guard.blocked) == 1


def test_getfqdn_swallows_the_refusal_but_it_is_kept():
    guard = NetworkGuard("guarded.")
    with guard.installed():
        assert socket.getfqdn(NAME) == NAME
    assert [b.host for b in guard.blocked] == [NAME]


def test_localhost_names_resolve_without_the_system_resolver():
    with NetworkGuard("guarded.").installed():
        infos = socket.getaddrinfo("app.localhost", 8000, type=socket.SOCK_STREAM)
        assert {info[4][0] for info in infos} == {"127.0.0.1", "::1"}
        v4 = socket.getaddrinfo("app.localhost.", 8000, socket.AF_INET)
        assert {info[4][0] for info in v4} == {"127.0.0.1"}
        assert socket.gethostbyname("app.localhost") == "127.0.0.1"
        assert socket.gethostbyname_ex("a.b.localhost")[2] == ["127.0.0.1"]
        with socket.create_server(("127.0.0.1", 0)) as server:
            port = server.getsockname()[1]
            with socket.create_connection(("app.localhost", port)):
                pass


def test_loopback_and_numeric_lookups_stay_open():
    with NetworkGuard("guarded.").installed():
        with socket.create_server(("127.0.0.1", 0)) as server:
            port = server.getsockname()[1]
            raw = _socket.socket()
            try:
                raw.connect(("127.0.0.1", port))
            finally:
                raw.close()
            with udp() as sock:
                sock.sendto(b"x", ("127.0.0.1", port))
        assert socket.getnameinfo(("127.0.0.1", 80), socket.NI_NUMERICHOST)[0] == "127.0.0.1"


def test_ip_and_unix_sockets_are_still_created():
    guard = NetworkGuard("guarded.")
    with guard.installed():
        for family in (socket.AF_INET, socket.AF_INET6, socket.AF_UNIX):
            socket.socket(family, socket.SOCK_DGRAM).close()
        _socket.socket().close()
        for pair in (_socket.socketpair(), _socket.socketpair(socket.AF_UNIX)):
            for end in pair:
                end.close()
        a, b = socket.socketpair()
        with a, b, socket.fromfd(a.fileno(), socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.sendall(b"x")  # a socket pair stays on the machine
            assert b.recv(1) == b"x"
        with socket.socket() as tcp_sock, socket.socket(fileno=socket.dup(tcp_sock.fileno())):
            pass
    assert guard.blocked == []


def test_uninstalled_guard_lets_calls_through_to_the_sentinel():
    with NetworkGuard("guarded.").installed():
        pass
    _socket.getaddrinfo("unguarded.example.invalid", 443)


def test_uninstalled_guard_lets_creation_through_to_the_sentinel():
    with NetworkGuard("guarded.").installed():
        pass
    socket.socket(RAW, socket.SOCK_RAW)
"""


def test_every_entry_point_is_guarded(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SENTINEL)
    pytester.makeini("[pytest]\nfilterwarnings =\n    error\n    ignore::ResourceWarning\n")
    pytester.makepyfile(test_entry_points=ENTRY_POINTS)
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        timeout=300,  # a hang guard only
    )
    wrappings = 3 if hasattr(socket, "AF_NETLINK") else 0
    result.assert_outcomes(passed=26 + 6 + wrappings, failed=2, skipped=3 - wrappings)
    raw = int(getattr(socket, "AF_PACKET", OTHER_FAMILIES[0]))
    result.stdout.fnmatch_lines_random(
        [
            "*SentinelReached: socket.getaddrinfo unguarded.example.invalid",
            f"*SentinelReached: socket.__new__ family {raw}",
        ]
    )
    log = pytester.path / "sentinel.log"
    # Only the control tests, with no guard installed, ever reached the sentinel.
    assert log.read_text().splitlines() == [
        "socket.getaddrinfo unguarded.example.invalid",
        f"socket.__new__ family {raw}",
    ]
