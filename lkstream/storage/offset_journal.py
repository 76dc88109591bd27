"""The offsets journal: ``offsets/commits.log``, an append-only log of commits with group commit.

Layout of ``offsets/`` (see ``docs/format.md``, section "Offsets journal")::

    {group}__{topic}__part{pid}.offset   compacted snapshot, one JSON line per key
    ~{digest}.offset                     the same for keys a readable name cannot carry
                                         (:mod:`lkstream.storage.offset_files`)
    commits.log                          8-byte magic, then records:
                                         u32 BE length | u32 BE crc32c(payload) | payload

A payload is JSON ``{"ms": T, "e": [[group, topic, pid, offset_or_null(, topic_id(, metadata))], ...]}``;
the entries of one record are one commit, applied together or not at all
(``null`` deletes the key). ``topic_id`` (32 hex digits or null, since issue 12) names the
incarnation of the topic the offset belongs to (``topic.json``'s ``topic_id``);
entries written before it have four elements and belong to whatever topic of that
name exists (the broker stamps them at open). ``metadata`` (a string, since issue 24) is the
commit's metadata; an entry has it only when it is non-empty, so journals without metadata
are byte for byte what earlier versions wrote. The state is: the snapshot files, then every
journal record replayed in order.

Writing (:class:`Journal`, one per directory per process, guarded by an
``flock`` on the ``offsets`` directory):

* A commit appends its record under the lock (write to the OS only), then waits
  until an fsync covers it. Group commit: the first waiter that finds no fsync
  running fsyncs for everyone who appended before it started; the others wait
  for that round. :meth:`Journal.submit` registers a callback instead and a
  background flusher thread runs the round, so the caller never waits for a disk.
* Values become visible to reads only once durable, and in journal order, so
  what readers see always equals what a replay after a crash gives.

Compaction (journal above ``compact_bytes``, and on close). Ordering invariant:
**the snapshot files of every key the journal changed are durable (tmp, fsync,
rename, directory fsync) before the journal is replaced by an empty one
(tmp, fsync, rename over ``commits.log``, directory fsync).** A crash between
the two steps leaves new snapshot files and the old journal; replaying that
journal over them is harmless, because the files hold exactly the journal's
final values for the keys it touched (the lock is held throughout, so no commit
lands in between) and keys it did not touch were not rewritten.

Recovery on open: load the snapshot files, replay the journal, stop at the first
record that is incomplete or fails its CRC, and truncate it (the writer only;
read-only views just stop there). Only the unfsynced tail can be torn, so a bad
record *followed by a valid one* is corruption of acknowledged data and raises
:class:`~lkstream.errors.CorruptRecordError` with the file and byte position.
Caveat: a power loss during an fsync can in principle persist a later page of
the unacknowledged tail without an earlier one, which looks the same; such a
journal needs an operator (``lkstream verify`` reports it) rather than a guess.

Read-only views (:class:`JournalFollower`: the offline CLI, ``verify``, a second
process) replay files and journal without writing, then follow the journal:
each read stats ``commits.log`` and parses only bytes appended since, and
reloads everything when compaction replaced the file.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any, ClassVar

from lkstream.errors import CorruptRecordError, LkstreamError, StorageError, map_os_errors
from lkstream.storage.files import OsFile, StorageFile, atomic_write, fsync_dir
from lkstream.storage.offset_files import (
    SUFFIX,
    Committed,
    Key,
    Value,
    is_topic_id,
    load_snapshot,
    offset_file_name,
    snapshot_body,
)
from lkstream.storage.offset_records import (
    JOURNAL_MAGIC,
    RECORD_HEADER,
    Entry,
    apply_entries,
    check_magic,
    encode_record,
    scan_records,
)

log = logging.getLogger("lkstream.storage")

JOURNAL_NAME = "commits.log"
DEFAULT_COMPACT_BYTES = 1024 * 1024

__all__ = [
    "JOURNAL_MAGIC",
    "RECORD_HEADER",
    "SUFFIX",
    "Committed",
    "Entry",
    "Journal",
    "JournalFollower",
    "Key",
    "Value",
    "encode_record",
    "is_topic_id",
    "scan_records",
]

DurableCallback = Callable[[BaseException | None], None]
FileFactory = Callable[[str], StorageFile]


class Journal:
    """The writer of one ``offsets`` directory. Thread-safe; shared by the stores of one process.

    Use :meth:`open` (which enforces one writer per directory per process and
    per machine); ``refs`` counts the stores using it.
    """

    _registry: ClassVar[weakref.WeakValueDictionary[tuple[int, int], Journal]] = weakref.WeakValueDictionary()
    _registry_lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def open(
        cls,
        directory: str,
        *,
        compact_bytes: int = DEFAULT_COMPACT_BYTES,
        file_factory: FileFactory | None = None,
        sweep_tmp: bool = False,
    ) -> Journal | None:
        """The process's writer of ``directory`` (created if needed), or None if another process writes it."""
        with cls._registry_lock:
            st = os.stat(directory)
            ident = (st.st_dev, st.st_ino)
            journal = cls._registry.get(ident)
            if journal is None or journal.closed:
                with map_os_errors("open", directory):
                    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    fcntl.flock(dir_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(dir_fd)
                    return None
                try:
                    journal = cls(directory, dir_fd, compact_bytes, file_factory or OsFile, sweep_tmp)
                except BaseException:
                    os.close(dir_fd)
                    raise
                cls._registry[ident] = journal
            elif sweep_tmp:
                with journal._cond:
                    _sweep_tmp(directory)
            journal.refs += 1
            return journal

    def __init__(
        self, directory: str, dir_fd: int, compact_bytes: int, file_factory: FileFactory, sweep_tmp: bool
    ) -> None:
        self.directory = directory
        self.path = os.path.join(directory, JOURNAL_NAME)
        self.compact_bytes = compact_bytes
        self.refs = 0
        self.closed = False
        #: fsyncs of the journal file (tests check that committers share them).
        self.fsyncs = 0
        #: Test seam: called with a stage name inside compaction ("snapshot-written", "journal-swapped").
        self.stage_hook: Callable[[str], None] | None = None
        self._file_factory = file_factory
        self._dir_fd = dir_fd
        self._cond = threading.Condition()
        self._pending: deque[tuple[int, int, list[Entry]]] = deque()
        self._async: deque[tuple[int, DurableCallback]] = deque()
        self._syncing = False
        self._error: BaseException | None = None
        self._flusher: threading.Thread | None = None
        self._compact_at = compact_bytes
        if sweep_tmp:
            _sweep_tmp(directory)
        self.values = load_snapshot(directory)
        self._dirty: set[Key] = set()
        self._file = self._recover()
        # Positions are logical (journal bytes ever written by this process, magic included once),
        # so waiters keep comparing correctly after compaction starts a new file.
        self._base = 0
        self._synced = self._file.size()
        # Close the file and drop the lock if the last store is dropped without close().
        self._handles = _Handles(self._file, dir_fd)
        weakref.finalize(self, self._handles.close)

    def _recover(self) -> StorageFile:
        if not os.path.exists(self.path) or os.path.getsize(self.path) == 0:
            # An empty file cannot come from us (the magic is written via tmp + rename): start afresh.
            atomic_write(self.path, JOURNAL_MAGIC)
        file = self._file_factory(self.path)
        try:
            data = file.pread(file.size(), 0)
            check_magic(data[: len(JOURNAL_MAGIC)], self.path)
            base = len(JOURNAL_MAGIC)
            records, end = scan_records(data[base:], self.path, base)
            for ms, entries in records:
                apply_entries(self.values, ms, entries)
                self._dirty.update(e[:3] for e in entries)
            if base + end < file.size():
                log.warning(
                    "offsets journal %s: truncating a torn tail of %d bytes", self.path, file.size() - base - end
                )
                file.truncate(base + end)
                file.fsync()
        except BaseException:
            file.close()
            raise
        return file

    # -- writing -----------------------------------------------------------------------------------

    def append(self, ms: int, entries: list[Entry], callback: DurableCallback | None = None) -> int:
        """Write one record to the OS; return the file size that an fsync must cover."""
        record = encode_record(ms, entries)
        with self._cond:
            self._check_usable()
            start = self._file.append(record)
            end = self._base + start + len(record)
            self._pending.append((end, ms, entries))
            if callback is not None:
                self._async.append((end, callback))
                if self._flusher is None:
                    self._flusher = threading.Thread(
                        target=self._flush_loop, name="lkstream-offsets-flush", daemon=True
                    )
                    self._flusher.start()
                self._cond.notify_all()
            return end

    def wait_durable(self, end: int) -> None:
        """Return once an fsync covered the journal up to ``end`` (running that fsync if none is)."""
        callbacks: list[tuple[DurableCallback, BaseException | None]] = []
        try:
            with self._cond:
                while self._synced < end:
                    if self._error is not None:
                        raise StorageError(f"offsets journal fsync failed earlier: {self._error}", path=self.path)
                    if self._syncing:
                        self._cond.wait()
                    else:
                        callbacks += self._sync_round_locked()
        finally:
            _run_callbacks(callbacks)

    def _sync_round_locked(self) -> list[tuple[DurableCallback, BaseException | None]]:
        """One fsync for everything appended so far. Called and returns with the lock held."""
        self._syncing = True
        target = self._base + self._file.size()
        error: BaseException | None = None
        self._cond.release()
        try:
            self._file.fsync()
        except BaseException as exc:  # recorded: every waiter learns it
            error = exc
        finally:
            self._cond.acquire()
            self._syncing = False
        self.fsyncs += 1
        done: list[tuple[DurableCallback, BaseException | None]] = []
        if error is not None:
            # After a failed fsync the page cache state is unknown (the kernel may have dropped
            # the dirty pages): nothing pending is acknowledged and the journal refuses writes.
            self._error = error
            self._pending.clear()
            done = [(cb, error) for _, cb in self._async]
            self._async.clear()
        else:
            self._synced = target
            while self._pending and self._pending[0][0] <= target:
                _, ms, entries = self._pending.popleft()
                apply_entries(self.values, ms, entries)
                self._dirty.update(e[:3] for e in entries)
            while self._async and self._async[0][0] <= target:
                done.append((self._async.popleft()[1], None))
            if self._file.size() >= self._compact_at and not self.closed:
                self._try_compact_locked()
        self._cond.notify_all()
        return done

    def _flush_loop(self) -> None:
        while True:
            with self._cond:
                while not self.closed and not (self._async and not self._syncing):
                    self._cond.wait()
                if not self._async:
                    return
                callbacks = self._sync_round_locked()
            _run_callbacks(callbacks)

    def _check_usable(self) -> None:
        if self.closed:
            raise LkstreamError(f"offset store {self.directory} is closed")
        if self._error is not None:
            raise StorageError(f"offsets journal fsync failed earlier: {self._error}; reopen", path=self.path)

    def keys_where(self, match: Callable[[Key], bool]) -> list[Key]:
        """Keys (durable or pending) that ``match`` selects; call with the lock held."""
        keys = dict.fromkeys(k for k in self.values if match(k))
        for _, _, entries in self._pending:
            keys.update(dict.fromkeys(e[:3] for e in entries if e[3] is not None and match(e[:3])))
        return list(keys)

    @property
    def lock(self) -> threading.Condition:
        return self._cond

    # -- compaction --------------------------------------------------------------------------------

    def _try_compact_locked(self) -> None:
        try:
            self.compact_locked()
            self._compact_at = self.compact_bytes
        except LkstreamError as exc:
            # The journal is still whole and replayable: keep appending, retry after another interval.
            log.error("offsets compaction failed: %s", exc)
            self._compact_at = self._file.size() + self.compact_bytes

    def compact_locked(self) -> None:
        """Write changed keys to their snapshot files, then start an empty journal. Lock held."""
        while self._syncing:  # another thread is fsyncing the file we are about to replace
            self._cond.wait()
        if self._error is not None:
            raise StorageError(f"offsets journal fsync failed earlier: {self._error}", path=self.path)
        if self._base + self._file.size() > self._synced or self._pending:
            self._file.fsync()
            self.fsyncs += 1
            self._synced = self._base + self._file.size()
            while self._pending:
                _, ms, entries = self._pending.popleft()
                apply_entries(self.values, ms, entries)
                self._dirty.update(e[:3] for e in entries)
        if self._file.size() == len(JOURNAL_MAGIC) and not self._dirty:
            return
        self._write_snapshot(sorted(self._dirty))
        self._stage("snapshot-written")
        # Only now may the journal that holds these changes go (see the module docstring).
        atomic_write(self.path, JOURNAL_MAGIC)
        self._stage("journal-swapped")
        old = self._file
        self._file = self._handles.file = self._file_factory(self.path)
        old.close()
        self._base = self._synced - self._file.size()
        self._dirty.clear()

    def _write_snapshot(self, keys: list[Key]) -> None:
        """atomic_write for many files with one directory fsync: tmp + fsync each, rename each."""
        renames: list[tuple[str, str]] = []
        try:
            for key in keys:
                path = os.path.join(self.directory, offset_file_name(key))
                value = self.values.get(key)
                if value is None:
                    renames.append(("", path))
                    continue
                if isinstance(value, CorruptRecordError):
                    continue  # never changed since it was loaded: leave the damaged file for verify
                tmp = f"{path}.{os.getpid()}-compact.tmp"
                body = snapshot_body(key, value)
                with map_os_errors("write", tmp):
                    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
                    try:
                        os.write(fd, body)
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                renames.append((tmp, path))
            for tmp, path in renames:
                if tmp:
                    with map_os_errors("rename", path):
                        os.replace(tmp, path)
                else:
                    with map_os_errors("remove", path), contextlib.suppress(FileNotFoundError):
                        os.remove(path)
        except BaseException:
            for tmp, _ in renames:
                if tmp:
                    with contextlib.suppress(OSError):
                        os.remove(tmp)
            raise
        fsync_dir(self.directory)

    def _stage(self, name: str) -> None:
        if self.stage_hook is not None:
            self.stage_hook(name)

    # -- lifetime ----------------------------------------------------------------------------------

    def release(self) -> None:
        """One store is done; the last one compacts, stops the flusher and drops the lock."""
        with Journal._registry_lock:
            self.refs -= 1
            if self.refs > 0 or self.closed:
                return
            flusher = None
            with self._cond:
                try:
                    if self._error is None:
                        self.compact_locked()
                finally:
                    self.closed = True
                    flusher = self._flusher
                    self._cond.notify_all()
            if flusher is not None:
                flusher.join()
            self.abandon()

    def abandon(self) -> None:
        """Drop the file and the lock without compacting (what a crash does; also used by tests)."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()
        self._handles.close()


class _Handles:
    """The journal file and the locked directory descriptor, closed exactly once."""

    def __init__(self, file: StorageFile, dir_fd: int) -> None:
        self.file = file
        self.dir_fd = dir_fd
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            if self.dir_fd < 0:
                return
            self.file.close()
            os.close(self.dir_fd)  # closing the descriptor drops the flock
            self.dir_fd = -1


def _sweep_tmp(directory: str) -> None:
    with map_os_errors("sweep temporary files", directory):
        for name in os.listdir(directory):
            if name.endswith(".tmp"):
                os.remove(os.path.join(directory, name))


def _run_callbacks(callbacks: list[tuple[DurableCallback, BaseException | None]]) -> None:
    for callback, error in callbacks:
        try:
            callback(error)
        except Exception:  # a broken callback must not stop durability for others
            log.exception("offset durability callback failed")


class JournalFollower:
    """A read-only view of a directory another process (or nobody) writes. Thread-safe.

    :meth:`refresh` brings :attr:`values` up to date: new journal bytes are
    parsed incrementally; a replaced journal (compaction) triggers a full reload.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.path = os.path.join(directory, JOURNAL_NAME)
        self.values: dict[Key, Value] = {}
        self._lock = threading.Lock()
        self._fd = -1
        self._ident: tuple[int, int] | None = None
        self._pos = 0
        self._loaded = False

    def refresh(self) -> dict[Key, Value]:
        with self._lock:
            try:
                st: Any = os.stat(self.path)
            except FileNotFoundError:
                st = None
            ident = None if st is None else (st.st_dev, st.st_ino)
            if not self._loaded or ident != self._ident or (st is not None and st.st_size < self._pos):
                self._reload()
            elif st is not None and st.st_size > self._pos:
                self._read_tail()
            return self.values

    def _reload(self) -> None:
        for _ in range(10):
            self._close_fd()
            try:
                self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                self._fd = -1
            values = load_snapshot(self.directory)
            if self._fd < 0:
                self.values, self._ident, self._pos, self._loaded = values, None, 0, True
                return
            st = os.fstat(self._fd)
            self._ident = (st.st_dev, st.st_ino)
            self._pos = 0
            self.values = values
            self._read_tail()
            try:
                now = os.stat(self.path)
            except FileNotFoundError:
                continue
            # Compaction swapped the journal while we read: snapshot and journal may not match.
            if (now.st_dev, now.st_ino) == self._ident:
                self._loaded = True
                return
        raise StorageError("offsets journal keeps being replaced while reading it", path=self.path)

    def _read_tail(self) -> None:
        size = os.fstat(self._fd).st_size
        data = b""
        with map_os_errors("read", self.path):
            while len(data) < size - self._pos:
                chunk = os.pread(self._fd, size - self._pos - len(data), self._pos + len(data))
                if not chunk:
                    break
                data += chunk
        if self._pos == 0:
            if len(data) < len(JOURNAL_MAGIC):
                return  # being created; nothing to read yet
            check_magic(data[: len(JOURNAL_MAGIC)], self.path)
            data = data[len(JOURNAL_MAGIC) :]
            self._pos = len(JOURNAL_MAGIC)
        records, end = scan_records(data, self.path, self._pos)
        for ms, entries in records:
            apply_entries(self.values, ms, entries)
        self._pos += end

    def _close_fd(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def close(self) -> None:
        with self._lock:
            self._close_fd()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._close_fd()
