"""The pytest plugin, through real pytest sessions run by `pytester`.

Inner sessions talk only to servers on 127.0.0.1 started here, or to reserved names
(``api.example.invalid``) that the network guard must refuse; the guard tests replace the real
socket functions with sentinels first (see test_plugin_guard.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.servers import start_echo_server

HEADER = '{"schema_version":"1.0","kind":"cassette"}\n'
PING = (
    '{"method":"GET","url":"http://api.example.invalid/ping","headers":[["accept","*/*"]],'
    '"body":"","status":200,"response_headers":[["content-type","text/plain"]],'
    '"response_body":"pong"}\n'
)
INI = """
[pytest]
filterwarnings = error
sakura_record_hosts = 127.0.0.1
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A project with the ini above, a ``tests/`` folder and one recorded exchange."""
    pytester.makeini(INI)
    fixtures = pytester.path / "tests" / "fixtures"
    fixtures.mkdir(parents=True)
    (fixtures / "billing.jsonl").write_text(HEADER + PING)
    return pytester


def write_test(pytester: pytest.Pytester, source: str, name: str = "test_app") -> Path:
    path = pytester.path / "tests" / f"{name}.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(source)
    return path


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


REPLAY = """
import httpx
import pytest

@pytest.mark.cassette("billing.jsonl")
def test_ping(sakura_transport):
    with httpx.Client(transport=sakura_transport) as client:
        assert client.get("http://api.example.invalid/ping").text == "pong"

def test_factory(sakura_recording, sakura_fixtures):
    transport = sakura_recording("billing.jsonl")
    assert transport.path == str(sakura_fixtures / "billing.jsonl")
    with httpx.Client(transport=transport) as client:
        assert client.get("http://api.example.invalid/ping").status_code == 200
"""


def test_offline_replay_passes_and_leaves_fixtures_alone(project: pytest.Pytester) -> None:
    write_test(project, REPLAY)
    fixtures = project.path / "tests" / "fixtures"
    before = snapshot(fixtures)
    result = project.runpytest()
    result.assert_outcomes(passed=2)
    assert snapshot(fixtures) == before
    result.stdout.no_fnmatch_line("*sakura-http: cassettes recorded*")


def test_async_clients_replay(project: pytest.Pytester) -> None:
    write_test(
        project,
        """
import anyio
import httpx
import pytest

@pytest.mark.cassette("billing.jsonl")
def test_async(sakura_transport):
    async def main():
        async with httpx.AsyncClient(transport=sakura_transport) as client:
            return (await client.get("http://api.example.invalid/ping")).text
    assert anyio.run(main) == "pong"
""",
    )
    project.runpytest().assert_outcomes(passed=1)


def test_miss_fails_with_the_record_hint(project: pytest.Pytester) -> None:
    write_test(
        project,
        """
import httpx
import pytest

@pytest.mark.cassette("billing.jsonl")
def test_new_request(sakura_transport):
    with httpx.Client(transport=sakura_transport) as client:
        client.get("http://api.example.invalid/refunds")
""",
    )
    result = project.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*CassetteMiss: GET http://api.example.invalid/refunds is not in the cassette*",
            "*to record it, run `pytest --record`*",
        ]
    )


def test_a_caught_miss_fails_at_teardown(project: pytest.Pytester) -> None:
    write_test(
        project,
        """
import httpx
import pytest
from sakura_http import CassetteError

@pytest.mark.cassette("billing.jsonl")
def test_sdk_swallows_errors(sakura_transport):
    with httpx.Client(transport=sakura_transport) as client:
        for _attempt in range(2):  # an SDK retrying, then giving up quietly
            try:
                client.get("http://api.example.invalid/refunds")
            except CassetteError:
                pass
""",
    )
    result = project.runpytest()
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_sdk_swallows_errors*",
            "*the code under test caught 2 sakura-http error(s)*",
            "  sakura_http.CassetteMiss: GET http://api.example.invalid/refunds is not in the *",
            "*to record it, run `pytest --record`*",
        ]
    )


def test_a_caught_error_message_says_how_to_expect_it(project: pytest.Pytester) -> None:
    """A test that provokes the error on purpose learns how to say so."""
    write_test(
        project,
        """
import httpx
import pytest

@pytest.mark.cassette("billing.jsonl")
def test_swallows(sakura_transport):
    with httpx.Client(transport=sakura_transport) as client:
        try:
            client.get("http://api.example.invalid/refunds")
        except Exception:
            pass
""",
    )
    result = project.runpytest()
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*the code under test caught 1 sakura-http error(s)*",
            "If the test provokes them on purpose, mark it "
            "@pytest.mark.cassette(expect_errors=True) or call "
            "sakura_recording.expect_errors()",
        ]
    )


def test_assert_all_played_lists_unplayed_exchanges(project: pytest.Pytester) -> None:
    write_test(
        project,
        """
import pytest

@pytest.mark.cassette("billing.jsonl", assert_all_played=True)
def test_nothing_sent(sakura_transport):
    pass

@pytest.mark.cassette("billing.jsonl")
def test_not_asked(sakura_transport):
    pass
""",
    )
    result = project.runpytest()
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_nothing_sent*",
            "*1 recorded exchange(s) of */billing.jsonl were not played (assert_all_played=True):",
            "*  GET http://api.example.invalid/ping -> 200",
        ]
    )


def test_a_transport_whose_requests_all_passed_through_was_used(
    project: pytest.Pytester,
) -> None:
    # Requests to passthrough_hosts reach the server and are never written, so no cassette
    # file appears; the transport was still given to the client, and the test passes.
    with start_echo_server() as server:
        write_test(
            project,
            f"""
import httpx
import pytest

@pytest.mark.cassette(passthrough_hosts=["127.0.0.1"])
def test_passthrough_only(sakura_transport):
    with httpx.Client(transport=sakura_transport) as client:
        assert client.get("{server.url}/health").status_code == 200
""",
        )
        result = project.runpytest()
        result.assert_outcomes(passed=1)
        assert len(server.requests) == 1
    assert not (project.path / "tests" / "fixtures" / "test_app").exists()


def test_record_appends_then_replays_offline(project: pytest.Pytester) -> None:
    with start_echo_server() as server:
        write_test(
            project,
            f"""
import httpx
import pytest

@pytest.mark.parametrize("item", ["a/b", "c"])
def test_echo(sakura_transport, item):
    with httpx.Client(transport=sakura_transport) as client:
        response = client.post("{server.url}/items", json={{"item": item}})
    assert response.json()["body"] == '{{"item":"' + item + '"}}'
""",
        )
        recorded = project.runpytest("--record")
        recorded.assert_outcomes(passed=2)
        assert len(server.requests) == 2
    recorded.stdout.fnmatch_lines(
        [
            "*= sakura-http: cassettes recorded =*",
            "tests/fixtures/test_app/test_echo[[]a-b[]].jsonl: 1 exchange appended",
            "tests/fixtures/test_app/test_echo[[]c[]].jsonl: 1 exchange appended",
            "Review the changes before committing: git diff tests/fixtures*",
        ]
    )
    cassette = project.path / "tests" / "fixtures" / "test_app" / "test_echo[a-b].jsonl"
    lines = cassette.read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[1])["url"].endswith("/items")

    # The server is gone: the plain run replays.
    replayed = project.runpytest()
    replayed.assert_outcomes(passed=2)
    replayed.stdout.no_fnmatch_line("*cassettes recorded*")


@pytest.mark.parametrize(
    ("args", "env"), [(["--record-all"], None), ([], "all")], ids=["option", "environment"]
)
def test_record_all_replaces_and_says_so(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, args: list[str], env: str | None
) -> None:
    if env:
        monkeypatch.setenv("SAKURA_HTTP_RECORD", env)
    with start_echo_server() as server:
        write_test(
            project,
            f"""
import httpx
import pytest

@pytest.mark.cassette("billing.jsonl")
def test_one(sakura_transport):
    with httpx.Client(transport=sakura_transport) as client:
        client.get("{server.url}/one")

@pytest.mark.cassette("billing.jsonl")
def test_two(sakura_transport):
    with httpx.Client(transport=sakura_transport) as client:
        client.get("{server.url}/two")
""",
        )
        result = project.runpytest(*args)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["tests/fixtures/billing.jsonl: re-recorded, 2 exchanges (replaced the old file)"]
    )
    urls = [json.loads(line)["url"] for line in (project.path / "tests/fixtures/billing.jsonl")
            .read_text().splitlines()[1:]]  # fmt: skip
    assert urls == [f"{server.url}/one", f"{server.url}/two"]  # the old ping is gone


def test_record_without_hosts_exits_75(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    write_test(pytester, "def test_never_runs():\n    raise AssertionError\n")
    result = pytester.runpytest_subprocess("--record")
    assert result.ret == 75
    result.stderr.fnmatch_lines(
        ["*pytest --record records from the network*sakura_record_hosts is empty*"]
    )
    result.stdout.no_fnmatch_line("*test_never_runs*")


@pytest.mark.parametrize(
    ("args", "env"),
    [(["--record"], {}), (["--record-all"], {}), ([], {"SAKURA_HTTP_RECORD": "new_episodes"})],
)
def test_strict_mode_refuses_recording_before_any_test(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, args: list[str], env: dict[str, str]
) -> None:
    monkeypatch.setenv("SAKURA_HTTP_STRICT", "1")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    write_test(project, "def test_never_runs():\n    raise AssertionError\n")
    result = project.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*SAKURA_HTTP_STRICT=1 forbids recording*"])


def test_record_and_record_all_together_are_refused(project: pytest.Pytester) -> None:
    result = project.runpytest("--record", "--record-all")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*either --record or --record-all, not both*"])


def test_names_escaping_the_fixtures_folder_are_refused(
    project: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outside = tmp_path_factory.mktemp("outside")
    (project.path / "tests" / "fixtures" / "link").symlink_to(outside, target_is_directory=True)
    write_test(
        project,
        f"""
import pytest
from sakura_http import ConfigurationError

@pytest.mark.parametrize(
    "name", ["../x.jsonl", "a/../../x.jsonl", {str(outside / "x.jsonl")!r}, "link/x.jsonl", ""]
)
def test_refused(sakura_recording, name):
    with pytest.raises(ConfigurationError, match="escapes the fixtures folder"):
        sakura_recording(name)

def test_inside_is_fine(sakura_recording, sakura_fixtures):
    transport = sakura_recording("payments/refund.jsonl")
    assert transport.path == str(sakura_fixtures / "payments" / "refund.jsonl")
""",
    )
    project.runpytest().assert_outcomes(passed=6)
    assert list(outside.iterdir()) == []
    assert not (project.path / "tests" / "fixtures" / "payments").exists()


def test_a_name_holding_a_nul_character_is_a_configuration_error(project: pytest.Pytester) -> None:
    # os.path.realpath raised a bare ValueError ("embedded null byte") for these.
    write_test(
        project,
        """
from pathlib import Path

import pytest
from sakura_http import ConfigurationError

@pytest.mark.parametrize("name", ["a\\0b.jsonl", Path("a\\0b.jsonl"), "payments/\\0.jsonl"])
def test_factory(sakura_recording, name):
    with pytest.raises(ConfigurationError, match="cassette name .* holds a NUL character"):
        sakura_recording(name)

@pytest.mark.cassette("a\\0b.jsonl")
def test_transport(sakura_transport):
    pass

@pytest.mark.cassette("a\\0b.jsonl")
def test_proxy(sakura_proxy):
    pass

@pytest.mark.cassette("a\\0b.jsonl", patch_clients=True)
def test_patch_clients():
    pass
""",
    )
    result = project.runpytest()
    result.assert_outcomes(passed=3, errors=3)
    result.stdout.fnmatch_lines(
        ["*ConfigurationError: cassette name 'a\\x00b.jsonl' holds a NUL character*"] * 3
    )
    assert "embedded null byte" not in result.stdout.str()


def test_a_fixtures_folder_holding_a_nul_character_names_the_ini_option(
    project: pytest.Pytester,
) -> None:
    write_test(project, "def test_it(sakura_transport):\n    pass\n")
    result = project.runpytest("-o", "sakura_fixtures=fix\0tures")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*the ini option sakura_fixtures (*) holds a NUL character*"])


def test_default_names_and_fixtures_folder(project: pytest.Pytester) -> None:
    write_test(
        project,
        """
import pytest

@pytest.mark.parametrize("model", ["gpt:4o/mini"])
def test_param(sakura_transport, sakura_fixtures, model):
    expected = sakura_fixtures / "test_app" / "test_param[gpt-4o-mini].jsonl"
    assert sakura_transport.path == str(expected)

class TestGroup:
    @pytest.mark.cassette(assert_all_played=False)
    def test_method(self, sakura_transport, sakura_fixtures):
        assert sakura_transport.path.endswith("test_app/TestGroup.test_method.jsonl")
""",
    )
    (project.path / "pkg").mkdir()
    (project.path / "pkg" / "test_outside.py").write_text(
        "def test_fallback(sakura_fixtures, pytestconfig):\n"
        "    assert sakura_fixtures == pytestconfig.rootpath / 'tests' / 'fixtures'\n"
    )
    (project.path / "tests" / "unit").mkdir()
    (project.path / "tests" / "unit" / "test_nested.py").write_text(
        "def test_nearest(sakura_fixtures, pytestconfig):\n"
        "    assert sakura_fixtures == pytestconfig.rootpath / 'tests' / 'fixtures'\n"
    )
    # The cassettes exist (empty): a transport no request went through, on a cassette that
    # does not exist, fails the test (test_llm_fixtures.py).
    (project.path / "tests" / "fixtures" / "test_app").mkdir(parents=True)
    for name in ("test_param[gpt-4o-mini].jsonl", "TestGroup.test_method.jsonl"):
        (project.path / "tests" / "fixtures" / "test_app" / name).touch()
    project.runpytest().assert_outcomes(passed=4)


def test_fixtures_folder_from_ini(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI + "sakura_fixtures = cassettes\n")
    write_test(
        pytester,
        "def test_ini(sakura_fixtures, pytestconfig):\n"
        "    assert sakura_fixtures == pytestconfig.rootpath / 'cassettes'\n",
    )
    pytester.runpytest().assert_outcomes(passed=1)


def test_secret_headers_from_ini_are_merged(project: pytest.Pytester) -> None:
    project.makeini(INI + "sakura_secret_headers =\n    authorization\n")
    with start_echo_server() as server:
        write_test(
            project,
            f"""
import httpx

def test_secrets(sakura_recording):
    transport = sakura_recording("secret.jsonl", secret_headers=["X-Api-Key"])
    headers = {{"authorization": "Bearer s3cret-one", "x-api-key": "s3cret-two"}}
    with httpx.Client(transport=transport) as client:
        assert client.get("{server.url}/me", headers=headers).status_code == 200
""",
        )
        project.runpytest("--record").assert_outcomes(passed=1)
    written = (project.path / "tests" / "fixtures" / "secret.jsonl").read_bytes()
    assert b"s3cret" not in written
    project.runpytest().assert_outcomes(passed=1)  # replays with the secrets left out


def test_markers_and_options_are_documented(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    markers = pytester.runpytest("--markers")
    markers.stdout.fnmatch_lines(
        ["@pytest.mark.cassette(name=None, *, assert_all_played=False, **transport_options)*"]
    )
    help_ = pytester.runpytest("--help")
    help_.stdout.fnmatch_lines(
        ["sakura-http cassettes:", "*--record *", "*--record-all*", "*sakura_record_hosts*"]
    )


def test_xdist_workers_record_into_one_cassette(project: pytest.Pytester) -> None:
    with start_echo_server() as server:
        write_test(
            project,
            f"""
import httpx
import pytest

@pytest.mark.parametrize("n", range(12))
@pytest.mark.cassette("shared.jsonl")
def test_shared(sakura_transport, n):
    with httpx.Client(transport=sakura_transport) as client:
        assert client.get("{server.url}/item/" + str(n)).status_code == 200
""",
        )
        result = project.runpytest_subprocess("-n", "2", "--record", "-p", "no:cacheprovider")
        result.assert_outcomes(passed=12)
    result.stdout.fnmatch_lines(
        [
            "*= sakura-http: cassettes recorded =*",
            "tests/fixtures/shared.jsonl: 12 exchanges appended",
            "Review the changes before committing: git diff tests/fixtures*",
        ]
    )
    lines = (project.path / "tests" / "fixtures" / "shared.jsonl").read_text().splitlines()
    assert lines[0] == HEADER.strip()
    urls = sorted(json.loads(line)["url"] for line in lines[1:])
    assert urls == sorted(f"{server.url}/item/{n}" for n in range(12))

    replayed = project.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider")
    replayed.assert_outcomes(passed=12)
    refused = project.runpytest_subprocess("-n", "2", "--record-all", "-p", "no:cacheprovider")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*Run it in one process (`pytest --record-all -n 0`)*"])


DOC = Path(__file__).resolve().parent.parent / "docs" / "pytest.md"
FILE_BLOCK = re.compile(r"^```\w+ file=(\S+)\n(.*?)^```", re.M | re.S)


def test_the_complete_example_in_the_docs_runs_offline(pytester: pytest.Pytester) -> None:
    blocks = FILE_BLOCK.findall(DOC.read_text())
    assert {path for path, _ in blocks} >= {"pyproject.toml", "tests/conftest.py"}
    for path, body in blocks:
        target = pytester.path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(body)
    fixtures = pytester.path / "tests" / "fixtures"
    before = snapshot(fixtures)
    pytester.runpytest("-W", "error").assert_outcomes(passed=3)
    assert snapshot(fixtures) == before


def test_default_outer_records_for_async_clients(project: pytest.Pytester) -> None:
    with start_echo_server() as server:
        write_test(
            project,
            f"""
import anyio
import httpx
import pytest

@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_async(sakura_transport, backend):
    async def main():
        async with httpx.AsyncClient(transport=sakura_transport) as client:
            return (await client.get("{server.url}/async")).json()["path"]
    assert anyio.run(main, backend=backend) == "/async"
""",
        )
        project.runpytest("--record").assert_outcomes(passed=2)
        assert len(server.requests) == 2
    project.runpytest().assert_outcomes(passed=2)


MISSES = """
import anyio
import httpx
import pytest

@pytest.mark.cassette("billing.jsonl")
def test_sync_miss(sakura_transport):
    with httpx.Client(transport=sakura_transport) as client:
        client.get("http://api.example.invalid/refunds")

@pytest.mark.cassette("billing.jsonl")
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_async_miss(sakura_transport, backend):
    async def main():
        async with httpx.AsyncClient(transport=sakura_transport) as client:
            await client.get("http://api.example.invalid/refunds")
    anyio.run(main, backend=backend)

@pytest.mark.cassette("billing.jsonl", patch_clients=True)
def test_patched_sync_miss():
    with httpx.Client() as client:
        client.get("http://api.example.invalid/refunds")

@pytest.mark.cassette("billing.jsonl", patch_clients=True)
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_patched_async_miss(backend):
    async def main():
        async with httpx.AsyncClient() as client:
            await client.get("http://api.example.invalid/refunds")
    anyio.run(main, backend=backend)
"""


def failure_sections(lines: list[str]) -> dict[str, list[str]]:
    """The lines of each test's section of the failures report, by test name."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in lines:
        title = re.fullmatch(r"_{3,} (\S+) _{3,}", line)
        if title:
            current = sections.setdefault(title.group(1), [])
        elif line.startswith("=") and current is not None:
            current = None
        elif current is not None:
            current.append(line)
    return sections


def test_a_miss_shows_the_tests_frames_not_the_librarys(project: pytest.Pytester) -> None:
    write_test(project, MISSES)
    result = project.runpytest()  # the default --tb=auto, as users see it
    result.assert_outcomes(failed=6)
    sections = failure_sections(result.outlines)
    assert set(sections) == {
        "test_sync_miss",
        "test_async_miss[asyncio]",
        "test_async_miss[trio]",
        # Clients the application builds, under patch_clients: sakura-http's frames hide too.
        "test_patched_sync_miss",
        "test_patched_async_miss[asyncio]",
        "test_patched_async_miss[trio]",
    }
    for name, lines in sections.items():
        text = "\n".join(lines)
        # No frame of sakura-http's own modules: the transport, the session, the streams, the
        # patch of the clients the application builds.
        assert "sakura_http/" not in text and "sakura_http\\" not in text, (name, text)
        assert "def plan(" not in text and "def handle_request(" not in text, name
        # The test's own frame and the miss, named by its public name.
        assert "tests/test_app.py:" in text, name
        shown = r"^E +sakura_http\.CassetteMiss: GET http://api\.example\.invalid/refunds "
        assert re.search(shown, text, re.M), name
    # The sync miss took 78 lines, most of them sakura-http's frames and source; what is left
    # is the test's frame, httpx's (which sakura-http does not own) and the message.
    assert len(sections["test_sync_miss"]) < 55, "\n".join(sections["test_sync_miss"])
    result.stdout.fnmatch_lines(
        ["FAILED tests/test_app.py::test_sync_miss - sakura_http.CassetteMiss: GET *"]
    )
    result.stdout.no_fnmatch_line("*sakura_http._exceptions*")


def test_a_bug_inside_sakura_http_still_shows_its_frames(project: pytest.Pytester) -> None:
    # Only sakura-http's own errors, whose messages say everything, hide its frames.
    write_test(
        project,
        """
import httpx
import pytest
from sakura_http import _session

@pytest.mark.cassette("billing.jsonl")
def test_broken(sakura_transport, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug")
    monkeypatch.setattr(_session, "explain_miss", broken)
    with httpx.Client(transport=sakura_transport) as client:
        client.get("http://api.example.invalid/refunds")
""",
    )
    result = project.runpytest("--tb=long")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*sakura_http/_session.py:*"])


def test_errors_carry_their_public_names() -> None:
    import sakura_http

    for name in sakura_http.__all__:
        value = getattr(sakura_http, name)
        if isinstance(value, type) and issubclass(value, BaseException):
            assert value.__module__ == "sakura_http", name
    miss = sakura_http.CassetteMiss("m", method="GET", url="u", path="p")
    assert repr(miss) == "CassetteMiss('m')"
    assert traceback_name(miss) == "sakura_http.CassetteMiss: m"


def traceback_name(error: BaseException) -> str:
    import traceback

    return "".join(traceback.format_exception_only(error)).strip()


def test_header_rules_from_the_ini_the_project_and_the_marker(project: pytest.Pytester) -> None:
    project.makeini(INI + "sakura_ignore_headers =\n    x-ini\n    x-ini-*\n")
    project.makeconftest(
        """
import pytest
from sakura_http import Rules

@pytest.fixture
def sakura_rules():
    return Rules(ignore_headers=["x-project"])
"""
    )
    write_test(
        project,
        """
import httpx
import pytest
from sakura_http import CassetteMiss, Rules

PING = "http://api.example.invalid/ping"

@pytest.mark.cassette("billing.jsonl", rules=Rules(ignore_headers=["x-marker"]))
def test_every_source_adds_to_the_others(sakura_transport):
    headers = {"x-ini": "1", "x-ini-run": "2", "x-project": "3", "x-marker": "4"}
    with httpx.Client(transport=sakura_transport, headers=headers) as client:
        assert client.get(PING).text == "pong"

@pytest.mark.cassette("billing.jsonl", expect_errors=True)
def test_other_headers_still_count(sakura_transport):
    with httpx.Client(transport=sakura_transport, headers={"x-ini": "1"}) as client:
        assert client.get(PING).text == "pong"
        with pytest.raises(CassetteMiss, match="header x-marker"):
            client.get(PING, headers={"x-marker": "4"})
""",
    )
    project.runpytest().assert_outcomes(passed=2)


def test_a_malformed_ini_header_rule_is_a_usage_error(project: pytest.Pytester) -> None:
    project.makeini(INI + "sakura_ignore_headers = x run\n")
    write_test(project, REPLAY)
    result = project.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*sakura_ignore_headers holds 'x run', which is not a header*"])


def test_a_dropped_re_recording_asks_for_no_review(project: pytest.Pytester) -> None:
    """Nothing was written when the only re-recording was dropped: no `git diff` to review."""
    cassette = project.path / "tests" / "fixtures" / "test_app" / "test_fails.jsonl"
    cassette.parent.mkdir(parents=True)
    cassette.write_text(HEADER + PING)
    with start_echo_server() as server:
        write_test(
            project,
            f"""
import httpx

def test_fails(sakura_transport):
    with httpx.Client(transport=sakura_transport) as client:
        client.get("{server.url}/first")
    raise AssertionError("the test failed after its request")
""",
        )
        result = project.runpytest("--record-all")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*test_fails.jsonl: re-recording of 1 exchange dropped*"])
    result.stdout.no_fnmatch_line("Review the changes before committing*")
