"""The narrow file seam under segments and indexes.

Segments and indexes talk to a :class:`StorageFile` (positional read, append,
fsync, truncate) so unit tests can run them on :class:`MemoryFile` and the crash
tests on a fault-injecting twin. :class:`OsFile` is the real thing.

Invariant enforced here: an append either lands whole or leaves the file at its
old size. A failed ``write`` (disk full, I/O error) is rolled back with
``ftruncate`` before the error reaches the caller, so a log never keeps a torn
batch it did not acknowledge.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Callable
from typing import Protocol

from lkstream.errors import map_os_errors


class StorageFile(Protocol):
    """What a segment or index needs from a file. Not thread-safe by itself."""

    path: str

    def size(self) -> int: ...
    def pread(self, size: int, position: int) -> bytes: ...
    def append(self, data: bytes | bytearray | memoryview) -> int: ...
    def fsync(self) -> None: ...
    def truncate(self, size: int) -> None: ...
    def close(self) -> None: ...


class OsFile:
    """A file opened for append and positional reads, with its size tracked in memory."""

    def __init__(self, path: str, *, create: bool = True, read_only: bool = False) -> None:
        self.path = path
        flags = os.O_RDONLY if read_only else os.O_RDWR | (os.O_CREAT if create else 0)
        with map_os_errors("open", path):
            self._fd = os.open(path, flags | os.O_CLOEXEC, 0o644)
            self._size = os.fstat(self._fd).st_size

    def size(self) -> int:
        return self._size

    def pread(self, size: int, position: int) -> bytes:
        with map_os_errors("read", self.path):
            return os.pread(self._fd, size, position)

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Write ``data`` at the end; return the position it starts at."""
        start = self._size
        view = memoryview(data)
        written = 0
        try:
            while written < len(view):
                written += os.pwrite(self._fd, view[written:], start + written)
        except OSError:
            self._rollback(start)
            with map_os_errors("append", self.path):
                raise
        self._size = start + written
        return start

    def _rollback(self, size: int) -> None:
        # Best effort: if even ftruncate fails, recovery truncates the torn tail on next open.
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, size)

    def fsync(self) -> None:
        with map_os_errors("fsync", self.path):
            os.fdatasync(self._fd)

    def pinned(self) -> tuple[int, Callable[[], None]]:
        """A duplicate of the descriptor, closed by ``unpin()``: it outlives :meth:`close` (read ranges)."""
        with map_os_errors("dup", self.path):
            fd = os.dup(self._fd)
        return fd, functools.partial(os.close, fd)

    def truncate(self, size: int) -> None:
        with map_os_errors("truncate", self.path):
            os.ftruncate(self._fd, size)
        self._size = size

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class MemoryFile:
    """An in-memory :class:`StorageFile` that remembers what was fsynced.

    ``crash()`` drops every byte written after the last ``fsync``, which is what
    a power loss may do to a real file.
    """

    def __init__(self, path: str = "<memory>", data: bytes = b"") -> None:
        self.path = path
        self.data = bytearray(data)
        self.durable = bytes(data)
        self.closed = False
        self._lock = threading.Lock()

    def size(self) -> int:
        return len(self.data)

    def pread(self, size: int, position: int) -> bytes:
        return bytes(self.data[position : position + size])

    def append(self, data: bytes | bytearray | memoryview) -> int:
        start = len(self.data)
        self.data += data
        return start

    def fsync(self) -> None:
        with self._lock:
            self.durable = bytes(self.data)

    def truncate(self, size: int) -> None:
        del self.data[size:]

    def close(self) -> None:
        self.closed = True

    def crash(self) -> None:
        self.data = bytearray(self.durable)


def fsync_dir(path: str) -> None:
    """fsync a directory so that entries created, renamed or removed in it are durable."""
    with map_os_errors("fsync directory", path):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write(path: str, data: bytes, *, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` atomically and durably.

    tmp file, fsync, rename over the target, fsync the directory: after a crash
    the file holds either the old or the new content, never a mix. The only
    function that writes metadata files; stray ``*.tmp`` files are swept on open.
    ``mode`` is the new file's permission bits (0o600 for credentials), less the umask.
    """
    # Unique per writer, so two writers of one file never share (or clobber) a tmp file.
    tmp = f"{path}.{os.getpid()}-{threading.get_ident()}.tmp"
    try:
        with map_os_errors("write", tmp):
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
        with map_os_errors("rename", path):
            os.replace(tmp, path)
    except BaseException:
        # A half-written tmp file must not keep holding space on a full disk.
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    fsync_dir(os.path.dirname(path) or ".")
