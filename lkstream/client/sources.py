"""Where a consumer reads from: the :class:`ConsumerSource` protocol and the embedded adapter.

A :class:`~lkstream.client.consumer.Consumer` reads through a :class:`ConsumerSource`:
:class:`~lkstream.client.remote.RemoteBroker` is one directly, and an embedded
:class:`~lkstream.broker.Broker` is wrapped with its offset store by
:class:`EmbeddedSource`. :func:`resolve_source` decides, from what the application
passed, which store holds the group's offsets and whether the consumer can join a group
(docs/groups.md; the rules are in the consumer's module docstring).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from lkstream.broker.broker import Broker
from lkstream.broker.partition import DEFAULT_FETCH_BYTES
from lkstream.client.membership import GroupSource
from lkstream.errors import InvalidArgumentError
from lkstream.storage.log import ReadResult
from lkstream.storage.offsets import OffsetStore

log = logging.getLogger("lkstream.consumer")

TopicPartition = tuple[str, int]
Positions = dict[TopicPartition, int]


@runtime_checkable
class ConsumerSource(Protocol):
    """What a :class:`Consumer` needs from a broker: reads, wake-ups and the group's offsets.

    :class:`~lkstream.client.remote.RemoteBroker` satisfies it directly; an embedded
    :class:`~lkstream.broker.Broker` is adapted (with its offset store) by the consumer.
    Group membership additionally needs ``join_group``, ``heartbeat``,
    ``leave_group`` and ``commit_offsets`` (:class:`GroupConsumerSource`).
    """

    def partitions_for(self, topic: str) -> int:
        """Partition count of ``topic`` (UnknownTopicError if it does not exist)."""
        ...

    def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        """``(log_start_offset, high_watermark)`` (InvalidArgumentError for a missing partition)."""
        ...

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = ...) -> ReadResult:
        """Whole record batches from ``offset`` (OffsetOutOfRangeError outside the log)."""
        ...

    async def fetch_async(self, topic: str, partition: int, offset: int, max_bytes: int = ...) -> ReadResult:
        """Async twin of :meth:`fetch`."""
        ...

    async def wait_for_data(self, positions: Positions, timeout: float | None = None) -> bool:
        """Wait until any partition has a record at or past its position; False on timeout. No polling."""
        ...

    def wait_for_data_sync(self, positions: Positions, timeout: float | None = None) -> bool:
        """Blocking twin of :meth:`wait_for_data`."""
        ...

    def read_committed(self, group: str, topic: str, partition: int) -> int | None:
        """The group's committed offset, or None if it never committed."""
        ...

    def commit_offset(self, group: str, topic: str, partition: int, offset: int) -> None:
        """Durably record that ``group`` will next read ``offset``."""
        ...


class GroupConsumerSource(GroupSource, Protocol):
    """The group calls of a source (embedded Broker, RemoteBroker) a group member needs."""

    def commit_offsets(
        self,
        group: str,
        offsets: Mapping[TopicPartition, int],
        *,
        member_id: str | None = None,
        generation: int | None = None,
    ) -> None: ...


class EmbeddedSource:
    """An embedded :class:`Broker` plus an :class:`OffsetStore`, seen as a :class:`ConsumerSource`."""

    def __init__(self, broker: Broker, offset_store: OffsetStore) -> None:
        self.broker = broker
        self.offset_store = offset_store

    def partitions_for(self, topic: str) -> int:
        return self.broker.partitions_for(topic)

    def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        p = self.broker.partition(topic, partition)
        return p.log_start_offset, p.high_watermark

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = DEFAULT_FETCH_BYTES) -> ReadResult:
        return self.broker.fetch(topic, partition, offset, max_bytes)

    async def fetch_async(
        self, topic: str, partition: int, offset: int, max_bytes: int = DEFAULT_FETCH_BYTES
    ) -> ReadResult:
        # An embedded read is a page-cache copy of microseconds: inline, as the broker's async API does.
        return self.broker.fetch(topic, partition, offset, max_bytes)

    async def wait_for_data(self, positions: Positions, timeout: float | None = None) -> bool:
        return await self.broker.wait_for_data(positions, timeout)

    def wait_for_data_sync(self, positions: Positions, timeout: float | None = None) -> bool:
        return self.broker.wait_for_data_sync(positions, timeout)

    def read_committed(self, group: str, topic: str, partition: int) -> int | None:
        # Only this incarnation's offset: a topic deleted and created again starts afresh.
        return self.offset_store.read_committed(group, topic, partition, topic_id=self.broker.topic_id(topic))

    def commit_offset(self, group: str, topic: str, partition: int, offset: int) -> None:
        # A private store knows nothing of the log: the broker refuses offsets past its end here.
        self.broker.check_commit(topic, partition, offset)
        self.offset_store.commit(group, topic, partition, offset, topic_id=self.broker.topic_id(topic))


def _supports_groups(source: object) -> bool:
    return all(
        callable(getattr(source, name, None)) for name in ("join_group", "heartbeat", "leave_group", "commit_offsets")
    )


def _same_directory(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def resolve_source(
    broker: Broker | ConsumerSource, offset_store: OffsetStore | None, group: str | None
) -> tuple[OffsetStore | None, ConsumerSource, GroupConsumerSource | None]:
    """(offset store, read source, group source or None for a standalone consumer).

    The rules are in :mod:`lkstream.client.consumer`'s docstring ("Where the group's offsets live").
    """
    if isinstance(broker, Broker):
        own_store = offset_store is None or _same_directory(offset_store.directory, broker.offset_store.directory)
        # The broker's own directory means the broker's store (one journal writer per directory).
        store = broker.offset_store if own_store or offset_store is None else offset_store
        group_source: GroupConsumerSource | None = broker if own_store and group is not None else None
        return store, EmbeddedSource(broker, store), group_source
    if isinstance(broker, ConsumerSource):
        if offset_store is not None:
            log.warning(
                "offset_store is ignored with a remote broker: group %r commits its offsets in the daemon", group
            )
        remote_groups = broker if group is not None and _supports_groups(broker) else None
        return None, broker, remote_groups  # type: ignore[return-value]
    raise InvalidArgumentError(
        f"Consumer needs a Broker or a ConsumerSource (e.g. lkstream.connect(...)), not {type(broker).__name__}"
    )
