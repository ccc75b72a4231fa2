"""Where a proxied request goes (`sakura_http.proxy._routing`), without a socket: the URL each
mode sends and records a request target under, and the 400 message of one that does not fit."""

from __future__ import annotations

import httpx
import pytest

from sakura_http._config import CassetteConfig
from sakura_http.proxy._routing import BadRequest, Routing

SECRETS = CassetteConfig().secret_query_params


def reverse(upstream: str) -> Routing:
    return Routing(httpx.URL(upstream), None, SECRETS)


NAMED = Routing(
    None,
    {"pay": httpx.URL("https://pay.example"), "geo": httpx.URL("https://geo.example/v2")},
    SECRETS,
)
FORWARD = Routing(None, None, SECRETS)


@pytest.mark.parametrize(
    ("upstream", "target", "url"),
    [
        ("https://api.example", "/v1/items?page=1", "https://api.example/v1/items?page=1"),
        ("https://h.example/api", "/v1", "https://h.example/api/v1"),  # the prefix is kept
        ("https://h.example/api/", "/v1", "https://h.example/api/v1"),
        ("http://127.0.0.1:8080", "/", "http://127.0.0.1:8080/"),
    ],
)
def test_reverse_mode_sends_a_path_under_the_upstream(upstream: str, target: str, url: str) -> None:
    routing = reverse(upstream)
    assert routing.reverse
    assert routing.url(target, None) == httpx.URL(url)


def test_reverse_mode_refuses_an_absolute_form_request_naming_its_flag() -> None:
    with pytest.raises(BadRequest) as caught:
        reverse("https://api.example").url("http://other.example/x", None)
    assert str(caught.value) == (
        "this proxy runs in reverse mode (--upstream https://api.example): send requests for "
        "paths (GET /path), not 'http://other.example/x'"
    )


@pytest.mark.parametrize(
    ("target", "url"),
    [
        ("/pay/v1/x", "https://pay.example/v1/x"),
        ("/geo/cities?q=a", "https://geo.example/v2/cities?q=a"),
        ("/geo", "https://geo.example/v2/"),
        ("/geo?q=a", "https://geo.example/v2/?q=a"),
    ],
)
def test_named_upstreams_are_chosen_by_the_first_path_segment(target: str, url: str) -> None:
    assert NAMED.reverse
    assert NAMED.url(target, None) == httpx.URL(url)


def test_an_unknown_prefix_names_the_ones_served() -> None:
    with pytest.raises(BadRequest) as caught:
        NAMED.url("/maps/v1", None)
    assert str(caught.value) == (
        "no upstream is named 'maps' (in '/maps/v1'): this proxy serves /pay/... for "
        "https://pay.example, /geo/... for https://geo.example/v2; send the request under one "
        "of these prefixes, or start the proxy with another --upstream NAME=URL"
    )
    assert NAMED.reverse_flags() == (
        "--upstream pay=https://pay.example --upstream geo=https://geo.example/v2"
    )


def test_forward_mode_sends_an_absolute_url_as_it_is() -> None:
    assert not FORWARD.reverse
    url = FORWARD.url("http://www.example:8080/a?b=1", None)
    assert url == httpx.URL("http://www.example:8080/a?b=1")


def test_inside_a_tunnel_a_path_goes_to_the_tunnel_s_origin() -> None:
    origin = httpx.URL(scheme="https", host="www.example", port=443)
    assert FORWARD.url("/index.html", origin) == httpx.URL("https://www.example/index.html")


def test_forward_mode_refuses_a_path_and_says_how_to_stand_in_for_a_server() -> None:
    with pytest.raises(BadRequest) as caught:
        FORWARD.url("/v1/items", None)
    assert str(caught.value) == (
        "this proxy runs in forward mode: send absolute-form requests (GET http://host/path, "
        "as clients do with HTTP_PROXY set) or CONNECT, not '/v1/items'; to stand in for one "
        "server, start it with --upstream URL"
    )


@pytest.mark.parametrize("target", ["ftp://files.example/a", "http:///no-host"])
def test_forward_mode_proxies_only_http_and_https_urls(target: str) -> None:
    with pytest.raises(BadRequest, match=r"only http:// and https:// URLs$"):
        FORWARD.url(target, None)


@pytest.mark.parametrize(
    ("routing", "target"),
    [
        (FORWARD, "/v1/items?token=s3cr3t-value"),
        (reverse("https://api.example"), "http://other.example/x?token=s3cr3t-value"),
        (NAMED, "/maps/v1?token=s3cr3t-value"),
    ],
)
def test_a_refusal_never_shows_a_secret_query_value(routing: Routing, target: str) -> None:
    with pytest.raises(BadRequest) as caught:
        routing.url(target, None)
    assert "s3cr3t-value" not in str(caught.value)
    assert "token=" in str(caught.value)
