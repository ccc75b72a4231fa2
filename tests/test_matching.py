"""URL canonicalization and secret query parameters (`_matching`), and what the transport
writes and matches because of them."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from sakura_http import DEFAULT_SECRET_QUERY_PARAMS, RecordingTransport, canonical_url


@pytest.mark.parametrize(
    ("url", "canonical"),
    [
        ("HTTPS://API.Example.TEST/v1/Items", "https://api.example.test/v1/Items"),
        ("https://api.example.test:443/x", "https://api.example.test/x"),
        ("http://api.example.test:80/x", "http://api.example.test/x"),
        ("http://api.example.test:8080/x", "http://api.example.test:8080/x"),
        ("https://alice:hunter2@api.example.test/x", "https://api.example.test/x"),
        ("https://bücher.example/x", "https://xn--bcher-kva.example/x"),
        ("http://[::1]:80/x", "http://[::1]/x"),
        ("https://h.example/a%7eb%2fc?q=%41%2a", "https://h.example/a~b%2Fc?q=A%2A"),
        ("https://h.example/p?b=2&a=1&b=1", "https://h.example/p?b=2&a=1&b=1"),
    ],
)
def test_canonical_url(url: str, canonical: str) -> None:
    assert canonical_url(url) == canonical


def test_secret_query_values_are_redacted_by_name() -> None:
    url = "https://h.example/p?Key=AIzaSyFAKE&x=1&token=t&token=u&api_key"
    assert canonical_url(url, DEFAULT_SECRET_QUERY_PARAMS) == (
        "https://h.example/p?Key=<redacted>&x=1&token=<redacted>&token=<redacted>&api_key"
    )


def test_a_proxy_view_and_a_client_view_match() -> None:
    # What a proxy rebuilds from the request line and Host header, and what httpx sends.
    seen_by_proxy = "http://API.example.test:80/v1/items?x=%7e"
    sent_by_client = str(httpx.URL("http://api.example.test/v1/items?x=~"))
    assert canonical_url(seen_by_proxy) == canonical_url(sent_by_client)


def test_credentials_in_urls_never_reach_the_cassette(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    outer = httpx.MockTransport(lambda request: httpx.Response(200, text="ok"))
    url = "https://alice:hunter2@api.example.test/x?key=AIzaSyFAKE-KEY-0123456789&page=2"
    with RecordingTransport(
        path, outer=outer, mode="new_episodes", secret_headers=["authorization"]
    ) as transport:
        assert httpx.Client(transport=transport).get(url).text == "ok"
    data = path.read_bytes()
    assert b"hunter2" not in data
    assert b"alice" not in data
    assert b"AIzaSyFAKE" not in data
    recorded = json.loads(data.splitlines()[1])
    assert recorded["url"] == "https://api.example.test/x?key=<redacted>&page=2"
    # Replay matches whatever key is sent now, and never prints it in a miss.
    with RecordingTransport(path, secret_headers=["authorization"]) as replay:
        client = httpx.Client(transport=replay)
        other = "https://bob:pw2@api.example.test/x?key=ANOTHER-KEY-value&page=2"
        assert client.get(other).text == "ok"
        with pytest.raises(Exception) as caught:
            client.get("https://api.example.test/x?key=ANOTHER-KEY-value&page=3")
        assert "ANOTHER-KEY-value" not in str(caught.value)
