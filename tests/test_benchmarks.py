"""The benchmark runs and prints its table (`benchmarks/run.py --quick`), so it cannot rot.

No figure is checked: timings are the benchmark's business, never the test suite's.  The full
run is by hand (see docs/performance.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_quick_benchmark_prints_every_measure(tmp_path: Path) -> None:
    chart = tmp_path / "chart.svg"
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick", "--chart", str(chart)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=900,  # a hang guard only: the quick run takes seconds
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "| Measure | sakura-http |" in out
    for measure in (
        "1. Replay", "2. Replay", "3. Open", "4. Record", "5. Replay", "6. Import", "8. Diff",
    ):  # fmt: skip
        assert f"| {measure}" in out, f"no row for {measure!r}:\n{out}"
    assert "| 7. Replay" in out or "the proxy has not landed" in out
    assert "| 1. The same, each request carrying an LLM SDK's headers" in out
    assert "| 2. The same, 200 and 10 exchanges alternating in one process" in out
    for client, peer in (("requests", "responses"), ("aiohttp", "aioresponses")):
        row = f"| 9. Replay 50 GETs through {client} "
        assert row in out, f"no row for {row!r}:\n{out}"
        assert f"{peer}, 5 block pairs" in out or f"{peer} skipped" in out
    # Measure 10, the proxy against mitmdump: every row runs; mitmdump's figures when it is
    # installed (in a virtualenv of its own), else the row says so.
    for scenario in ("Replay a small JSON body", "Replay a 1 MiB body"):
        for clients in ("1 keep-alive client", "32 keep-alive clients"):
            row = f"| 10. {scenario}, {clients} | "
            assert row in out, f"no row for {row!r}:\n{out}"
    assert "| 10. Record every request" in out or "need trustme" in out
    assert "mitmdump: " in out or "mitmdump not installed" in out
    # The chart is drawn when matplotlib (the `bench` extra) is there, and said so when not.
    assert f"chart written to {chart}" in out or "no chart: matplotlib is not installed" in out
