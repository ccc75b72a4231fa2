"""The `sakura-http` command: show, diff, lint, convert, repair cassettes, git-setup, proxy, ca,
migrate and verify.

Exit codes, for every subcommand:

* 0 - done, nothing found (`diff`: the cassettes are equal; `lint`: no errors);
* 1 - the check found something (`diff`: they differ; `lint`: an error, or a warning with
  `--strict`; `repair`: a problem it must not fix);
* 2 - a usage error or an unreadable input, with a one-line reason on stderr.

Each subcommand lives in its own module, its parser beside its logic: `_show.py`, `_diff.py`,
`_lint.py`, `_convert.py` (with `_foreign.py` reading vcrpy and cassetter files), `_git.py`
(`git-setup`), `_repair.py`, `_proxy.py` (`proxy`, `ca`), `_migrate.py` and `_verify.py`.  Each
registers itself with an `add_..._command(command)` function, given the `command` registrar of
`build_parser`; what they share (exit codes, `UsageError`, printing, the cassettes of a folder)
is `_usage.py`, so no command module imports this package.  This module keeps the top-level
parser and the dispatch: a new subcommand is a module with an `add_..._command` and one line in
`build_parser`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from ._convert import add_convert_command
from ._diff import add_diff_command
from ._git import add_git_setup_command
from ._lint import add_lint_command
from ._migrate import add_migrate_command
from ._proxy import add_proxy_commands
from ._repair import add_repair_command
from ._show import add_show_command
from ._usage import EXIT_FOUND, EXIT_USAGE, PROG, Handler, UsageError, err
from ._verify import add_verify_command

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr (exit 2), pointing at --help."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `sakura-http`, with one subparser per subcommand, listed by
    `--help` in the order they are added here."""
    parser = _Parser(
        prog=PROG,
        description="Review, check and repair sakura-http cassettes.",
        epilog="Exit codes: 0 ok, 1 the check found something, 2 usage error or unreadable input.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(
        name: str, handler: Handler, summary: str, details: str = ""
    ) -> argparse.ArgumentParser:
        """Register a subcommand: `summary` is listed by `sakura-http --help`, `details`
        follows it in the subcommand's own --help."""
        description = f"{summary} {details}".strip()
        sub = commands.add_parser(name, help=summary, description=description)
        sub.set_defaults(handler=handler)
        return sub

    add_show_command(command)
    add_diff_command(command)
    add_lint_command(command)
    add_convert_command(command)
    add_git_setup_command(command)
    add_repair_command(command)
    add_proxy_commands(command)  # proxy, ca: sakura_http.proxy is imported when they run
    add_migrate_command(command)  # migrate: libcst is imported when it runs
    add_verify_command(command)  # verify: re-sends recorded requests, compares shapes
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `sakura-http` with `argv` (default: the process arguments); return the exit code.

    Usage errors and unreadable inputs print one line on stderr and return 2; `--help` prints
    help and returns 0.  Nothing is raised for those, so callers can `sys.exit(main())`.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    for arg in argv:  # only main() called from Python can be given one: no process argument can
        if "\0" in arg:
            where = f"{PROG} {argv[0]}" if argv[0] != arg else PROG
            err(
                f"{where}: error: the argument {arg!r} holds a NUL character, which no file "
                "name, pattern or option value can hold"
            )
            return EXIT_USAGE
    git_paths = None
    if argv[:1] == ["diff"] and "--" in argv:  # git's form: diff REV [REV2] -- PATH
        cut = argv.index("--")
        argv, git_paths = argv[:cut], argv[cut + 1 :]
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2), already printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if git_paths is not None:
        args.git_paths = git_paths
    handler: Handler = args.handler
    try:
        return handler(args)
    except UsageError as exc:
        err(f"{PROG} {args.command}: error: {exc}")
        return EXIT_USAGE
    except BrokenPipeError:
        # The reader went away (`sakura-http show big.jsonl | head`): stop quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FOUND
