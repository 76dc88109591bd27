"""Committed offsets through the group coordinator: fenced commits, standalone commits, resets, reads.

A mixin of :class:`~lkstream.broker.groups.coordinator.GroupCoordinator` (the rules are in
its module docstring and docs/groups.md, "Committed offsets"). Two rule sets:

* LKSTREAM's (embedded ``Consumer``, gRPC, HTTP): an offset is at most its partition's high
  watermark (:class:`~lkstream.errors.OffsetOutOfRangeError`) and a member's commit never
  moves an offset backward (:class:`~lkstream.errors.OffsetRegressionError`);
* Kafka's (``any_offset=True``, the Kafka listener's OffsetCommit): any offset, either way,
  as Kafka accepts it; the consumer's ``auto.offset.reset`` handles one past the log on fetch.

Either way a commit may carry a metadata string per partition (Kafka's ``committed_metadata``),
at most ``limits.offset_metadata_max_bytes`` long, stored with the offset.

Commits of one group are serialised by a per-group lock held across the checks and the durable
write; the coordinator's own lock is released before the write (fsyncs take milliseconds). The
per-group locks live only while someone holds or waits for them, so a commit under a new group
name costs nothing once it is done.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping

from lkstream.broker.groups.limits import GroupLimits
from lkstream.broker.groups.types import TopicPartition
from lkstream.errors import (
    GroupNotEmptyError,
    InvalidArgumentError,
    NotPartitionOwnerError,
    OffsetOutOfRangeError,
    OffsetRegressionError,
    StaleGenerationError,
)
from lkstream.storage.names import validate_group, validate_topic
from lkstream.storage.offsets import Committed, OffsetStore

Metadata = Mapping[TopicPartition, str]

__all__ = ["Committed", "Metadata", "OffsetCalls", "check_int", "check_offsets", "check_owns", "check_stale"]


class OffsetCalls:
    """The offset calls of the group coordinator (a mixin: the coordinator supplies what is declared here)."""

    _store: OffsetStore
    _lock: threading.Lock
    _bounds: Callable[[str, int], tuple[int, int]] | None
    _topic_ids: Callable[[], Mapping[str, uuid.UUID]] | None
    limits: GroupLimits

    def _init_commit_locks(self) -> None:
        # group -> [lock, users]: only while someone holds or waits for it (bounded by concurrent commits).
        self._commit_locks: dict[str, tuple[threading.Lock, list[int]]] = {}

    @abstractmethod
    def _live_members_locked(self, group: str) -> int: ...

    @abstractmethod
    def _check_member_commit_locked(
        self,
        group: str,
        member_id: str,
        generation: int | None,
        partitions: Iterable[TopicPartition],
        owner: str | None,
    ) -> None: ...

    @abstractmethod
    def _check_partitions_exist(self, partitions: Iterable[TopicPartition]) -> None: ...

    def commit(
        self,
        group: str,
        member_id: str | None,
        generation: int | None,
        offsets: Mapping[TopicPartition, int],
        *,
        owner: str | None = None,
        metadata: Metadata | None = None,
        any_offset: bool = False,
    ) -> None:
        """Durably commit ``offsets`` (next offset to read) for ``group``, fenced (see the module docstring).

        ``member_id=None``: a standalone commit, accepted while the group has no live member.
        ``any_offset``: Kafka's rule (any offset, either direction) instead of LKSTREAM's.
        """
        validate_group(group)
        checked = check_offsets(offsets)
        notes = self._check_metadata(group, checked, metadata)
        with self._commit_lock(group):
            with self._lock:
                self._expire_locked()
                if member_id is None:
                    live = self._live_members_locked(group)
                    if live:
                        # Not an unknown member: a standalone commit must not overwrite a running group.
                        raise GroupNotEmptyError(group, live, "commit without a member id and generation")
                    self._check_partitions_exist(checked)
                else:
                    self._check_member_commit_locked(group, member_id, generation, checked, owner=owner)
            # Outside the coordinator lock (fsyncs take milliseconds), inside the group's commit lock.
            ids = self._ids()
            if not any_offset:
                self._check_forward(group, checked, ids)
            self._store.commit_many(group, checked, topic_ids=ids, metadata=notes)

    def _check_forward(
        self, group: str, checked: Mapping[TopicPartition, int], ids: Mapping[str, uuid.UUID] | None
    ) -> None:
        highs = self._check_below_high_watermarks(checked)
        for (topic, pid), offset in checked.items():
            committed = self._store.read_committed(group, topic, pid, topic_id=_id_of(ids, topic))
            # An offset above the log's end (written before this check existed, or by a Kafka
            # client) is impossible here: the next valid commit may replace it, so such a group is
            # never wedged.
            if committed is not None and offset < committed <= highs.get((topic, pid), committed):
                raise OffsetRegressionError(group, topic, pid, offset, committed)

    def commit_unfenced(
        self,
        group: str,
        offsets: Mapping[TopicPartition, int],
        *,
        metadata: Metadata | None = None,
        any_offset: bool = False,
    ) -> None:
        """Commit for a group this coordinator does not fence (Kafka clients' classic groups, fenced by
        :mod:`~lkstream.broker.groups.classic`): offsets may move backward (a Kafka consumer may seek
        back and commit). Refused while LKSTREAM members live in it."""
        self._store_without_members(group, offsets, "commit from a Kafka client", metadata, any_offset)

    def reset_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Operator reset: set offsets (any direction); refused while the group has live members.

        Resolving ``earliest``/``latest``/a timestamp to offsets is the
        caller's job (the broker has the partition bounds and
        ``offset_for_timestamp``).
        """
        self._store_without_members(group, offsets, "reset offsets")

    def _store_without_members(
        self,
        group: str,
        offsets: Mapping[TopicPartition, int],
        action: str,
        metadata: Metadata | None = None,
        any_offset: bool = False,
    ) -> None:
        """Write offsets (any direction) to a group with no live member of this coordinator."""
        validate_group(group)
        checked = check_offsets(offsets)
        notes = self._check_metadata(group, checked, metadata)
        with self._commit_lock(group):
            with self._lock:
                self._expire_locked()
                live = self._live_members_locked(group)
                if live:
                    raise GroupNotEmptyError(group, live, action)
                self._check_partitions_exist(checked)
            if not any_offset:
                self._check_below_high_watermarks(checked)
            self._store.commit_many(group, checked, topic_ids=self._ids(), metadata=notes)

    def _check_metadata(
        self, group: str, offsets: Mapping[TopicPartition, int], metadata: Metadata | None
    ) -> dict[TopicPartition, str] | None:
        if not metadata:
            return None
        notes = {}
        for tp, note in metadata.items():
            if tp not in offsets:
                continue
            if not isinstance(note, str):
                raise InvalidArgumentError(f"invalid metadata {note!r} for {tp[0]}[{tp[1]}]: must be a string")
            self.limits.check_metadata(group, tp[0], tp[1], note)
            notes[tp] = note
        return notes

    def _ids(self) -> Mapping[str, uuid.UUID] | None:
        return None if self._topic_ids is None else self._topic_ids()

    def _check_below_high_watermarks(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Refuse offsets above a partition's high watermark; return the high watermarks.

        A committed offset is the next offset the group reads, so the high watermark itself
        is the largest valid one. Every LKSTREAM commit that enters the broker (embedded
        consumer, gRPC, HTTP) passes here, so none can wedge a group.
        """
        if self._bounds is None:
            return {}
        highs = {}
        for (topic, pid), offset in offsets.items():
            start, high = self._bounds(topic, pid)
            if offset > high:
                raise OffsetOutOfRangeError(topic, pid, offset, start, high)
            highs[(topic, pid)] = high
        return highs

    def fetch_committed(
        self, group: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, int]:
        """Committed offsets of ``group`` (all of them, or those of ``partitions`` that have one)."""
        return {tp: found.offset for tp, found in self.fetch_committed_metadata(group, partitions).items()}

    def fetch_committed_metadata(
        self, group: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, Committed]:
        """Like :meth:`fetch_committed`, with each commit's time and metadata string."""
        validate_group(group)
        ids = self._ids()
        if partitions is None:
            wanted = [(t, p) for (gr, t, p) in self._store.list_committed(topic_ids=ids) if gr == group]
        else:
            wanted = list(partitions)
        found = {}
        for topic, pid in wanted:
            committed = self._store.read_committed_metadata(group, topic, pid, topic_id=_id_of(ids, topic))
            if committed is not None:
                found[(topic, pid)] = committed
        return found

    @contextlib.contextmanager
    def _commit_lock(self, group: str) -> Iterator[None]:
        with self._lock:
            lock, users = self._commit_locks.setdefault(group, (threading.Lock(), [0]))
            users[0] += 1
        try:
            with lock:
                yield
        finally:
            with self._lock:
                users[0] -= 1
                if not users[0]:
                    del self._commit_locks[group]

    @abstractmethod
    def _expire_locked(self) -> float: ...


def check_stale(group: str, member_id: str, given: int | None, current: int) -> None:
    if given != current:
        raise StaleGenerationError(group, member_id, -1 if given is None else given, current)


def check_owns(group: str, member_id: str, owned: set[TopicPartition], partitions: Iterable[TopicPartition]) -> None:
    not_owned = sorted(tp for tp in partitions if tp not in owned)
    if not_owned:
        raise NotPartitionOwnerError(group, member_id, not_owned)


def check_int(name: str, value: object, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidArgumentError(f"invalid {name} {value!r}: must be an integer >= {minimum}")
    return value


def check_offsets(offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    if not isinstance(offsets, Mapping) or not offsets:
        raise InvalidArgumentError("no offsets given: pass {(topic, partition): offset}")
    checked: dict[TopicPartition, int] = {}
    for tp, offset in offsets.items():
        if not isinstance(tp, tuple) or len(tp) != 2:
            raise InvalidArgumentError(f"invalid partition key {tp!r}: use (topic, partition)")
        topic, pid = tp
        validate_topic(topic)
        check_int("partition", pid, 0)
        check_int("offset", offset, 0)
        checked[(topic, pid)] = offset
    return checked


def _id_of(ids: Mapping[str, uuid.UUID] | None, topic: str) -> uuid.UUID | None:
    """The topic's current id; a topic that is gone gets the nil id, which no stored offset has."""
    if ids is None:
        return None
    return ids.get(topic, uuid.UUID(int=0))
