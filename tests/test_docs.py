"""Every ```python block in README.md and docs/*.md runs, so the docs cannot rot.

Blocks of one file run in order in one namespace, in a fresh working folder.  Blocks that are
not meant to run use another info string (```text, ```console, ```toml, ```ini).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_python_blocks_run(doc: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__doc__"}
    for number, match in enumerate(BLOCK.finditer(doc.read_text()), 1):
        code = compile(match.group(1), f"{doc.name} block {number}", "exec")
        exec(code, namespace)
