"""A topic's partitions, each built at its first use (issue 12, finding 9).

An open partition is about 30 objects that CPython's garbage collector tracks (the
partition, its log, segment, index, files, locks, conditions, lists and dicts). A new
topic of 4,000 partitions was 120,000 of them, built at once by the create, and every
full collection afterwards (one or more per create) held the GIL while it walked them
all: 55-170 ms during which no other client of the daemon was served. Most partitions
of a large topic are never written, or not for a long while. So a new topic's
partitions are slots; a partition is built when a caller first asks for it (a produce,
a fetch, a wait, a commit check). Until then it is known empty: its directory exists
(made by :meth:`~lkstream.storage.topics.TopicStore.create`) and holds nothing, which is
exactly what a built new partition would write to disk before its first append.

Thread-safety: building and closing serialise on one lock per table, so a partition is
built once, and never after :meth:`PartitionTable.close` (a caller that looked the topic
up before its delete gets :class:`~lkstream.errors.BrokerClosedError`, as it would from a
partition the delete closed). Reading a built slot takes no lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from lkstream.broker.partition import Partition
from lkstream.errors import BrokerClosedError
from lkstream.storage.log import PartitionStats

#: What a partition never written reports (the same as a built, empty one: one empty segment).
EMPTY_STATS = PartitionStats(
    log_start_offset=0, next_offset=0, high_watermark=0, segment_count=1, size_bytes=0, active_segment_bytes=0
)


class PartitionTable:
    """Partitions ``0..len-1`` of ``topic``; ``build(pid)`` makes the ones not given at construction."""

    __slots__ = ("_build", "_closed", "_lock", "_slots", "topic")

    def __init__(
        self, topic: str, count: int, build: Callable[[int], Partition], opened: list[Partition] | None = None
    ) -> None:
        opened = opened or []
        if len(opened) > count:
            raise ValueError(f"{len(opened)} partitions given for a table of {count}")
        self.topic = topic
        self._slots: list[Partition | None] = [*opened, *([None] * (count - len(opened)))]
        self._build = build
        self._lock = threading.Lock()
        self._closed = False

    def __len__(self) -> int:
        return len(self._slots)

    def __getitem__(self, pid: int) -> Partition:
        """Partition ``pid`` (``0 <= pid < len``, checked by the caller), built now if it is the first use."""
        partition = self._slots[pid]
        if partition is not None:
            return partition
        with self._lock:
            partition = self._slots[pid]
            if partition is None:
                if self._closed:
                    raise BrokerClosedError(f"{self.topic}[{pid}] was closed (topic deleted or broker closed)")
                partition = self._slots[pid] = self._build(pid)
            return partition

    def peek(self, pid: int) -> Partition | None:
        """Partition ``pid`` if it was built, else None (never builds; takes no lock)."""
        return self._slots[pid]

    def stats(self, pid: int) -> PartitionStats:
        """Partition ``pid``'s stats, without building it (a partition not built is empty)."""
        partition = self._slots[pid]
        return EMPTY_STATS if partition is None else partition.stats()

    def opened(self) -> list[Partition]:
        """The partitions built so far."""
        return [p for p in self._slots if p is not None]

    def each_built(self, apply: Callable[[Partition], None]) -> None:
        """Call ``apply`` on every partition built so far, holding the build lock.

        For a change that partitions built later read when they are built (a topic config alter):
        no partition can be built with the old value after this has run.
        """
        with self._lock:
            for partition in self.opened():
                apply(partition)

    def grow(self, fresh: list[Partition]) -> None:
        """Append ``fresh`` (new partitions, already open) when the topic grows (CreatePartitions).

        In place, under the lock: a caller holding this table builds into the same slots as
        everyone else, so no partition is ever built twice. The slots not built stay lazy.
        """
        with self._lock:
            if self._closed:
                raise BrokerClosedError(f"topic {self.topic!r} was closed (deleted or broker closed)")
            self._slots.extend(fresh)

    def close(self) -> list[Partition]:
        """Refuse every later build; return the partitions built so far (the caller closes them)."""
        with self._lock:
            self._closed = True
            return self.opened()
