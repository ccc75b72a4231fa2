"""Lists of "host" or "host:port" entries (`sakura_http._hosts`): the one parser behind
`record_hosts`, `passthrough_hosts`, `sakura-http verify --record-host` and the network guard."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from sakura_http import CassetteMiss, RecordingForbidden, RecordingTransport
from sakura_http._hosts import HostList, split_host_entry


@pytest.mark.parametrize(
    ("entry", "split"),
    [
        ("api.example.test", ("api.example.test", None)),
        ("API.Example.TEST", ("api.example.test", None)),
        ("  api.example.test  ", ("api.example.test", None)),
        ("api.example.test:8443", ("api.example.test", 8443)),
        ("127.0.0.1:8000", ("127.0.0.1", 8000)),
        ("[::1]:8000", ("::1", 8000)),
        ("[::1]", ("::1", None)),
        ("::1", ("::1", None)),  # a bare IPv6 address: its last group is no port
        ("[2001:DB8::1]:443", ("2001:db8::1", 443)),
        ("api.example.test:http", ("api.example.test:http", None)),  # no port: a name
    ],
)
def test_an_entry_is_a_host_and_maybe_a_port(entry: str, split: tuple[str, int | None]) -> None:
    assert split_host_entry(entry) == split


def test_a_host_entry_allows_every_port() -> None:
    hosts = HostList(["api.example.test"])
    assert ("api.example.test", 443) in hosts
    assert ("api.example.test", 8080) in hosts
    assert ("api.example.test", None) in hosts
    assert ("other.example.test", 443) not in hosts
    assert ("sub.api.example.test", 443) not in hosts  # no suffix matching


def test_a_host_port_entry_allows_that_port_only() -> None:
    hosts = HostList(["api.example.test:8443", "[::1]:9000"])
    assert ("api.example.test", 8443) in hosts
    assert ("api.example.test", 443) not in hosts
    assert ("api.example.test", None) not in hosts
    assert ("::1", 9000) in hosts
    assert ("::1", 9001) not in hosts


def test_hosts_are_compared_without_case() -> None:
    assert ("API.EXAMPLE.test", 443) in HostList(["Api.Example.Test"])


def test_an_empty_list_is_false_and_holds_nothing() -> None:
    assert not HostList([])
    assert ("api.example.test", 443) not in HostList([])
    hosts = HostList(iter(["a.example.test", "b.example.test:81"]))  # any iterable, read once
    assert hosts
    assert hosts.entries == ("a.example.test", "b.example.test:81")
    assert ("b.example.test", 81) in hosts


def test_the_transport_reads_record_hosts_with_ports(tmp_path: Path) -> None:
    path = f"{tmp_path}/c.jsonl"
    outer = httpx.MockTransport(lambda request: httpx.Response(200))
    transport = RecordingTransport(
        path, outer=outer, mode="new_episodes", record_hosts=["api.example.test:8443"]
    )
    client = httpx.Client(transport=transport)
    assert client.get("https://api.example.test:8443/v1").status_code == 200
    with pytest.raises(RecordingForbidden) as caught:
        client.get("https://api.example.test/v1")  # port 443, not 8443
    assert caught.value.host == "api.example.test"


def test_the_transport_reads_passthrough_hosts_with_ports(tmp_path: Path) -> None:
    outer = httpx.MockTransport(lambda request: httpx.Response(200, text="live"))
    transport = RecordingTransport(
        f"{tmp_path}/c.jsonl", outer=outer, passthrough_hosts=["AUTH.example.test:8443"]
    )
    client = httpx.Client(transport=transport)
    assert client.get("https://auth.example.test:8443/token").text == "live"
    with pytest.raises(CassetteMiss):
        client.get("https://auth.example.test/token")  # another port: matched, and missing
