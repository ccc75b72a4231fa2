"""The LLM examples run as a user would run them: each project's own tests, offline, from its
committed synthetic cassettes; and each ``regenerate.py`` still writes exactly those cassettes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sakura_http._cassette import load_cassette

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PROJECTS = ["llm_extract", "agent_loop", "openai_chat", "app_patch"]


# Loaded first by every example process (sitecustomize): any name resolution or connection to
# something other than loopback is refused and written down, so a test can prove the examples
# never reach a provider, whatever guard would have stopped them otherwise.
SENTINEL = """
import os, socket

_LOOPBACK = ("127.", "::1", "localhost")
_getaddrinfo, _connect = socket.getaddrinfo, socket.socket.connect


def _refuse(host):
    host = str(host)
    if host.startswith(_LOOPBACK):
        return
    with open(os.environ["SAKURA_SENTINEL_LOG"], "a") as log:
        log.write(host + "\\n")
    raise OSError(f"sentinel: the example tried to reach {host}")


def getaddrinfo(host, *args, **kwargs):
    _refuse(host)
    return _getaddrinfo(host, *args, **kwargs)


def connect(self, address):
    if isinstance(address, tuple):
        _refuse(address[0])
    return _connect(self, address)


socket.getaddrinfo = getaddrinfo
socket.socket.connect = connect
"""


@pytest.fixture
def sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment that loads `SENTINEL`; after the test, no attempt may be logged."""
    folder = tmp_path_factory.mktemp("sentinel")
    (folder / "sitecustomize.py").write_text(SENTINEL)
    log = folder / "attempts.log"
    path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p)
    yield {"PYTHONPATH": path, "SAKURA_SENTINEL_LOG": str(log)}
    assert not log.exists(), f"an example tried to reach: {log.read_text()}"


def test_the_sentinel_catches_a_connection(sentinel: dict[str, str]) -> None:
    attempt = "import socket; socket.create_connection(('api.anthropic.example', 443), 1)"
    result = subprocess.run(
        [sys.executable, "-c", attempt],
        env={**offline_env(), **sentinel},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "sentinel: the example tried to reach api.anthropic.example" in result.stderr
    log = Path(sentinel["SAKURA_SENTINEL_LOG"])
    assert log.read_text() == "api.anthropic.example\n"
    log.unlink()  # the fixture's own check must pass


def offline_env() -> dict[str, str]:
    """No key, no recording: what a fresh checkout on a machine without secrets has."""
    drop = {
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "OPENAI_API_KEY",
        "SAKURA_HTTP_RECORD",
        "SAKURA_HTTP_STRICT",
        "PYTEST_ADDOPTS",
    }
    return {k: v for k, v in os.environ.items() if k not in drop}


@pytest.mark.parametrize("project", PROJECTS)
def test_example_tests_pass_offline(project: str, sentinel: dict[str, str]) -> None:
    folder = EXAMPLES / project
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"],
        cwd=folder,
        env={**offline_env(), **sentinel},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert " passed" in result.stdout
    assert "failed" not in result.stdout and "error" not in result.stdout
    assert (folder / "tests" / "fixtures" / "README.md").is_file()


@pytest.mark.parametrize("project", PROJECTS)
def test_regenerate_writes_the_committed_cassettes(
    project: str, tmp_path: Path, sentinel: dict[str, str]
) -> None:
    folder = EXAMPLES / project
    subprocess.run(
        [sys.executable, "regenerate.py", str(tmp_path)],
        cwd=folder,
        env={**offline_env(), **sentinel},
        check=True,
        timeout=300,
    )
    committed = sorted(p.name for p in (folder / "tests" / "fixtures").glob("*.jsonl"))
    assert sorted(p.name for p in tmp_path.glob("*.jsonl")) == committed
    for name in committed:
        fresh = load_cassette(tmp_path / name).exchanges
        kept = load_cassette(folder / "tests" / "fixtures" / name).exchanges
        # Headers may differ by machine and SDK version (user-agent, x-stainless-*); the
        # request a test replays and the response it gets may not.
        assert [(e.method, e.url, e.body, e.status, e.response_body, e.chunks) for e in fresh] == [
            (e.method, e.url, e.body, e.status, e.response_body, e.chunks) for e in kept
        ], f"{project}/tests/fixtures/{name} is stale: run python regenerate.py there"
        assert not any("synthetic-key" in str(e) for e in fresh)


def test_committed_cassettes_lint_clean() -> None:
    cassettes = sorted(str(p) for p in EXAMPLES.glob("*/tests/fixtures/*.jsonl"))
    assert len(cassettes) == 5
    result = subprocess.run(
        [sys.executable, "-m", "sakura_http", "lint", "--strict", *cassettes],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
