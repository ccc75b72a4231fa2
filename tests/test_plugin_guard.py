"""The network guard, in real pytest sessions run in a subprocess.

No packet may leave for a non-loopback address even if the guard were broken: the inner
conftest replaces the real `socket.getaddrinfo` and `socket.socket.connect` / `connect_ex` /
`sendto` with sentinels *before* the guard wraps them.  A sentinel passes loopback through and,
for anything else, logs the call and raises instead of calling the real function.  Creating a
socket of a family that bypasses IP (`AF_PACKET`) is watched by a sentinel audit hook that runs
after the guard's: it raises before the socket exists, and no test sends anything on one.
Names are reserved (``.invalid``); the one address is from TEST-NET-1 (192.0.2.0/24,
documentation only).
"""

from __future__ import annotations

from pathlib import Path

import pytest

SENTINELS = '''
import ipaddress
import socket
import sys
from pathlib import Path

from sakura_http.pytest_plugin import _guard

_guard._install_audit_hook()  # the guard's hook first, so it decides before the sentinel

LOG = Path(__file__).with_name("sentinel.log")
REAL_GETADDRINFO = socket.getaddrinfo
REAL = {name: getattr(socket.socket, name) for name in ("connect", "connect_ex", "sendto")}


class SentinelReached(BaseException):
    """Raised instead of touching the network; a BaseException so nothing swallows it."""


def loopback(host):
    host = str(host).strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def trip(what):
    with LOG.open("a") as log:
        log.write(what + "\\n")
    raise SentinelReached(what)


def getaddrinfo(host, port, *args, **kwargs):
    if host is not None and not loopback(host):
        trip(f"getaddrinfo {host}")
    return REAL_GETADDRINFO(host, port, *args, **kwargs)


def wrap(name):
    def method(sock, *args):
        address = args[-1]
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not loopback(address[0]):
            trip(f"{name} {address[0]}")
        return REAL[name](sock, *args)
    return method


CREATABLE = (-1, socket.AF_INET, socket.AF_INET6, socket.AF_UNIX)


def creation(event, args):
    if event == "socket.__new__" and args[1] not in CREATABLE:
        trip(f"socket.__new__ family {args[1]}")


socket.getaddrinfo = getaddrinfo
for name in REAL:
    setattr(socket.socket, name, wrap(name))
sys.addaudithook(creation)
'''

GUARDED = """
import socket

import anyio
import httpx
import pytest

# A family that bypasses IP (Linux's raw link-layer sockets; another one elsewhere).
RAW = getattr(socket, "AF_PACKET", getattr(socket, "AF_ROUTE", 17))


def test_create_connection_is_refused(sakura_fixtures):
    socket.create_connection(("api.example.invalid", 443))


def test_an_address_is_refused(sakura_fixtures):
    with socket.socket() as sock:
        sock.connect(("192.0.2.1", 443))


def test_connect_ex_and_sendto_are_refused(sakura_fixtures):
    with socket.socket() as sock:
        with pytest.raises(OSError, match="runs offline"):
            sock.connect_ex(("192.0.2.1", 443))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(b"x", ("192.0.2.1", 53))


def test_a_raw_socket_is_refused(sakura_fixtures):
    socket.socket(RAW, socket.SOCK_RAW)


def test_a_raw_socket_refusal_caught_by_the_code_under_test(sakura_fixtures):
    try:
        socket.socket(RAW, socket.SOCK_RAW)
    except OSError:
        pass


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_async_connect_is_refused(sakura_fixtures, backend):
    anyio.run(anyio.connect_tcp, "api.example.invalid", 443, backend=backend)


@pytest.mark.cassette("x.jsonl")
def test_httpx_error_caught_by_the_code_under_test(sakura_transport):
    try:
        httpx.get("http://api.example.invalid/")
    except httpx.ConnectError as exc:
        assert "this test runs offline" in str(exc)


def test_loopback_stays_open(sakura_fixtures):
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        for host in ("127.0.0.1", "localhost"):
            with socket.create_connection((host, port)):
                pass


def test_unguarded_without_sakura():
    # Proves the sentinel works: no sakura fixture, so no guard, so the sentinel trips.
    socket.getaddrinfo("unguarded.example.invalid", 443)
"""


@pytest.fixture
def sentinels(pytester: pytest.Pytester) -> Path:
    pytester.makeconftest(SENTINELS)
    return pytester.path / "sentinel.log"


def read(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_guard_refuses_everything_but_loopback(pytester: pytest.Pytester, sentinels: Path) -> None:
    pytester.makeini("[pytest]\nfilterwarnings = error\n")
    pytester.makepyfile(test_guarded=GUARDED)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=7, passed=3, errors=3)
    result.stdout.fnmatch_lines_random(
        [
            "*NetworkBlocked: sakura-http blocked resolving api.example.invalid:443: "
            "this test runs offline. The test uses sakura-http*",
            "*NetworkBlocked: sakura-http blocked a connection to 192.0.2.1:443: this test runs*",
            "*NetworkBlocked: sakura-http blocked a connection to 192.0.2.1:53*",
            "*NetworkBlocked: sakura-http blocked creating an AF_* socket: this test runs offline*",
            "*ERROR at teardown of test_a_raw_socket_refusal_caught_by_the_code_under_test*",
            "*ERROR at teardown of test_httpx_error_caught_by_the_code_under_test*",
            "*the code under test caught 1 network refusal(s)*",
            "FAILED *test_async_connect_is_refused[[]asyncio[]]*",
            "FAILED *test_async_connect_is_refused[[]trio[]]*",
            "*SentinelReached: getaddrinfo unguarded.example.invalid",
        ]
    )
    # Only the unguarded test ever reached the real functions' place.
    assert read(sentinels) == ["getaddrinfo unguarded.example.invalid"]


@pytest.mark.parametrize(
    ("ini", "why"),
    [
        ("sakura_block_network = true", "runs with sakura_block_network"),
        # Every test's clients go through its cassette, so every test runs offline: what is not
        # an httpx client (a raw socket here) is refused as with the marker.
        ("sakura_patch_clients = true", "uses sakura-http"),
    ],
)
def test_an_ini_key_guards_every_test(
    pytester: pytest.Pytester, sentinels: Path, ini: str, why: str
) -> None:
    pytester.makeini(f"[pytest]\nfilterwarnings = error\n{ini}\n")
    pytester.makepyfile(
        test_plain="""
import socket

def test_plain():
    socket.getaddrinfo("api.example.invalid", 443)
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*blocked resolving api.example.invalid:443*"])
    result.stdout.fnmatch_lines([f"*{why}*"])
    assert read(sentinels) == []


def test_record_hosts_are_let_through_while_recording(
    pytester: pytest.Pytester, sentinels: Path
) -> None:
    pytester.makeini(
        "[pytest]\nfilterwarnings = error\nsakura_record_hosts =\n    api.example.invalid\n"
    )
    pytester.makepyfile(
        test_record="""
import socket
import pytest

def test_allowed_host_reaches_the_real_function(sakura_fixtures):
    socket.getaddrinfo("api.example.invalid", 443)

def test_other_hosts_stay_blocked(sakura_fixtures):
    socket.getaddrinfo("other.example.invalid", 443)
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--record")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines_random(
        [
            "*SentinelReached: getaddrinfo api.example.invalid",
            "*blocked resolving other.example.invalid:443*sakura_record_hosts "
            "(api.example.invalid)*",
        ]
    )
    assert read(sentinels) == ["getaddrinfo api.example.invalid"]


def test_while_recording_the_refusal_points_at_the_missing_transport(
    pytester: pytest.Pytester, sentinels: Path
) -> None:
    """The transport refuses a host outside sakura_record_hosts itself (RecordingForbidden), so
    a refusal by the guard means a request that bypassed every transport: adding its host to
    sakura_record_hosts would let it reach the network unrecorded."""
    pytester.makeini("[pytest]\nfilterwarnings = error\nsakura_record_hosts = 127.0.0.1\n")
    pytester.makepyfile(
        test_record="""
import socket

def test_bypass(sakura_fixtures):
    socket.getaddrinfo("other.example.invalid", 443)
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--record")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*blocked resolving other.example.invalid:443*did not go through a sakura transport*"]
    )
    assert read(sentinels) == []
