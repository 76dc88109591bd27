"""A seeded, fault-injecting twin of :class:`lkstream.storage.files.OsFile`.

:class:`FaultyDisk` is a simulated device. ``disk.open`` is a
``PartitionLog`` ``file_factory``: it hands out :class:`FaultyFile` handles
whose contents live in memory and outlive the handle, so a log can be
"re-opened" on the same disk after a simulated power loss.

What it models:

* **The page cache versus the platter.** Every file keeps ``data`` (what a
  process sees: the page cache) and ``durable`` (what survives a power loss:
  the bytes as of the last ``fsync``).
* **Power loss** (:meth:`FaultyDisk.crash`). Each file keeps its durable bytes
  plus, depending on the crash mode, nothing of what was written after the last
  fsync (``drop``), a random prefix of it (``torn``: the last writes were cut
  mid-way), a prefix followed by zeros (``zeros``: the size reached the disk,
  the data did not), a prefix followed by random bytes (``garbage``), or all of
  it with random bytes flipped (``flip``). Only the unsynced region is ever
  damaged: fsynced data is what the storage contract may rely on. After a
  crash every handle of the old "process" is dead and raises ``StorageError``.
* **Failed writes** (``append_fault_rate``). An append may fail with
  ``DiskFullError`` after a random prefix of the data reached the page cache;
  like ``OsFile`` it then rolls back to the old size, except that with
  ``rollback_fault_rate`` the rollback itself fails and the torn bytes stay
  beyond the logical end (``OsFile`` keeps its size in memory, so the next
  append overwrites them; recovery must truncate whatever is left).

Directory entries are not simulated: each file also exists as an empty
placeholder on the real filesystem so that the log's ``os.listdir`` discovery,
stray sweeping and retention's ``os.remove`` work unchanged; a placeholder that
was removed means the file is gone. Metadata files (``checkpoint.meta``) are
real files written by ``atomic_write`` and therefore always durable.

Every random choice comes from one ``random.Random(seed)``, so a failing run is
replayed by its seed (as long as only one thread drives the disk).
"""

from __future__ import annotations

import os
import random
import threading
from dataclasses import dataclass, field

from lkstream.errors import DiskFullError, StorageError

CRASH_MODES = ("drop", "torn", "zeros", "garbage", "flip")


@dataclass
class _Content:
    data: bytearray = field(default_factory=bytearray)  # the page cache, physical size
    durable: bytes = b""  # survives power loss


@dataclass
class FileCrash:
    """What one crash did to one file."""

    path: str
    mode: str
    durable_bytes: int
    unsynced_bytes: int
    kept_bytes: int  # bytes of the file after the crash


class FaultyDisk:
    """A simulated disk shared by every :class:`FaultyFile` opened on it. Thread-safe."""

    def __init__(self, seed: int, *, append_fault_rate: float = 0.0, rollback_fault_rate: float = 0.0) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.append_fault_rate = append_fault_rate
        self.rollback_fault_rate = rollback_fault_rate
        self.files: dict[str, _Content] = {}
        self.generation = 0
        self.fsyncs = 0
        self.append_faults = 0
        self.lock = threading.RLock()

    def open(self, path: str) -> FaultyFile:
        """A ``file_factory`` for :class:`~lkstream.storage.log.PartitionLog`."""
        with self.lock:
            if not os.path.exists(path):
                # A removed placeholder means the file was deleted: start empty.
                self.files.pop(path, None)
                with open(path, "ab"):
                    pass
            content = self.files.setdefault(path, _Content())
            return FaultyFile(self, path, content, self.generation)

    def content(self, path: str) -> bytes:
        """What a process opening ``path`` now would read."""
        with self.lock:
            return bytes(self.files[path].data)

    def set_content(self, path: str, data: bytes) -> None:
        """Replace a file's bytes (as if written and fsynced), e.g. to plant corruption."""
        with self.lock:
            if not os.path.exists(path):
                with open(path, "ab"):
                    pass
            self.files[path] = _Content(bytearray(data), bytes(data))

    def unsynced_bytes(self, suffix: str = "") -> int:
        """Bytes a power loss could take now, in files whose name ends with ``suffix``."""
        with self.lock:
            return sum(
                len(c.data) - len(c.durable) for p, c in self.files.items() if p.endswith(suffix) and os.path.exists(p)
            )

    def crash(self, mode: str | None = None) -> list[FileCrash]:
        """Simulate a power loss: every file falls back to durable bytes plus ``mode`` damage.

        ``mode`` is one of :data:`CRASH_MODES`, or ``None`` to pick one per file at random.
        Every handle opened before the crash is dead afterwards.
        """
        with self.lock:
            self.generation += 1
            report = []
            for path in sorted(self.files):
                if not os.path.exists(path):
                    continue
                content = self.files[path]
                file_mode = mode or self.rng.choice(CRASH_MODES)
                kept = self._after_power_loss(content, file_mode)
                unsynced = len(content.data) - len(content.durable)
                report.append(FileCrash(path, file_mode, len(content.durable), unsynced, len(kept)))
                content.data = bytearray(kept)
                content.durable = bytes(kept)
            return report

    def _after_power_loss(self, content: _Content, mode: str) -> bytes:
        durable = content.durable
        assert content.data[: len(durable)] == durable, "durable bytes must be a prefix of the file"
        unsynced = bytes(content.data[len(durable) :])
        rng = self.rng
        if not unsynced or mode == "drop":
            return durable
        cut = rng.randint(0, len(unsynced))
        if mode == "torn":
            return durable + unsynced[:cut]
        if mode == "zeros":
            return durable + unsynced[:cut] + bytes(rng.randint(1, 4096))
        if mode == "garbage":
            return durable + unsynced[:cut] + rng.randbytes(rng.randint(1, 4096))
        if mode == "flip":
            damaged = bytearray(unsynced)
            for _ in range(rng.randint(1, 4)):
                i = rng.randrange(len(damaged))
                damaged[i] ^= 1 << rng.randrange(8)
            return durable + bytes(damaged)
        raise ValueError(f"unknown crash mode {mode!r}")


class FaultyFile:
    """A :class:`~lkstream.storage.files.StorageFile` on a :class:`FaultyDisk`.

    Mirrors ``OsFile``: the logical size is tracked in memory (it starts at the
    physical size), appends go to the logical end, reads see physical bytes.
    """

    def __init__(self, disk: FaultyDisk, path: str, content: _Content, generation: int) -> None:
        self.disk = disk
        self.path = path
        self._content = content
        self._generation = generation
        self._size = len(content.data)
        self.closed = False

    def _check_alive(self, action: str) -> None:
        if self._generation != self.disk.generation:
            raise StorageError(f"cannot {action} (device lost power)", path=self.path)
        if self.closed:
            raise StorageError(f"cannot {action} (file is closed)", path=self.path)

    def size(self) -> int:
        return self._size

    def pread(self, size: int, position: int) -> bytes:
        with self.disk.lock:
            self._check_alive("read")
            if position < 0 or size < 0:
                raise StorageError("cannot read (Invalid argument)", path=self.path)
            return bytes(self._content.data[position : position + size])

    def append(self, data: bytes | bytearray | memoryview) -> int:
        with self.disk.lock:
            self._check_alive("append")
            start = self._size
            content = self._content
            raw = bytes(data)
            disk = self.disk
            if disk.append_fault_rate and disk.rng.random() < disk.append_fault_rate:
                disk.append_faults += 1
                torn = raw[: disk.rng.randint(0, len(raw) - 1)] if raw else b""
                self._write_at(start, torn)
                if not (disk.rollback_fault_rate and disk.rng.random() < disk.rollback_fault_rate):
                    del content.data[start:]
                    content.durable = content.durable[:start]
                raise DiskFullError("disk full while trying to append (injected)", path=self.path)
            self._write_at(start, raw)
            self._size = start + len(raw)
            return start

    def _write_at(self, position: int, raw: bytes) -> None:
        content = self._content
        end = position + len(raw)
        if position < len(content.durable):
            # Overwriting durable bytes (after a failed rollback) makes them unsynced again.
            content.durable = content.durable[:position]
        content.data[position:end] = raw

    def fsync(self) -> None:
        with self.disk.lock:
            self._check_alive("fsync")
            self._content.durable = bytes(self._content.data)
            self.disk.fsyncs += 1

    def truncate(self, size: int) -> None:
        # Modelled as durable at once (the log fsyncs after every truncation that matters).
        with self.disk.lock:
            self._check_alive("truncate")
            content = self._content
            del content.data[size:]
            content.durable = content.durable[:size]
            self._size = size

    def close(self) -> None:
        self.closed = True
