"""`ClientPatch` (sakura_http/pytest_plugin/_patch.py) on its own: httpx and httpx2 clients, sync
and async (asyncio, trio), recording from a real server on 127.0.0.1 and replaying without it."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import pytest

from sakura_http import RecordingTransport
from sakura_http.pytest_plugin._patch import ClientPatch
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
