"""Shared fixtures: async backends, the two httpx libraries, a real server on 127.0.0.1."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from types import ModuleType

import pytest
from hypothesis import settings

from tests import offline
from tests.drive import Driver
from tests.servers import LocalServer, start_echo_server

offline.install()  # before any test: nothing in this process reaches beyond loopback

# In CI (CI=true) every property test draws the same examples run after run, so a red run can be
# replayed exactly; anywhere, a failure prints the blob that reproduces it
# (@reproduce_failure).  A test's own @settings override only the fields it names.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

LIBRARIES = ["httpx"] + (["httpx2"] if sys.version_info >= (3, 11) else [])
# The anthropic and openai SDKs the LLM tests record need httpx2, so Python 3.11 or later.
collect_ignore_glob = ["test_llm*.py"] if sys.version_info < (3, 11) else []


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=LIBRARIES)
def lib(request: pytest.FixtureRequest) -> ModuleType:
    """The httpx library under test: httpx, and httpx2 where it is installable."""
    return importlib.import_module(request.param)


@pytest.fixture(autouse=True)
def _offline() -> Iterator[None]:
    """Fail a test that tried to reach a host that is not reserved (it was refused anyway)."""
    offline.ATTEMPTS.clear()
    yield
    unreserved = [host for host in offline.ATTEMPTS if not offline.is_reserved(host)]
    assert not unreserved, f"the test tried to reach {unreserved}: use a reserved name"


@pytest.fixture(autouse=True)
def _no_recording_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # A developer's shell must not change what the tests mean.
    monkeypatch.delenv("SAKURA_HTTP_RECORD", raising=False)
    monkeypatch.delenv("SAKURA_HTTP_STRICT", raising=False)


@pytest.fixture
def echo_server() -> Iterator[LocalServer]:
    """A real HTTP server on 127.0.0.1 that echoes requests back as JSON."""
    with start_echo_server() as server:
        yield server


@pytest.fixture(params=["sync", "asyncio", "trio"])
def drive(lib: ModuleType, request: pytest.FixtureRequest) -> Driver:
    """Sync and async (asyncio, trio) clients of each httpx library, one test body for all."""
    return Driver(lib, str(request.param))
