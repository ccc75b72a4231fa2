"""The plugin's LLM side (sakura_http/pytest_plugin/_llm_fixtures.py and _patch.py), through
real pytest sessions run by `pytester`: recorded with ``--record`` against the fake provider on
127.0.0.1 (tests/llm_server.py), then replayed with the provider stopped."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import httpx2
import pytest

from sakura_http.llm import anthropic_client
from tests.llm_server import start_fake_provider
from tests.servers import start_echo_server
from tests.test_plugin_guard import SENTINELS, read

INI = """
[pytest]
filterwarnings =
    error
    ignore:Async generator '(openai|anthropic|httpx2|httpcore2?)\\.:ResourceWarning
sakura_record_hosts = 127.0.0.1
"""
KEYS = {"ANTHROPIC_API_KEY": "sk-ant-inner-0001", "OPENAI_API_KEY": "sk-inner-0002"}


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makeini(INI)
    (pytester.path / "tests").mkdir()
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    return pytester


def write_test(pytester: pytest.Pytester, source: str, name: str = "test_app") -> Path:
    path = pytester.path / "tests" / f"{name}.py"
    path.write_text(source)
    return path


def cassettes(pytester: pytest.Pytester) -> dict[str, str]:
    folder = pytester.path / "tests" / "fixtures"
    return {
        p.relative_to(folder).as_posix(): p.read_text() for p in sorted(folder.rglob("*.jsonl"))
    }


def record_then_replay(
    project: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    source: str,
    passed: int,
) -> dict[str, str]:
    """Run `source` (with ``{url}`` the fake provider) with --record, then offline."""
    with start_fake_provider() as provider:
        write_test(project, source.replace("{url}", provider.url))
        with monkeypatch.context() as keys:
            for name, value in KEYS.items():
                keys.setenv(name, value)
            project.runpytest("--record").assert_outcomes(passed=passed)
    recorded = cassettes(project)
    for text in recorded.values():
        assert not any(key in text for key in KEYS.values())
    result = project.runpytest("-p", "no:randomly")
    result.assert_outcomes(passed=passed)
    assert cassettes(project) == recorded  # replaying wrote nothing
    return recorded


SDK_FIXTURES = """
import pytest

pytestmark = pytest.mark.cassette(
    anthropic={"base_url": "{url}"}, openai={"base_url": "{url}/v1", "timeout": 30}
)
USER = [{"role": "user", "content": "sakura"}]


def test_anthropic(sakura_anthropic):
    message = sakura_anthropic.messages.create(model="m", max_tokens=9, messages=USER)
    assert message.content[0].text == "Hello, sakura!"
    assert sakura_anthropic.max_retries == 0


def test_openai(sakura_openai):
    with sakura_openai.chat.completions.stream(model="m", messages=USER) as stream:
        text = "".join(e.delta for e in stream if e.type == "content.delta")
    assert text == "Hello, sakura!"
    assert sakura_openai.timeout == 30


@pytest.mark.anyio
async def test_async_anthropic(sakura_async_anthropic):
    async with sakura_async_anthropic.messages.stream(
        model="m", max_tokens=9, messages=USER
    ) as stream:
        pieces = [text async for text in stream.text_stream]
    assert "".join(pieces) == "Hello, sakura!"


@pytest.mark.anyio
async def test_async_openai(sakura_async_openai):
    completion = await sakura_async_openai.chat.completions.create(model="m", messages=USER)
    assert completion.choices[0].message.content == "Hello, sakura!"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request):
    return request.param
"""


def test_sdk_fixtures_record_then_replay_offline(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = record_then_replay(project, monkeypatch, SDK_FIXTURES, passed=6)
    assert sorted(recorded) == [
        "test_app/test_anthropic.jsonl",
        "test_app/test_async_anthropic[asyncio].jsonl",
        "test_app/test_async_anthropic[trio].jsonl",
        "test_app/test_async_openai[asyncio].jsonl",
        "test_app/test_async_openai[trio].jsonl",
        "test_app/test_openai.jsonl",
    ]


def test_recording_without_a_key_says_where_it_comes_from(project: pytest.Pytester) -> None:
    write_test(
        project,
        "def test_a(sakura_anthropic):\n    pass\n\ndef test_o(sakura_openai):\n    pass\n",
    )
    result = project.runpytest("--record")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines_random(
        [
            "*recording */test_app/test_a.jsonl needs an anthropic API key: set ANTHROPIC_API_KEY "
            "or ANTHROPIC_AUTH_TOKEN in the environment*",
            "*needs an openai API key: set OPENAI_API_KEY in the environment*",
        ]
    )


def test_a_cassette_name_holding_a_nul_character_is_a_configuration_error(
    project: pytest.Pytester,
) -> None:
    # os.path.realpath raised a bare ValueError ("embedded null byte").
    write_test(
        project,
        """
import pytest

pytestmark = pytest.mark.cassette("chat\\0.jsonl")

def test_anthropic(sakura_anthropic):
    pass

@pytest.mark.anyio
async def test_async_openai(sakura_async_openai):
    pass

@pytest.fixture
def anyio_backend():
    return "asyncio"
""",
    )
    result = project.runpytest()
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        ["*ConfigurationError: cassette name 'chat\\x00.jsonl' holds a NUL character*"] * 2
    )


def test_a_fixture_nothing_went_through_fails(project: pytest.Pytester) -> None:
    write_test(
        project,
        """
import httpx
import pytest

def test_forgot(sakura_transport):
    httpx.Client()  # the transport was never given to it

def test_sdk_unused(sakura_openai):
    pass

@pytest.mark.anyio
async def test_async_sdk_unused(sakura_async_anthropic):
    pass
""",
    )
    result = project.runpytest()
    result.assert_outcomes(passed=4, errors=4)  # the async test runs on asyncio and trio
    result.stdout.fnmatch_lines_random(
        [
            "*sakura_transport: no request went through the transport of */test_forgot.jsonl, "
            "and that cassette does not exist: the client under test was probably not given "
            "the transport*patch_clients=True*",
            "*sakura_openai: no request went through*",
            "*sakura_async_anthropic: no request went through*",
        ]
    )


# --- patch_clients -------------------------------------------------------------------------

APP = '''
"""An app that builds its own clients, as apps do."""
import anthropic
import httpx
import openai

BASE = "{url}"
module_client = httpx.Client()  # built before any test runs


def greet(name):
    # The SDK passes its own HTTPTransport.  Closed: a connection left open is a
    # ResourceWarning wherever the garbage collector finds it (a later in-process run).
    with anthropic.Anthropic(base_url=BASE) as client:
        return client.messages.create(
            model="m", max_tokens=9, messages=[{"role": "user", "content": name}]
        ).content[0].text


async def agreet(name):
    async with openai.AsyncOpenAI(base_url=BASE + "/v1") as client:
        completion = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": name}]
        )
    return completion.choices[0].message.content


def ping_plain():
    # httpx, not httpx2: an explicit transport of the library's own class.
    with httpx.Client(transport=httpx.HTTPTransport()) as client:
        return client.post(BASE + "/v1/messages", json={"model": "fake-429"}).status_code
'''

PATCHED = """
import httpx
import pytest

import app


@pytest.mark.cassette(patch_clients=True)
def test_sync_app():
    assert app.greet("sakura") == "Hello, sakura!"
    assert app.ping_plain() == 429
    assert app.module_client.post(
        app.BASE + "/v1/messages", json={"model": "fake-529"}
    ).status_code == 529


@pytest.mark.cassette("async.jsonl", patch_clients=True)
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
@pytest.mark.anyio
async def test_async_app():
    assert await app.agreet("hanami") == "Hello, hanami!"


@pytest.mark.cassette(patch_clients=True)
def test_other_transports_are_left_alone():
    mock = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(204)))
    assert mock.get("https://api.example.invalid/").status_code == 204
"""


def test_patch_clients_records_and_replays_an_app_unchanged(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project.path / "tests" / "conftest.py").write_text(
        "import sys, pathlib\nsys.path.insert(0, str(pathlib.Path(__file__).parent))\n\n\n"
        # The app's module-level client would otherwise keep its connection to the provider
        # open until the app module, dropped when the in-process run ends, is collected: a
        # ResourceWarning in whichever later test of this process that happens in.
        "def pytest_sessionfinish():\n    sys.modules['app'].module_client.close()\n"
    )
    with start_fake_provider() as provider:
        (project.path / "tests" / "app.py").write_text(APP.replace("{url}", provider.url))
        recorded = record_then_replay(project, monkeypatch, PATCHED, passed=4)
        # The trio run of the async test replays what its asyncio run recorded: the two differ
        # only in the SDK's x-stainless-async header, which is never compared.
        assert len(provider.requests) == 4
    assert sorted(recorded) == ["async.jsonl", "test_app/test_sync_app.jsonl"]
    sync = [json.loads(line) for line in recorded["test_app/test_sync_app.jsonl"].splitlines()]
    assert [e["status"] for e in sync[1:]] == [200, 429, 529]
    assert len(recorded["async.jsonl"].splitlines()) == 2


def test_patch_is_undone_even_when_the_test_fails(project: pytest.Pytester) -> None:
    write_test(
        project,
        """
import pytest

@pytest.mark.cassette(patch_clients=True)
def test_fails():
    raise RuntimeError("boom")
""",
    )
    hooks = [cls.__dict__["_transport_for_url"] for cls in _client_classes()]
    project.runpytest().assert_outcomes(failed=1)
    assert [cls.__dict__["_transport_for_url"] for cls in _client_classes()] == hooks


def _client_classes() -> list[type]:
    return [httpx.Client, httpx.AsyncClient, httpx2.Client, httpx2.AsyncClient]


def test_patch_clients_from_ini(project: pytest.Pytester) -> None:
    project.makeini(INI + "sakura_patch_clients = true\n")
    fixtures = project.path / "tests" / "fixtures"
    fixtures.mkdir()
    (fixtures / "ini.jsonl").write_text(
        '{"schema_version":"1.0","kind":"cassette"}\n'
        '{"method":"GET","url":"http://127.0.0.1:9/ping","headers":[["accept","*/*"]],"body":"",'
        '"status":200,"response_headers":[],"response_body":"pong"}\n'
    )
    write_test(
        project,
        """
import httpx2
import pytest

@pytest.mark.cassette("ini.jsonl")
def test_on_by_ini():
    assert httpx2.get("http://127.0.0.1:9/ping").text == "pong"

@pytest.mark.cassette("ini.jsonl", patch_clients=False)
def test_off_by_marker():
    with pytest.raises(Exception, match="Connection refused"):  # it went live: port 9 is shut
        httpx2.get("http://127.0.0.1:9/ping")
""",
    )
    project.runpytest().assert_outcomes(passed=2)


# --- patch_clients gets the SDK fixtures' defaults ---------------------------------------

DEFAULTS = """
import anthropic
import httpx2
import openai
import pytest

BASE = "{url}"
ECHO = "{echo}"
USER = [{"role": "user", "content": "sakura"}]


@pytest.mark.cassette("defaults.jsonl", patch_clients=True)
def test_app():
    with anthropic.Anthropic(base_url=BASE) as client:  # closed: see APP's greet
        assert client.messages.create(model="m", max_tokens=9, messages=USER).content[0].text
    with openai.OpenAI(base_url=BASE + "/v1") as chat:
        assert chat.chat.completions.create(model="m", messages=USER).choices[0].message.content
    assert httpx2.get(ECHO + "/plain").status_code == 200  # not an SDK's request
"""


def test_patch_clients_writes_the_sdks_exchanges_under_the_llm_rules(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    with start_echo_server() as echo:
        recorded = record_then_replay(
            project, monkeypatch, DEFAULTS.replace("{echo}", echo.url), passed=1
        )
    anthropic_, openai_, plain = [
        dict((name, value) for name, value in json.loads(line)["response_headers"])
        for line in recorded["defaults.jsonl"].splitlines()[1:]
    ]
    # Rules.llm(): the providers' per-call headers are written as stable placeholders...
    for sdk in (anthropic_, openai_):
        assert sdk["date"] == sdk["request-id"] == "<scrubbed>"
    # ...for the SDKs' exchanges only: another client's date is written as it came.
    assert plain["date"] != "<scrubbed>"
    assert plain["date"].endswith(" GMT")


def test_the_llm_rules_reach_the_providers_hosts_whatever_the_client() -> None:
    from sakura_http import Exchange
    from sakura_http.pytest_plugin._llm_fixtures import LLM_HOSTS, PATCH_CLIENTS_RULES

    hook = PATCH_CLIENTS_RULES.before_record
    assert hook is not None
    headers = (("date", "Mon, 30 Nov 2026 12:00:00 GMT"), ("x-request-id", "req_1"))
    # The providers' own hosts are taken from the rule's list (only exchanges are built here:
    # nothing is sent anywhere); the other URLs use loopback and reserved names.
    providers = [(f"https://{host}/v1/messages", (), True) for host in sorted(LLM_HOSTS)]
    assert len(providers) == 2
    for url, sent, scrubbed in [
        *providers,
        ("http://127.0.0.1:8000/v1/messages", (("user-agent", "AsyncAnthropic/Python 2"),), True),
        ("https://llm.example.test/openai", (("user-agent", "AzureOpenAI/Python 3"),), True),
        ("https://api.example.test/v1/items", (("user-agent", "python-httpx/0.28"),), False),
        ("https://anthropic.com.example.test/", (), False),
    ]:
        exchange = Exchange("POST", url, headers=sent, status=200, response_headers=headers)
        written = hook(exchange)
        assert written is not None
        assert (dict(written.response_headers)["date"] == "<scrubbed>") is scrubbed, url


MISSES = """
import anthropic
import httpx2
import openai
import pytest
from sakura_http import CassetteMiss

pytestmark = pytest.mark.cassette("chat.jsonl", patch_clients=True, expect_errors=True)
ASK = [{"role": "user", "content": "goodbye"}]  # not the recorded "hello"


def attempts():
    sent = []
    return sent, {"request": [sent.append]}


def test_anthropic():
    sent, hooks = attempts()
    http = httpx2.Client(event_hooks=hooks)
    client = anthropic.Anthropic(base_url="http://127.0.0.1:9", http_client=http)
    assert client.max_retries == 2  # the app's own setting is left as it is
    with pytest.raises(anthropic.APIConnectionError) as raised:
        client.messages.create(model="m", max_tokens=9, messages=ASK)
    assert isinstance(raised.value.__cause__, CassetteMiss)
    assert len(sent) == 1  # asked once, not three times with backoff


def test_openai():
    sent, hooks = attempts()
    http = httpx2.Client(event_hooks=hooks)
    client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", http_client=http)
    with pytest.raises(Exception) as raised:
        client.chat.completions.create(model="m", messages=ASK)
    assert CassetteMiss in {type(e) for e in (raised.value, raised.value.__cause__)}
    assert len(sent) == 1


@pytest.mark.anyio
async def test_async_anthropic():
    sent = []

    async def hook(request):
        sent.append(request)

    http = httpx2.AsyncClient(event_hooks={"request": [hook]})
    async with anthropic.AsyncAnthropic(base_url="http://127.0.0.1:9", http_client=http) as client:
        with pytest.raises(anthropic.APIConnectionError) as raised:
            await client.messages.create(model="m", max_tokens=9, messages=ASK)
    assert isinstance(raised.value.__cause__, CassetteMiss)
    assert len(sent) == 1


@pytest.mark.cassette("retried.jsonl", patch_clients=True)
def test_a_recorded_overload_is_still_retried():
    client = anthropic.Anthropic(base_url="http://127.0.0.1:9", max_retries=1)
    message = client.messages.create(model="m", max_tokens=9, messages=ASK)
    assert message.content[0].text == "after a retry"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request):
    return request.param
"""

ASKED = (
    '"headers":[["content-type","application/json"]],"body":"{\\"model\\":\\"m\\",'
    '\\"max_tokens\\":9,\\"messages\\":[{\\"role\\":\\"user\\",\\"content\\":'
    '\\"%s\\"}]}"'
)
GOODBYE = {"role": "user", "content": "goodbye"}
REPLY = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [{"type": "text", "text": "after a retry"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 3},
}


def test_under_patch_clients_a_miss_is_not_retried(project: pytest.Pytester) -> None:
    fixtures = project.path / "tests" / "fixtures"
    fixtures.mkdir()
    url = '{"method":"POST","url":"http://127.0.0.1:9/v1/messages",'
    (fixtures / "chat.jsonl").write_text(
        '{"schema_version":"1.0","kind":"cassette"}\n'
        + url
        + ASKED % "hello"
        + ',"status":200,"response_headers":[],"response_body":"{}"}\n'
    )
    # A recorded overload and its retry, as the SDK sends them (recorded through the helper).
    answers = iter(
        [
            httpx2.Response(
                529,
                json={"type": "error", "error": {"type": "overloaded_error"}},
                headers={"retry-after-ms": "1"},
            ),
            httpx2.Response(200, json=REPLY),
        ]
    )
    with anthropic_client(
        fixtures / "retried.jsonl",
        mode="new_episodes",
        outer=httpx2.MockTransport(lambda request: next(answers)),
        api_key="sk-ant-inner-0001",
        base_url="http://127.0.0.1:9",
        max_retries=1,
    ) as client:
        client.messages.create(model="m", max_tokens=9, messages=[GOODBYE])
    write_test(project, MISSES)
    project.runpytest().assert_outcomes(passed=5)


APP_AT_IMPORT = '''
"""An app whose clients are built when it is imported, as apps do."""
import anthropic
import openai

BASE = "{url}"
CLAUDE = anthropic.Anthropic(base_url=BASE)  # reads ANTHROPIC_API_KEY now
GPT = openai.OpenAI(base_url=BASE + "/v1")  # raises now without OPENAI_API_KEY


def ask(name):
    first = CLAUDE.messages.create(
        model="m", max_tokens=9, messages=[{"role": "user", "content": name}]
    ).content[0].text
    second = GPT.chat.completions.create(
        model="m", messages=[{"role": "user", "content": name}]
    ).choices[0].message.content
    return first, second
'''


def test_clients_built_at_import_time_replay_without_a_key(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.makeini(INI + "sakura_patch_clients = true\n")
    # The app is imported by the conftest, before any test module (and before any fixture).
    (project.path / "tests" / "conftest.py").write_text(
        "import sys, pathlib\nsys.path.insert(0, str(pathlib.Path(__file__).parent))\n"
        "import app  # noqa: E402,F401\n"
    )
    with start_fake_provider() as provider:
        (project.path / "tests" / "app.py").write_text(APP_AT_IMPORT.replace("{url}", provider.url))
        recorded = record_then_replay(
            project,
            monkeypatch,
            "import app\n\n\ndef test_ask():\n"
            '    assert app.ask("sakura") == ("Hello, sakura!", "Hello, sakura!")\n',
            passed=1,
        )
    assert len(recorded["test_app/test_ask.jsonl"].splitlines()) == 3
    # The placeholders were the run's only: this process's environment is as it was.
    assert not {"ANTHROPIC_API_KEY", "OPENAI_API_KEY"} & set(os.environ)


# --- diagnostics ---------------------------------------------------------------------------


def test_a_miss_wrapped_by_the_sdk_is_named_in_the_summary_once(
    project: pytest.Pytester,
) -> None:
    fixtures = project.path / "tests" / "fixtures"
    fixtures.mkdir()
    (fixtures / "chat.jsonl").write_text(
        '{"schema_version":"1.0","kind":"cassette"}\n'
        '{"method":"POST","url":"http://127.0.0.1:9/v1/messages","headers":'
        '[["content-type","application/json"]],"body":"{\\"model\\":\\"m\\",\\"max_tokens\\":9,'
        '\\"messages\\":[{\\"role\\":\\"user\\",\\"content\\":\\"hello\\"}]}",'
        '"status":200,"response_headers":[],"response_body":"{}"}\n'
    )
    write_test(
        project,
        """
import pytest

@pytest.mark.cassette("chat.jsonl", anthropic={"base_url": "http://127.0.0.1:9"})
def test_changed_prompt(sakura_anthropic):
    sakura_anthropic.messages.create(
        model="m", max_tokens=9, messages=[{"role": "user", "content": "goodbye"}]
    )

@pytest.mark.cassette("chat.jsonl", anthropic={"base_url": "http://127.0.0.1:9"})
def test_hidden_context(sakura_anthropic):
    try:
        sakura_anthropic.messages.create(
            model="m", max_tokens=9, messages=[{"role": "user", "content": "goodbye"}]
        )
    except Exception:
        raise ValueError("the app's own error") from None

@pytest.mark.cassette("chat.jsonl", patch_clients=True)
def test_app_client_retries():
    import anthropic

    client = anthropic.Anthropic(base_url="http://127.0.0.1:9")  # max_retries=2, as apps do
    client.messages.create(
        model="m", max_tokens=9, messages=[{"role": "user", "content": "goodbye"}]
    )
""",
    )
    result = project.runpytest("-rf", "-vv")
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(
        [
            "FAILED tests/test_app.py::test_changed_prompt - sakura_http.CassetteMiss: POST "
            "http://127.0.0.1:9/v1/messages is not in the cassette */chat.jsonl (raised as "
            "anthropic.APIConnectionError: Connection error.)",
            "FAILED tests/test_app.py::test_hidden_context - sakura_http.CassetteMiss: POST "
            "http://127.0.0.1:9/v1/messages is not in the cassette */chat.jsonl (raised as "
            "builtins.ValueError: the app's own error)",
            "FAILED tests/test_app.py::test_app_client_retries - sakura_http.CassetteMiss: POST "
            "http://127.0.0.1:9/v1/messages is not in the cassette */chat.jsonl (raised as "
            "anthropic.APIConnectionError: Connection error.)",
        ]
    )
    out = result.stdout.str()
    # The full message with its diff, once per test: in the chained traceback for the first,
    # in a report section for the second (raised `from None`, so not in its traceback).
    # The app's client (max_retries=2) asks once under patch_clients: a miss is not retried.
    assert out.count('-      "content": "hello",') == 3
    assert "sakura-http: sakura_http.CassetteMiss" in out
    assert "sakura_http._exceptions" not in out
    assert "ERROR at teardown" not in out


def test_the_guard_names_the_three_ways_through_a_transport(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SENTINELS)
    pytester.makeini("[pytest]\nfilterwarnings = error\n")
    pytester.makepyfile(
        test_guarded="""
import httpx

def test_client_without_transport(sakura_fixtures):
    httpx.get("http://api.example.invalid/")
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*this request did not go through a sakura transport. Give the client one: pass "
            "transport=sakura_transport, use an SDK fixture (sakura_anthropic, sakura_openai), "
            "or mark the test @pytest.mark.cassette(patch_clients=True) for clients the app "
            "builds.*"
        ]
    )
    assert read(pytester.path / "sentinel.log") == []


def test_an_undeclared_credential_names_the_ini_option(project: pytest.Pytester) -> None:
    write_test(
        project,
        """
import httpx
import pytest

@pytest.mark.cassette("token.jsonl")
def test_token(sakura_transport):
    client = httpx.Client(transport=sakura_transport)
    client.get("http://127.0.0.1:9/", headers={"x-api-key": "k"})

def test_sdk_fixture_declares_the_providers_headers(sakura_anthropic):
    assert sakura_anthropic.api_key  # built; its headers are secret (see test_sdk_fixtures_*)
""",
    )
    (project.path / "tests" / "fixtures").mkdir()
    (project.path / "tests" / "fixtures" / "test_app").mkdir()
    (
        project.path
        / "tests"
        / "fixtures"
        / "test_app"
        / "test_sdk_fixture_declares_the_providers_headers.jsonl"
    ).touch()
    result = project.runpytest()
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["*CredentialHeaderError: header x-api-key*sakura_secret_headers*"])
