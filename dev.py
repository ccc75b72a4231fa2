#!/usr/bin/env python3
"""Set up a virtual environment and run a job, with nothing but Python 3.10+ installed.

    python3 dev.py demo   # record from a real local server, then replay offline
    python3 dev.py test   # lint (ruff), type-check (mypy --strict) and the whole test suite

The environment lives in .venv/ and is (re)installed from pyproject.toml when it changes.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")
STAMP = VENV / ".sakura-installed"
# cassetter and pytest-recording both register --record-mode, so they cannot share .venv; the
# plugin's side-by-side test loads cassetter from this folder instead.
CASSETTER_SITE = VENV / "sidecar-cassetter"


def run(*args: str | os.PathLike[str]) -> None:
    print("+", " ".join(str(a) for a in args), flush=True)
    result = subprocess.run([str(a) for a in args], cwd=ROOT)
    if result.returncode != 0:
        sys.exit(result.returncode)


def setup() -> None:
    if sys.version_info < (3, 10):  # noqa: UP036 - users may run an older python3
        sys.exit(f"sakura-http needs Python 3.10 or newer, not {sys.version.split()[0]}")
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if PYTHON.exists() and STAMP.exists() and STAMP.read_text() == wanted:
        return
    if not PYTHON.exists():
        print(f"+ creating {VENV}", flush=True)
        venv.create(VENV, with_pip=True)
    run(PYTHON, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    # The suite's tools are a dependency group (PEP 735), which pip reads from 25.1 on.
    run(PYTHON, "-m", "pip", "install", "--quiet", "-e", ".", "--group", "dev")
    run(PYTHON, "-m", "pip", "install", "--quiet", "--no-deps", "--upgrade", "--target",
        CASSETTER_SITE, "cassetter==0.16.1")  # fmt: skip
    STAMP.write_text(wanted)


def main(argv: list[str]) -> None:
    job = argv[0] if argv else ""
    if job not in ("demo", "test"):
        sys.exit(__doc__)
    setup()
    if job == "demo":
        run(PYTHON, "examples/demo.py")
        return
    run(PYTHON, "-m", "ruff", "check", "sakura_http", "tests", "examples", "dev.py")
    run(PYTHON, "-m", "ruff", "format", "--check", "sakura_http", "tests", "examples", "dev.py")
    run(PYTHON, "-m", "mypy")
    os.environ["SAKURA_HTTP_CASSETTER_SITE"] = str(CASSETTER_SITE)
    run(PYTHON, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", *argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
