"""``pytest --verify`` (sakura_http/pytest_plugin/_verify.py), through real pytest runs: a suite
recorded with ``--record`` from a local API, whose answers then change shape (or not), run
again live with ``--verify``; the cassettes stay byte-identical."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from sakura_http import Exchange
from sakura_http._cassette import load_cassette
from tests.cli_support import write_cassette
from tests.llm_server import start_fake_provider
from tests.test_cli_verify import MESSAGE, STREAM, Api, start_api
from tests.test_llm_fixtures import KEYS
from tests.test_plugin import INI, write_test

CHAT = """
import httpx
import pytest

URL = "{url}"

@pytest.mark.cassette("chat.jsonl")
def test_chat(sakura_transport):
    with httpx.Client(transport=sakura_transport, base_url=URL) as client:
        assert client.post("/v1/messages", json={{"model": "m"}}).json()["type"] == "message"

@pytest.mark.cassette("stream.jsonl")
def test_stream(sakura_transport):
    with httpx.Client(transport=sakura_transport, base_url=URL) as client:
        assert b"message_start" in client.get("/v1/stream").content
"""


@pytest.fixture
def api() -> Iterator[Api]:
    with start_api() as running:
        running.routes = {
            "/v1/messages": (200, "application/json", orjson.dumps(MESSAGE)),
            "/v1/stream": (200, "text/event-stream", STREAM),
        }
        yield running


@pytest.fixture
def recorded(pytester: pytest.Pytester, api: Api) -> pytest.Pytester:
    """A project whose two cassettes were recorded from `api` with --record."""
    pytester.makeini(INI)
    write_test(pytester, CHAT.format(url=api.url))
    pytester.runpytest("--record").assert_outcomes(passed=2)
    return pytester


def fixtures(pytester: pytest.Pytester) -> dict[str, bytes]:
    """Every file under the fixtures folder, byte for byte (new or stray files included)."""
    folder = pytester.path / "tests" / "fixtures"
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*")}


def test_answers_of_the_same_shape_pass_and_report_no_drift(
    recorded: pytest.Pytester, api: Api
) -> None:
    before = fixtures(recorded)
    other = {**MESSAGE, "id": "msg_77", "content": [{"type": "text", "text": "Other words"}]}
    api.routes["/v1/messages"] = (200, "application/json", orjson.dumps(other))
    seen = len(api.seen)
    result = recorded.runpytest("--verify")
    result.assert_outcomes(passed=2)
    assert len(api.seen) == seen + 2  # both tests went live
    result.stdout.fnmatch_lines(
        [
            "*= sakura-http: live answers compared with the cassettes =*",
            "2 exchanges of 2 cassettes compared: 2 same shape, 0 drifted (the cassettes were "
            "not changed)",
        ]
    )
    result.stdout.no_fnmatch_line("*: drifted*")
    result.stdout.no_fnmatch_line("*cassettes recorded*")
    assert fixtures(recorded) == before


def test_drift_is_reported_in_the_summary_and_does_not_fail_the_run(
    recorded: pytest.Pytester, api: Api
) -> None:
    before = fixtures(recorded)
    usage = {"input_tokens": 10, "output_tokens": 3, "cache_creation": {"ephemeral": 0}}
    changed = {**MESSAGE, "content": [{"type": "thinking", "text": "..."}], "usage": usage}
    api.routes["/v1/messages"] = (200, "application/json", orjson.dumps(changed))
    renamed = STREAM.replace(b"event: message_stop", b"event: message_end")
    api.routes["/v1/stream"] = (200, "text/event-stream", renamed)
    result = recorded.runpytest("--verify")
    result.assert_outcomes(passed=2)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "*= sakura-http: live answers compared with the cassettes =*",
            "tests/fixtures/chat.jsonl: 1 of 1 exchange drifted",
            f"  #1 POST {api.url}/v1/messages (200 -> 200): drifted",
            '      response.body.content[0].type: "text" -> "thinking"',
            "      key added: response.body.usage.cache_creation",
            "tests/fixtures/stream.jsonl: 1 of 1 exchange drifted",
            f"  #1 GET {api.url}/v1/stream (200 -> 200): drifted",
            "      event removed: message_stop",
            "      event added: message_end",
            "2 exchanges of 2 cassettes compared: 0 same shape, 2 drifted (the cassettes were "
            "not changed)",
            "Update them: sakura-http verify --update tests/fixtures/chat.jsonl "
            "tests/fixtures/stream.jsonl --record-host HOST *`pytest --record-all`",
        ]
    )
    assert fixtures(recorded) == before


def test_verify_strict_fails_the_tests_that_drifted(recorded: pytest.Pytester, api: Api) -> None:
    before = fixtures(recorded)
    api.routes["/v1/messages"] = (400, "application/json", b'{"type":"message"}')
    result = recorded.runpytest("--verify-strict")
    # test_chat passes its own assertion: only --verify-strict fails it, at teardown.
    result.assert_outcomes(passed=2, errors=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_chat*",
            "*--verify-strict: the live answers drifted from the shapes the cassettes hold:",
            "*  tests/fixtures/chat.jsonl",
            f"*    #1 POST {api.url}/v1/messages (200 -> 400): drifted",
            "*        status: 200 -> 400",
        ]
    )
    result.stdout.no_fnmatch_line("*ERROR at teardown of test_stream*")
    assert fixtures(recorded) == before


def test_a_test_that_fails_live_is_a_failure_of_the_live_run(
    recorded: pytest.Pytester, api: Api
) -> None:
    """A drift can break the test itself: it fails (the run fails), the summary says what its
    exchange looked like and names it among the tests that failed live."""
    before = fixtures(recorded)
    api.routes["/v1/messages"] = (200, "application/json", b'{"kind":"message"}')
    result = recorded.runpytest("--verify")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "tests/fixtures/chat.jsonl: 1 of 1 exchange drifted",
            "      key removed: response.body.id",
            "*",
            "1 test failed against the live APIs (see above); a changed API can be the cause: "
            "tests/test_app.py::test_chat",
        ]
    )
    assert fixtures(recorded) == before


def test_a_request_repeated_in_a_test_goes_live_each_time(
    pytester: pytest.Pytester, api: Api
) -> None:
    """Paired as a replay plays them: the first recorded answer, then the second."""
    pytester.makeini(INI)
    write_test(
        pytester,
        f"""
import httpx

def test_poll(sakura_transport):
    with httpx.Client(transport=sakura_transport) as client:
        for _ in range(2):
            client.post("{api.url}/v1/messages", json={{}})
""",
    )
    pytester.runpytest("--record").assert_outcomes(passed=1)
    cassette = pytester.path / "tests" / "fixtures" / "test_app" / "test_poll.jsonl"
    first, second = load_cassette(cassette).exchanges
    older = orjson.loads(second.response_body)
    del older["usage"]
    write_cassette(cassette, [first, _with_body(second, older)])
    before = cassette.read_bytes()
    seen = len(api.seen)
    result = pytester.runpytest("--verify")
    result.assert_outcomes(passed=1)
    assert len(api.seen) == seen + 2
    result.stdout.fnmatch_lines(
        [
            "tests/fixtures/test_app/test_poll.jsonl: 1 of 2 exchanges drifted",
            f"  #2 POST {api.url}/v1/messages (200 -> 200): drifted",
            "      key added: response.body.usage",
        ]
    )
    assert cassette.read_bytes() == before


def _with_body(exchange: Exchange, body: object) -> Exchange:
    return replace(exchange, response_body=orjson.dumps(body))


def test_a_request_the_cassette_lacks_is_listed_not_compared(
    recorded: pytest.Pytester, api: Api
) -> None:
    write_test(recorded, CHAT.format(url=api.url).replace('{"model": "m"}', '{"model": "n"}'))
    result = recorded.runpytest("--verify")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "tests/fixtures/chat.jsonl: 1 request not compared",
            f"  POST {api.url}/v1/messages: not in the cassette (a replay run misses it)",
        ]
    )


def test_under_xdist_the_workers_findings_are_merged(recorded: pytest.Pytester, api: Api) -> None:
    before = fixtures(recorded)
    changed = {**MESSAGE, "stop_reason": "refusal"}
    api.routes["/v1/messages"] = (200, "application/json", orjson.dumps(changed))
    result = recorded.runpytest_subprocess("-n", "2", "--verify", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "tests/fixtures/chat.jsonl: 1 of 1 exchange drifted",
            f"  #1 POST {api.url}/v1/messages (200 -> 200): drifted",
            '      response.body.stop_reason: "end_turn" -> "refusal"',
            "2 exchanges of 2 cassettes compared: 1 same shape, 1 drifted (the cassettes were "
            "not changed)",
        ]
    )
    strict = recorded.runpytest_subprocess("-n", "2", "--verify-strict", "-p", "no:cacheprovider")
    strict.assert_outcomes(passed=2, errors=1)
    assert fixtures(recorded) == before
    assert not list(Path(recorded.path).rglob("*.recording"))


# --- refusals ------------------------------------------------------------------------------------


@pytest.mark.parametrize("other", ["--record", "--record-all", "--prune"])
def test_verify_with_an_option_that_writes_cassettes_is_a_usage_error(
    recorded: pytest.Pytester, other: str
) -> None:
    result = recorded.runpytest("--verify", other)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--verify compares the live APIs*{other} writes them*"])


def test_verify_with_sakura_http_record_set_is_a_usage_error(
    recorded: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAKURA_HTTP_RECORD", "all")
    result = recorded.runpytest("--verify")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--verify writes no cassette*unset SAKURA_HTTP_RECORD*"])


def test_verify_without_record_hosts_exits_75_before_any_test(
    recorded: pytest.Pytester, api: Api
) -> None:
    recorded.makeini("[pytest]\nfilterwarnings = error\n")
    seen = len(api.seen)
    result = recorded.runpytest_subprocess("--verify")
    assert result.ret == 75
    result.stderr.fnmatch_lines(["*pytest --verify records from the network*sakura_record_hosts*"])
    result.stdout.no_fnmatch_line("*test_chat*")
    assert len(api.seen) == seen


# --- the fake LLM provider, through an SDK fixture -----------------------------------------------

SDK_TEST = """
import pytest

@pytest.mark.cassette("claude.jsonl", anthropic={{"base_url": "{url}"}})
def test_claude(sakura_anthropic):
    message = sakura_anthropic.messages.create(
        model="fake", max_tokens=10, messages=[{{"role": "user", "content": "Kyoto"}}]
    )
    assert message.content[0].text == "Hello, Kyoto!"
"""


def test_an_sdk_fixture_is_verified_with_the_key_from_the_environment(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeini(INI)
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    with start_fake_provider() as provider:
        write_test(pytester, SDK_TEST.format(url=provider.url))
        with monkeypatch.context() as keys:
            keys.setenv("ANTHROPIC_API_KEY", KEYS["ANTHROPIC_API_KEY"])
            pytester.runpytest("--record").assert_outcomes(passed=1)
        cassette = pytester.path / "tests" / "fixtures" / "claude.jsonl"
        (exchange,) = load_cassette(cassette).exchanges
        older = orjson.loads(exchange.response_body)
        del older["usage"]  # as an older API answered
        write_cassette(cassette, [_with_body(exchange, older)])
        before = cassette.read_bytes()
        unkeyed = pytester.runpytest("--verify")
        unkeyed.assert_outcomes(errors=1)  # a live run needs the key, as --record does
        unkeyed.stdout.fnmatch_lines(["*needs an anthropic API key: set ANTHROPIC_API_KEY*"])
        with monkeypatch.context() as keys:
            keys.setenv("ANTHROPIC_API_KEY", KEYS["ANTHROPIC_API_KEY"])
            result = pytester.runpytest("--verify")
    result.assert_outcomes(passed=1)
    sent = provider.requests[-1]["headers"].values()
    assert any(KEYS["ANTHROPIC_API_KEY"] in value for value in sent)  # the key went live
    result.stdout.fnmatch_lines(
        [
            "tests/fixtures/claude.jsonl: 1 of 1 exchange drifted",
            "*POST */v1/messages (200 -> 200): drifted",
            "      key added: response.body.usage",
        ]
    )
    assert cassette.read_bytes() == before


# --- the other ways a test reaches its cassette: patch_clients and sakura_proxy ------------------

FRONT_ENDS = """
import httpx
import pytest

URL = "{url}"

@pytest.mark.cassette("app.jsonl", patch_clients=True)
def test_app_builds_its_own_client():
    with httpx.Client(base_url=URL) as client:  # patched: it goes through the cassette
        assert client.post("/v1/messages", json={{"model": "m"}}).status_code == 200

@pytest.mark.cassette("proxied.jsonl", upstream=URL)
def test_through_the_proxy(sakura_proxy):
    with httpx.Client(base_url=sakura_proxy.url) as client:
        assert client.get("/v1/stream").status_code == 200
"""


def test_patch_clients_and_the_proxy_fixture_are_verified_too(
    pytester: pytest.Pytester, api: Api
) -> None:
    pytester.makeini(INI)
    write_test(pytester, FRONT_ENDS.format(url=api.url))
    pytester.runpytest("--record").assert_outcomes(passed=2)
    before = fixtures(pytester)
    assert sorted(before) == ["app.jsonl", "proxied.jsonl"]
    changed = {**MESSAGE, "stop_reason": "refusal"}
    api.routes["/v1/messages"] = (200, "application/json", orjson.dumps(changed))
    api.routes["/v1/stream"] = (200, "application/json", b"{}")
    seen = len(api.seen)
    result = pytester.runpytest("--verify")
    result.assert_outcomes(passed=2)
    assert len(api.seen) == seen + 2
    result.stdout.fnmatch_lines(
        [
            "tests/fixtures/app.jsonl: 1 of 1 exchange drifted",
            '      response.body.stop_reason: "end_turn" -> "refusal"',
            "tests/fixtures/proxied.jsonl: 1 of 1 exchange drifted",
            "      content-type: text/event-stream -> application/json",
        ]
    )
    assert fixtures(pytester) == before


def test_a_cassette_that_cannot_be_read_is_named_not_compared(
    recorded: pytest.Pytester, api: Api
) -> None:
    cassette = recorded.path / "tests" / "fixtures" / "chat.jsonl"
    cassette.write_text("this is not a cassette\n")
    result = recorded.runpytest("--verify")
    result.assert_outcomes(passed=2)  # live, the test does not read its cassette
    result.stdout.fnmatch_lines(
        ["tests/fixtures/chat.jsonl: not compared: the cassette cannot be read (*"]
    )
    assert cassette.read_text() == "this is not a cassette\n"


# --- found in review -----------------------------------------------------------------------------

RULES_FIXTURE = """
import pytest
from sakura_http import Rules

@pytest.fixture
def sakura_rules():
    return Rules(ignore_headers=["x-ex*"])
"""

#: How a project ignores the header x-extra: (ini lines, conftest.py, the marker's keywords).
IGNORED_BY = {
    "nothing": ("", "", ""),
    "the ini option": ("sakura_ignore_headers = x-extra\n", "", ""),
    "the sakura_rules fixture": ("", RULES_FIXTURE, ""),
    "the marker": ("", "", ', rules=Rules(ignore_headers=["x-extra"])'),
}


@pytest.mark.parametrize("ignored_by", IGNORED_BY)
def test_a_header_the_project_ignores_is_not_compared(
    recorded: pytest.Pytester, api: Api, ignored_by: str
) -> None:
    """What matching ignores for a cassette (the ini option, the project's rules, the test's),
    the comparison of response header names ignores too, as `sakura-http verify --ignore-header`
    does: here the API no longer sends ``x-extra``."""
    ini, conftest, marker = IGNORED_BY[ignored_by]
    recorded.makeini(INI + ini)
    if conftest:
        (recorded.path / "tests" / "conftest.py").write_text(conftest)
    source = CHAT.format(url=api.url).replace('"chat.jsonl")', f'"chat.jsonl"{marker})')
    write_test(recorded, "from sakura_http import Rules\n" + source)
    cassette = recorded.path / "tests" / "fixtures" / "chat.jsonl"
    (exchange,) = load_cassette(cassette).exchanges
    headers = (*exchange.response_headers, ("x-extra", "1"))
    write_cassette(cassette, [replace(exchange, response_headers=headers)])
    result = recorded.runpytest("--verify")
    result.assert_outcomes(passed=2)
    if ignored_by == "nothing":
        result.stdout.fnmatch_lines(["tests/fixtures/chat.jsonl: 1 of 1 exchange drifted"])
        result.stdout.fnmatch_lines(["      header removed: x-extra"])
    else:
        result.stdout.no_fnmatch_line("*x-extra*")
        result.stdout.fnmatch_lines(
            [
                "2 exchanges of 2 cassettes compared: 2 same shape, 0 drifted (the cassettes were "
                "not changed)"
            ]
        )


def test_patch_clients_from_the_ini_sets_no_placeholder_key_under_verify(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under --verify the keys come from the environment, as for --record: a missing one is
    the test's error, never a placeholder sent live (whose 401 would read as drift)."""
    pytester.makeini(INI + "sakura_patch_clients = true\n")
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with start_fake_provider() as provider:
        write_test(pytester, SDK_TEST.format(url=provider.url))
        with monkeypatch.context() as keys:
            keys.setenv("ANTHROPIC_API_KEY", KEYS["ANTHROPIC_API_KEY"])
            pytester.runpytest("--record").assert_outcomes(passed=1)
        sent = len(provider.requests)
        result = pytester.runpytest("--verify")
        assert len(provider.requests) == sent  # nothing went live without a key
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*verifying */tests/fixtures/claude.jsonl needs an anthropic API key: set ANTHROPIC_*"]
    )  # the cassette, not the temporary one standing for it
    result.stdout.no_fnmatch_line("*drifted*")


SHARED = """
import httpx
import pytest

pytestmark = pytest.mark.cassette("shared.jsonl")

@pytest.mark.parametrize("n", [1, 2])
def test_ask(sakura_transport, n):
    with httpx.Client(transport=sakura_transport) as client:
        client.post("{url}/v1/messages", json={{"model": "m"}})
"""


def test_every_test_of_a_shared_cassette_goes_live(pytester: pytest.Pytester, api: Api) -> None:
    """The second test does not replay the first one's live answer: each test's requests go
    live, and each is compared with what a replay of the real cassette gives that test."""
    pytester.makeini(INI)
    write_test(pytester, SHARED.format(url=api.url))
    pytester.runpytest("--record").assert_outcomes(passed=2)
    cassette = pytester.path / "tests" / "fixtures" / "shared.jsonl"
    assert len(load_cassette(cassette).exchanges) == 1  # the second test replayed it
    before = cassette.read_bytes()
    seen = len(api.seen)
    changed = {**MESSAGE, "stop_reason": "refusal"}
    api.routes["/v1/messages"] = (200, "application/json", orjson.dumps(changed))
    result = pytester.runpytest("--verify")
    result.assert_outcomes(passed=2)
    assert len(api.seen) == seen + 2
    result.stdout.fnmatch_lines(
        [
            "tests/fixtures/shared.jsonl: 1 of 1 exchange drifted",
            f"  #1 POST {api.url}/v1/messages (200 -> 200): drifted",
            '      response.body.stop_reason: "end_turn" -> "refusal"',
            "1 exchange of 1 cassette compared: 0 same shape, 1 drifted (the cassettes were not "
            "changed)",
        ]
    )
    assert cassette.read_bytes() == before


def test_requests_whose_cassette_was_never_recorded_are_counted_truthfully(
    pytester: pytest.Pytester, api: Api
) -> None:
    pytester.makeini(INI)
    write_test(pytester, SHARED.format(url=api.url))
    seen = len(api.seen)
    result = pytester.runpytest("--verify")
    result.assert_outcomes(passed=2)
    assert len(api.seen) == seen + 2  # they went live
    assert not (pytester.path / "tests" / "fixtures" / "shared.jsonl").exists()
    result.stdout.fnmatch_lines(
        [
            "*= sakura-http: live answers compared with the cassettes =*",
            "tests/fixtures/shared.jsonl: not compared: no recorded cassette (2 requests went "
            "live); `pytest --record` records it",
            "No live exchange was compared: 2 requests went live, and no cassette was recorded "
            "to compare them with (1 cassette missing): `pytest --record` records them",
        ]
    )
    result.stdout.no_fnmatch_line("*no test sent a request*")
    result.stdout.no_fnmatch_line("*a replay run misses it*")


def test_requests_an_empty_cassette_lacks_are_counted_truthfully(
    pytester: pytest.Pytester, api: Api
) -> None:
    pytester.makeini(INI)
    write_test(pytester, SHARED.format(url=api.url))
    cassette = pytester.path / "tests" / "fixtures" / "shared.jsonl"
    cassette.parent.mkdir()
    write_cassette(cassette, [])
    result = pytester.runpytest("--verify")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "tests/fixtures/shared.jsonl: 1 request not compared",
            f"  POST {api.url}/v1/messages: not in the cassette (a replay run misses it)",
            "No live exchange was compared: 1 request went live, and no recorded exchange of "
            "their cassettes matches them (listed above)",
        ]
    )


def test_the_drift_checks_are_imported_only_for_verify() -> None:
    """Every pytest run imports the plugin; --verify's part of it is imported when asked for."""
    import subprocess
    import sys

    code = (
        "import sys; import sakura_http.pytest_plugin; "
        "loaded = [m for m in ('sakura_http._drift', 'sakura_http.pytest_plugin._verify') "
        "if m in sys.modules]; assert loaded == [], loaded"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
