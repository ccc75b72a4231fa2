"""A cassette file on disk: load it, append to it under a lock, replace it atomically.

Appending is one `write` of one complete line, under an exclusive lock on the file itself, so
several processes (pytest-xdist workers) can record into one cassette without interleaving; a
crash can tear at most the last line, which the next load reports instead of hiding.

Re-recording a whole cassette (mode "all") writes a sibling `<name>.recording` file, locked for
as long as the recording lasts, and moves it over the cassette with `os.replace` on commit.
While that lock is held, the cassette belongs to the re-recording: an append from another
process would be replaced with the file, and a second re-recording would replace the first, so
both are refused (`RerecordingInProgress`, naming the process).  The lock dies with its
process, so a re-recording killed mid-way blocks no one; the `.recording` file it leaves is a
stray that the next open of the cassette removes.

Who may start, end or test a re-recording is settled under a second lock, on the cassette's
folder: appends hold it shared (they do not wait for one another), while claiming a
re-recording, committing or dropping one, and removing a stray hold it exclusively.  So an
append either finished before a re-recording began (and is part of what it replaces) or sees
it and is refused; a claim or a stray's removal never mistakes a brief look at the lock for a
live re-recording; and a commit never moves the file while an append is writing to it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import sys
import time
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson

from ._exceptions import CassetteFormatError, RerecordingInProgress
from ._format import CassetteContent, CassetteParser, encode_header, torn_tail

__all__ = [
    "RECORDING_ESCAPES",
    "AtomicRecording",
    "append_lines",
    "cassette_stem",
    "default_fixtures_folder",
    "load_cassette",
    "locked",
    "open_for_writing",
    "read_all",
    "recording_path",
    "remove_stray_recording",
]

#: pytest-recording's escapes (its get_default_cassette_name): each of these becomes "-".
RECORDING_ESCAPES = str.maketrans(dict.fromkeys("<>?%*:|\"'/\\", "-"))
_NOT_FILE_SAFE = re.compile(r"[^A-Za-z0-9._,=+\-\[\]]+")


def cassette_stem(name: str) -> str:
    """`name` (a test's name: ``test_x[id]``, or ``Class.test_x[id]``) as the stem of its
    cassette's file name, the one the pytest plugin looks for and `sakura-http migrate` moves a
    pytest-recording cassette to.

    Each of ``<>?%*:|"'/\\`` becomes ``-``, as pytest-recording names its cassettes, so migrate
    gets the same stem from that file's name alone; then every other run of characters that
    are not file-safe (spaces, non-ASCII letters, ``#``...) becomes one ``-``.  A stem over
    150 characters keeps its first 130 and a digest of the whole (file names are limited to
    255 bytes).
    """
    escaped = name.translate(RECORDING_ESCAPES)
    safe = _NOT_FILE_SAFE.sub("-", escaped)
    if len(safe) > 150:
        digest = hashlib.sha256(escaped.encode()).hexdigest()[:12]
        safe = f"{safe[:130]}-{digest}"
    return safe


def default_fixtures_folder(test_path: Path, root: Path) -> Path:
    """Where a test file's cassettes live unless configured (the pytest plugin's default, and
    where `sakura-http migrate` moves them): ``fixtures/`` in the nearest ancestor folder named
    ``tests`` within `root`, else ``<root>/tests/fixtures``.  The folder is not created."""
    for parent in test_path.parents:
        if parent.name == "tests":
            return parent / "fixtures"
        if parent == root:
            break
    return root / "tests" / "fixtures"


if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
    import msvcrt

    def _lock(fd: int, blocking: bool = True) -> bool:
        os.lseek(fd, 0, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_LOCK if blocking else msvcrt.LK_NBLCK, 1)
        except OSError:
            if blocking:
                raise
            return False
        return True

    def _unlock(fd: int) -> None:
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

    @contextlib.contextmanager
    def _shared(fd: int) -> Iterator[None]:
        # msvcrt has no shared lock for a read-only descriptor; Windows writes of one buffer
        # are not observed half-done by readers of the same file in practice.
        yield

    def _is_free(fd: int) -> bool:
        if not _lock(fd, blocking=False):
            return False
        _unlock(fd)
        return True

    def _enter_folder(folder: Path, *, exclusive: bool, blocking: bool = True) -> int | None:
        # Windows cannot lock a folder: the folder lock is a no-op there (and `os.replace`
        # cannot move a file another process holds open anyway).
        return -1

    def _leave_folder(fd: int) -> None:
        pass

    def _write_at(fd: int, offset: int, data: bytes) -> None:
        os.lseek(fd, offset, os.SEEK_SET)  # (Windows has no pwrite)
        _write_all(fd, data)

else:
    import fcntl

    def _lock(fd: int, blocking: bool = True) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def _shared(fd: int) -> Iterator[None]:
        # A shared lock: appends (which take the exclusive one) wait, so a reader never sees
        # a line another process is still writing, which would read as a torn tail.
        fcntl.flock(fd, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def _is_free(fd: int) -> bool:
        """Whether no one holds an exclusive lock on the file (tried shared, so that several
        processes looking at once never see each other as a holder)."""
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True

    def _enter_folder(folder: Path, *, exclusive: bool, blocking: bool = True) -> int | None:
        """Lock `folder` (see the module's docstring); the descriptor to give `_leave_folder`,
        or None when `blocking` is False and another process holds a conflicting lock."""
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        operation = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        try:
            fcntl.flock(fd, operation if blocking else operation | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _leave_folder(fd: int) -> None:
        os.close(fd)  # (closing the only descriptor of the open folder releases its lock)

    def _write_at(fd: int, offset: int, data: bytes) -> None:
        """Write `data` whole at `offset` of the file (one system call: `os.pwrite`)."""
        view = memoryview(data)
        while view:
            written = os.pwrite(fd, view, offset)
            view = view[written:]
            offset += written


@contextlib.contextmanager
def _locked(fd: int) -> Iterator[None]:
    _lock(fd)
    try:
        yield
    finally:
        _unlock(fd)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[int]:
    """Hold the append lock of the existing cassette `path` for the block; yield its file
    descriptor, open for reading and writing.

    Recorders appending to `path` (in this or another process) wait until the block ends, so a
    tool that rewrites the file in place (`sakura-http repair`) never races an append.  A
    missing file raises `FileNotFoundError`; nothing is created.
    """
    fd = os.open(path, os.O_RDWR)
    try:
        with _locked(fd):
            yield fd
    finally:
        os.close(fd)


def load_cassette(path: str | os.PathLike[str]) -> CassetteContent:
    """Read and parse the cassette at `path`: its header, exchanges and their line numbers.

    A missing or empty file is an empty cassette.  A file that cannot be read as a cassette (bad
    JSON, a missing field, an unknown schema, a torn last line, a directory) raises
    `CassetteFormatError` naming the file and line.
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return CassetteContent(header={}, exchanges=[], line_numbers=[])
    except IsADirectoryError:
        raise CassetteFormatError(path, None, "is a directory, not a cassette file") from None
    # Parsed as it is read, under the shared lock: the file is never held whole, and a long
    # body is read apart from its line, once (the parser's `read_at`; see CassetteParser).
    parser = CassetteParser(path, functools.partial(_read_at, fd))
    try:
        with _shared(fd):
            offset = 0
            while block := _read_at(fd, offset, _READ_BLOCK):
                offset += len(block)
                parser.feed(block)
    except IsADirectoryError:
        raise CassetteFormatError(path, None, "is a directory, not a cassette file") from None
    finally:
        os.close(fd)
    return parser.close()


_READ_BLOCK = 1 << 20


def read_all(fd: int) -> bytes:
    """The whole file behind `fd`, from its start (with `locked`, under the append lock)."""
    os.lseek(fd, 0, os.SEEK_SET)
    # One read of the size the file has: no list of blocks joined into a second copy.
    data = os.read(fd, os.fstat(fd).st_size)
    while more := os.read(fd, _READ_BLOCK):  # a file that grew, or a read cut short
        data += more
    return data


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


_BLOCK = 65536


def _read_at(fd: int, offset: int, size: int) -> bytes:
    os.lseek(fd, offset, os.SEEK_SET)
    pieces = []
    while size > 0:
        piece = os.read(fd, size)
        if not piece:
            break
        pieces.append(piece)
        size -= len(piece)
    return b"".join(pieces)


def _last_line(fd: int, size: int) -> bytes:
    """The file's bytes from its last newline on (the whole file when it has none)."""
    end, tail = size, b""
    while end > 0:
        start = max(0, end - _BLOCK)
        tail = _read_at(fd, start, end - start) + tail
        if b"\n" in tail:
            return tail[tail.rfind(b"\n") :]
        end = start
    return tail


def _is_blank(fd: int, size: int) -> bool:
    """Whether the file holds nothing but whitespace (reads only up to the first non-blank)."""
    offset = 0
    while offset < size:
        block = _read_at(fd, offset, min(_BLOCK, size - offset))
        if not block or block.strip():
            return not block
        offset += len(block)
    return True


def _append_locked(fd: int, path: Path, data: bytes, header: Mapping[str, Any]) -> None:
    size = os.fstat(fd).st_size
    last = _last_line(fd, size)
    if torn_tail(last):
        raise CassetteFormatError(
            path,
            None,
            "ends with an incomplete line (another process crashed mid-write); "
            "nothing was appended. Run `sakura-http repair` on it, then record again",
        )
    if _is_blank(fd, size):
        data = encode_header(header) + data  # a new, empty or whitespace-only file
    if last and not last.endswith(b"\n"):
        data = b"\n" + data  # blank space after the last newline: start a fresh line
    try:
        _write_all(fd, data)
    except BaseException:
        os.ftruncate(fd, size)  # a write cut short (a full disk) takes back what it wrote
        raise


def append_lines(path: Path, data: bytes, header: Mapping[str, Any], *, wait: bool = True) -> bool:
    """Append complete lines to `path` in one locked write; write the header line first if the
    file is new or empty.  Missing parent folders are created now, never before.

    While another process re-records `path` (mode "all"), nothing is written and
    `RerecordingInProgress` is raised: the re-recording would replace the appended lines.  With
    `wait` False, a lock another writer holds is not waited for: nothing is written and the
    answer is False (else True)."""
    retries = 3
    while True:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            return _append(path, data, header, wait)
        except FileNotFoundError:
            # The folder went between its mkdir and its open: a re-recording that recorded
            # nothing takes back the folders it made.  Make it again.
            retries -= 1
            if not retries:
                raise


def _append(path: Path, data: bytes, header: Mapping[str, Any], wait: bool) -> bool:
    folder = _enter_folder(path.parent, exclusive=False, blocking=wait)
    if folder is None:
        return False
    try:
        refusal = _live_rerecording(path)
        if refusal is not None:
            raise refusal
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if not _lock(fd, blocking=wait):
                return False
            try:
                _append_locked(fd, path, data, header)
            finally:
                _unlock(fd)
        finally:
            os.close(fd)
    finally:
        _leave_folder(folder)
    return True


def recording_path(path: Path) -> Path:
    """The file a re-recording of `path` writes until it commits: `<name>.recording` beside it."""
    return path.with_name(path.name + ".recording")


def _live_rerecording(path: Path) -> RerecordingInProgress | None:
    """The refusal to give an append while a live process re-records `path`, else None.  Call
    it holding the folder lock (then only a re-recording can hold the `.recording` lock)."""
    try:
        fd = os.open(recording_path(path), os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        return None if _is_free(fd) else _refusal(path, fd, claiming=False)
    finally:
        os.close(fd)


_OWNER_KEY = "rerecording"


def _owner(fd: int) -> tuple[int | None, float | None]:
    """The process id and start time on the last line of a `.recording` file (see
    `AtomicRecording.append`), or Nones if the line cannot be read right now."""
    size = os.fstat(fd).st_size
    tail = _read_at(fd, max(0, size - 256), min(size, 256))
    try:
        owner = orjson.loads(tail.rstrip(b"\n").rpartition(b"\n")[2])[_OWNER_KEY]
        return int(owner["pid"]), float(owner["since"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None, None


def _refusal(path: Path, fd: int, *, claiming: bool) -> RerecordingInProgress:
    pid, since = _owner(fd)
    who = "a process whose id could not be read" if pid is None else f"process {pid}"
    if since is not None:
        who += f", since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(since))}"
    if claiming:
        what = (
            "two processes re-recording one cassette would lose each other's exchanges. "
            "Re-record it from a single process (for example `pytest --record-all -n 0`), or "
            "use `pytest --record` (mode 'new_episodes'), which appends safely from many "
            "processes"
        )
    else:
        what = (
            "it replaces the whole file when it ends, so an exchange appended now would be "
            "lost: nothing was written. Record again once that process has finished (or stop "
            "it); while a cassette is re-recorded, no other process may record into it"
        )
    return RerecordingInProgress(
        f"another process is re-recording {path} right now (mode 'all'): {who}; {what}",
        path=str(path),
        pid=pid,
        since=since,
    )


def remove_stray_recording(path: Path) -> bool:
    """Remove the `<name>.recording` file beside `path` if the process that wrote it is gone
    (killed mid-way through a re-recording); answer whether a file was removed.

    "Gone" is the lock, not a guess from a process id: a live re-recording holds its file's
    lock until it ends, and the system frees it when its process dies.  A stray that cannot be
    removed (a read-only folder) is left as it is: it is never read."""
    stray = recording_path(path)
    if not os.path.lexists(stray):
        return False
    try:
        folder = _enter_folder(path.parent, exclusive=True)
        assert folder is not None
        try:
            fd = os.open(stray, os.O_RDONLY)
            try:
                if not _lock(fd, blocking=False):
                    return False  # a live re-recording
                os.unlink(stray)
            finally:
                os.close(fd)
        finally:
            _leave_folder(folder)
    except OSError:
        return False
    return True


def open_for_writing(
    path: Path, header: Mapping[str, Any], *, rerecord: bool
) -> AtomicRecording | None:
    """What opening the cassette `path` does to the files: with `rerecord` (mode "all") the
    re-recording starts now (`AtomicRecording`), so from the moment the cassette is open no
    other process may append to it; else a `.recording` file its writer left behind is
    removed (`remove_stray_recording`) and None is returned."""
    if rerecord:
        return AtomicRecording(path, header)
    remove_stray_recording(path)
    return None


def _make_folders(folder: Path) -> list[Path]:
    """Make `folder` and its missing parents; answer those that were missing, deepest first."""
    missing = []
    while not folder.exists() and folder.parent != folder:
        missing.append(folder)
        folder = folder.parent
    if missing:
        missing[0].mkdir(parents=True, exist_ok=True)
    return missing


def _remove_folders(folders: list[Path]) -> None:
    """Take back folders `_make_folders` made, deepest first, as long as they are empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


class AtomicRecording:
    """A fresh cassette written beside `path` that replaces it on `replace_cassette()`.

    Creating it claims the cassette: until `replace_cassette()` or `discard()`, the sibling
    `<name>.recording` file stays locked, and an append from another process or a second
    re-recording is refused with `RerecordingInProgress` naming this process and when it
    began (the file's last line says both).  The old cassette is untouched until
    `replace_cassette()`.
    Missing parent folders are made now, and taken back if nothing is committed.  Dropped
    unclosed (or its process killed), it leaves `<name>.recording` unlocked: a stray, removed
    by the next open of the cassette (`remove_stray_recording`).
    """

    def __init__(self, path: Path, header: Mapping[str, Any]) -> None:
        self.path = path
        self.temp_path = recording_path(path)
        self._header = dict(header)
        #: When the re-recording began, in seconds since the epoch.
        self.since = time.time()
        owner = {_OWNER_KEY: {"pid": os.getpid(), "since": self.since}}
        self._owner_line = orjson.dumps(owner, option=orjson.OPT_APPEND_NEWLINE)
        self._made = _make_folders(path.parent)
        try:
            fd = self._claim()
        except BaseException:
            _remove_folders(self._made)
            raise
        self._fd: int | None = fd
        self._size = 0  # bytes of the cassette written: this process alone writes the file
        self.count = 0
        # Dropped without replace_cassette() or discard(): closing the file frees its lock.
        self._finalizer = weakref.finalize(self, os.close, fd)

    def _claim(self) -> int:
        folder = _enter_folder(self.path.parent, exclusive=True)
        assert folder is not None
        try:
            fd = os.open(self.temp_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if not _lock(fd, blocking=False):
                    raise _refusal(self.path, fd, claiming=True)
                os.ftruncate(fd, 0)  # a stray left by a writer that is gone is started over
                _write_all(fd, self._owner_line)
            except BaseException:
                os.close(fd)
                raise
        finally:
            _leave_folder(folder)
        return fd

    def append(self, data: bytes) -> None:
        """Append one complete exchange line to the fresh cassette."""
        fd = self._fd
        if fd is None:
            raise RuntimeError(f"the re-recording of {self.path} is already closed")
        if self._size == 0:
            data = encode_header(self._header) + data
        try:
            # The line naming this process stays last, for a refused process to read; the
            # commit cuts it off.  One write for both, at the place of the last one's (benchmark
            # row "4. The same, sakura-http and the bare client alternating in one process",
            # recording: three system calls an exchange were a seek and two writes).
            _write_at(fd, self._size, data + self._owner_line)
        except BaseException:
            # A write cut short (a full disk) takes back what it wrote: the next line must not
            # land glued to half of this one.
            os.ftruncate(fd, self._size)
            with contextlib.suppress(OSError):
                _write_at(fd, self._size, self._owner_line)
            raise
        self._size += len(data)
        self.count += 1

    def replace_cassette(self) -> None:
        """Move the fresh cassette over the old one (if anything was recorded) and unlock."""
        self._end(keep=True)

    def discard(self) -> None:
        """Drop the fresh cassette and unlock; the old cassette stays as it was."""
        self._end(keep=False)

    def _end(self, keep: bool) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        self._finalizer.detach()
        keep = keep and self.count > 0  # nothing recorded: keep the old cassette, not wipe it
        try:
            if keep:
                os.ftruncate(fd, self._size)  # the line naming this process goes
                os.fsync(fd)
            folder = _enter_folder(self.path.parent, exclusive=True)
            assert folder is not None
            try:
                if keep:
                    os.replace(self.temp_path, self.path)
                else:
                    self.temp_path.unlink(missing_ok=True)
            finally:
                _leave_folder(folder)
        finally:
            os.close(fd)
        if not keep:
            _remove_folders(self._made)
