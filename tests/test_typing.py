"""`mypy --strict` accepts sakura-http's transports in httpx and httpx2 clients, and rejects an
outer transport that is not one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


def test_transports_type_check_in_both_libraries(tmp_path: Path) -> None:
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "bad.py").write_text(BAD)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "good.py", "bad.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
        check=False,
    )
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1, result.stdout + result.stderr
    assert errors[0].startswith("bad.py:4:") and 'Argument "outer"' in errors[0]
