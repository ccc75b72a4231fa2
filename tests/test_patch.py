"""`ClientPatch` (sakura_http/pytest_plugin/_patch.py) on its own: httpx and httpx2 clients, sync
and async (asyncio, trio), requests and aiohttp sessions (asyncio), recording from a real server
on 127.0.0.1 and replaying without it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import pytest

from sakura_http import CassetteMiss, RecordingTransport
from sakura_http.pytest_plugin._patch import ClientPatch
from tests.client_support import ClientServer, start_client_server
from tests.servers import LocalServer


@pytest.fixture(params=["sync", "asyncio", "trio"])
def flavor(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def get(lib: ModuleType, flavor: str, url: str, client: Any = None, **options: Any) -> Any:
    """GET `url` with `client` (or a new client built with `options`), return the JSON."""
    if flavor == "sync":
        own = client or lib.Client(**options)
        response = own.get(url)
        if client is None:
            own.close()
        return response.json()

    async def go() -> Any:
        async with lib.AsyncClient(**options) as own:
            return (await own.get(url)).json()

    return anyio.run(go, backend=flavor)


def network(lib: ModuleType, flavor: str) -> Any:
    return lib.HTTPTransport() if flavor == "sync" else lib.AsyncHTTPTransport()


def patched(path: Path, mode: str) -> ClientPatch:
    return ClientPatch(RecordingTransport(path, mode=mode, outer=ClientPatch.outer()))


def three_clients(lib: ModuleType, flavor: str, url: str) -> list[Any]:
    """GET through a default client, one given HTTPTransport, and one with a mounted one."""
    return [
        get(lib, flavor, f"{url}/default"),
        get(lib, flavor, f"{url}/explicit", transport=network(lib, flavor)),
        get(lib, flavor, f"{url}/mounted", mounts={"http://": network(lib, flavor)}),
    ]


def test_default_explicit_and_mounted_transports_record_then_replay(
    lib: ModuleType, flavor: str, echo_server: LocalServer, tmp_path: Path
) -> None:
    path = tmp_path / "patched.jsonl"
    recording = patched(path, "new_episodes")
    with recording.installed():
        live = three_clients(lib, flavor, echo_server.url)
    recording.recording.close()
    assert len(echo_server.requests) == 3

    replay = patched(path, "none")
    with replay.installed():
        replayed = three_clients(lib, flavor, echo_server.url)
    replay.recording.close()
    assert replayed == live
    assert len(echo_server.requests) == 3  # nothing reached the server


def test_other_transports_are_left_alone(
    lib: ModuleType, flavor: str, echo_server: LocalServer, tmp_path: Path
) -> None:
    patch = patched(tmp_path / "empty.jsonl", "none")  # would miss anything sent through it
    (tmp_path / "own.jsonl").write_text(
        '{"schema_version":"1.0","kind":"cassette"}\n'
        '{"method":"GET","url":"http://own.example.test/","headers":[["accept","*/*"]],'
        '"body":"","status":200,"response_headers":[],"response_body":"{\\"own\\": 1}"}\n'
    )
    own = RecordingTransport(tmp_path / "own.jsonl")
    mock = lib.MockTransport(lambda request: lib.Response(200, json={"mock": 1}))
    with patch.installed():
        assert get(lib, flavor, "http://mock.example.test/", transport=mock) == {"mock": 1}
        assert get(lib, flavor, "http://own.example.test/", transport=own) == {"own": 1}
    assert patch.recording.raised == []
    assert echo_server.requests == []


def test_clients_built_before_are_patched_and_restored_after(
    lib: ModuleType, echo_server: LocalServer, tmp_path: Path
) -> None:
    client = lib.Client()  # built before the patch, as a module-level client of an app is
    url = f"{echo_server.url}/early"
    patch = patched(tmp_path / "early.jsonl", "new_episodes")
    with patch.installed():
        assert get(lib, "sync", url, client=client)["count"] == 1
    patch.recording.close()
    assert patch.recording.appended == 1  # it went through the cassette
    assert get(lib, "sync", url, client=client)["count"] == 2  # live again, the same client
    assert patch.recording.appended == 1
    client.close()


def test_the_patch_is_undone_when_the_block_raises(lib: ModuleType, tmp_path: Path) -> None:
    before = [cls.__dict__["_transport_for_url"] for cls in (lib.Client, lib.AsyncClient)]
    patch = patched(tmp_path / "x.jsonl", "none")
    with pytest.raises(RuntimeError, match="boom"), patch.installed():
        assert lib.Client.__dict__["_transport_for_url"] is not before[0]
        raise RuntimeError("boom")
    after = [cls.__dict__["_transport_for_url"] for cls in (lib.Client, lib.AsyncClient)]
    assert after == before


def test_a_renamed_hook_is_an_error_not_silence(
    lib: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delattr(lib.AsyncClient, "_transport_for_url")
    before = [cls.__dict__.get("_transport_for_url") for cls in (lib.Client, lib.AsyncClient)]
    patch = patched(tmp_path / "x.jsonl", "none")
    renamed = r"patch_clients needs .*AsyncClient\._transport_for_url"
    with pytest.raises(RuntimeError, match=renamed), patch.installed():
        pass  # pragma: no cover - never entered
    after = [cls.__dict__.get("_transport_for_url") for cls in (lib.Client, lib.AsyncClient)]
    assert after == before  # what was patched before the error is restored


def _sdk_retries() -> dict[type, Any]:
    import anthropic
    import openai

    owners = {}
    for client_class in (
        anthropic.Anthropic,
        anthropic.AsyncAnthropic,
        openai.OpenAI,
        openai.AsyncOpenAI,
    ):
        owner = next(c for c in client_class.__mro__ if "_sleep_for_retry" in c.__dict__)
        owners[owner] = owner.__dict__["_sleep_for_retry"]
    return owners


def test_the_sdks_retries_are_wrapped_for_the_block_and_restored(tmp_path: Path) -> None:
    before = _sdk_retries()
    assert len(before) == 4  # the sync and async base clients of each SDK
    patch = patched(tmp_path / "x.jsonl", "none")
    with pytest.raises(RuntimeError, match="boom"), patch.installed():
        for owner, original in before.items():
            assert owner.__dict__["_sleep_for_retry"].__wrapped__ is original
        raise RuntimeError("boom")
    assert _sdk_retries() == before


def test_an_sdk_without_the_retry_method_is_left_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for owner in _sdk_retries():
        monkeypatch.delattr(owner, "_sleep_for_retry")
    with patched(tmp_path / "x.jsonl", "none").installed():  # misses are then retried as before
        pass


# --- requests and aiohttp sessions ------------------------------------------------------------


@pytest.fixture
def client_server() -> Iterator[ClientServer]:
    with start_client_server() as running:
        yield running


def requests_calls(url: str, early: Any) -> list[Any]:
    """GET through a session built before the patch, ``requests.get`` (a session of its own),
    and a session whose HTTPAdapter retries; POST a JSON body."""
    import requests
    import requests.adapters

    retrying = requests.Session()
    retrying.mount("http://", requests.adapters.HTTPAdapter(max_retries=2))
    with retrying:
        return [
            early.get(f"{url}/early").json()["path"],
            requests.get(f"{url}/module", params={"q": "1"}, timeout=30).json()["path"],
            retrying.get(f"{url}/retrying").json()["path"],
            requests.post(f"{url}/post", json={"a": 1}, timeout=30).json()["body"],
        ]


def test_requests_sessions_record_then_replay_through_the_patch(
    client_server: ClientServer, tmp_path: Path
) -> None:
    import requests

    path = tmp_path / "requests.jsonl"
    early = requests.Session()  # built before the patch, as a module-level session of an app
    recording = patched(path, "new_episodes")
    with recording.installed():
        live = requests_calls(client_server.url, early)
    assert live == ["/early", "/module?q=1", "/retrying", '{"a": 1}']
    assert len(client_server.requests) == 4
    assert [type(o).__name__ for o in recording.opened] == ["RecordingAdapter"]
    assert recording.opened[0].appended == 4  # written by one adapter on the cassette
    recording.recording.close()

    replay = patched(path, "none")
    with replay.installed():
        assert requests_calls(client_server.url, early) == live
    assert len(client_server.requests) == 4  # nothing reached the server
    assert early.get(f"{client_server.url}/early").json()["path"] == "/early"  # live again
    assert len(client_server.requests) == 5
    early.close()
    replay.recording.close()


def test_a_requests_miss_goes_to_the_adapter_and_other_adapters_are_left_alone(
    client_server: ClientServer, tmp_path: Path
) -> None:
    import requests

    from sakura_http.requests import RecordingAdapter

    own = RecordingAdapter(tmp_path / "own.jsonl", mode="new_episodes")
    mounted = requests.Session()
    mounted.mount("http://", own)
    patch = patched(tmp_path / "empty.jsonl", "none")
    with patch.installed():
        assert mounted.get(f"{client_server.url}/own").json()["path"] == "/own"
        assert patch.opened == []  # the session's own RecordingAdapter recorded it
        with pytest.raises(CassetteMiss):
            requests.get(f"{client_server.url}/missing", timeout=30)
    assert own.appended == 1
    assert len(patch.opened[0].raised) == 1  # the miss, for the plugin's swallowed-error check
    assert patch.opened[0]._closed  # no track given: closed by the block
    assert client_server.requests == [("GET", "/own")]
    own.close()
    mounted.close()
    patch.recording.close()


def aiohttp_calls(url: str, early: bool = False) -> list[Any]:
    """GET and POST through new sessions (one with a middleware of the app's, which must still
    run), on asyncio."""
    import asyncio

    import aiohttp

    async def stamp(request: Any, handler: Any) -> Any:
        request.headers["x-app"] = "stamped"
        return await handler(request)

    async def go() -> list[Any]:
        async with aiohttp.ClientSession(middlewares=[stamp]) as session:
            async with session.get(f"{url}/get", params={"q": "1"}) as response:
                got = await response.json()
            async with session.post(f"{url}/post", json={"a": 1}) as response:
                posted = await response.json()
        async with aiohttp.ClientSession() as plain, plain.get(f"{url}/sse?n=2") as response:
            chunks = [chunk async for chunk in response.content.iter_any()]
        return [got["path"], got["headers"]["x-app"], posted["body"], len(chunks)]

    return asyncio.run(go())


def test_aiohttp_sessions_record_then_replay_through_the_patch(
    client_server: ClientServer, tmp_path: Path
) -> None:
    path = tmp_path / "aiohttp.jsonl"
    recording = patched(path, "new_episodes")
    with recording.installed():
        live = aiohttp_calls(client_server.url)
    assert live == ["/get?q=1", "stamped", '{"a": 1}', 2]
    assert len(client_server.requests) == 3
    assert [type(o).__name__ for o in recording.opened] == ["RecordingMiddleware"]
    recording.recording.close()

    replay = patched(path, "none")
    with replay.installed():
        assert aiohttp_calls(client_server.url) == live
    assert len(client_server.requests) == 3  # no connection was opened
    replay.recording.close()


def test_an_aiohttp_session_with_its_own_recording_middleware_is_left_alone(
    client_server: ClientServer, tmp_path: Path
) -> None:
    import asyncio

    import aiohttp

    from sakura_http.aiohttp import RecordingMiddleware

    async def go() -> Any:
        async with (
            RecordingMiddleware(tmp_path / "own.jsonl", mode="new_episodes") as own,
            aiohttp.ClientSession(middlewares=[own]) as session,
            session.get(f"{client_server.url}/own") as response,
        ):
            return (await response.json())["path"], own.appended

    patch = patched(tmp_path / "empty.jsonl", "none")
    with patch.installed():
        assert asyncio.run(go()) == ("/own", 1)
    assert patch.opened == []
    patch.recording.close()


def test_the_requests_and_aiohttp_hooks_are_undone_when_the_block_raises(
    tmp_path: Path,
) -> None:
    import aiohttp
    import requests

    before = (requests.Session.__dict__["get_adapter"], aiohttp.ClientSession.__dict__["_request"])
    patch = patched(tmp_path / "x.jsonl", "none")
    with pytest.raises(RuntimeError, match="boom"), patch.installed():
        assert requests.Session.__dict__["get_adapter"].__wrapped__ is before[0]
        assert aiohttp.ClientSession.__dict__["_request"].__wrapped__ is before[1]
        raise RuntimeError("boom")
    after = (requests.Session.__dict__["get_adapter"], aiohttp.ClientSession.__dict__["_request"])
    assert after == before


def test_a_renamed_requests_or_aiohttp_hook_is_an_error_not_silence(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import aiohttp
    import requests

    with monkeypatch.context() as renamed:
        renamed.delattr(requests.Session, "get_adapter")
        message = r"patch_clients needs requests\.Session\.get_adapter, .*sakura_requests"
        with (
            pytest.raises(RuntimeError, match=message),
            patched(tmp_path / "x.jsonl", "none").installed(),
        ):
            pass  # pragma: no cover - never entered
    before = aiohttp.ClientSession.__dict__["_request"]

    async def _request(self: Any, method: str, url: Any, **kwargs: Any) -> Any:
        raise AssertionError("never called")  # pragma: no cover

    monkeypatch.setattr(aiohttp.ClientSession, "_request", _request)  # no middlewares=
    message = r"patch_clients needs aiohttp\.ClientSession\._request\(middlewares=\.\.\.\)"
    with (
        pytest.raises(RuntimeError, match=message),
        patched(tmp_path / "x.jsonl", "none").installed(),
    ):
        pass  # pragma: no cover - never entered
    assert aiohttp.ClientSession.__dict__["_request"] is _request
    monkeypatch.undo()
    assert aiohttp.ClientSession.__dict__["_request"] is before


# --- through the plugin: @pytest.mark.cassette(patch_clients=True) --------------------------

APP = '''
"""An app that builds its own requests and aiohttp sessions, as apps do."""
import aiohttp
import requests

BASE = "{url}"


def search(query):
    return requests.get(BASE + "/search", params={"q": query}, timeout=30).json()["path"]


async def post(payload):
    async with aiohttp.ClientSession() as session:
        async with session.post(BASE + "/tweets", json=payload) as response:
            return (await response.json())["body"]
'''

PATCHED = """
import asyncio

import pytest

import app


@pytest.mark.cassette(patch_clients=True)
def test_app():
    assert app.search("sakura") == "/search?q=sakura"
    assert asyncio.run(app.post({"text": "hanami"})) == '{"text": "hanami"}'


@pytest.mark.cassette("test_app/test_app.jsonl", patch_clients=True)
def test_swallowed_miss():
    try:
        app.search("never recorded")
    except Exception:
        pass
"""


def test_patch_clients_covers_the_apps_requests_and_aiohttp_sessions(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nfilterwarnings = error\nsakura_record_hosts = 127.0.0.1\n")
    pytester.syspathinsert()
    with start_client_server() as running:
        pytester.makepyfile(app=APP.replace("{url}", running.url), test_app=PATCHED)
        recorded = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", "--record", "-k", "not swallowed"
        )
        recorded.assert_outcomes(passed=1)
        recorded.stdout.fnmatch_lines(
            [
                "*= sakura-http: cassettes recorded =*",
                "*test_app/test_app.jsonl: 2 exchanges appended",
            ]
        )
        assert len(running.requests) == 2
        replayed = pytester.runpytest_subprocess("-p", "no:cacheprovider")
        assert len(running.requests) == 2  # replayed without the server
    replayed.assert_outcomes(passed=2, errors=1)  # the swallowed miss fails at teardown
    replayed.stdout.fnmatch_lines(
        [
            "*the code under test caught 1 sakura-http error(s)*",
            "*sakura_http.CassetteMiss: GET http://127.0.0.1:*/search?q=never* is not in the*",
        ]
    )


def test_patch_clients_from_ini_covers_requests(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nfilterwarnings = error\nsakura_patch_clients = true\n")
    (pytester.path / "tests" / "fixtures").mkdir(parents=True)
    (pytester.path / "tests" / "fixtures" / "ini.jsonl").write_text(
        '{"schema_version":"1.0","kind":"cassette"}\n'
        '{"method":"GET","url":"http://127.0.0.1:9/ping","headers":[["accept","*/*"]],"body":"",'
        '"status":200,"response_headers":[],"response_body":"pong"}\n'
    )
    pytester.makepyfile(
        test_ini="""
import pytest
import requests

@pytest.mark.cassette("ini.jsonl")
def test_on_by_ini():
    assert requests.get("http://127.0.0.1:9/ping", timeout=30).text == "pong"

@pytest.mark.cassette("ini.jsonl", patch_clients=False)
def test_off_by_marker():
    with pytest.raises(requests.ConnectionError):  # it went live: port 9 is shut
        requests.get("http://127.0.0.1:9/ping", timeout=30)
"""
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)
