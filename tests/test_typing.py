"""`mypy --strict` accepts sakura-http's transports in httpx and httpx2 clients, and rejects an
outer transport that is not one."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("httpx2", reason="httpx2 needs Python 3.11 or later")

GOOD = """
import httpx
import httpx2
import sakura_http
import sakura_http.httpx2

sync2 = httpx2.Client(transport=sakura_http.httpx2.RecordingTransport("c.jsonl"))
async2 = httpx2.AsyncClient(
    transport=sakura_http.httpx2.RecordingTransport("c.jsonl", outer=httpx2.AsyncHTTPTransport())
)
outer1 = httpx.HTTPTransport()
sync1 = httpx.Client(transport=sakura_http.RecordingTransport("c.jsonl", outer=outer1))
"""

BAD = """
import sakura_http

sakura_http.RecordingTransport("c.jsonl", outer=12345)
"""


@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str]]:
    """One `mypy --strict` run over every sample below (it takes a while): its output and
    its error lines."""
    folder = tmp_path_factory.mktemp("typing")
    samples = {"good": GOOD, "bad": BAD, "options_good": OPTIONS_GOOD, "options_bad": OPTIONS_BAD}
    for name, text in samples.items():
        (folder / f"{name}.py").write_text(text)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            *sorted(f"{name}.py" for name in samples),
        ],
        capture_output=True,
        text=True,
        cwd=folder,
        timeout=900,
        check=False,
    )
    output = result.stdout + result.stderr
    return output, [line for line in result.stdout.splitlines() if ": error:" in line]


def _lines(errors: list[str], sample: str) -> list[int]:
    return sorted({int(e.split(":")[1]) for e in errors if e.startswith(f"{sample}.py:")})


def test_transports_type_check_in_both_libraries(mypy_errors: tuple[str, list[str]]) -> None:
    output, errors = mypy_errors
    assert _lines(errors, "good") == [], output
    bad = [e for e in errors if e.startswith("bad.py:")]
    assert len(bad) == 1, output
    assert bad[0].startswith("bad.py:4:") and 'Argument "outer"' in bad[0]


OPTIONS_GOOD = """
import httpx
import sakura_http
import sakura_http.pytest_plugin
from sakura_http import CassetteConfig, RecordingTransport, Rules
from sakura_http.llm import anthropic_client, openai_client
from sakura_http.proxy import serve

config = CassetteConfig(mode="new_episodes", secret_headers=["authorization"])
config = config.replace(record_hosts=["api.example"], rules=Rules.llm())
transport = RecordingTransport(
    "c.jsonl", outer=httpx.HTTPTransport(), mode="none", secret_headers={"x-api-key"},
    record_hosts=("api.example:443",), max_body_bytes=1024, rules=Rules(ignore_query=["t"]),
)
client = anthropic_client("c.jsonl", mode="none", base_url="http://127.0.0.1:1", max_retries=2)
other = openai_client("c.jsonl", secret_headers=["x-extra"], organization="org-1")
with serve("c.jsonl", upstream="http://127.0.0.1:1", secret_headers=["authorization"]) as p:
    pass


def fixture_factory(sakura_recording: sakura_http.pytest_plugin.CassetteFactory) -> None:
    sakura_recording("c.jsonl", secret_headers=["authorization"], allow_repeats=False)
"""

OPTIONS_BAD = """
import sakura_http
import sakura_http.pytest_plugin
from sakura_http import CassetteConfig, RecordingTransport
from sakura_http.llm import anthropic_client
from sakura_http.proxy import serve

RecordingTransport("c.jsonl", secret_header=["authorization"])
CassetteConfig(record_host=["api.example"])
anthropic_client("c.jsonl", secret_header=["x"])
with serve("c.jsonl", recordhosts=["api.example"]):
    pass
RecordingTransport("c.jsonl", allow_repeats="yes")


def fixture_factory(sakura_recording: sakura_http.pytest_plugin.CassetteFactory) -> None:
    sakura_recording("c.jsonl", secret_header=["authorization"])
"""


def test_options_are_typed_a_misspelt_one_is_an_error(
    mypy_errors: tuple[str, list[str]],
) -> None:
    """Every constructor that takes cassette options types them: the documented spellings pass
    `mypy --strict`, a misspelt option (or a wrongly typed one) is an error at its line."""
    output, errors = mypy_errors
    assert _lines(errors, "options_good") == [], output
    assert _lines(errors, "options_bad") == [8, 9, 10, 11, 13, 17], output
