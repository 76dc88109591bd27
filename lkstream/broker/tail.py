"""The hot tail: the newest batches of a partition, kept in memory.

Tailing consumers ask for offsets near the end of the log; serving them from
here avoids a ``pread`` per fetch. The tail holds stamped batches exactly as
written to the segment (already CRC-checked on append), oldest first, and
drops the oldest once it holds more than ``max_bytes``.

Thread-safety: the caller holds the partition's lock for :meth:`HotTail.add`
and :meth:`HotTail.read`.
"""

from __future__ import annotations

from bisect import bisect_right

# Dropped entries are compacted away once this many pile up at the front.
_COMPACT_AFTER = 1024


class HotTail:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._bases: list[int] = []
        self._nexts: list[int] = []
        self._data: list[bytes | bytearray] = []
        self._head = 0  # index of the oldest entry still cached
        self._bytes = 0

    def add(self, base_offset: int, next_offset: int, batch: bytes | bytearray) -> None:
        if len(batch) > self.max_bytes:
            self.clear()
            return
        if self._head < len(self._nexts) and self._nexts[-1] != base_offset:
            self.clear()  # a gap means the log moved without us; never serve stale bytes
        self._bases.append(base_offset)
        self._nexts.append(next_offset)
        self._data.append(batch)
        self._bytes += len(batch)
        while self._bytes > self.max_bytes:
            self._bytes -= len(self._data[self._head])
            self._data[self._head] = b""
            self._head += 1
        if self._head >= _COMPACT_AFTER and self._head * 2 >= len(self._bases):
            del self._bases[: self._head], self._nexts[: self._head], self._data[: self._head]
            self._head = 0

    def read(self, offset: int, max_bytes: int, high_watermark: int) -> bytes | bytearray | None:
        """Batches from the one holding ``offset``, all below ``high_watermark``; None if not cached."""
        head = self._head
        if head == len(self._bases) or offset < self._bases[head] or offset >= self._nexts[-1]:
            return None
        first = bisect_right(self._bases, offset, lo=head) - 1
        last, size = first, 0
        while last < len(self._bases) and self._nexts[last] <= high_watermark:
            batch_size = len(self._data[last])
            if last > first and size + batch_size > max_bytes:
                break
            size += batch_size
            last += 1
        if last == first:
            return None
        if last == first + 1:
            return self._data[first]
        return b"".join(self._data[first:last])

    def clear(self) -> None:
        self._bases, self._nexts, self._data = [], [], []
        self._head = 0
        self._bytes = 0
