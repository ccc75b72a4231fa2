"""The ```bash examples of docs/proxy.md run as written: they record through `sakura-http proxy`
from a server on 127.0.0.1 (the test sets ``UPSTREAM`` and ``SITE``), then replay offline."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.proxy_support import HANG_GUARD, start_upstream

DOC = Path(__file__).resolve().parent.parent / "docs" / "proxy.md"
BLOCKS = re.findall(r"^```bash\n(.*?)^```$", DOC.read_text(), flags=re.M | re.S)

pytestmark = pytest.mark.skipif(
    shutil.which("curl") is None or shutil.which("bash") is None or sys.platform == "win32",
    reason="the shell examples need bash and curl",
)


def test_the_doc_has_both_shell_examples() -> None:
    assert len(BLOCKS) == 2
    assert "--upstream" in BLOCKS[0] and "HTTPS_PROXY" in BLOCKS[1]


@pytest.mark.parametrize("block", BLOCKS, ids=["reverse-http", "forward-https"])
def test_shell_examples_record_then_replay(tmp_path: Path, block: str) -> None:
    with start_upstream(tls="HTTPS_PROXY" in block, folder=tmp_path) as upstream:
        env = {k: v for k, v in os.environ.items() if not k.lower().endswith(("_proxy", "_ca_dir"))}
        env.update(
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            UPSTREAM=upstream.url,
            SITE=upstream.url,
            SAKURA_HTTP_CA_DIR=str(tmp_path / "ca"),
        )
        if upstream.ca_file is not None:
            env["SSL_CERT_FILE"] = str(upstream.ca_file)  # the proxy verifies the upstream
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=HANG_GUARD,
        )
        assert result.returncode == 0, result.stderr
        assert len(upstream.requests) == 1  # recorded once, replayed offline
    if "--upstream" in block:
        assert result.stdout.splitlines() == ["502 x-sakura-http-error: miss"]
        assert (tmp_path / "recorded.json").read_bytes() == (
            tmp_path / "replayed.json"
        ).read_bytes()
    assert "listening on" not in result.stderr
