"""Working with git: the logic behind `sakura-http diff REV -- PATH` and `sakura-http git-setup`.

Everything goes through the `git` command (no library, no reading of `.git/` by hand), so it
behaves as the user's git does: worktrees, sub-folders, `GIT_DIR` and the like all work.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DRIVER", "GitError", "GitSetup", "setup_textconv", "show_at_revision"]

#: The name of the diff driver in `.gitattributes` and `git config diff.<name>.textconv`.
DRIVER = "sakura-http"


class GitError(Exception):
    """git could not be run or refused; the message is one line, git's own reason last."""


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
    folder = path.parent if path.parent.is_dir() else Path.cwd()
    done = _git("show", f"{revision}:./{path.name}", cwd=folder)
    if done.returncode == 0:
        return done.stdout
    reason = _reason(done)
    if "exists on disk, but not in" in reason or "does not exist in" in reason:
        return None
    raise GitError(f"cannot read {revision}:{path} from git: {reason}")


@dataclass(frozen=True, slots=True)
class GitSetup:
    """What `setup_textconv` did: the `.gitattributes` file, its lines that were added and
    those that were already there, and the textconv command now configured."""

    attributes: Path
    added: tuple[str, ...]
    present: tuple[str, ...]
    command: str


def setup_textconv(patterns: list[str], command: str) -> GitSetup:
    """Make git diff the files matching `patterns` through `command` (a textconv) in the
    repository of the current folder: add `<pattern> diff=sakura-http` lines to the top-level
    `.gitattributes` (never twice) and set `diff.sakura-http.textconv` in the repository's own
    configuration.  Raises `GitError` outside a repository, `OSError` when `.gitattributes`
    cannot be read or written."""
    done = _git("rev-parse", "--show-toplevel")
    if done.returncode != 0:
        raise GitError(f"git rev-parse failed: {_reason(done)}")
    root = Path(done.stdout.decode().strip())
    attributes = root / ".gitattributes"
    existing = attributes.read_text(encoding="utf-8") if attributes.exists() else ""
    have = {tuple(line.split()) for line in existing.splitlines()}
    wanted = [f"{pattern} diff={DRIVER}" for pattern in patterns]
    added = tuple(line for line in wanted if tuple(line.split()) not in have)
    if added:
        text = existing + ("\n" if existing and not existing.endswith("\n") else "")
        attributes.write_text(text + "".join(f"{line}\n" for line in added), encoding="utf-8")
    done = _git("config", f"diff.{DRIVER}.textconv", command, cwd=root)
    if done.returncode != 0:
        raise GitError(f"git config failed: {_reason(done)}")
    present = tuple(line for line in wanted if line not in added)
    return GitSetup(attributes, added, present, command)
