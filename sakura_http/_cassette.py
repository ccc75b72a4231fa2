"""A cassette file on disk: load it, append to it under a lock, replace it atomically.

Appending is one `write` of one complete line, under an exclusive lock on the file itself, so
several processes (pytest-xdist workers) can record into one cassette without interleaving; a
crash can tear at most the last line, which the next load reports instead of hiding.

Re-recording a whole cassette (mode "all") writes a sibling `<name>.recording` file, locked for
as long as the recording lasts, and moves it over the cassette with `os.replace` on commit.  A
second process that tries to re-record the same cassette at the same time is refused.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ._exceptions import CassetteFormatError, RecordingForbidden
from ._format import CassetteContent, CassetteParser, encode_header, torn_tail

__all__ = ["AtomicRecording", "append_lines", "load_cassette", "locked", "read_all"]

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

    With `wait` False, a lock another writer holds is not waited for: nothing is written and
    the answer is False (else True)."""
    path.parent.mkdir(parents=True, exist_ok=True)
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
    return True


class AtomicRecording:
    """A fresh cassette written beside `path` that replaces it on `commit()`.

    Until `commit()` the old cassette is untouched.  The sibling file stays locked while this
    object is open, so two processes re-recording one cassette cannot overwrite each other's
    exchanges: the second is refused with `RecordingForbidden`.
    """

    def __init__(self, path: Path, header: Mapping[str, Any]) -> None:
        self.path = path
        self.temp_path = path.with_name(path.name + ".recording")
        self._header = dict(header)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.temp_path, os.O_RDWR | os.O_CREAT, 0o644)
        if not _lock(fd, blocking=False):
            os.close(fd)
            raise RecordingForbidden(
                f"another process is re-recording {path} right now (mode 'all'); two "
                "processes re-recording one cassette would lose each other's exchanges. "
                "Re-record it from a single process (for example `pytest --record-all -n 0`), "
                "or use `pytest --record` (mode 'new_episodes'), which appends safely from "
                "many processes"
            )
        os.ftruncate(fd, 0)  # a stale file left by a crashed recording is started over
        self._fd: int | None = fd
        self._size = 0  # bytes written: this process alone writes the locked file
        self.count = 0

    def append(self, data: bytes) -> None:
        """Append one complete exchange line to the fresh cassette."""
        if self._fd is None:
            raise RuntimeError(f"the re-recording of {self.path} is already closed")
        if self._size == 0:
            data = encode_header(self._header) + data
        try:
            _write_all(self._fd, data)
        except BaseException:
            # A write cut short (a full disk) takes back what it wrote: the next line must not
            # land glued to half of this one.
            os.ftruncate(self._fd, self._size)
            os.lseek(self._fd, self._size, os.SEEK_SET)
            raise
        self._size += len(data)
        self.count += 1

    def commit(self) -> None:
        """Move the fresh cassette over the old one (if anything was recorded) and unlock."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            if self.count:
                os.fsync(fd)
                os.replace(self.temp_path, self.path)
            else:
                # Nothing was recorded: keep the old cassette rather than wipe it.
                self.temp_path.unlink(missing_ok=True)
        finally:
            os.close(fd)

    def discard(self) -> None:
        """Drop the fresh cassette and unlock; the old cassette stays as it was."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            self.temp_path.unlink(missing_ok=True)
        finally:
            os.close(fd)
