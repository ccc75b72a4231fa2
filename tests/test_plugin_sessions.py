"""The plugin shares one session per cassette within a test, words its own advice, keeps the old
cassette when a re-recording test fails, and lets a test expect errors on purpose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.servers import start_echo_server
from tests.test_plugin import HEADER, PING, project, write_test

__all__ = ["project"]  # the fixture, shared with test_plugin.py

SHARED = """
import httpx

def test_twice(sakura_recording):
    for _ in range(2):
        with httpx.Client(transport=sakura_recording("shared.jsonl")) as client:
            assert client.get("{url}/one").status_code == 200
"""


def _exchanges(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()[1:]]


def test_two_transports_on_one_cassette_rerecord_together(project: pytest.Pytester) -> None:
    # Before, the second transport appended to the old file and the first one's atomic replace
    # then overwrote it: the summary said 2 exchanges, the file held 1.
    fixtures = project.path / "tests" / "fixtures"
    (fixtures / "shared.jsonl").write_text(HEADER + PING)
    with start_echo_server() as server:
        write_test(project, SHARED.replace("{url}", server.url))
        result = project.runpytest("--record-all")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*shared.jsonl: re-recorded, 2 exchanges (replaced the old file)"])
    assert [e["url"] for e in _exchanges(fixtures / "shared.jsonl")] == [server.url + "/one"] * 2


POLL = (
    '{"method":"GET","url":"http://api.example.invalid/job","headers":[["accept","*/*"]],'
    '"body":"","status":200,"response_headers":[],"response_body":"%s"}\n'
)


def test_a_new_client_per_call_continues_the_play_order(project: pytest.Pytester) -> None:
    fixtures = project.path / "tests" / "fixtures"
    (fixtures / "poll.jsonl").write_text(HEADER + POLL % "pending" + POLL % "done")
    write_test(
        project,
        """
import httpx

def poll_once(sakura_recording):
    # crewAI and simonw/llm build a new client, and so a new transport, per call
    with httpx.Client(transport=sakura_recording("poll.jsonl")) as client:
        return client.get("http://api.example.invalid/job").text

def test_poll(sakura_recording):
    assert [poll_once(sakura_recording) for _ in range(2)] == ["pending", "done"]

def test_each_test_starts_from_the_beginning(sakura_recording):
    assert poll_once(sakura_recording) == "pending"
""",
    )
    project.runpytest().assert_outcomes(passed=2)


FAILING_RERECORD = """
import httpx

def test_fails_half_way(sakura_transport):
    with httpx.Client(transport=sakura_transport) as client:
        client.get("{url}/first")
    raise AssertionError("the test failed after one of its requests")
"""


def test_a_failed_test_keeps_the_old_cassette(project: pytest.Pytester) -> None:
    fixtures = project.path / "tests" / "fixtures"
    cassette = fixtures / "test_app" / "test_fails_half_way.jsonl"
    cassette.parent.mkdir()
    cassette.write_text(HEADER + PING + PING)
    before = cassette.read_bytes()
    with start_echo_server() as server:
        write_test(project, FAILING_RERECORD.replace("{url}", server.url))
        result = project.runpytest("--record-all")
    result.assert_outcomes(failed=1)
    assert cassette.read_bytes() == before
    assert not cassette.with_name(cassette.name + ".recording").exists()
    result.stdout.fnmatch_lines(
        ["*test_fails_half_way.jsonl: re-recording of 1 exchange dropped because its test "
         "failed (the old file was kept)"]
    )  # fmt: skip


def test_messages_name_the_plugins_fixes(project: pytest.Pytester) -> None:
    write_test(
        project,
        """
import httpx
import pytest
from sakura_http import BodyTooLargeError, CredentialHeaderError

@pytest.mark.cassette("billing.jsonl", expect_errors=True, max_body_bytes=1)
def test_refusals(sakura_transport):
    client = httpx.Client(transport=sakura_transport)
    with pytest.raises(CredentialHeaderError) as caught:
        client.get("http://api.example.invalid/ping", headers={"x-auth-token": "t0k3n-value"})
    assert "add x-auth-token to the ini option sakura_secret_headers" in str(caught.value)
    assert "t0k3n-value" not in str(caught.value)
    with pytest.raises(BodyTooLargeError) as too_big:
        client.post("http://api.example.invalid/ping", content=b"12")
    assert "@pytest.mark.cassette(max_body_bytes=2)" in str(too_big.value)
""",
    )
    project.runpytest().assert_outcomes(passed=1)


def test_expect_errors_lets_a_test_check_a_miss(project: pytest.Pytester) -> None:
    write_test(
        project,
        """
import httpx
import pytest
from sakura_http import CassetteMiss

@pytest.mark.cassette("billing.jsonl", expect_errors=True)
def test_marker(sakura_transport):
    with pytest.raises(CassetteMiss):
        httpx.Client(transport=sakura_transport).get("http://api.example.invalid/new")

def test_method(sakura_recording):
    sakura_recording.expect_errors()
    with pytest.raises(CassetteMiss):
        httpx.Client(transport=sakura_recording("billing.jsonl")).get(
            "http://api.example.invalid/new"
        )

@pytest.mark.cassette("billing.jsonl")
def test_without(sakura_transport):
    with pytest.raises(CassetteMiss):
        httpx.Client(transport=sakura_transport).get("http://api.example.invalid/new")
""",
    )
    result = project.runpytest()
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_without*"])


def test_rules_per_project_and_per_test(project: pytest.Pytester) -> None:
    (project.path / "tests" / "conftest.py").write_text(
        """
import pytest
from sakura_http import Rules, Scrub

@pytest.fixture
def sakura_rules():
    return Rules(scrub=[Scrub.response_header("date")])
"""
    )
    with start_echo_server() as server:
        write_test(
            project,
            f"""
import httpx
import pytest
from sakura_http import Rules

@pytest.mark.cassette("ruled.jsonl", rules=Rules(ignore_query=["ts"]))
def test_ruled(sakura_transport):
    with httpx.Client(transport=sakura_transport) as client:
        assert client.get("{server.url}/x?ts=1").status_code == 200
""",
        )
        project.runpytest("--record").assert_outcomes(passed=1)
    fixtures = project.path / "tests" / "fixtures"
    recorded = _exchanges(fixtures / "ruled.jsonl")[0]
    assert ["date", "<scrubbed>"] in recorded["response_headers"]
    # Replayed offline with another timestamp: the test's own rule ignores it.
    (project.path / "tests" / "test_app.py").write_text(
        (project.path / "tests" / "test_app.py").read_text().replace("ts=1", "ts=2")
    )
    project.runpytest().assert_outcomes(passed=1)


BROKEN_BODY_RERECORD = """
import httpx

class Broken(httpx.SyncByteStream):
    def __iter__(self):
        yield b"half"
        raise httpx.ReadError("connection reset")

def answer(request):
    if request.url.path == "/broken":
        return httpx.Response(200, stream=Broken())
    return httpx.Response(200, text="pong")

def test_handles_a_broken_body(sakura_recording):
    outer = httpx.MockTransport(answer)
    transport = sakura_recording("broken.jsonl", outer=outer, record_hosts=["api.test"])
    with httpx.Client(transport=transport) as client:
        client.get("http://api.test/ping")
        try:
            client.get("http://api.test/broken")
        except httpx.ReadError:
            pass  # the code under test handles it
"""


def test_a_rerecording_an_exchange_of_which_was_not_written_says_the_old_file_was_kept(
    project: pytest.Pytester,
) -> None:
    """The test passes, but one exchange it sent could not be written (its body broke off):
    the old cassette is kept, and the summary says so instead of 'replaced the old file'."""
    cassette = project.path / "tests" / "fixtures" / "broken.jsonl"
    cassette.write_text(HEADER + PING + PING)
    before = cassette.read_bytes()
    write_test(project, BROKEN_BODY_RERECORD)
    result = project.runpytest("--record-all")
    result.assert_outcomes(passed=1)
    assert cassette.read_bytes() == before
    result.stdout.fnmatch_lines(
        ["*broken.jsonl: re-recording of 1 exchange dropped because an exchange its test sent "
         "could not be written (the old file was kept)"]
    )  # fmt: skip
    assert "replaced the old file" not in result.stdout.str()
