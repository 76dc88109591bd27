"""The hot tail: the newest batches of a partition, kept in memory, within a broker-wide budget.

Tailing consumers ask for offsets near the end of the log; serving them from
here avoids a ``pread`` per fetch. A :class:`HotTail` holds stamped batches exactly
as written to the segment (already CRC-checked on append), oldest first, and drops
its oldest once it holds more than ``max_bytes`` (``hot_tail_bytes``).

All the tails of a broker share one :class:`TailBudget` (``hot_tail_total_bytes``):
when the cached batches of every partition together pass it, the batches cached
longest ago are dropped, whichever partition holds them. Without it a broker with
many partitions kept ``hot_tail_bytes`` of every partition it ever wrote, long after
the writes stopped (8 MiB x 33 partitions: most of the 444 MB the peer suite's
embedded phases peaked at; docs/benchmarks-notes.md, "Memory").

How: every cached batch gets a broker-wide sequence number; the budget queues its
tail id and sequence in two deques of ints. No object per batch that the garbage
collector tracks: a tuple is tracked from its creation until a collection looks at it, so a
tuple per batch made every ~700 small appends a young collection (issue 14, row 3).
Entries whose batches their tail dropped already are popped from the front as new ones
arrive, and the queue is compacted only once its stale entries outnumber the live ones
(plus a slack): the compaction is a Python loop over the whole queue (1.5-4 ms on the
producer's thread at 30,000 entries), so it must stay rare, and it is needed only for
stale entries stuck behind a live one. :meth:`TailBudget.enforce` pops the oldest entries and asks their tails to drop
everything up to that sequence, taking each tail's lock (the partition's) in turn. It runs with no
partition lock held (``Partition.append_batch`` calls it after releasing its own), so the
lock order stays Partition, then TailBudget, with the budget's lock a leaf.

Thread-safety: the caller holds the partition's lock for :meth:`HotTail.add`,
:meth:`HotTail.read` and :meth:`HotTail.clear`; :meth:`HotTail.drop_through` takes it
itself. :class:`TailBudget` is thread-safe.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from array import array
from bisect import bisect_right
from collections import deque

# Dropped entries are compacted away once this many pile up at the front.
_COMPACT_AFTER = 1024


class TailBudget:
    """The bytes all hot tails of a broker may hold together. Thread-safe (a leaf lock)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        #: Batches dropped to stay within the budget (not counting a tail's own evictions).
        self.evictions = 0
        self._lock = threading.Lock()
        # The queue, oldest first, as two parallel deques of ints (see the module docstring).
        self._tail_ids: deque[int] = deque()
        self._queued_sequences: deque[int] = deque()
        self._live = 0  # batches cached by all tails: the queue's other entries are stale
        self._tails: dict[int, HotTail] = {}
        self._ids = itertools.count()
        self._sequences = itertools.count()

    def register(self, tail: HotTail) -> int:
        with self._lock:
            tail_id = next(self._ids)
            self._tails[tail_id] = tail
            return tail_id

    def unregister(self, tail_id: int) -> None:
        with self._lock:
            self._tails.pop(tail_id, None)

    def queued(self) -> int:
        """Entries in the queue, live or stale (bounded: see :meth:`admit`)."""
        return len(self._tail_ids)

    def admit(self, tail_id: int, size: int) -> int:
        """Count a newly cached batch of ``size`` bytes; returns its sequence number."""
        with self._lock:
            sequence = next(self._sequences)
            self._tail_ids.append(tail_id)
            self._queued_sequences.append(sequence)
            self.bytes += size
            self._live += 1
            self._pop_stale_front_locked()
            if len(self._tail_ids) > 2 * self._live + _COMPACT_AFTER:
                self._compact_locked()
            return sequence

    def release(self, size: int, batches: int = 1) -> None:
        """A tail dropped ``batches`` batches of ``size`` bytes (its own limit, a gap, a clear, or :meth:`enforce`)."""
        with self._lock:
            self.bytes -= size
            self._live -= batches

    def enforce(self) -> None:
        """Drop the oldest cached batches, whichever tail holds them, until within budget.

        Call with no partition lock held: it takes the lock of each tail it trims.
        """
        while True:
            with self._lock:
                if self.bytes <= self.max_bytes or not self._tail_ids:
                    return
                tail = self._tails.get(self._tail_ids.popleft())
                sequence = self._queued_sequences.popleft()
            if tail is not None and tail.drop_through(sequence):
                with self._lock:
                    self.evictions += 1

    def _is_live(self, tail_id: int, sequence: int) -> bool:
        tail = self._tails.get(tail_id)
        return tail is not None and sequence >= tail.oldest_sequence

    def _pop_stale_front_locked(self) -> None:
        """Pop entries whose batches are gone from the front (amortised O(1) per admit)."""
        ids, sequences = self._tail_ids, self._queued_sequences
        while ids and not self._is_live(ids[0], sequences[0]):
            ids.popleft()
            sequences.popleft()

    def _compact_locked(self) -> None:
        """Forget queue entries whose batches their tails dropped already (the queue stays bounded)."""
        tail_ids: deque[int] = deque()
        sequences: deque[int] = deque()
        for tail_id, sequence in zip(self._tail_ids, self._queued_sequences, strict=True):
            if self._is_live(tail_id, sequence):
                tail_ids.append(tail_id)
                sequences.append(sequence)
        self._tail_ids, self._queued_sequences = tail_ids, sequences


class HotTail:
    def __init__(self, max_bytes: int, budget: TailBudget | None = None, lock: threading.Lock | None = None) -> None:
        self.max_bytes = max_bytes
        self.budget = budget or TailBudget(max_bytes)
        self._lock: contextlib.AbstractContextManager[object] = lock or contextlib.nullcontext()
        self._id = self.budget.register(self)
        # Offsets and sequences as machine ints: dropping the evicted front (below, every
        # _COMPACT_AFTER or more batches) is then a memmove, not tens of thousands of int frees
        # on the producer's thread (1.3-1.7 ms of CPU per drop at 31,000 batches with lists, 0.3-0.6 now).
        self._bases: array[int] = array("q")
        self._nexts: array[int] = array("q")
        self._data: list[bytes | bytearray] = []
        self._sequences: array[int] = array("q")
        self._head = 0  # index of the oldest entry still cached
        self._bytes = 0
        #: The budget sequence of the oldest batch still cached (read without the lock by the budget).
        self.oldest_sequence = 0

    def add(self, base_offset: int, next_offset: int, batch: bytes | bytearray) -> None:
        """Cache a batch (the caller holds the partition's lock, then calls ``budget.enforce()`` after it)."""
        size = len(batch)
        if size > self.max_bytes or size > self.budget.max_bytes:
            self.clear()
            return
        if self._head < len(self._nexts) and self._nexts[-1] != base_offset:
            self.clear()  # a gap means the log moved without us; never serve stale bytes
        self._bases.append(base_offset)
        self._nexts.append(next_offset)
        self._data.append(batch)
        self._sequences.append(self.budget.admit(self._id, size))
        self._bytes += size
        while self._bytes > self.max_bytes:
            self._drop_head()
        if self._head >= _COMPACT_AFTER and self._head * 2 >= len(self._bases):
            del self._bases[: self._head], self._nexts[: self._head]
            del self._data[: self._head], self._sequences[: self._head]
            self._head = 0

    def _drop_head(self) -> int:
        head = self._head
        size = len(self._data[head])
        self._data[head] = b""
        self._bytes -= size
        self._head = head + 1
        self.oldest_sequence = self._sequences[head] + 1
        self.budget.release(size)
        return size

    def drop_through(self, sequence: int) -> bool:
        """Drop the cached batches up to budget ``sequence`` (taking the lock); whether any was dropped."""
        with self._lock:
            dropped = False
            while self._head < len(self._sequences) and self._sequences[self._head] <= sequence:
                self._drop_head()
                dropped = True
            return dropped

    def drop_below(self, offset: int) -> None:
        """Drop the cached batches below ``offset`` (the caller holds the partition's lock).

        The partition drops everything below the active segment at each roll: the tail then only
        ever holds batches of the active segment, which the log cleaner never rewrites, so a read
        never mixes cached bytes from before a clean with segment bytes from after it.
        """
        while self._head < len(self._bases) and self._bases[self._head] < offset:
            self._drop_head()

    def read(
        self, offset: int, max_bytes: int, high_watermark: int, *, min_one: bool = True
    ) -> bytes | bytearray | None:
        """Batches from the one holding ``offset``, all below ``high_watermark``; None if not cached.

        The first batch even if larger than ``max_bytes``; without ``min_one``, ``b""`` then.
        """
        head = self._head
        if head == len(self._bases) or offset < self._bases[head] or offset >= self._nexts[-1]:
            return None
        first = bisect_right(self._bases, offset, lo=head) - 1
        last, size = first, 0
        while last < len(self._bases) and self._nexts[last] <= high_watermark:
            batch_size = len(self._data[last])
            if size + batch_size > max_bytes and (last > first or not min_one):
                if last == first:
                    return b""
                break
            size += batch_size
            last += 1
        if last == first:
            return None
        if last == first + 1:
            return self._data[first]
        return b"".join(self._data[first:last])

    def clear(self) -> None:
        released, batches = self._bytes, len(self._bases) - self._head
        if self._sequences:
            self.oldest_sequence = self._sequences[-1] + 1  # every queued entry of this tail is stale
        self._bases, self._nexts, self._data, self._sequences = array("q"), array("q"), [], array("q")
        self._head = 0
        self._bytes = 0
        if batches:
            self.budget.release(released, batches)

    def close(self) -> None:
        """Clear and leave the budget (the partition is closing)."""
        self.clear()
        self.budget.unregister(self._id)
