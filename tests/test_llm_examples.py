"""The LLM examples run as a user would run them: each project's own tests, offline, from its
committed synthetic cassettes; and each ``regenerate.py`` still writes exactly those cassettes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sakura_http._cassette import load_cassette

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PROJECTS = ["llm_extract", "agent_loop", "openai_chat", "app_patch"]


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
def test_example_tests_pass_offline(project: str) -> None:
    folder = EXAMPLES / project
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"],
        cwd=folder,
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert " passed" in result.stdout
    assert "failed" not in result.stdout and "error" not in result.stdout
    assert (folder / "tests" / "fixtures" / "README.md").is_file()


@pytest.mark.parametrize("project", PROJECTS)
def test_regenerate_writes_the_committed_cassettes(project: str, tmp_path: Path) -> None:
    folder = EXAMPLES / project
    subprocess.run(
        [sys.executable, "regenerate.py", str(tmp_path)],
        cwd=folder,
        env=offline_env(),
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
