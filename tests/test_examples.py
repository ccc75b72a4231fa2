"""The examples run as a user would run them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_demo_records_then_replays_offline() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    out = result.stdout
    assert "1. recording GET http://127.0.0.1:" in out
    assert "live response: 200 {'city': 'Kyoto', 'forecast': 'sakura showers'}" in out
    assert '{"schema_version":"1.0","kind":"cassette"}' in out
    assert "replayed response: 200 {'city': 'Kyoto', 'forecast': 'sakura showers'}" in out
    assert 'to record it, pass mode="new_episodes" to RecordingTransport' in out
    assert out.rstrip().endswith("done: recorded once, replayed offline.")
