"""The ``sakura_proxy`` fixture, through real pytest sessions run by `pytester`: the same path
rules, marker, ``--record`` / ``--record-all`` behaviour and end-of-test checks as
``sakura_recording``, for a client in a subprocess."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.proxy_support import Upstream, start_upstream

INI = """
[pytest]
filterwarnings = error
sakura_record_hosts = 127.0.0.1
"""

# A client in another process: it prints the status and body, and never raises on a 502.
CLIENT = """
import subprocess, sys

CLIENT = (
    "import sys, urllib.request, urllib.error\\n"
    "try:\\n"
    "    response = urllib.request.urlopen(sys.argv[1], timeout=60)\\n"
    "except urllib.error.HTTPError as error:\\n"
    "    response = error\\n"
    "print(response.status, response.read().decode())\\n"
)

def fetch(url, env):
    done = subprocess.run([sys.executable, "-c", CLIENT, url], env=env, capture_output=True,
                          text=True, timeout=60, check=True)
    return done.stdout.strip()
"""


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with start_upstream() as running:
        yield running


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(INI)
    (pytester.path / "tests" / "fixtures").mkdir(parents=True)
    (pytester.path / "tests" / "tool_client.py").write_text(CLIENT)
    return pytester


def write_test(pytester: pytest.Pytester, source: str) -> Path:
    path = pytester.path / "tests" / "test_tool.py"
    path.write_text(source)
    return path


REVERSE = """
import os
import pytest
from tool_client import fetch

@pytest.mark.cassette("tool.jsonl", upstream="{upstream}")
def test_tool(sakura_proxy):
    env = {{**os.environ, **sakura_proxy.env()}}
    assert fetch(sakura_proxy.url + "/v1/items?page=1", env).startswith("200 ")
"""


def test_record_then_replay_a_subprocess_offline(
    project: pytest.Pytester, upstream: Upstream
) -> None:
    write_test(project, REVERSE.format(upstream=upstream.url))
    result = project.runpytest("--record")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*tests/fixtures/tool.jsonl: 1 exchange appended*"])
    cassette = project.path / "tests" / "fixtures" / "tool.jsonl"
    lines = cassette.read_text().splitlines()
    assert json.loads(lines[1])["url"] == f"{upstream.url}/v1/items?page=1"

    upstream.requests.clear()
    project.runpytest().assert_outcomes(passed=1)
    assert upstream.requests == []  # replayed offline
    assert cassette.read_text().splitlines() == lines


MISS = """
import os
import pytest
from tool_client import fetch

@pytest.mark.cassette("tool.jsonl", upstream="https://api.example.invalid")
def test_tool(sakura_proxy):
    env = {**os.environ, **sakura_proxy.env()}
    print(fetch(sakura_proxy.url + "/v1/other", env))  # the tool ignores the 502
"""


def test_a_miss_the_client_ignored_fails_the_test(project: pytest.Pytester) -> None:
    write_test(project, MISS)
    result = project.runpytest()
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*the code under test caught 1 sakura-http error(s)*",
            "*CassetteMiss: GET https://api.example.invalid/v1/other is not in the cassette*",
            "*run `pytest --record`*",  # the plugin's advice, not the command's
        ]
    )


UNPLAYED = """
import pytest

@pytest.mark.cassette("tool.jsonl", upstream="{upstream}", assert_all_played=True)
def test_tool(sakura_proxy):
    pass
"""


def test_assert_all_played_checks_the_proxy(project: pytest.Pytester, upstream: Upstream) -> None:
    write_test(project, REVERSE.format(upstream=upstream.url))
    project.runpytest("--record").assert_outcomes(passed=1)
    write_test(project, UNPLAYED.format(upstream=upstream.url))
    result = project.runpytest()
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*1 recorded exchange(s) of *tool.jsonl were not played*",
            f"  GET {upstream.url}/v1/items?page=1 -> 200",
        ]
    )


FAILING = """
import os
import pytest
from tool_client import fetch

@pytest.mark.cassette("tool.jsonl", upstream="{upstream}")
def test_tool(sakura_proxy):
    env = {{**os.environ, **sakura_proxy.env()}}
    fetch(sakura_proxy.url + "/v1/rerecorded", env)
    assert {fail}
"""


def test_record_all_replaces_the_cassette_only_when_the_test_passes(
    project: pytest.Pytester, upstream: Upstream
) -> None:
    write_test(project, REVERSE.format(upstream=upstream.url))
    project.runpytest("--record").assert_outcomes(passed=1)
    cassette = project.path / "tests" / "fixtures" / "tool.jsonl"
    old = cassette.read_bytes()

    write_test(project, FAILING.format(upstream=upstream.url, fail="False"))
    project.runpytest("--record-all").assert_outcomes(failed=1)
    assert cassette.read_bytes() == old

    write_test(project, FAILING.format(upstream=upstream.url, fail="True"))
    result = project.runpytest("--record-all")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*tool.jsonl: re-recorded, 1 exchange*"])
    assert "/v1/rerecorded" in cassette.read_text() and "/v1/items" not in cassette.read_text()


FORWARD = """
import os
import pytest
from tool_client import fetch

@pytest.mark.cassette("forward.jsonl", ca_dir={ca_dir!r})
def test_tool(sakura_proxy):
    env = {{**os.environ, **sakura_proxy.env()}}
    assert env["HTTP_PROXY"] == sakura_proxy.url
    assert fetch("{upstream}/v1/forward", env).startswith("200 ")
"""


def test_forward_mode_routes_a_subprocess_through_env(
    project: pytest.Pytester, upstream: Upstream, tmp_path: Path
) -> None:
    write_test(project, FORWARD.format(upstream=upstream.url, ca_dir=str(tmp_path / "ca")))
    project.runpytest("--record").assert_outcomes(passed=1)
    cassette = project.path / "tests" / "fixtures" / "forward.jsonl"
    assert json.loads(cassette.read_text().splitlines()[1])["url"] == f"{upstream.url}/v1/forward"
    upstream.requests.clear()
    project.runpytest().assert_outcomes(passed=1)
    assert upstream.requests == []


BOTH = """
import os
import httpx
import pytest
from tool_client import fetch

@pytest.mark.cassette(
    "both.jsonl",
    upstream="{upstream}",
    shutdown_timeout=5.0,
    header_timeout=20.0,
    idle_timeout=30.0,
)
def test_tool_and_client(sakura_proxy, sakura_transport):
    env = {{**os.environ, **sakura_proxy.env()}}
    assert fetch(sakura_proxy.url + "/v1/items?page=1", env).startswith("200 ")
    with httpx.Client(transport=sakura_transport) as client:
        assert client.get("{upstream}/v1/items?page=2").status_code == 200
"""


def test_the_proxy_marker_keywords_leave_the_transport_fixture_alone(
    project: pytest.Pytester, upstream: Upstream
) -> None:
    # `upstream` and the timeouts configure the proxy: the transport of the same test,
    # on the same cassette, must not be handed them.
    write_test(project, BOTH.format(upstream=upstream.url))
    result = project.runpytest("--record")
    result.assert_outcomes(passed=1)
    result = project.runpytest()
    result.assert_outcomes(passed=1)
    cassette = project.path / "tests" / "fixtures" / "both.jsonl"
    urls = [json.loads(line)["url"] for line in cassette.read_text().splitlines()[1:]]
    assert sorted(urls) == [f"{upstream.url}/v1/items?page=1", f"{upstream.url}/v1/items?page=2"]
