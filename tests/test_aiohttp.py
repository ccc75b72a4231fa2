"""`sakura_http.aiohttp.RecordingMiddleware`: aiohttp sessions on the cassette engine, against a
real server on 127.0.0.1 (asyncio: aiohttp runs on asyncio only)."""

from __future__ import annotations

import contextlib
import gzip
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import aiohttp.web
import httpx
import pytest

from sakura_http import (
    CassetteMiss,
    ConfigurationError,
    CredentialHeaderError,
    RecordingTransport,
    load_cassette,
)
from sakura_http.aiohttp import RecordingMiddleware
from tests.cli_support import run
from tests.client_support import (
    COOKIES,
    GZIPPED,
    ClientServer,
    closed_port_url,
    sse_events,
    start_client_server,
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def server() -> Iterator[ClientServer]:
    with start_client_server() as running:
        yield running


@pytest.fixture
def cassette(tmp_path: Path) -> Path:
    return tmp_path / "aiohttp.jsonl"


@contextlib.asynccontextmanager
async def opened(
    cassette: Path, **options: Any
) -> AsyncIterator[tuple[RecordingMiddleware, aiohttp.ClientSession]]:
    middleware = RecordingMiddleware(cassette, **options)
    async with middleware, session_on(middleware) as session:
        yield middleware, session


def session_on(middleware: RecordingMiddleware) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        middlewares=[middleware], cookie_jar=aiohttp.CookieJar(unsafe=True)
    )


@pytest.mark.anyio
async def test_records_then_replays_without_opening_a_connection(
    cassette: Path, server: ClientServer
) -> None:
    async with opened(cassette, mode="new_episodes") as (_, session):
        async with session.get(f"{server.url}/items", params={"q": "café"}) as live:
            got = await live.json()
        async with session.post(f"{server.url}/items", json={"name": "x", "n": 1}) as post:
            posted = await post.json()
    answered = len(server.requests)
    async with RecordingMiddleware(cassette) as middleware, session_on(middleware) as session:
        async with session.get(f"{server.url}/items", params={"q": "café"}) as replayed:
            assert replayed.status == 200 and replayed.reason == "OK"
            assert replayed.headers["content-type"] == "application/json"
            assert await replayed.json() == got
            replayed.raise_for_status()
        async with session.post(f"{server.url}/items", json={"n": 1, "name": "x"}) as again:
            assert await again.json() == posted
    assert len(server.requests) == answered  # no request reached the server


@pytest.mark.anyio
async def test_sse_replays_the_recorded_chunks(cassette: Path, server: ClientServer) -> None:
    async with (
        opened(cassette, mode="new_episodes") as (_, session),
        session.get(f"{server.url}/sse?n=3") as live,
    ):
        assert [c async for c in live.content.iter_any()] == sse_events(3)
    async with RecordingMiddleware(cassette) as middleware, session_on(middleware) as session:
        async with session.get(f"{server.url}/sse?n=3") as replayed:
            assert [c async for c in replayed.content.iter_any()] == sse_events(3)
        async with session.get(f"{server.url}/sse?n=3") as replayed:
            lines = [line async for line in replayed.content]
            assert lines[:3] == [b"event: tick\n", b'data: {"n": 1}\n', b"\n"]
        async with session.get(f"{server.url}/sse?n=3") as replayed:
            pieces = [c async for c in replayed.content.iter_chunked(5)]
            assert pieces[0] == b"event" and b"".join(pieces) == b"".join(sse_events(3))
        async with session.get(f"{server.url}/sse?n=3") as replayed:
            assert await replayed.text() == b"".join(sse_events(3)).decode()


@pytest.mark.anyio
async def test_a_miss_and_a_credential_refusal_say_what_to_do(
    cassette: Path, server: ClientServer
) -> None:
    middleware = RecordingMiddleware(cassette)
    async with session_on(middleware) as session:
        with pytest.raises(CassetteMiss) as miss:
            await session.get(f"{server.url}/never")
        with pytest.raises(CredentialHeaderError) as refused:
            await session.get(f"{server.url}/me", headers={"Authorization": "Bearer sk-test-9"})
    await middleware.aclose()
    assert 'pass mode="new_episodes" to RecordingMiddleware' in str(miss.value)
    assert 'RecordingMiddleware(..., secret_headers=["authorization"])' in str(refused.value)
    assert middleware.raised == [miss.value, refused.value]
    assert server.requests == []


@pytest.mark.anyio
async def test_secrets_are_sent_never_written(cassette: Path, server: ClientServer) -> None:
    async with (
        RecordingMiddleware(
            cassette, mode="new_episodes", secret_headers=["authorization"]
        ) as middleware,
        session_on(middleware) as session,
        session.get(f"{server.url}/me", headers={"Authorization": "Bearer sk-test-0002"}) as live,
    ):
        assert (await live.json())["headers"]["authorization"] == "Bearer sk-test-0002"
    text = cassette.read_text()
    assert "sk-test-0002" not in text and "<redacted>" in text


@pytest.mark.anyio
async def test_gzip_redirects_and_cookies(cassette: Path, server: ClientServer) -> None:
    async with opened(cassette, mode="new_episodes") as (_, session):
        async with session.get(f"{server.url}/gzip") as live:
            assert await live.read() == GZIPPED
        async with session.get(f"{server.url}/redirect") as redirected:
            assert [r.status for r in redirected.history] == [302]
        async with session.get(f"{server.url}/cookie"):
            pass
        jar = {c.key: c.value for c in session.cookie_jar}
    assert jar == COOKIES  # live: the real values
    text = cassette.read_text()
    assert all(value not in text for value in COOKIES.values())
    exchanges = load_cassette(cassette).exchanges
    assert exchanges[0].response_body == GZIPPED
    assert "content-encoding" not in dict(exchanges[0].response_headers)
    assert [e.status for e in exchanges[1:3]] == [302, 200]
    async with RecordingMiddleware(cassette) as middleware, session_on(middleware) as session:
        async with session.get(f"{server.url}/gzip") as replayed:
            assert await replayed.text() == GZIPPED.decode()
        async with session.get(f"{server.url}/redirect") as replayed:
            assert str(replayed.url) == f"{server.url}/echo?from=redirect"
            assert [r.status for r in replayed.history] == [302]
        async with session.get(f"{server.url}/cookie") as replayed:
            assert replayed.headers.getall("set-cookie") == ["<redacted>", "<redacted>"]


@pytest.mark.anyio
async def test_an_x_gzip_body_aiohttp_leaves_encoded_is_decoded_and_redacted(
    cassette: Path,
) -> None:
    # aiohttp decodes gzip, deflate, br and zstd only: an x-gzip body reaches the middleware
    # still compressed, where no redaction could search it unless it is decoded first.
    async def echo(request: aiohttp.web.Request) -> aiohttp.web.Response:
        body = gzip.compress(request.headers["Authorization"].encode(), mtime=0)
        return aiohttp.web.Response(body=body, headers={"Content-Encoding": "x-gzip"})

    app = aiohttp.web.Application()
    app.router.add_get("/me", echo)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        async with (
            opened(cassette, mode="new_episodes", secret_headers=["authorization"]) as (_, s),
            s.get(f"http://127.0.0.1:{port}/me", headers={"Authorization": "sk-xgz-0123"}) as live,
        ):
            assert await live.read() == b"sk-xgz-0123"  # live: decoded, as sent
            assert "content-encoding" not in live.headers
    finally:
        await runner.cleanup()
    (exchange,) = load_cassette(cassette).exchanges
    assert exchange.response_body == b"<redacted>"
    assert "content-encoding" not in dict(exchange.response_headers)


@pytest.mark.anyio
async def test_faults_are_recorded_and_replayed(cassette: Path) -> None:
    url = closed_port_url()
    async with (
        RecordingMiddleware(cassette, mode="new_episodes", record_errors=True) as middleware,
        session_on(middleware) as session,
    ):
        with pytest.raises(aiohttp.ClientConnectionError):
            await session.get(url)
    (exchange,) = load_cassette(cassette).exchanges
    assert exchange.error is not None and exchange.error.type == "ClientConnectorError"
    async with RecordingMiddleware(cassette) as middleware, session_on(middleware) as session:
        with pytest.raises(aiohttp.ClientConnectionError, match="recorded as"):
            await session.get(url)


@pytest.mark.anyio
async def test_mode_all_replaces_the_cassette_on_a_clean_close_only(
    cassette: Path, server: ClientServer
) -> None:
    async with opened(cassette, mode="new_episodes") as (_, session):
        (await session.get(f"{server.url}/old")).release()
    with pytest.raises(RuntimeError, match="the test failed"):
        async with opened(cassette, mode="all") as (_, session):
            (await session.get(f"{server.url}/new")).release()
            raise RuntimeError("the test failed")
    assert [e.url for e in load_cassette(cassette).exchanges] == [f"{server.url}/old"]
    async with opened(cassette, mode="all") as (_, session):
        (await session.get(f"{server.url}/new")).release()
    assert [e.url for e in load_cassette(cassette).exchanges] == [f"{server.url}/new"]


@pytest.mark.anyio
async def test_a_cassette_is_shared_with_an_httpx_client(
    cassette: Path, server: ClientServer
) -> None:
    async with opened(cassette, mode="new_episodes") as (_, session):
        (await session.post(f"{server.url}/shared", json={"n": 1})).release()
        (await session.get(f"{server.url}/shared")).release()
    answered = len(server.requests)
    transport = RecordingTransport(cassette, allow_repeats=False)
    async with (
        opened(cassette, allow_repeats=False) as (_, session),
        httpx.AsyncClient(transport=transport) as client,
    ):
        posted = await client.post(f"{server.url}/shared", json={"n": 1})
        assert posted.json()["body"] == '{"n": 1}'
        async with session.get(f"{server.url}/shared") as got:
            assert (await got.json())["path"] == "/shared"
        with pytest.raises(CassetteMiss, match="already played"):
            await session.post(f"{server.url}/shared", json={"n": 1})  # httpx played it
    assert len(server.requests) == answered


@pytest.mark.anyio
async def test_options_are_validated_and_a_closed_middleware_refuses(cassette: Path) -> None:
    with pytest.raises(TypeError, match="RecordingMiddleware"):
        RecordingMiddleware(cassette, made_up=True)  # type: ignore[call-arg]
    with pytest.raises(ConfigurationError, match="stream_through"):
        RecordingMiddleware(cassette, stream_through=True)
    middleware = RecordingMiddleware(cassette)
    await middleware.aclose()
    async with session_on(middleware) as session:
        with pytest.raises(RuntimeError, match="is closed"):
            await session.get("http://api.example.test/")


SAMPLES = Path(__file__).resolve().parent / "fixtures" / "convert"


@pytest.mark.anyio
async def test_a_vcrpy_cassette_recorded_through_aiohttp_converts_and_replays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # tweepy's AsyncClient: a POST with a json= body (vcrpy stored the mapping), then a DELETE;
    # the bodies stored decoded under a stale content-encoding, the bearer token filtered out.
    cassette = tmp_path / "tweets.jsonl"
    converted = run(capsys, "convert", SAMPLES / "vcr-tweepy-aiohttp-create.yaml", cassette)
    assert converted.code == 0, converted.err
    headers = {
        "User-Agent": "Python/3.11.7 aiohttp/3.14.5 Tweepy/4.14.0",
        "Authorization": "Bearer fake-bearer-token-0001",
    }
    url = "https://api.twitter.example.test/2/tweets"
    async with (
        RecordingMiddleware(cassette, secret_headers=["authorization"]) as middleware,
        session_on(middleware) as session,
    ):
        async with session.post(
            url, json={"text": "Hello from the cassette"}, headers=headers
        ) as r:
            assert (r.status, r.reason) == (201, "Created")
            created = (await r.json())["data"]
        assert created["text"] == "Hello from the cassette"
        async with session.delete(f"{url}/{created['id']}", headers=headers) as r:
            r.raise_for_status()
            assert await r.json() == {"data": {"deleted": True}}
        assert middleware.unplayed() == []
    assert b"fake-bearer-token" not in cassette.read_bytes()


FIXTURE_TEST = """
import pytest

@pytest.fixture
def anyio_backend():
    return "asyncio"

@pytest.mark.anyio
@pytest.mark.cassette("api.jsonl")
@pytest.mark.anyio
async def test_api(sakura_aiohttp):
    async with sakura_aiohttp.get("{url}/items", params={"page": "1"}) as response:
        assert (await response.json())["path"] == "/items?page=1"
    async with sakura_aiohttp.get("{url}/sse?n=2") as events:
        assert len([chunk async for chunk in events.content.iter_any()]) == 2

@pytest.mark.anyio
@pytest.mark.cassette("api.jsonl")
@pytest.mark.anyio
async def test_swallowed_miss(sakura_aiohttp):
    try:
        await sakura_aiohttp.get("{url}/never")
    except Exception:
        pass

@pytest.mark.anyio
@pytest.mark.cassette("api.jsonl", assert_all_played=True)
async def test_unplayed(sakura_aiohttp):
    async with sakura_aiohttp.get("{url}/items", params={"page": "1"}) as response:
        await response.read()

@pytest.mark.anyio
@pytest.mark.cassette("api.jsonl", expect_errors=True)
async def test_expected_miss(sakura_aiohttp):
    with pytest.raises(Exception):
        await sakura_aiohttp.get("{url}/never")
"""


def test_the_fixture_records_replays_and_checks_as_sakura_transport(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nfilterwarnings = error\nsakura_record_hosts = 127.0.0.1\n")
    with start_client_server() as running:
        pytester.makepyfile(test_app=FIXTURE_TEST.replace("{url}", running.url))
        recorded = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", "--record", "-k", "test_api"
        )
        recorded.assert_outcomes(passed=1)
        recorded.stdout.fnmatch_lines(
            [
                "*= sakura-http: cassettes recorded =*",
                "tests/fixtures/api.jsonl: 2 exchanges appended",
                "Review the changes before committing: git diff tests/fixtures*",
            ]
        )
    assert len(running.requests) == 2
    replayed = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    replayed.assert_outcomes(passed=4, errors=2)  # the swallowed miss and test_unplayed
    replayed.stdout.fnmatch_lines(
        [
            "*the code under test caught 1 sakura-http error(s)*",
            "*sakura_http.CassetteMiss: GET http://127.0.0.1:*/never is not in the cassette*",
            "*1 recorded exchange(s) of *api.jsonl were not played (assert_all_played=True):",
            "  GET http://127.0.0.1:*/sse?n=2 -> 200",
        ]
    )
    assert "sakura-http: cassettes recorded" not in replayed.stdout.str()


UNUSED_TEST = """
import pytest

@pytest.fixture
def anyio_backend():
    return "asyncio"

@pytest.mark.anyio
async def test_never_used(sakura_aiohttp):
    pass
"""


def test_the_fixture_fails_a_test_that_never_used_it_without_a_cassette(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nfilterwarnings = error\n")
    pytester.makepyfile(test_app=UNUSED_TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*sakura_aiohttp: no request went through the sakura_aiohttp session, and its "
            "cassette *test_never_used.jsonl does not exist*"
            "(async with sakura_aiohttp.get(...))*patch_clients=True*"
        ]
    )


@pytest.mark.anyio
async def test_show_diff_and_lint_read_requests_and_aiohttp_cassettes(
    tmp_path: Path, server: ClientServer, capsys: pytest.CaptureFixture[str]
) -> None:
    import requests

    from sakura_http.requests import RecordingAdapter

    by_requests, by_aiohttp = tmp_path / "requests.jsonl", tmp_path / "aiohttp.jsonl"
    with RecordingAdapter(by_requests, mode="new_episodes") as adapter, requests.Session() as s:
        s.mount("http://", adapter)
        assert s.get(f"{server.url}/status/200", params={"q": "1"}).text == "status"
        assert s.post(f"{server.url}/status/201", json={"a": 1}).status_code == 201
    async with opened(by_aiohttp, mode="new_episodes") as (_, session):
        async with session.get(f"{server.url}/status/200", params={"q": "1"}) as response:
            assert await response.text() == "status"
        async with session.post(f"{server.url}/status/201", json={"a": 2}) as response:
            assert response.status == 201

    for cassette in (by_requests, by_aiohttp):
        shown = run(capsys, "show", cassette)
        assert shown.code == 0, shown.err
        assert "GET" in shown.out and f"{server.url}/status/200?q=1" in shown.out
        assert "2 exchanges; 1 x 200, 1 x 201" in shown.out
        linted = run(capsys, "lint", cassette)
        assert linted.code == 0, linted.out
        assert "1 file checked: 0 errors, 0 warnings" in linted.out
    diffed = run(capsys, "diff", by_requests, by_aiohttp)
    assert diffed.code == 1, diffed.err  # (differences found, as diff(1) says)
    assert "0 added, 0 removed, 2 changed, 0 unchanged" in diffed.out
    # The GET differs only in headers each client sets itself: not a changed request.
    assert f"changed #1 GET {server.url}/status/200?q=1 -> 200\n" in diffed.out
    assert "request header user-agent: 'python-requests/" in diffed.out
    assert f"changed #2 POST {server.url}/status/201 -> 201" in diffed.out
    assert '-  "a": 1' in diffed.out and '+  "a": 2' in diffed.out


@pytest.mark.anyio
async def test_a_body_echoing_its_own_secret_query_value_replays(
    cassette: Path, server: ClientServer
) -> None:
    # Written with the echo as <redacted>, it must match as written (it missed on replay).
    secret = "sk-query-echo-0123456789abcdef"
    url, body = f"{server.url}/items?api_key={secret}", {"key": secret}
    async with (
        opened(cassette, mode="new_episodes") as (_, session),
        session.post(url, json=body) as live,
    ):
        assert live.status == 200
    assert secret not in cassette.read_text()
    async with opened(cassette) as (_, session), session.post(url, json=body) as again:
        assert again.status == 200
