"""Repairing a cassette torn by a crash: the logic behind `sakura-http repair`.

Appends are one write of one complete line (see `_cassette.py`), so a crash can tear at most
the last line: it is left without its trailing newline.  Repair handles exactly that case and
refuses everything else, so it can never discard a complete exchange:

* a torn last line that is not a complete exchange is cut off;
* a last line that *is* a complete exchange (the crash hit between the line and its newline)
  keeps the exchange and gets its newline back;
* any other problem (a bad line elsewhere, an unsupported version) refuses, changing nothing.

Before changing anything the original bytes are written to a backup next to the file.  The
file is then truncated (or its newline appended) in place, never rewritten, under the same lock
recorders take to append (`_cassette.locked`), so no concurrent append can be lost.  A file
whose lines end in a bare CR is refused: without a newline it would read as one torn line.

The end of the module is the `repair` subcommand itself (its parser and handler,
`add_repair_command`).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from .._cassette import locked, read_all
from .._exceptions import CassetteFormatError
from .._format import decode_exchange, decode_header, parse_cassette, torn_tail
from ._show import human_size
from ._usage import EXIT_FOUND, EXIT_OK, PROG, AddCommand, UsageError, err, out

__all__ = ["RepairRefused", "RepairResult", "add_repair_command", "repair_cassette"]


class RepairRefused(Exception):
    """The cassette has a problem that repair must not fix automatically; nothing changed.

    `problem` is the underlying `CassetteFormatError`.
    """

    def __init__(self, problem: CassetteFormatError) -> None:
        self.problem = problem
        super().__init__(
            f"{problem}; `sakura-http repair` only removes a torn last line, so nothing was "
            "changed. Fix the line by hand (see `sakura-http lint`) or re-record the cassette"
        )


@dataclass(frozen=True, slots=True)
class RepairResult:
    """What `repair_cassette` did.

    `action` is "none" (the file was healthy), "removed" (a torn last line was cut off) or
    "completed" (a complete last exchange got its missing newline).  `line` is the torn line's
    number, `removed_bytes` how many bytes were cut, `backup` the backup's path.
    """

    action: str
    line: int | None = None
    removed_bytes: int = 0
    backup: Path | None = None


def _backup_path(path: Path) -> Path:
    candidate = path.with_name(path.name + ".bak")
    number = 0
    while candidate.exists():
        number += 1
        candidate = path.with_name(f"{path.name}.bak.{number}")
    return candidate


def _write_backup(path: Path, data: bytes) -> Path:
    backup = _backup_path(path)
    with open(backup, "xb") as file:  # "x": never overwrite an earlier backup
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    return backup


def _is_complete(line: bytes, path: Path, number: int, is_header: bool) -> bool:
    try:
        if is_header:
            decode_header(line, path, number)
        else:
            decode_exchange(line, path, number)
    except CassetteFormatError:
        return False
    return True


def repair_cassette(path: Path) -> RepairResult:
    """Remove a torn last line from the cassette at `path`, after writing `<path>.bak`
    (`.bak.1`, `.bak.2`, ... when that exists).

    The file's append lock is held throughout, so no recorder appends while it is read and
    cut.  A healthy file (empty included) is left alone and gives `action="none"`.  Any problem
    other than a torn last line, and line endings repair does not understand (CR-only), raise
    `RepairRefused` and change nothing.  A missing or unreadable file raises `OSError`.
    """
    with locked(path) as fd:
        data = read_all(fd)
        tail = torn_tail(data)  # exactly what makes appending refuse
        head = data[: len(data) - len(tail)]
        number = head.count(b"\n") + 1
        if b"\r" in tail.rstrip():
            # Without "\n" the rest of the file reads as one torn line; cutting it would
            # discard complete exchanges separated by bare CRs.
            raise RepairRefused(
                CassetteFormatError(
                    path,
                    number,
                    "from this line on the file uses CR-only line endings, which sakura-http "
                    "does not read as line breaks; turn them into LF (for example "
                    "`tr '\\r' '\\n' < FILE > FIXED`) and check the result with `sakura-http lint`",
                )
            )
        try:
            parse_cassette(head, path)
        except CassetteFormatError as exc:
            raise RepairRefused(exc) from None
        if not tail:
            return RepairResult("none")
        is_header = not head.strip()
        if _is_complete(tail, path, number, is_header):
            backup = _write_backup(path, data)
            os.lseek(fd, 0, os.SEEK_END)
            os.write(fd, b"\n")
            return RepairResult("completed", number, 0, backup)
        backup = _write_backup(path, data)
        os.ftruncate(fd, len(head))
        return RepairResult("removed", number, len(tail), backup)


# --- the command -----------------------------------------------------------------------------


def _repair(args: argparse.Namespace) -> int:
    path = Path(args.cassette)
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    try:
        result = repair_cassette(path)
    except RepairRefused as exc:
        err(f"{PROG} repair: refused: {exc}")
        return EXIT_FOUND
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror or exc}") from None
    if result.action == "none":
        out(f"{path}: nothing to repair")
    elif result.action == "removed":
        out(
            f"{path}: removed the torn last line {result.line} "
            f"({human_size(result.removed_bytes)}); backup at {result.backup}"
        )
    else:
        out(
            f"{path}: line {result.line} was a complete exchange without its newline: added "
            f"the newline, kept the exchange; backup at {result.backup}"
        )
    return EXIT_OK


def add_repair_command(command: AddCommand) -> None:
    """Register `repair` through the CLI's registrar."""
    repair = command(
        "repair",
        _repair,
        "Remove a torn last line left by a crash (a backup is written first); "
        "refuse anything else.",
    )
    repair.add_argument("cassette", metavar="CASSETTE")
