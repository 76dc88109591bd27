"""A consumer's assignment: which partitions it reads, where, what is committed, what is paused.

:class:`Assignment` is the consumer's bookkeeping (aiokafka calls it the subscription
state). It holds no connection: starting positions come from a
:class:`~lkstream.client.sources.ConsumerSource` passed in, and everything else is plain
dictionaries and sets that only the consumer's thread or event loop touches (not
thread-safe, like the consumer).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Literal

from lkstream.client.sources import ConsumerSource, TopicPartition
from lkstream.errors import InvalidArgumentError, OffsetOutOfRangeError

log = logging.getLogger("lkstream.consumer")

OffsetReset = Literal["earliest", "latest", "error"]


class Assignment:
    """Positions, committed offsets, paused and seeked partitions of one consumer.

    ``positions`` is the next offset to read per assigned partition (its keys *are* the
    assignment); ``committed`` the offsets known committed for the group; ``seeked`` the
    partitions moved (or dropped) since ``consume()`` read its current records, whose
    remaining records of that read are stale.
    """

    def __init__(self, auto_offset_reset: OffsetReset) -> None:
        self.auto_offset_reset = auto_offset_reset
        self.positions: dict[TopicPartition, int] = {}
        self.committed: dict[TopicPartition, int] = {}
        self.paused: set[TopicPartition] = set()
        self.seeked: set[TopicPartition] = set()

    def take(
        self, source: ConsumerSource, group: str | None, partitions: Iterable[TopicPartition], from_committed: bool
    ) -> None:
        """Start reading ``partitions``: at the group's committed offset, else ``auto_offset_reset``."""
        for topic, pid in partitions:
            start = None
            if from_committed and group is not None:
                start = source.read_committed(group, topic, pid)
                if start is not None:
                    self.committed[(topic, pid)] = start
            # valid_start asks for the partition's bounds, which also proves it exists.
            self.positions[(topic, pid)] = self.valid_start(source, topic, pid, start)

    def valid_start(self, source: ConsumerSource, topic: str, pid: int, wanted: int | None) -> int:
        """``wanted`` if it lies in the log, else where ``auto_offset_reset`` says (or its error)."""
        start, end = source.bounds(topic, pid)
        if wanted is not None and start <= wanted <= end:
            return wanted
        if wanted is not None:
            if self.auto_offset_reset == "error":
                raise OffsetOutOfRangeError(topic, pid, wanted, start, end)
            log.warning(
                "%s[%d]: committed offset %d is outside [%d, %d]; resetting to %s",
                topic,
                pid,
                wanted,
                start,
                end,
                self.auto_offset_reset,
            )
        return start if self.auto_offset_reset == "earliest" else end

    def reset(self, tp: TopicPartition, exc: OffsetOutOfRangeError) -> None:
        """A read found the position outside the log (retention, a truncation): move it as configured."""
        if self.auto_offset_reset == "error":
            raise exc
        self.positions[tp] = exc.earliest if self.auto_offset_reset == "earliest" else exc.latest
        log.warning("%s; resetting %s[%d] to %d", exc, tp[0], tp[1], self.positions[tp])

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.positions[tp] = offset
        self.seeked.add(tp)

    def check_assigned(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            if tp not in self.positions:
                raise InvalidArgumentError(f"{tp[0]}[{tp[1]}] is not assigned to this consumer")

    def readable(self, topic: str | None) -> list[TopicPartition]:
        """Assigned, not paused partitions (of ``topic``, when given)."""
        return [tp for tp in self.positions if tp not in self.paused and (topic is None or tp[0] == topic)]

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        """Drop ``partitions`` from the assignment; records of them already read must not be handled."""
        for tp in partitions:
            self.positions.pop(tp, None)
            self.committed.pop(tp, None)
            self.paused.discard(tp)
            self.seeked.add(tp)

    def advanced(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """The offsets past the known committed ones (a seek back is not committed automatically)."""
        return {tp: o for tp, o in offsets.items() if self.committed.get(tp) is None or o > self.committed[tp]}

    def pending(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """The offsets that differ from the known committed ones."""
        return {tp: o for tp, o in offsets.items() if self.committed.get(tp) != o}
