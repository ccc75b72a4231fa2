"""Working with git: the logic behind `sakura-http diff REV -- PATH` and `sakura-http git-setup`.

Everything goes through the `git` command (no library, no reading of `.git/` by hand), so it
behaves as the user's git does: worktrees, sub-folders, `GIT_DIR` and the like all work.  The
end of the module is the `git-setup` subcommand itself (its parser and handler,
`add_git_setup_command`); `diff`'s use of git is in `_diff.py`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ._usage import EXIT_OK, AddCommand, UsageError, out

__all__ = [
    "DRIVER",
    "BlobReader",
    "GitError",
    "GitSetup",
    "PatternError",
    "add_git_setup_command",
    "attributes_line",
    "blob_ids",
    "files_at_revision",
    "kind_at_revision",
    "setup_textconv",
    "show_at_revision",
    "textconv_command",
]

#: The name of the diff driver in `.gitattributes` and `git config diff.<name>.textconv`.
DRIVER = "sakura-http"


class GitError(Exception):
    """git could not be run or refused; the message is one line, git's own reason last."""


class PatternError(ValueError):
    """A pattern that cannot be written as a `.gitattributes` pattern; the message says why."""


def _git(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", *argv], cwd=cwd, capture_output=True, check=False)
    except OSError as exc:
        raise GitError(f"cannot run git ({exc.strerror or exc})") from None


def _reason(done: subprocess.CompletedProcess[bytes]) -> str:
    lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else f"git exited {done.returncode}"


def show_at_revision(revision: str, path: Path) -> bytes | None:
    """The bytes of `path` (relative to the current folder) at `revision`, or None when the
    revision does not have the file (a cassette added since).  Raises `GitError` otherwise."""
    spec, folder = _at(revision, path)
    done = _git("cat-file", "blob", spec, cwd=folder)  # a folder (a tree) is not a file
    if done.returncode == 0:
        return done.stdout
    reason = _reason(done)
    if _missing(reason):
        return None
    raise GitError(f"cannot read {revision}:{path} from git: {reason}")


def _at(revision: str, path: Path) -> tuple[str, Path]:
    """`REV:./RELATIVE` naming `path` (relative to the current folder) at `revision`, and the
    folder to run git in: git reads `./` from where it runs, so it runs in the nearest folder
    of `path` that exists (a folder deleted since is found through its parent)."""
    folder = path if path.is_dir() else path.parent
    while not folder.is_dir():
        folder = folder.parent
    relative = Path(os.path.relpath(path, folder)).as_posix()
    return f"{revision}:./{relative}", folder


def _missing(reason: str) -> bool:
    return "exists on disk, but not in" in reason or "does not exist in" in reason


def kind_at_revision(revision: str, path: Path) -> str | None:
    """What `path` is at `revision`: "file", "directory", or None when the revision does not have
    it.  Raises `GitError` for a revision git does not know."""
    spec, folder = _at(revision, path)
    done = _git("cat-file", "-t", spec, cwd=folder)
    if done.returncode != 0:
        reason = _reason(done)
        if _missing(reason):
            return None
        raise GitError(f"cannot read {revision}:{path} from git: {reason}")
    kind = done.stdout.decode().strip()
    return {"blob": "file", "tree": "directory"}.get(kind, kind)


def files_at_revision(revision: str, folder: Path) -> dict[str, str]:
    """Every file under `folder` at `revision`: its path below `folder` (with `/`) -> git's
    id of its content.  Symbolic links and submodules are left out; a folder the revision does
    not have has no files.  Raises `GitError` otherwise."""
    spec, cwd = _at(revision, folder)
    done = _git("ls-tree", "-r", "-z", "--full-tree", spec, cwd=cwd)
    if done.returncode != 0:
        # git says the same for a revision it does not know: ask which it is.
        if kind_at_revision(revision, folder) is None:
            return {}
        raise GitError(f"cannot list {revision}:{folder} from git: {_reason(done)}")
    files: dict[str, str] = {}
    for entry in done.stdout.split(b"\0"):
        if entry:
            info, _, name = entry.partition(b"\t")
            mode, kind, blob = info.decode().split()
            if kind == "blob" and mode in ("100644", "100755"):
                files[name.decode("utf-8", "surrogateescape")] = blob
    return files


def blob_ids(paths: list[Path]) -> list[str]:
    """git's ids of the contents of `paths` (files on disk), as `git add` would store them in
    the repository of the current folder: comparing them with `files_at_revision` tells
    unchanged files without reading the revision's.  Raises `GitError` when git cannot."""
    if not paths:
        return []
    names = "".join(f"{path.resolve()}\n" for path in paths).encode("utf-8", "surrogateescape")
    try:
        done = subprocess.run(
            ["git", "hash-object", "--stdin-paths"], input=names, capture_output=True, check=False
        )
    except OSError as exc:
        raise GitError(f"cannot run git ({exc.strerror or exc})") from None
    if done.returncode != 0:
        raise GitError(f"git hash-object failed: {_reason(done)}")
    return done.stdout.decode().split()


class BlobReader:
    """Reads file contents by their git id through one `git cat-file --batch` process (started
    by the first read), one at a time, for as long as the `with` block lasts."""

    def __init__(self) -> None:
        self._git: subprocess.Popen[bytes] | None = None

    def read(self, blob: str) -> bytes:
        """The content of the blob `blob`; `GitError` when git does not have it."""
        if self._git is None:
            try:
                self._git = subprocess.Popen(
                    ["git", "cat-file", "--batch"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                )
            except OSError as exc:
                raise GitError(f"cannot run git ({exc.strerror or exc})") from None
        stdin, stdout = self._git.stdin, self._git.stdout
        assert stdin is not None and stdout is not None
        try:
            stdin.write(f"{blob}\n".encode())
            stdin.flush()
        except BrokenPipeError:  # not the reader of our output going away: git stopped
            raise GitError(f"git cat-file stopped before reading {blob}") from None
        head = stdout.readline().decode().split()
        if len(head) != 3 or head[1] != "blob":
            raise GitError(f"git cat-file cannot read {blob}: {' '.join(head) or 'no answer'}")
        data = stdout.read(int(head[2]))
        stdout.read(1)  # the newline after each content
        return data

    def __enter__(self) -> BlobReader:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._git is None:
            return
        if self._git.stdin is not None:
            with contextlib.suppress(BrokenPipeError):  # git has gone already
                self._git.stdin.close()
        if self._git.stdout is not None:
            self._git.stdout.close()
        self._git.wait()


def textconv_command(python: str | None = None) -> str:
    """The textconv command `git-setup` configures: the Python interpreter running it
    (`python`, default `sys.executable`, kept as it is: a virtual environment's ``python`` is a
    link whose path chooses the environment) with ``-m sakura_http show --textconv``, quoted for
    the shell git runs it with.  So `git diff` finds sakura-http from any shell, whether or not
    the environment is activated.  Without a known interpreter, ``sakura-http`` on PATH."""
    python = sys.executable if python is None else python
    if not python:
        return "sakura-http show --textconv"
    return f"{shlex.quote(python)} -m sakura_http show --textconv"


def attributes_line(pattern: str) -> str:
    """The `.gitattributes` line ``<pattern> diff=sakura-http``, the pattern quoted in C style
    (as git reads a pattern starting with a double quote) when it holds a space, a quote or a
    backslash.  Raises `PatternError` for a pattern git would not read as one: empty, holding a
    control character (a newline would start another line), or starting with ``!`` (git ignores
    negative patterns in attributes) or ``#`` (a comment)."""
    if not pattern.strip():
        raise PatternError(f"the pattern {pattern!r} is empty: give a glob such as '*.jsonl'")
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in pattern):
        raise PatternError(
            f"the pattern {pattern!r} holds a control character (a newline, tab or the like), "
            "which no .gitattributes pattern can hold: match that character with '?'"
        )
    if pattern[0] in "!#":
        what = "a comment" if pattern[0] == "#" else "a negative pattern, which git ignores here"
        raise PatternError(
            f"the pattern {pattern!r} starts with {pattern[0]!r}: .gitattributes would read it "
            f"as {what}; match that character with '?' ('?{pattern[1:]}')"
        )
    if any(char in pattern for char in ' "\\'):
        quoted = pattern.replace("\\", "\\\\").replace('"', '\\"')
        pattern = f'"{quoted}"'
    return f"{pattern} diff={DRIVER}"


@dataclass(frozen=True, slots=True)
class GitSetup:
    """What `setup_textconv` did: the `.gitattributes` file, its lines that were added and
    those that were already there, and the textconv command now configured."""

    attributes: Path
    added: tuple[str, ...]
    present: tuple[str, ...]
    command: str


def setup_textconv(patterns: list[str], command: str | None = None) -> GitSetup:
    """Make git diff the files matching `patterns` through `command` (a textconv; default
    `textconv_command()`) in the repository of the current folder: add
    `<pattern> diff=sakura-http` lines (`attributes_line`) to the top-level `.gitattributes`
    (never twice) and set `diff.sakura-http.textconv` in the repository's own configuration.
    Raises `PatternError` for a bad pattern before anything is written, `GitError` outside a
    repository, `OSError` when `.gitattributes` cannot be read or written."""
    wanted = [attributes_line(pattern) for pattern in patterns]
    command = textconv_command() if command is None else command
    done = _git("rev-parse", "--show-toplevel")
    if done.returncode != 0:
        raise GitError(f"git rev-parse failed: {_reason(done)}")
    root = Path(done.stdout.decode().strip())
    attributes = root / ".gitattributes"
    existing = attributes.read_text(encoding="utf-8") if attributes.exists() else ""
    have = {tuple(line.split()) for line in existing.splitlines()}
    added = tuple(line for line in wanted if tuple(line.split()) not in have)
    if added:
        text = existing + ("\n" if existing and not existing.endswith("\n") else "")
        attributes.write_text(text + "".join(f"{line}\n" for line in added), encoding="utf-8")
    done = _git("config", "--local", f"diff.{DRIVER}.textconv", command, cwd=root)
    if done.returncode != 0:
        raise GitError(f"git config failed: {_reason(done)}")
    present = tuple(line for line in wanted if line not in added)
    return GitSetup(attributes, added, present, command)


# --- the command -----------------------------------------------------------------------------


def _git_setup(args: argparse.Namespace) -> int:
    try:
        done = setup_textconv(args.pattern or ["*.jsonl"], args.textconv)
    except (GitError, PatternError) as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"{exc.filename or '.gitattributes'}: {exc.strerror or exc}") from None
    for line in done.added:
        out(f"added to {done.attributes}: {line}")
    for line in done.present:
        out(f"already in {done.attributes}: {line}")
    out(f'set git config diff.{DRIVER}.textconv "{done.command}" (this repository only)')
    out("`git diff` and `git log -p` now show cassettes one field per line")
    return EXIT_OK


def add_git_setup_command(command: AddCommand) -> None:
    """Register `git-setup` through the CLI's registrar."""
    git_setup = command(
        "git-setup",
        _git_setup,
        "Make `git diff` and `git log -p` show cassettes readably in this repository.",
        "Adds a diff attribute to .gitattributes and sets its textconv to "
        "`PYTHON -m sakura_http show --textconv` in the repository's git config, PYTHON being "
        "the interpreter running this command, so `git diff` works from any shell.",
    )
    git_setup.add_argument(
        "--pattern",
        action="append",
        metavar="GLOB",
        help="the files that are cassettes, as a .gitattributes pattern (repeatable; "
        "default *.jsonl)",
    )
    git_setup.add_argument(
        "--command",
        dest="textconv",  # not "command": that is the subcommand's name
        metavar="COMMAND",
        help="the textconv command git runs, through the shell, with a file name appended "
        "(default: this Python with -m sakura_http show --textconv)",
    )
