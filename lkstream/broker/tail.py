"""The hot tail: the newest batches of a partition, kept in memory, within a broker-wide budget.

Tailing consumers ask for offsets near the end of the log; serving them from
here avoids a ``pread`` per fetch. A :class:`HotTail` holds stamped batches exactly
as written to the segment (already CRC-checked on append), oldest first, and drops
its oldest once it holds more than ``max_bytes`` (``hot_tail_bytes``).

All the tails of a broker share one :class:`TailBudget` (``hot_tail_total_bytes``):
when the cached batches of every partition together pass it, the batches cached
longest ago are dropped, whichever partition holds them. Without it a broker with
many partitions kept ``hot_tail_bytes`` of every partition it ever wrote, long after
the writes stopped (8 MiB x 33 partitions: most of the 444 MB the peer suite's embedded
phases peaked at; docs/benchmarks.md, issue 14).

How a budget drops a batch without taking the partition's lock (which would invert
the lock order): a tail holds each batch in a :class:`Cached` cell that the budget
also queues; dropping empties the cell. Cells empty only oldest first, within a tail
as across the broker, so a tail's emptied cells are always at its front; it skips
them and counts their bytes out. A read that finds the batch it starts at emptied
is a miss (the log serves it); one that meets an emptied cell further on stops there.

Thread-safety: the caller holds the partition's lock for :meth:`HotTail.add`,
:meth:`HotTail.read` and :meth:`HotTail.clear`; :class:`TailBudget` is thread-safe
with a leaf lock (taken inside the partition's lock, never the other way round).
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections import deque

# Dropped entries are compacted away once this many pile up at the front.
_COMPACT_AFTER = 1024


class Cached:
    """One cached batch; ``data`` becomes None once the tail or the budget dropped it."""

    __slots__ = ("data",)

    def __init__(self, data: bytes | bytearray) -> None:
        self.data: bytes | bytearray | None = data


class TailBudget:
    """The bytes all hot tails of a broker may hold together. Thread-safe (leaf lock)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        #: Batches dropped to stay within the budget (not counting a tail's own evictions).
        self.evictions = 0
        self._lock = threading.Lock()
        self._queue: deque[tuple[Cached, int]] = deque()  # oldest first; emptied cells linger until compacted
        self._live = 0  # cells of the queue still holding a batch

    def admit(self, cell: Cached, size: int) -> None:
        """Count a newly cached batch, then drop the oldest batches anywhere until within budget."""
        with self._lock:
            self._queue.append((cell, size))
            self.bytes += size
            self._live += 1
            while self.bytes > self.max_bytes and self._queue:
                oldest, oldest_size = self._queue.popleft()
                if oldest.data is not None:
                    oldest.data = None
                    self.bytes -= oldest_size
                    self._live -= 1
                    self.evictions += 1
            if len(self._queue) > 2 * self._live + _COMPACT_AFTER:
                # Cells the tails emptied themselves: drop them so the queue stays bounded.
                self._queue = deque(entry for entry in self._queue if entry[0].data is not None)

    def release(self, cell: Cached, size: int) -> None:
        """A tail dropped ``cell`` itself (its own limit, a gap, a clear)."""
        with self._lock:
            if cell.data is not None:
                cell.data = None
                self.bytes -= size
                self._live -= 1


class HotTail:
    def __init__(self, max_bytes: int, budget: TailBudget | None = None) -> None:
        self.max_bytes = max_bytes
        self._budget = budget or TailBudget(max_bytes)
        self._bases: list[int] = []
        self._nexts: list[int] = []
        self._cells: list[Cached] = []
        self._sizes: list[int] = []
        self._head = 0  # index of the oldest entry not yet known dropped
        self._bytes = 0  # bytes of the entries from _head on (some may have been dropped by the budget)

    def add(self, base_offset: int, next_offset: int, batch: bytes | bytearray) -> None:
        size = len(batch)
        if size > self.max_bytes or size > self._budget.max_bytes:
            self.clear()
            return
        self._skip_dropped()
        if self._head < len(self._nexts) and self._nexts[-1] != base_offset:
            self.clear()  # a gap means the log moved without us; never serve stale bytes
        cell = Cached(batch)
        self._bases.append(base_offset)
        self._nexts.append(next_offset)
        self._cells.append(cell)
        self._sizes.append(size)
        self._bytes += size
        while self._bytes > self.max_bytes:
            self._drop_head()
        self._budget.admit(cell, size)
        if self._head >= _COMPACT_AFTER and self._head * 2 >= len(self._bases):
            del self._bases[: self._head], self._nexts[: self._head]
            del self._cells[: self._head], self._sizes[: self._head]
            self._head = 0

    def _drop_head(self) -> None:
        head = self._head
        self._budget.release(self._cells[head], self._sizes[head])
        self._bytes -= self._sizes[head]
        self._head = head + 1

    def _skip_dropped(self) -> None:
        """Count out the entries the budget emptied (always the oldest)."""
        cells, head = self._cells, self._head
        while head < len(cells) and cells[head].data is None:
            self._bytes -= self._sizes[head]
            head += 1
        self._head = head

    def read(self, offset: int, max_bytes: int, high_watermark: int) -> bytes | bytearray | None:
        """Batches from the one holding ``offset``, all below ``high_watermark``; None if not cached."""
        self._skip_dropped()
        head = self._head
        if head == len(self._bases) or offset < self._bases[head] or offset >= self._nexts[-1]:
            return None
        first = bisect_right(self._bases, offset, lo=head) - 1
        found: list[bytes | bytearray] = []
        size = 0
        for last in range(first, len(self._bases)):
            data = self._cells[last].data  # one read: the budget may empty the cell at any moment
            if data is None or self._nexts[last] > high_watermark or (found and size + len(data) > max_bytes):
                break
            found.append(data)
            size += len(data)
        if not found:
            return None
        return found[0] if len(found) == 1 else b"".join(found)

    def clear(self) -> None:
        for cell, size in zip(self._cells[self._head :], self._sizes[self._head :], strict=True):
            self._budget.release(cell, size)
        self._bases, self._nexts, self._cells, self._sizes = [], [], [], []
        self._head = 0
        self._bytes = 0
