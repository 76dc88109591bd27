"""One budget of open files for every partition of a broker (issue 12, finding 1).

Each partition used to keep a segment and an index file open per segment, for its
whole life: one ``POST /topics {"partitions": 10000}`` exhausted the descriptors,
and a data directory with enough partitions could not be opened again (EMFILE).

:class:`FileBudget` owns at most ``capacity`` open descriptors. Segment and index
files are :class:`BudgetedFile`\\ s: a path, a size kept in memory and, while the
file is in use or recently used, a descriptor taken from the budget. Every
operation pins the descriptor for its duration; unpinned descriptors sit in an
LRU and the least recently used one is closed when another file needs a slot.
Opening is lazy: a file costs nothing until it is read or written, so a broker
opens with any number of partitions and sealed segments are closed after use.
A partition created empty goes further (:meth:`FileBudget.deferred_file`): its first
segment and index files are not even created until the first write, and the
directory entry of a file created so is fsynced with the file's first fsync.

Durability across eviction: a file with writes not yet fsynced ("dirty") is
evicted only when no clean file is left to evict, and then it is fsynced *before*
its descriptor closes (on Linux an fsync through any descriptor covers the whole
file, so the group committer's later fsync through a new descriptor covers the
rest). If that fsync fails, the error sticks to the file: its next :meth:`fsync`
raises it, so the log refuses further appends as after any failed fsync
("fsyncgate"); nothing acknowledged is called durable without an fsync.

``capacity`` is derived from ``RLIMIT_NOFILE`` (:func:`derive_capacity`): the soft
limit minus a reserve for sockets, the offsets journal, checkpoints and the
``LOCK``. A pinned file never waits for a slot: when every descriptor is pinned
the budget goes over by the few files in use at that instant, which the reserve
covers.

Thread-safety: :class:`FileBudget` is thread-safe; its lock is a leaf, held only
for bookkeeping (no system call runs under it). A :class:`BudgetedFile` is used
under its log's lock, except ``fsync``, which the group committer runs outside it,
concurrently with appends (a pin count covers that).
"""

from __future__ import annotations

import contextlib
import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Final

from lkstream.errors import StorageError, map_os_errors
from lkstream.storage.files import fsync_dir

#: The smallest budget: a few partitions' active segments and indexes.
MIN_CAPACITY: Final = 16
#: How many LRU entries an eviction looks through for a clean file before it fsyncs a dirty one.
_CLEAN_SCAN: Final = 64
#: Appends up to this size keep the GIL through their pwrite (see lkstream/storage/_pwrite.c):
#: a copy into the page cache of this much takes microseconds.
GIL_HELD_WRITE_BYTES: Final = 64 * 1024


def _native_pwrite() -> Callable[[int, bytes | bytearray | memoryview, int], int] | None:
    try:
        from lkstream.storage import _pwrite  # type: ignore[attr-defined]
    except ImportError:
        return None
    pwrite: Callable[[int, bytes | bytearray | memoryview, int], int] = _pwrite.pwrite_holding_gil
    return pwrite


_NATIVE_PWRITE: Final = _native_pwrite()
#: Whether the C write is built (``pip install`` compiles it; without it small appends let go of the GIL).
NATIVE_PWRITE: Final = _NATIVE_PWRITE is not None
#: ``os.pwrite`` keeping the GIL (C when built, else ``os.pwrite`` itself): for small writes only.
pwrite_holding_gil: Final[Callable[[int, bytes | bytearray | memoryview, int], int]] = _NATIVE_PWRITE or os.pwrite


def descriptor_limit() -> int:
    """The process's soft ``RLIMIT_NOFILE`` (a large number when it is unlimited)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def derive_capacity(configured: int, reserve: int, limit: int | None = None) -> int:
    """The budget: ``configured`` if set (> 0), else the descriptor limit minus ``reserve``.

    The reserve never takes more than three quarters of a small limit, so a broker
    started under ``ulimit -n 128`` still gets 32 files.
    """
    if configured > 0:
        return configured
    limit = descriptor_limit() if limit is None else limit
    return max(MIN_CAPACITY, limit // 4, limit - reserve)


class FileBudget:
    """At most ``capacity`` open descriptors for the :class:`BudgetedFile`\\ s made by :meth:`file`."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be positive, got {capacity}")
        self.capacity = capacity
        self._lock = threading.Lock()
        self._idle: OrderedDict[BudgetedFile, None] = OrderedDict()  # open, unpinned, oldest first
        self._open = 0
        #: Counters for tests and stats: descriptors opened, closed by eviction, dirty ones fsynced first.
        self.opens = 0
        self.evictions = 0
        self.eviction_fsyncs = 0
        #: Uses in progress (reads, appends, fsyncs, read ranges not yet released): pinned descriptors.
        self.pins = 0

    @property
    def open_files(self) -> int:
        """Descriptors open now (including the ones in use)."""
        with self._lock:
            return self._open

    def file(self, path: str, *, create: bool = True) -> BudgetedFile:
        """A budgeted file for ``path`` (created empty if missing and ``create``)."""
        return BudgetedFile(path, self, create=create)

    def deferred_file(self, path: str) -> BudgetedFile:
        """A budgeted file for ``path``, which the caller knows is missing: created at its first write.

        Until then it reads as empty and costs no system call, so a topic of thousands of
        partitions is created without thousands of file creations (issue 12, finding 9).
        """
        return BudgetedFile(path, self, defer=True)

    # -- used by BudgetedFile ---------------------------------------------------------------------

    def _acquire(self, f: BudgetedFile) -> int:
        with self._lock:
            if f._fd >= 0:
                f._pins += 1
                self.pins += 1
                self._idle.pop(f, None)
                return f._fd
            victims = self._take_victims_locked()
            self._open += 1  # this file's slot, reserved before the syscalls
        try:
            self._close_victims(victims)
            fd = f._open_descriptor()
        except BaseException:
            with self._lock:
                self._open -= 1
            raise
        with self._lock:
            self.opens += 1
            self.pins += 1
            if f._fd >= 0:  # another thread opened it meanwhile: keep theirs
                self._open -= 1
                f._pins += 1
                self._idle.pop(f, None)
                duplicate = fd
                fd = f._fd
            else:
                duplicate = -1
                f._fd, f._pins = fd, 1
        if duplicate >= 0:
            os.close(duplicate)
        return fd

    def _release(self, f: BudgetedFile) -> None:
        close_fd = -1
        with self._lock:
            f._pins -= 1
            self.pins -= 1
            if f._pins == 0 and f._fd >= 0:
                if f._closed:
                    close_fd, f._fd = f._fd, -1
                    self._open -= 1
                else:
                    self._idle[f] = None
        if close_fd >= 0:
            os.close(close_fd)

    def _forget(self, f: BudgetedFile) -> None:
        """``f`` was closed by its owner: close its descriptor now, or when its last user is done."""
        close_fd = -1
        with self._lock:
            f._closed = True
            self._idle.pop(f, None)
            if f._pins == 0 and f._fd >= 0:
                close_fd, f._fd = f._fd, -1
                self._open -= 1
        if close_fd >= 0:
            os.close(close_fd)

    def _take_victims_locked(self) -> list[tuple[BudgetedFile, int]]:
        """Descriptors to close so one more fits: clean ones first. Caller holds the lock."""
        victims: list[tuple[BudgetedFile, int]] = []
        while self._open - len(victims) >= self.capacity and self._idle:
            victim = next(
                (f for f, _ in zip(self._idle, range(_CLEAN_SCAN), strict=False) if not f.dirty),
                next(iter(self._idle)),
            )
            del self._idle[victim]
            victims.append((victim, victim._fd))
            victim._fd = -1
        return victims

    def _close_victims(self, victims: list[tuple[BudgetedFile, int]]) -> None:
        for victim, fd in victims:
            try:
                if victim.dirty:
                    # Never close unsynced writes: fsync first; a failure sticks to the file.
                    victim._fsync_descriptor(fd)
                    with self._lock:
                        self.eviction_fsyncs += 1
            finally:
                os.close(fd)
                with self._lock:
                    self._open -= 1
                    self.evictions += 1


class BudgetedFile:
    """A :class:`~lkstream.storage.files.StorageFile` whose descriptor comes from a :class:`FileBudget`.

    Appends either land whole or leave the file at its old size, as
    :class:`~lkstream.storage.files.OsFile` (the write is rolled back with ``ftruncate``).
    """

    def __init__(self, path: str, budget: FileBudget, *, create: bool = True, defer: bool = False) -> None:
        self.path = path
        self._budget = budget
        self._create = create or defer
        self._fd = -1
        self._pins = 0
        self._closed = False
        self._written = 0  # generation of the last write
        self._synced = 0  # generation the last successful fsync covered
        self._error: StorageError | None = None  # a failed fsync at eviction: raised by the next fsync()
        # A deferred file does not exist until its first write opens it (O_CREAT); its directory
        # entry is then fsynced with the file's first fsync, before anything in it is called durable.
        self._exists = not defer
        self._entry_unsynced = defer
        if defer:
            self._size = 0
            return
        with map_os_errors("open", path):
            try:
                self._size = os.stat(path).st_size
                return
            except FileNotFoundError:
                if not create:
                    raise
        self._size = 0
        with self._use():  # creates it (the directory entry is fsynced by the log)
            pass

    @property
    def dirty(self) -> bool:
        """Whether writes happened since the last fsync."""
        return self._written > self._synced

    @contextlib.contextmanager
    def _use(self) -> Iterator[int]:
        if self._closed:
            raise StorageError("file is closed", path=self.path)
        fd = self._budget._acquire(self)
        try:
            yield fd
        finally:
            self._budget._release(self)

    def _open_descriptor(self) -> int:
        flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if self._create else 0)
        with map_os_errors("open", self.path):
            fd = os.open(self.path, flags, 0o644)
        self._exists = True
        return fd

    def _fsync_descriptor(self, fd: int) -> None:
        generation = self._written
        try:
            with map_os_errors("fsync", self.path):
                os.fdatasync(fd)
        except StorageError as exc:
            self._error = exc
            return
        self._synced = max(self._synced, generation)

    # -- StorageFile ----------------------------------------------------------------------------

    def size(self) -> int:
        return self._size

    def pread(self, size: int, position: int) -> bytes:
        # Every read of the log: pinned by hand rather than through _use()'s generator.
        if self._closed:
            raise StorageError("file is closed", path=self.path)
        if not self._exists:
            return b""  # deferred and never written: empty, and not worth creating
        fd = self._budget._acquire(self)
        try:
            with map_os_errors("read", self.path):
                return os.pread(fd, size, position)
        finally:
            self._budget._release(self)

    def pinned(self) -> tuple[int, Callable[[], None]]:
        """The descriptor, kept open (not evicted, not closed by :meth:`close`) until ``unpin()`` is called.

        For read ranges sent after the log's lock is released (:mod:`lkstream.storage.ranges`).
        """
        if self._closed:
            raise StorageError("file is closed", path=self.path)
        fd = self._budget._acquire(self)
        released = False

        def unpin() -> None:
            nonlocal released
            if not released:
                released = True
                self._budget._release(self)

        return fd, unpin

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Write ``data`` at the end; return the position it starts at."""
        start = self._size
        # The produce path's hottest call: pinned by hand rather than through _use()'s generator.
        if self._closed:
            raise StorageError("file is closed", path=self.path)
        fd = self._budget._acquire(self)
        try:
            self._written += 1
            # Called under the log lock: a small write keeps the GIL, so no other thread runs while
            # the lock is held (a thread that did would queue on it: issue 14, row 3).
            write = pwrite_holding_gil if len(data) <= GIL_HELD_WRITE_BYTES else os.pwrite
            written = write(fd, data, start)
            if written < len(data):
                view = memoryview(data)
                while written < len(view):
                    written += write(fd, view[written:], start + written)
        except OSError:
            with contextlib.suppress(OSError):  # best effort; recovery cuts a torn tail
                os.ftruncate(fd, start)
            with map_os_errors("append", self.path):
                raise
        finally:
            self._budget._release(self)
        self._size = start + written
        return start

    def fsync(self) -> None:
        if self._error is not None:
            raise StorageError(f"an earlier fsync failed ({self._error})", path=self.path)
        if not self._exists:
            return  # deferred and never written: nothing to make durable
        with self._use() as fd:
            self._fsync_descriptor(fd)
        if self._error is not None:
            raise self._error
        if self._entry_unsynced:
            fsync_dir(os.path.dirname(self.path))
            self._entry_unsynced = False

    def truncate(self, size: int) -> None:
        if not self._exists and size == 0:
            return  # deferred and never written: already empty
        with self._use() as fd, map_os_errors("truncate", self.path):
            self._written += 1
            os.ftruncate(fd, size)
        self._size = size

    def close(self) -> None:
        if not self._closed:
            self._budget._forget(self)
