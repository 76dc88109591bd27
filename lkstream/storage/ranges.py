"""Read ranges: stored batches handed out as (file, position, length) for zero-copy sends.

A surface that can copy file bytes to a socket inside the kernel (``sendfile(2)``) asks the log
for :class:`FileRange`\\ s instead of bytes (:meth:`~lkstream.storage.log.PartitionLog.read_for_send`).
This module is the whole seam: what a range promises, how long it stays valid, and which bytes
may be handed out that way.

What a range promises (computed under the log's lock, then sent without it):

* **Whole batches below the high watermark.** The range starts at a batch boundary and ends at one,
  at or below the readable end of the segment at the moment it was computed (the high watermark's
  position; in ``sync`` mode the fsynced end). A segment only grows past that point, and a failed
  append's rollback cuts only bytes beyond it, so the bytes of a range never change afterwards.
* **Only CRC-checked bytes.** Each segment keeps the spans of its bytes whose batches passed their
  CRC check in this process (:class:`VerifiedSpans`): every batch appended (checked before it was
  written), what recovery or an index rebuild validated, and every read through the copying path
  (:meth:`~lkstream.storage.segment.Segment.read` checks each batch it returns). A range never
  reaches past the span its start lies in; bytes outside every span (a sealed segment written by an
  earlier process) are read and checked through the copying path first, which verifies them for
  the next reader.
* **The same file until released.** A range holds its segment file's descriptor open (a pin in
  the :class:`~lkstream.storage.handles.FileBudget`, or a ``dup`` for a plain
  :class:`~lkstream.storage.files.OsFile`): the budget does not close a pinned descriptor, and
  retention's unlink, a close, or a cleaner that renames a rewritten file over the segment's path
  leave the descriptor on the original inode, whose bytes are the ones that were checked. Storage
  never rewrites bytes below a segment's readable end in place. Release every range exactly once
  (:meth:`FileRange.release`, idempotent); a pinned descriptor counts against the file budget.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from lkstream.errors import StorageError, map_os_errors

#: Spans kept per segment; past this the shortest are forgotten (they are re-checked when read again).
MAX_SPANS: Final = 64


class FileRange:
    """``length`` bytes at ``position`` of an open descriptor: whole, CRC-checked batches.

    Owned by one response: send it (``os.sendfile(sock, range.fd, range.position, range.length)``)
    or :meth:`read` it, then :meth:`release` it.
    """

    __slots__ = ("_unpin", "fd", "length", "path", "position")

    def __init__(self, fd: int, position: int, length: int, path: str, unpin: Callable[[], None]) -> None:
        self.fd = fd
        self.position = position
        self.length = length
        self.path = path
        self._unpin: Callable[[], None] | None = unpin

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return f"FileRange({self.path!r}, position={self.position}, length={self.length})"

    @property
    def released(self) -> bool:
        return self._unpin is None

    def read(self) -> bytes:
        """The range's bytes, copied into memory (for a transport that cannot send files: TLS)."""
        if self._unpin is None:
            raise StorageError("read of a released range", path=self.path)
        parts = []
        done = 0
        with map_os_errors("read", self.path):
            while done < self.length:
                chunk = os.pread(self.fd, self.length - done, self.position + done)
                if not chunk:
                    raise StorageError(f"range cut short at {done} of {self.length} bytes", path=self.path)
                parts.append(chunk)
                done += len(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def release(self) -> None:
        """Give the descriptor back (once; later calls do nothing)."""
        unpin, self._unpin = self._unpin, None
        if unpin is not None:
            unpin()


@dataclass(frozen=True, slots=True)
class SendableRead:
    """What :meth:`~lkstream.storage.log.PartitionLog.read_for_send` found: bytes or a range, with the bounds."""

    data: bytes | bytearray | FileRange
    log_start_offset: int
    high_watermark: int


class PinnableFile(Protocol):
    """A storage file that can hand out its descriptor for the life of a range."""

    path: str

    def pinned(self) -> tuple[int, Callable[[], None]]:
        """``(descriptor, unpin)``: the descriptor stays open on this file until ``unpin()`` is called."""
        ...


class VerifiedSpans:
    """Sorted, disjoint ``[start, end)`` byte spans of one segment whose batches passed their CRC check.

    Span bounds are batch boundaries (only whole checked batches are added). Not thread-safe: the
    caller holds the log's lock. Bounded by :data:`MAX_SPANS`.
    """

    __slots__ = ("_ends", "_starts")

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []

    def __len__(self) -> int:
        return len(self._starts)

    def spans(self) -> list[tuple[int, int]]:
        return list(zip(self._starts, self._ends, strict=True))

    def add(self, start: int, end: int) -> None:
        """Note ``[start, end)`` as checked, merging it with the spans it touches."""
        if end <= start:
            return
        ends = self._ends
        if ends and ends[-1] == start:  # an append right after the last checked byte: the hot case
            ends[-1] = end
            return
        starts = self._starts
        first = bisect_right(ends, start - 1)  # first span ending at or after `start`
        last = bisect_right(starts, end)  # spans before `last` start at or before `end`
        if first < last:
            start = min(start, starts[first])
            end = max(end, ends[last - 1])
        starts[first:last] = [start]
        ends[first:last] = [end]
        if len(starts) > MAX_SPANS:
            shortest = min(range(len(starts)), key=lambda i: ends[i] - starts[i])
            del starts[shortest], ends[shortest]

    def end_from(self, position: int) -> int:
        """The end of the span holding ``position`` (``position`` itself when no span holds it)."""
        i = bisect_right(self._starts, position) - 1
        if i >= 0 and position < self._ends[i]:
            return self._ends[i]
        return position

    def cut(self, end: int) -> None:
        """Forget everything at or past ``end`` (the segment was truncated there)."""
        while self._ends and self._ends[-1] > end:
            if self._starts[-1] >= end:
                del self._starts[-1], self._ends[-1]
            else:
                self._ends[-1] = end
