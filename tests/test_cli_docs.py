"""The ```console examples of docs/cli.md print exactly what the command prints.

Each block is run in order, in a scratch copy of the repository's tests/fixtures/cli/ (so
`convert` and `repair` examples do not touch the committed fixtures): a line starting with
"$ sakura-http" is a command, the lines after it are its output (stderr, then stdout).
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest

from tests.cli_support import run

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "cli.md"
FIXTURES = ROOT / "tests" / "fixtures" / "cli"


def _console_blocks() -> list[str]:
    return re.findall(r"^```console\n(.*?)^```$", DOC.read_text(), flags=re.M | re.S)


def _commands(block: str) -> list[tuple[str, str]]:
    commands: list[tuple[str, str]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            commands.append((line[2:], ""))
        else:
            command, output = commands[-1]
            commands[-1] = (command, output + line + "\n")
    return commands


def test_the_doc_has_console_examples_for_every_subcommand() -> None:
    commands = [command for block in _console_blocks() for command, _ in _commands(block)]
    for name in ("show", "diff", "lint", "convert", "repair"):
        assert any(command.startswith(f"sakura-http {name} ") for command in commands), name


@pytest.mark.parametrize("block", _console_blocks())
def test_console_examples_match_the_output(
    block: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    shutil.copytree(FIXTURES, tmp_path / "tests" / "fixtures" / "cli")
    monkeypatch.chdir(tmp_path)
    for command, expected in _commands(block):
        argv = shlex.split(command)
        assert argv[0] == "sakura-http", command
        result = run(capsys, *argv[1:])
        assert result.err + result.out == expected, command
