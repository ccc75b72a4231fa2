"""sakura_http.llm: the SDKs' own clients over a cassette, recorded against a fake provider on
127.0.0.1 (tests/llm_server.py), then replayed with the provider stopped.

Each conversation is written once as an async function; `run` drives it with the sync client
(flavor "sync") or the async client on asyncio or trio, and the helpers below hide the
difference (awaiting what is awaitable, iterating what is iterable either way).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anthropic
import anyio
import httpx
import httpx2
import openai
import pydantic
import pytest

from sakura_http import CassetteMiss, CredentialHeaderError, RecordingTransport
from sakura_http._cassette import load_cassette
from sakura_http.llm import (
    LLM_SECRET_HEADERS,
    PLACEHOLDER_API_KEY,
    anthropic_client,
    async_anthropic_client,
    async_openai_client,
    http_library_of,
    openai_client,
)
from tests.llm_server import STRUCTURED, FakeProvider, start_fake_provider

ANTHROPIC_KEY = "sk-ant-test-never-on-disk-0001"
OPENAI_KEY = "sk-test-never-on-disk-0002"
USER = [{"role": "user", "content": "sakura"}]
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
OPENAI_WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}

# The SDKs stop reading an async event stream at its end marker (openai's ``[DONE]``) without
# exhausting their own async generators; on trio, collecting those warns.  Not sakura-http's.
IGNORE_SDK_ASYNCGEN = pytest.mark.filterwarnings(
    "ignore:Async generator '(openai|anthropic|httpx2|httpcore2?)\\.:ResourceWarning"
)


class Flower(pydantic.BaseModel):
    name: str
    petals: int


@pytest.fixture(params=["sync", "asyncio", "trio"])
def flavor(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(autouse=True)
def _no_provider_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    # Replaying must need no key: a developer's real key must not change what the tests mean.
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


# --- sync and async in one body ------------------------------------------------------------


async def aw(value: Any) -> Any:
    """`value`, awaited if it is awaitable (an async client's call)."""
    return await value if inspect.isawaitable(value) else value


async def items(iterable: Any) -> list[Any]:
    """Every item of a sync or async iterable."""
    if hasattr(iterable, "__aiter__"):
        return [item async for item in iterable]
    return list(iterable)


@contextlib.asynccontextmanager
async def entered(manager: Any) -> AsyncIterator[Any]:
    """Enter a sync or async context manager."""
    if hasattr(manager, "__aenter__"):
        async with manager as value:
            yield value
    else:
        with manager as value:
            yield value


Conversation = Callable[[Any], Awaitable[Any]]


def run(flavor: str, make: Callable[..., Any], conversation: Conversation) -> Any:
    """Build the client (`make(is_async=...)`), run `conversation` with it, close it."""

    async def go() -> Any:
        client = make(is_async=flavor != "sync")
        async with entered(client):
            return await conversation(client)

    return anyio.run(go, backend="asyncio" if flavor == "sync" else flavor)


def anthropic_maker(path: Path, base_url: str, **options: Any) -> Callable[..., Any]:
    def make(*, is_async: bool) -> Any:
        build = async_anthropic_client if is_async else anthropic_client
        return build(path, base_url=base_url, **options)

    return make


def openai_maker(path: Path, base_url: str, **options: Any) -> Callable[..., Any]:
    def make(*, is_async: bool) -> Any:
        build = async_openai_client if is_async else openai_client
        return build(path, base_url=f"{base_url}/v1", **options)

    return make


def record_then_replay(
    flavor: str, path: Path, sdk: str, conversation: Conversation
) -> tuple[Any, Any, FakeProvider]:
    """Record `conversation` against the fake provider, stop it, replay it offline."""
    maker = anthropic_maker if sdk == "anthropic" else openai_maker
    key = ANTHROPIC_KEY if sdk == "anthropic" else OPENAI_KEY
    with start_fake_provider() as provider:
        live = run(
            flavor, maker(path, provider.url, mode="new_episodes", api_key=key), conversation
        )
    replayed = run(flavor, maker(path, provider.url), conversation)
    text = path.read_text(encoding="utf-8")
    assert key not in text
    assert PLACEHOLDER_API_KEY not in text
    return live, replayed, provider


# --- what must work ------------------------------------------------------------------------


@pytest.mark.parametrize("sdk", ["anthropic", "openai"])
def test_plain_generation(flavor: str, sdk: str, tmp_path: Path) -> None:
    async def anthropic_turn(client: Any) -> str:
        message = await aw(client.messages.create(model="m", max_tokens=64, messages=USER))
        return str(message.content[0].text)

    async def openai_turn(client: Any) -> str:
        completion = await aw(client.chat.completions.create(model="m", messages=USER))
        return str(completion.choices[0].message.content)

    turn = anthropic_turn if sdk == "anthropic" else openai_turn
    live, replayed, provider = record_then_replay(flavor, tmp_path / "c.jsonl", sdk, turn)
    assert live == replayed == "Hello, sakura!"
    [sent] = provider.requests
    assert (
        sent["headers"]["authorization"]
        == f"Bearer {ANTHROPIC_KEY if sdk == 'anthropic' else OPENAI_KEY}"
    )


@IGNORE_SDK_ASYNCGEN
def test_anthropic_stream_helper_text_and_events(flavor: str, tmp_path: Path) -> None:
    async def turn(client: Any) -> tuple[list[str], list[str], str]:
        manager = client.messages.stream(model="m", max_tokens=64, messages=USER)
        async with entered(manager) as stream:
            texts = await items(stream.text_stream)
            final = await aw(stream.get_final_message())
        async with entered(client.messages.stream(model="m", max_tokens=64, messages=USER)) as s:
            kinds = [event.type for event in await items(s)]
        return texts, kinds, final.content[0].text

    live, replayed, _ = record_then_replay(flavor, tmp_path / "c.jsonl", "anthropic", turn)
    assert live == replayed
    texts, kinds, final = replayed
    assert texts == ["Hello,", " sakur", "a!"]
    assert "".join(texts) == final
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_delta" in kinds


@IGNORE_SDK_ASYNCGEN
@pytest.mark.parametrize("sdk", ["anthropic", "openai"])
def test_stream_true_arrives_in_the_recorded_chunks(flavor: str, sdk: str, tmp_path: Path) -> None:
    async def turn(client: Any) -> tuple[list[Any], list[int]]:
        if sdk == "anthropic":
            raw = client.messages.with_streaming_response.create(
                model="m", max_tokens=64, messages=USER, stream=True
            )
        else:
            raw = client.chat.completions.with_streaming_response.create(
                model="m", messages=USER, stream=True
            )
        async with entered(raw) as response:
            sizes = [len(chunk) for chunk in await items(response.iter_bytes())]
        if sdk == "anthropic":
            stream = await aw(
                client.messages.create(model="m", max_tokens=64, messages=USER, stream=True)
            )
            events = [e.delta.text for e in await items(stream) if e.type == "content_block_delta"]
        else:
            stream = await aw(client.chat.completions.create(model="m", messages=USER, stream=True))
            events = [c.choices[0].delta.content for c in await items(stream)]
        return events, sizes

    path = tmp_path / "c.jsonl"
    live, replayed, _ = record_then_replay(flavor, path, sdk, turn)
    assert live[0] == replayed[0]
    assert "".join(e for e in replayed[0] if e) == "Hello, sakura!"
    recorded = load_cassette(path).exchanges[0]
    assert recorded.chunks is not None and len(recorded.chunks) > 3
    assert replayed[1] == list(recorded.chunks)  # one chunk per recorded chunk, same sizes


def test_anthropic_tool_use_loop(flavor: str, tmp_path: Path) -> None:
    async def loop(client: Any) -> list[str]:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "weather?"}]
        calls = []
        while True:
            message = await aw(
                client.messages.create(
                    model="m", max_tokens=64, messages=messages, tools=[WEATHER_TOOL]
                )
            )
            if message.stop_reason != "tool_use":
                return [*calls, message.content[0].text]
            [use] = message.content
            calls.append(f"{use.name}({use.input['city']}) as {use.id}")
            messages += [
                {"role": "assistant", "content": [use.model_dump()]},
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}],
                },
            ]

    live, replayed, _ = record_then_replay(flavor, tmp_path / "c.jsonl", "anthropic", loop)
    assert live == replayed == ["get_weather(Kyoto) as toolu_0001", "Tool said: sunny."]


@IGNORE_SDK_ASYNCGEN
def test_openai_streamed_tool_call_loop(flavor: str, tmp_path: Path) -> None:
    async def loop(client: Any) -> list[str]:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "weather?"}]
        stream = await aw(
            client.chat.completions.create(
                model="m", messages=messages, tools=[OPENAI_WEATHER_TOOL], stream=True
            )
        )
        arguments = ""
        call_id = name = ""
        for chunk in await items(stream):
            for call in chunk.choices[0].delta.tool_calls or ():
                call_id = call.id or call_id
                name = (call.function.name if call.function else None) or name
                arguments += (call.function.arguments if call.function else None) or ""
        messages += [
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": arguments},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call_id, "content": "cloudy"},
        ]
        final = await aw(client.chat.completions.create(model="m", messages=messages))
        return [
            f"{name}({json.loads(arguments)['city']}) as {call_id}",
            final.choices[0].message.content,
        ]

    live, replayed, _ = record_then_replay(flavor, tmp_path / "c.jsonl", "openai", loop)
    assert live == replayed == ["get_weather(Kyoto) as call_0001", "Tool said: cloudy."]


@pytest.mark.parametrize("sdk", ["anthropic", "openai"])
def test_structured_output(flavor: str, sdk: str, tmp_path: Path) -> None:
    async def extract(client: Any) -> Flower:
        if sdk == "anthropic":
            parsed = await aw(
                client.messages.parse(model="m", max_tokens=64, messages=USER, output_format=Flower)
            )
            return parsed.parsed_output  # type: ignore[no-any-return]
        completion = await aw(
            client.chat.completions.parse(model="m", messages=USER, response_format=Flower)
        )
        return completion.choices[0].message.parsed  # type: ignore[no-any-return]

    live, replayed, _ = record_then_replay(flavor, tmp_path / "c.jsonl", sdk, extract)
    assert live == replayed == Flower(**STRUCTURED)


@pytest.mark.parametrize(
    ("sdk", "model", "error"),
    [
        ("anthropic", "fake-429", anthropic.RateLimitError),
        ("anthropic", "fake-529", anthropic.OverloadedError),
        ("openai", "fake-429", openai.RateLimitError),
    ],
)
def test_provider_errors_replay_as_the_sdk_exception(
    flavor: str, sdk: str, model: str, error: type[Exception], tmp_path: Path
) -> None:
    async def fail(client: Any) -> tuple[str, int]:
        with pytest.raises(error) as caught:
            if sdk == "anthropic":
                await aw(client.messages.create(model=model, max_tokens=64, messages=USER))
            else:
                await aw(client.chat.completions.create(model=model, messages=USER))
        return type(caught.value).__name__, caught.value.status_code  # type: ignore[attr-defined]

    live, replayed, provider = record_then_replay(flavor, tmp_path / "c.jsonl", sdk, fail)
    assert live == replayed
    assert len(provider.requests) == 1  # max_retries=0: recorded once, not retried


@pytest.mark.parametrize("sdk", ["anthropic", "openai"])
def test_another_machine_sdk_version_and_compression_replays(
    flavor: str, sdk: str, tmp_path: Path
) -> None:
    # The telemetry headers of another SDK patch version, OS, runtime and compression
    # libraries: recorded on one machine, different on the next, never compared.
    elsewhere = {
        "user-agent": f"{sdk}/Python 9.9.9",
        "x-stainless-package-version": "9.9.9",
        "x-stainless-os": "Windows",
        "x-stainless-arch": "arm64",
        "x-stainless-runtime-version": "3.13.1",
        "accept-encoding": "gzip, deflate, zstd",
    }

    async def turn(client: Any) -> str:
        if sdk == "anthropic":
            message = await aw(client.messages.create(model="m", max_tokens=64, messages=USER))
            return str(message.content[0].text)
        completion = await aw(client.chat.completions.create(model="m", messages=USER))
        return str(completion.choices[0].message.content)

    path = tmp_path / "c.jsonl"
    maker = anthropic_maker if sdk == "anthropic" else openai_maker
    key = ANTHROPIC_KEY if sdk == "anthropic" else OPENAI_KEY
    with start_fake_provider() as provider:
        run(flavor, maker(path, provider.url, mode="new_episodes", api_key=key), turn)
    replayed = run(flavor, maker(path, provider.url, default_headers=elsewhere), turn)
    assert replayed == "Hello, sakura!"
    [recorded] = load_cassette(path).exchanges
    assert ("user-agent", elsewhere["user-agent"]) not in recorded.headers


# --- misses, keys and options --------------------------------------------------------------


def test_a_miss_is_raised_once_without_retries(flavor: str, tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_text("")
    transport = RecordingTransport(tmp_path / "empty.jsonl", secret_headers=LLM_SECRET_HEADERS)

    async def turn(client: Any) -> BaseException:
        with pytest.raises(anthropic.APIConnectionError) as caught:
            await aw(client.messages.create(model="m", max_tokens=64, messages=USER))
        return caught.value

    def make(*, is_async: bool) -> Any:
        build = async_anthropic_client if is_async else anthropic_client
        return build(transport, base_url="http://127.0.0.1:9")

    wrapper = run(flavor, make, turn)
    assert isinstance(wrapper.__cause__, CassetteMiss)
    assert transport.raised == [wrapper.__cause__]  # asked once: max_retries defaults to 0


def test_replaying_needs_no_key_and_gets_the_placeholder(tmp_path: Path) -> None:
    client = anthropic_client(tmp_path / "c.jsonl")
    assert client.api_key == PLACEHOLDER_API_KEY
    assert client.max_retries == 0
    assert isinstance(client._client, httpx2.Client)  # the library the SDK needs
    assert openai_client(tmp_path / "c.jsonl").api_key == PLACEHOLDER_API_KEY
    given = anthropic_client(tmp_path / "c.jsonl", auth_token="tok", max_retries=3)
    assert given.api_key is None and given.auth_token == "tok" and given.max_retries == 3


def test_recording_takes_the_key_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    assert anthropic_client(tmp_path / "c.jsonl", mode="new_episodes").api_key == ANTHROPIC_KEY
    assert openai_client(tmp_path / "c.jsonl", mode="all").api_key == OPENAI_KEY
    # Replaying never uses the real key, even when it is set.
    assert anthropic_client(tmp_path / "c.jsonl").api_key == PLACEHOLDER_API_KEY


def test_secret_headers_are_declared_and_merged(tmp_path: Path) -> None:
    transport = RecordingTransport(tmp_path / "bare.jsonl", mode="new_episodes", outer=None)
    client = anthropic_client(transport, base_url="http://127.0.0.1:9", api_key="k")
    with pytest.raises(anthropic.APIConnectionError) as caught:
        client.messages.create(model="m", max_tokens=64, messages=USER)
    # A bare transport refuses the key; the helpers' own transports declare it.
    assert isinstance(caught.value.__cause__, CredentialHeaderError)
    assert "authorization" in LLM_SECRET_HEADERS and "x-api-key" in LLM_SECRET_HEADERS

    with start_fake_provider() as provider:
        client = anthropic_client(
            tmp_path / "c.jsonl",
            mode="new_episodes",
            secret_headers=["x-tenant"],
            base_url=provider.url,
            api_key=ANTHROPIC_KEY,
            default_headers={"x-tenant": "tenant-secret-value"},
        )
        with client:
            client.messages.create(model="m", max_tokens=64, messages=USER)
        assert provider.requests[0]["headers"]["x-tenant"] == "tenant-secret-value"
    assert "tenant-secret-value" not in (tmp_path / "c.jsonl").read_text()


def test_argument_errors(tmp_path: Path) -> None:
    transport = RecordingTransport(tmp_path / "c.jsonl")
    with pytest.raises(TypeError, match=r"got mode beside an existing RecordingTransport"):
        anthropic_client(transport, mode="all")
    with pytest.raises(TypeError, match=r"builds the http_client itself"):
        openai_client(tmp_path / "c.jsonl", http_client=httpx2.Client())


def test_async_clients_are_async_context_managers(tmp_path: Path) -> None:
    async def go() -> tuple[bool, bool]:
        async with async_anthropic_client(tmp_path / "a.jsonl") as a:
            pass
        async with async_openai_client(tmp_path / "o.jsonl") as o:
            pass
        return a.is_closed(), o.is_closed()

    assert anyio.run(go) == (True, True)


def test_http_library_is_read_from_the_sdk() -> None:
    assert http_library_of(anthropic) is httpx2
    assert http_library_of(openai) is httpx2

    class OldDefault(httpx.Client):
        pass

    old_sdk = type(sys)("old_sdk")
    old_sdk.DefaultHttpxClient = OldDefault  # type: ignore[attr-defined]
    assert http_library_of(old_sdk) is httpx
    assert http_library_of(type(sys)("older_sdk")) is httpx


def test_importing_sakura_http_imports_no_sdk() -> None:
    code = (
        "import sys, sakura_http, sakura_http.pytest_plugin, sakura_http.llm\n"
        "loaded = sorted({'anthropic', 'openai'} & set(sys.modules))\n"
        "print(loaded)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"


def test_a_missing_sdk_names_the_extra(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "sys.modules['anthropic'] = None\n"
        "from sakura_http.llm import anthropic_client\n"
        "try:\n"
        f"    anthropic_client({str(tmp_path / 'c.jsonl')!r})\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert 'pip install "sakura-http[anthropic]"' in result.stdout


def test_public_names_are_sorted_and_documented() -> None:
    import sakura_http.llm as llm

    assert llm.__all__ == sorted(llm.__all__, key=lambda n: (not n.isupper(), n))
    # (pytest rewrites the plugin's modules, adding "@py_builtins" and the like)
    public = {n for n in dir(llm) if n.isidentifier() and not n.startswith("_")}
    assert set(llm.__all__) == public
    for name in llm.__all__:
        member = getattr(llm, name)
        if callable(member):
            assert member.__doc__, name


def test_a_cassette_config_goes_to_the_transport(tmp_path: Path) -> None:
    from sakura_http import CassetteConfig

    config = CassetteConfig(secret_headers=["x-tenant"])
    client = anthropic_client(tmp_path / "c.jsonl", config=config)
    transport = client._client._transport
    assert isinstance(transport, RecordingTransport)
    assert transport.config.secret_headers == {"x-tenant", *LLM_SECRET_HEADERS}
    assert client.api_key == PLACEHOLDER_API_KEY
