"""sakura-http loads beside pytest-recording and cassetter, which both own ``--record-mode``.

pytest-recording is a dev dependency, so its test always runs.  cassetter cannot be installed
in the same environment as pytest-recording (each registers ``--record-mode``, and pytest
refuses to start with both), so its test runs only where cassetter is importable or where
``SAKURA_HTTP_CASSETTER_SITE`` names a folder it was installed into with
``pip install --target``.  A stub registering both plugins' option, ini, marker and fixture names
keeps the check running everywhere.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

INI = """
[pytest]
filterwarnings = error
sakura_record_hosts = 127.0.0.1
"""

SAKURA_TEST = """
import httpx
import pytest

@pytest.mark.cassette("billing.jsonl")
def test_sakura(sakura_transport):
    with httpx.Client(transport=sakura_transport) as client:
        assert client.get("http://api.example.invalid/ping").text == "pong"
"""

CASSETTE = (
    '{"schema_version":"1.0","kind":"cassette"}\n'
    '{"method":"GET","url":"http://api.example.invalid/ping","headers":[["accept","*/*"]],'
    '"body":"","status":200,"response_headers":[],"response_body":"pong"}\n'
)

# The names pytest-recording 0.14 and cassetter 0.16 register.
STUB = """
import pytest

def pytest_addoption(parser):
    group = parser.getgroup("vcr")
    for option in ("--record-mode", "--block-network", "--allowed-hosts",
                   "--disable-recording", "--vcr-check-orphans"):
        group.addoption(option, action="store", default=None)
    parser.addini("vcr_max_age", "stub")
    parser.addini("vcr_on_expiry", "stub")
    parser.addini("vcr_on_unplayed", "stub")

def pytest_configure(config):
    for marker in ("vcr", "block_network", "default_cassette", "allowed_hosts"):
        config.addinivalue_line("markers", marker + ": stub")

@pytest.fixture
def vcr():
    return None

@pytest.fixture
def cassette():
    return None

@pytest.fixture
def vcr_config():
    return {}
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(INI)
    (pytester.path / "tests" / "fixtures").mkdir(parents=True)
    (pytester.path / "tests" / "fixtures" / "billing.jsonl").write_text(CASSETTE)
    (pytester.path / "tests" / "test_app.py").write_text(SAKURA_TEST)
    return pytester


def check_side_by_side(project: pytest.Pytester, *args: str) -> None:
    help_ = project.runpytest_subprocess(*args, "--help")
    assert help_.ret == 0, help_.stderr.str()
    help_.stdout.fnmatch_lines(["*--record-mode*", "sakura-http cassettes:", "*--record-all*"])
    run = project.runpytest_subprocess(*args, "--record-mode=none", "-p", "no:cacheprovider")
    run.assert_outcomes(passed=1)


def test_loads_beside_the_names_both_plugins_register(project: pytest.Pytester) -> None:
    (project.path / "vcr_stub.py").write_text(STUB)
    # the real pytest-recording is left out: the stub registers the same names
    check_side_by_side(project, "-p", "no:recording", "-p", "vcr_stub")


def test_loads_beside_pytest_recording(project: pytest.Pytester) -> None:
    pytest.importorskip("pytest_recording")
    check_side_by_side(project, "-p", "recording")


def test_loads_beside_cassetter(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    site = os.environ.get("SAKURA_HTTP_CASSETTER_SITE", "")
    if site:
        monkeypatch.setenv(
            "PYTHONPATH", os.pathsep.join(filter(None, [site, os.environ.get("PYTHONPATH")]))
        )
    elif importlib.util.find_spec("cassetter") is None:
        pytest.skip(
            "cassetter is not installed (it cannot share an environment with pytest-recording); "
            "set SAKURA_HTTP_CASSETTER_SITE to a `pip install --target` folder holding it"
        )
    # pytest-recording and cassetter both add --record-mode: only one of them may load.
    check_side_by_side(project, "-p", "no:recording", "-p", "cassetter")
