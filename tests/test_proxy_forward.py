"""The recording proxy in forward mode: ``HTTP_PROXY`` / ``HTTPS_PROXY`` clients, http and https.

Each client (curl, urllib.request, requests, httpx with ``proxy=``) records through the proxy
from a real upstream on 127.0.0.1 (https with a trustme certificate, verified by the proxy), then
replays with the upstream stopped.  https goes through ``CONNECT``, intercepted with a leaf
certificate from the proxy's CA in a temporary folder.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests

from sakura_http import RecordingTransport
from sakura_http.proxy import Proxy, serve
from tests.proxy_support import HANG_GUARD, start_upstream

CURL = shutil.which("curl")


@pytest.fixture(autouse=True)
def _no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # Proxies and bypass lists from the developer's shell must not reroute the test clients.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture(params=["http", "https"])
def scheme(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def exchanges(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[1:]]


# --- one function per client: GET and POST through the proxy, return (status, body) pairs ----


def with_curl(proxy: Proxy, base: str) -> list[tuple[int, bytes]]:
    assert CURL is not None
    env = {**os.environ, **proxy.env()}
    out = []
    for extra in ([], ["-X", "POST", "-H", "content-type: application/json", "-d", '{"a":1}']):
        result = subprocess.run(
            [CURL, "-sS", "-w", "\n%{http_code}", *extra, f"{base}/v1/curl?x=1"],
            env=env,
            capture_output=True,
            timeout=HANG_GUARD,
            check=True,
        )
        body, _, status = result.stdout.rpartition(b"\n")
        out.append((int(status), body))
    return out


def with_urllib(proxy: Proxy, base: str) -> list[tuple[int, bytes]]:
    assert proxy.ca_cert is not None
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({"http": proxy.url, "https": proxy.url}),
        urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=proxy.ca_cert)),
    )
    out = []
    for data in (None, b'{"a":1}'):
        request = urllib.request.Request(
            f"{base}/v1/urllib?x=1", data=data, headers={"content-type": "application/json"}
        )
        with opener.open(request, timeout=HANG_GUARD) as response:
            out.append((response.status, response.read()))
    return out


def with_requests(proxy: Proxy, base: str) -> list[tuple[int, bytes]]:
    with requests.Session() as session:
        session.trust_env = False
        session.proxies = {"http": proxy.url, "https": proxy.url}
        session.verify = str(proxy.ca_cert)
        first = session.get(f"{base}/v1/requests?x=1", timeout=HANG_GUARD)
        second = session.post(f"{base}/v1/requests?x=1", data=b'{"a":1}', timeout=HANG_GUARD)
    return [(r.status_code, r.content) for r in (first, second)]


def with_httpx(proxy: Proxy, base: str) -> list[tuple[int, bytes]]:
    assert proxy.ca_cert is not None
    verify = ssl.create_default_context(cafile=proxy.ca_cert)
    with httpx.Client(proxy=proxy.url, verify=verify, timeout=HANG_GUARD) as http:
        first = http.get(f"{base}/v1/httpx?x=1")
        second = http.post(f"{base}/v1/httpx?x=1", json={"a": 1})
    return [(r.status_code, r.content) for r in (first, second)]


CLIENTS: dict[str, Callable[[Proxy, str], list[tuple[int, bytes]]]] = {
    "curl": with_curl,
    "urllib": with_urllib,
    "requests": with_requests,
    "httpx": with_httpx,
}


@pytest.fixture(params=list(CLIENTS))
def client(request: pytest.FixtureRequest) -> Callable[[Proxy, str], list[tuple[int, bytes]]]:
    if request.param == "curl" and CURL is None:
        pytest.skip("curl is not installed")
    return CLIENTS[request.param]


def test_record_then_replay_offline(
    tmp_path: Path, scheme: str, client: Callable[[Proxy, str], list[tuple[int, bytes]]]
) -> None:
    cassette = tmp_path / "forward.jsonl"
    ca_dir = tmp_path / "ca"
    with start_upstream(tls=scheme == "https", folder=tmp_path) as upstream:
        verify = upstream.ca_file or True
        with serve(cassette, mode="new_episodes", ca_dir=ca_dir, verify=verify) as proxy:
            live = client(proxy, upstream.url)
        assert [method for method, _, _ in upstream.requests] == ["GET", "POST"]
        base = upstream.url
    assert [status for status, _ in live] == [200, 200]
    assert json.loads(live[1][1])["body"] == '{"a":1}'
    lines = exchanges(cassette)
    assert [line["url"].split("?")[0].rsplit("/", 2)[0] for line in lines] == [base, base]
    for line in lines:
        names = [name for name, _ in line["headers"]]
        assert "proxy-connection" not in names and "proxy-authorization" not in names

    # The upstream is gone: the replay is offline.
    with serve(cassette, ca_dir=ca_dir) as proxy:
        assert client(proxy, base) == live
    assert len(exchanges(cassette)) == 2


def test_httpx_through_the_forward_proxy_records_the_in_process_cassette(
    tmp_path: Path, scheme: str
) -> None:
    through_proxy = tmp_path / "proxy.jsonl"
    in_process = tmp_path / "in-process.jsonl"
    with start_upstream(tls=scheme == "https", folder=tmp_path) as upstream:
        verify = upstream.ssl_context() if upstream.ca_file else True
        with serve(
            through_proxy, mode="new_episodes", ca_dir=tmp_path / "ca", verify=verify
        ) as proxy:
            with_httpx(proxy, upstream.url)
        outer = httpx.HTTPTransport(verify=verify)
        transport = RecordingTransport(in_process, mode="new_episodes", outer=outer)
        with httpx.Client(transport=transport) as http:
            http.get(f"{upstream.url}/v1/httpx?x=1")
            http.post(f"{upstream.url}/v1/httpx?x=1", json={"a": 1})
    assert through_proxy.read_bytes() == in_process.read_bytes()


def test_a_client_that_does_not_trust_the_ca_fails_alone(tmp_path: Path) -> None:
    cassette = tmp_path / "untrusted.jsonl"
    with (
        start_upstream(tls=True, folder=tmp_path) as upstream,
        serve(
            cassette, mode="new_episodes", ca_dir=tmp_path / "ca", verify=upstream.ca_file
        ) as proxy,
    ):
        with (
            httpx.Client(proxy=proxy.url, timeout=HANG_GUARD) as http,
            pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"),
        ):
            http.get(f"{upstream.url}/v1/refused")  # the system CAs do not know ours
        assert with_httpx(proxy, upstream.url)[0][0] == 200
    assert [line["url"].split("?")[0] for line in exchanges(cassette)] == [
        f"{upstream.url}/v1/httpx",
        f"{upstream.url}/v1/httpx",
    ]


def test_a_miss_inside_a_tunnel_answers_502(tmp_path: Path) -> None:
    with (
        start_upstream(tls=True, folder=tmp_path) as upstream,
        serve(tmp_path / "empty.jsonl", ca_dir=tmp_path / "ca") as proxy,
    ):
        assert proxy.ca_cert is not None
        verify = ssl.create_default_context(cafile=proxy.ca_cert)
        with httpx.Client(proxy=proxy.url, verify=verify, timeout=HANG_GUARD) as http:
            response = http.get(f"{upstream.url}/v1/missing")
    assert response.status_code == 502
    assert response.headers["x-sakura-http-error"] == "miss"
    assert f"GET {upstream.url}/v1/missing is not in the cassette" in response.text
    assert upstream.requests == []


def test_origin_form_requests_are_refused_in_forward_mode(tmp_path: Path) -> None:
    with serve(tmp_path / "a.jsonl", ca_dir=tmp_path / "ca") as proxy:
        response = httpx.get(f"{proxy.url}/v1/x", timeout=HANG_GUARD)
    assert response.status_code == 400
    assert "forward mode" in response.text and "--upstream" in response.text


def test_passthrough_hosts_are_forwarded_but_not_recorded(tmp_path: Path) -> None:
    cassette = tmp_path / "pass.jsonl"
    with (
        start_upstream() as upstream,
        serve(
            cassette, ca_dir=tmp_path / "ca", passthrough_hosts=[f"127.0.0.1:{upstream.port}"]
        ) as proxy,
    ):
        assert with_httpx(proxy, upstream.url)[0][0] == 200
    assert not cassette.exists()


def test_env_sends_a_subprocess_through_the_proxy(tmp_path: Path) -> None:
    with serve(tmp_path / "a.jsonl", ca_dir=tmp_path / "ca") as proxy:
        env = proxy.env()
    assert env["HTTPS_PROXY"] == env["http_proxy"] == proxy.url
    assert env["NO_PROXY"] == env["no_proxy"] == ""
    assert env["HTTP_PROXY"] == env["https_proxy"] == proxy.url  # curl reads http_proxy only
    assert env["NODE_USE_ENV_PROXY"] == "1"  # Node 24's fetch and https ignore them without it
    assert proxy.ca_cert == tmp_path / "ca" / "sakura-http-ca-cert.pem"
    for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"):
        assert env[name] == str(proxy.ca_cert)
    with serve(tmp_path / "a.jsonl", upstream="https://api.example") as proxy:
        assert proxy.env() == {"NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
        assert proxy.ca_cert is None


def test_a_tls_client_that_hangs_up_mid_handshake_costs_one_connection(tmp_path: Path) -> None:
    with (
        start_upstream() as upstream,
        serve(tmp_path / "a.jsonl", mode="new_episodes", ca_dir=tmp_path / "ca") as proxy,
    ):
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=HANG_GUARD) as sock:
            sock.sendall(b"CONNECT upstream.test:443 HTTP/1.1\r\nHost: upstream.test:443\r\n\r\n")
            assert sock.recv(1024).startswith(b"HTTP/1.1 200")
            sock.sendall(b"\x16\x03\x01\x00\x05hello")  # a torn ClientHello, then gone
        assert with_httpx(proxy, upstream.url)[0][0] == 200


def test_ambiguous_framing_inside_a_tunnel_is_refused_and_the_tunnel_closed(
    tmp_path: Path,
) -> None:
    smuggled = b"GET /v1/smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
    with (
        start_upstream(tls=True, folder=tmp_path) as upstream,
        serve(
            tmp_path / "a.jsonl", mode="new_episodes", ca_dir=tmp_path / "ca",
            verify=upstream.ca_file,
        ) as proxy,
    ):  # fmt: skip
        assert proxy.ca_cert is not None
        authority = f"127.0.0.1:{upstream.port}".encode()
        context = ssl.create_default_context(cafile=proxy.ca_cert)
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=HANG_GUARD) as sock:
            sock.sendall(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority, authority))
            assert sock.recv(1024).startswith(b"HTTP/1.1 200")
            with context.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
                tls.sendall(
                    b"POST /v1/a HTTP/1.1\r\nHost: %s\r\nContent-Length: 5\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n%s" % (authority, smuggled)
                )
                answer = b""
                while chunk := tls.recv(65536):
                    answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert answer.count(b"HTTP/1.1 ") == 1
    assert b"\r\nconnection: close\r\n" in answer
    assert upstream.requests == []


def test_a_tunnel_without_a_tls_handshake_is_closed(tmp_path: Path) -> None:
    with (
        serve(tmp_path / "a.jsonl", ca_dir=tmp_path / "ca", header_timeout=0.3) as proxy,
        socket.create_connection(("127.0.0.1", proxy.port), timeout=HANG_GUARD) as sock,
    ):
        sock.sendall(b"CONNECT upstream.test:443 HTTP/1.1\r\nHost: upstream.test:443\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):  # the 200, then the close: no ClientHello came
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 ")


def test_plain_http_inside_a_connect_tunnel_is_served_as_http(tmp_path: Path) -> None:
    # undici's EnvHttpProxyAgent (Node) opens a CONNECT tunnel for http:// URLs too, and
    # speaks plain HTTP inside it: the proxy must not insist on a TLS handshake.
    cassette = tmp_path / "tunnel.jsonl"
    with (
        start_upstream() as upstream,
        serve(cassette, mode="new_episodes", ca_dir=tmp_path / "ca") as proxy,
        socket.create_connection(("127.0.0.1", proxy.port), timeout=HANG_GUARD) as sock,
    ):
        authority = f"127.0.0.1:{upstream.port}".encode()
        sock.sendall(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority, authority))
        assert sock.recv(1024).startswith(b"HTTP/1.1 200")
        sock.sendall(b"GET /v1/plain HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % authority)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert [line["url"] for line in exchanges(cassette)] == [f"{upstream.url}/v1/plain"]


def test_the_health_check_in_forward_mode_and_not_inside_a_tunnel(tmp_path: Path) -> None:
    cassette = tmp_path / "health.jsonl"
    with (
        start_upstream() as upstream,
        serve(cassette, mode="new_episodes", ca_dir=tmp_path / "ca") as proxy,
    ):
        own = httpx.get(f"{proxy.url}/__sakura-http/health", timeout=HANG_GUARD)
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=HANG_GUARD) as sock:
            authority = f"127.0.0.1:{upstream.port}".encode()
            sock.sendall(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority, authority))
            assert sock.recv(1024).startswith(b"HTTP/1.1 200")
            sock.sendall(
                b"GET /__sakura-http/health HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
                % authority
            )
            tunnelled = b""
            while chunk := sock.recv(65536):
                tunnelled += chunk
    assert own.status_code == 200 and own.json() == {"status": "ready", "mode": "new_episodes"}
    # In a tunnel the path belongs to the host tunnelled to: forwarded and recorded.
    assert b'"path": "/__sakura-http/health"' in tunnelled
    assert [path for _, path, _ in upstream.requests] == ["/__sakura-http/health"]
    assert [line["url"] for line in exchanges(cassette)] == [f"{upstream.url}/__sakura-http/health"]


def test_each_tunnel_has_its_upstream_connection_of_its_own(tmp_path: Path) -> None:
    # A CONNECT tunnel is one client connection to one origin: its requests go upstream over a
    # connection of its own, closed with the tunnel, as the client's keep-alive goes.  (One
    # pool for every tunnel made each request look over all the idle connections: with 32
    # clients, recording cost three times the CPU per request it costs with one.)
    with start_upstream(tls=True, folder=tmp_path) as upstream:
        with serve(
            tmp_path / "tunnels.jsonl", mode="new_episodes", ca_dir=tmp_path / "ca",
            verify=upstream.ssl_context(),
        ) as proxy:  # fmt: skip
            assert proxy.ca_cert is not None
            verify = ssl.create_default_context(cafile=proxy.ca_cert)
            for tunnel in range(2):  # one after the other: a shared pool would reuse one
                with httpx.Client(proxy=proxy.url, verify=verify, timeout=HANG_GUARD) as http:
                    for n in range(3):
                        assert http.get(f"{upstream.url}/v1/{tunnel}/{n}").status_code == 200
        assert len(upstream.requests) == 6
        assert len(upstream.connections) == 2
