"""What every `sakura-http` command shares: the exit codes, the one-line usage error, printing,
the registrar a command module adds its subcommand with, and which files of a folder are
cassettes.

A module of its own so that each command module (which registers its own subcommand, parser
and handler together) uses these without importing the CLI package, which imports it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import orjson

__all__ = [
    "CASSETTE_GLOB",
    "EXIT_FOUND",
    "EXIT_OK",
    "EXIT_USAGE",
    "PROG",
    "AddCommand",
    "Handler",
    "UsageError",
    "cassettes_below",
    "dump_json",
    "err",
    "out",
    "plural",
]

PROG = "sakura-http"

EXIT_OK = 0
"""Done, nothing found (`diff`: the cassettes are equal; `lint`: no errors)."""
EXIT_FOUND = 1
"""The check found something (`diff`: they differ; `lint`: an error; `repair`: a problem it
must not fix)."""
EXIT_USAGE = 2
"""A usage error or an unreadable input, with a one-line reason on stderr."""

CASSETTE_GLOB = "*.jsonl"
"""The files of a folder that are cassettes, for every command that takes a folder."""


class UsageError(Exception):
    """A usage error or unreadable input: printed as one line, exit code 2."""


Handler = Callable[[argparse.Namespace], int]
"""A subcommand's handler: the parsed arguments in, the exit code out."""


class AddCommand(Protocol):
    """The CLI's registrar, handed to each command module's `add_..._command`: it adds the
    subcommand `name`, run by `handler`; `summary` is listed by `sakura-http --help`,
    `details` follows it in the subcommand's own --help.  It returns the subcommand's parser,
    for the command module to add its arguments to."""

    def __call__(
        self, name: str, handler: Handler, summary: str, details: str = ""
    ) -> argparse.ArgumentParser: ...


def out(text: str = "") -> None:
    """Print one line on stdout."""
    sys.stdout.write(text + "\n")


def err(text: str) -> None:
    """Print one line on stderr."""
    sys.stderr.write(text + "\n")


def dump_json(obj: Any) -> None:
    """Print `obj` as indented JSON on stdout, for scripts."""
    sys.stdout.write(orjson.dumps(obj, option=orjson.OPT_INDENT_2).decode() + "\n")


def plural(n: int, word: str) -> str:
    """ "1 exchange", "2 exchanges"."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def cassettes_below(folder: Path) -> list[Path]:
    """The cassettes a folder stands for: every `*.jsonl` file below it, sorted by path (an
    empty list for a folder with none)."""
    return [path for path in sorted(folder.rglob(CASSETTE_GLOB)) if path.is_file()]
