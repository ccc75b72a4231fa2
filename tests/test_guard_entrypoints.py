"""Every entry point of `socket` / `_socket` that resolves a name or sends to an address is
refused by the network guard; `.localhost` names never reach the system resolver.

Nothing here may reach the network even if the guard were broken.  The tests run in a pytest
subprocess whose conftest adds a *sentinel* audit hook after the guard's own: CPython's
`_socket` raises an audit event before it resolves a name or sends a packet, so the sentinel
sees every such attempt the guard let through, logs it and raises instead of letting it
proceed.  The guard's hook runs first, so a working guard refuses before the sentinel is
reached.  Names are reserved (`.invalid`); addresses are from the documentation ranges
(192.0.2.0/24, 2001:db8::/32).
"""

from __future__ import annotations

import pytest

SENTINEL = '''
import ipaddress
import socket
import sys
from pathlib import Path

from sakura_http.pytest_plugin import _guard

_guard._install_audit_hook()  # the guard's hook first, so it decides before the sentinel

LOG = Path(__file__).with_name("sentinel.log")


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


def test_uninstalled_guard_lets_calls_through_to_the_sentinel():
    with NetworkGuard("guarded.").installed():
        pass
    _socket.getaddrinfo("unguarded.example.invalid", 443)
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
    result.assert_outcomes(passed=25, failed=1)
    result.stdout.fnmatch_lines(["*SentinelReached: socket.getaddrinfo unguarded.example.invalid"])
    log = pytester.path / "sentinel.log"
    # Only the control test, with no guard installed, ever reached the sentinel.
    assert log.read_text().splitlines() == ["socket.getaddrinfo unguarded.example.invalid"]
