"""The sparse offset index of one segment (``{base_offset:020d}.idx``).

File layout: a flat array of 16-byte entries, nothing else::

    offset size type    field      meaning
    ------ ---- ------- ---------- ------------------------------------------------
         0    8 uint64  offset     base offset of a batch (absolute, not relative)
         8    8 uint64  position   byte position of that batch in the .seg file

Both big-endian. Entries are strictly increasing in both fields. One entry is
written for the first batch of a segment and then for the first batch after at
least ``index_interval_bytes`` of segment data since the previous entry (0 means
an entry per batch). A lookup finds the last entry at or below the target offset
by binary search; the caller then walks batch headers forward from there, which
touches at most ``index_interval_bytes`` plus one batch.

Durability: entries are buffered in memory and written to the file by
:meth:`OffsetIndex.flush`, which the log calls with every group commit, on
rotation and on close. The index is a cache of the segment: after a crash,
recovery keeps the entries that point inside the validated part of the segment
and rebuilds the rest by scanning (or the whole index if the file is missing,
has a size that is not a multiple of 16, or is not monotonic).
"""

from __future__ import annotations

import operator
import struct
import sys
import threading
from array import array
from bisect import bisect_right
from typing import Final

from lkstream.errors import invariant
from lkstream.storage.files import StorageFile

ENTRY: Final = struct.Struct(">QQ")
ENTRY_SIZE: Final = ENTRY.size
assert ENTRY_SIZE == 16


class IndexDamaged(Exception):
    """The index file cannot be trusted; the caller rebuilds it from the segment."""


class OffsetIndex:
    """In-memory sparse index backed by an append-only file.

    The caller holds ``PartitionLog._lock`` for everything but :meth:`flush`, which the
    group committer runs without it: an index write that stalls in the kernel (ext4's
    journal held it 21 ms on this machine) must not hold up appends. Entries are only
    ever added at the end while the log runs (reset and truncation happen in recovery),
    and every write of the file takes the index's own leaf lock, so two flushes never
    write the same entries twice.
    """

    def __init__(self, file: StorageFile, interval_bytes: int) -> None:
        self.file = file
        self.interval_bytes = interval_bytes
        self._offsets: array[int] = array("q")
        self._positions: array[int] = array("q")
        self._flushed_entries = 0
        self._last_indexed_position = -1
        self._write_lock = threading.Lock()  # a leaf: every write of the file, and what it writes from

    def __len__(self) -> int:
        return len(self._offsets)

    def load(self) -> None:
        """Read every entry from the file, checking size and monotonicity."""
        size = self.file.size()
        if size % ENTRY_SIZE:
            raise IndexDamaged(f"size {size} is not a multiple of {ENTRY_SIZE}")
        raw = self.file.pread(size, 0)
        if len(raw) != size:
            raise IndexDamaged(f"short read: {len(raw)} of {size} bytes")
        pairs: array[int] = array("q")
        pairs.frombytes(raw)
        if sys.byteorder == "little":
            pairs.byteswap()
        offsets, positions = pairs[0::2], pairs[1::2]
        # A slice-wise comparison keeps the monotonicity check in C.
        for values in (offsets, positions):
            if len(values) > 1 and not all(map(operator.lt, values, values[1:])):
                raise IndexDamaged("entries are not strictly increasing")
            if values and values[0] < 0:
                raise IndexDamaged("negative entry")
        self._offsets, self._positions = offsets, positions
        self._flushed_entries = len(offsets)
        self._last_indexed_position = positions[-1] if positions else -1
        invariant(len(self) * ENTRY_SIZE == size, "index entries and file size disagree")

    @property
    def last_entry(self) -> tuple[int, int] | None:
        if not self._offsets:
            return None
        return self._offsets[-1], self._positions[-1]

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._offsets, self._positions, strict=True))

    def maybe_add(self, offset: int, position: int) -> None:
        """Record a batch at ``position``, if the sparse interval says so."""
        if self._last_indexed_position >= 0 and (position - self._last_indexed_position < self.interval_bytes):
            return
        invariant(
            not self._offsets or (offset > self._offsets[-1] and position > self._positions[-1]),
            f"index entry ({offset}, {position}) not above the last one",
        )
        self._offsets.append(offset)
        self._positions.append(position)
        self._last_indexed_position = position

    def lookup(self, offset: int) -> tuple[int, int] | None:
        """The last entry ``(offset, position)`` with entry offset <= ``offset``, if any."""
        i = bisect_right(self._offsets, offset) - 1
        if i < 0:
            return None
        return self._offsets[i], self._positions[i]

    def at_or_below_position(self, position: int) -> tuple[int, int] | None:
        """The last entry ``(offset, position)`` with entry position <= ``position``, if any."""
        i = bisect_right(self._positions, position) - 1
        if i < 0:
            return None
        return self._offsets[i], self._positions[i]

    def truncate_to_position(self, position: int) -> None:
        """Drop entries that point at or past ``position`` (a truncated segment tail)."""
        with self._write_lock:
            keep = bisect_right(self._positions, position - 1)
            if keep == len(self._positions):
                return
            del self._offsets[keep:]
            del self._positions[keep:]
            self._last_indexed_position = self._positions[-1] if self._positions else -1
            if self._flushed_entries > keep:
                self.file.truncate(keep * ENTRY_SIZE)
                self._flushed_entries = keep

    def reset(self) -> None:
        """Forget everything (before a rebuild)."""
        with self._write_lock:
            self._offsets = array("q")
            self._positions = array("q")
            self._last_indexed_position = -1
            self.file.truncate(0)
            self._flushed_entries = 0

    def flush(self) -> bool:
        """Append unwritten entries to the file; return whether anything was written.

        Safe without the log's lock, while :meth:`maybe_add` runs on another thread.
        """
        with self._write_lock:
            # maybe_add appends the offset before the position: an entry below this end is whole.
            end = len(self._positions)
            start = self._flushed_entries
            if end == start:
                return False
            pairs = array("q", bytes((end - start) * ENTRY_SIZE))
            pairs[0::2] = self._offsets[start:end]
            pairs[1::2] = self._positions[start:end]
            if sys.byteorder == "little":
                pairs.byteswap()
            self.file.append(pairs.tobytes())
            self._flushed_entries = end
            return True
