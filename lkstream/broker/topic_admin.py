"""Topic administration of the embedded broker: create, delete, grow, configure, purge.

:class:`TopicAdmin` is a mixin of :class:`~lkstream.broker.broker.Broker`; it works on the
broker's topic table under ``Broker._lock`` and keeps every change all or nothing on disk
(``topic.json`` is rewritten atomically, a topic directory appears or leaves in one rename).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from lkstream.broker.topics import OpenTopic, TopicDescription
from lkstream.errors import (
    InvalidArgumentError,
    LkstreamError,
    OffsetOutOfRangeError,
    PartitionLimitError,
    PolicyViolationError,
    TopicExistsError,
    UnknownTopicError,
    count_of,
)
from lkstream.storage.names import validate_topic
from lkstream.storage.topic_config import ConfigEntry, EffectiveTopicConfig, TopicConfig
from lkstream.storage.topics import StoredTopic, TopicSettings

if TYPE_CHECKING:
    from collections.abc import Callable

    from lkstream.broker.autocreate import AutoCreateBudget
    from lkstream.broker.groups.coordinator import GroupCoordinator
    from lkstream.broker.partition import DataArrived, Partition
    from lkstream.config import BrokerConfig
    from lkstream.storage.cleaner import CleanerPolicy
    from lkstream.storage.log import LogConfig, PartitionStats
    from lkstream.storage.offsets import OffsetStore
    from lkstream.storage.topics import TopicStore
    from lkstream.storage.trash import TrashEmptier

log = logging.getLogger("lkstream.broker")


class TopicAdmin:
    """Mixin of :class:`~lkstream.broker.broker.Broker`: the calls that change or describe topics."""

    # The broker's state this mixin works on (Broker.__init__ sets every one).
    config: BrokerConfig
    _lock: threading.RLock
    _topics: dict[str, OpenTopic]
    _store: TopicStore
    _trash: TrashEmptier
    _data_arrived: DataArrived
    topics_version: int
    groups: GroupCoordinator
    offset_store: OffsetStore
    auto_creates: AutoCreateBudget
    topic_config_observers: list[Callable[[str, EffectiveTopicConfig], None]]

    if TYPE_CHECKING:
        # Defined by Broker and the maintenance mixin; declared only for the type checker, so
        # no stub here can shadow the real method in the broker's MRO.
        def _check_open(self) -> None: ...
        def _topic(self, name: str, *, create: bool) -> OpenTopic: ...
        def _publish(self, topic: OpenTopic) -> OpenTopic: ...
        def _open_topic(self, name: str, *, new: bool = False) -> OpenTopic: ...
        def _open_partition(self, name: str, pid: int, log_config: LogConfig, *, new: bool = False) -> Partition: ...
        def _log_config(self, effective: EffectiveTopicConfig) -> LogConfig: ...
        def _cleaner_policy(self, topic: str) -> CleanerPolicy | None: ...
        def partition(self, topic: str, pid: int) -> Partition: ...
        def partitions_for(self, topic: str) -> int: ...

    def create_topic(
        self,
        name: str,
        partitions: int | None = None,
        *,
        retention_ms: int | None = None,
        retention_bytes: int | None = None,
        configs: Mapping[str, str | None] | TopicConfig | None = None,
    ) -> None:
        """Create a topic; :class:`TopicExistsError` if it exists.

        ``configs`` are Kafka's topic configs by name with string values
        (``{"cleanup.policy": "compact"}``), validated by
        :meth:`~lkstream.storage.topic_config.TopicConfig.parse` (:class:`InvalidConfigError`,
        :class:`UnsupportedConfigError`); ``retention_ms`` / ``retention_bytes`` are shorthands for
        ``retention.ms`` / ``retention.bytes``. Configs not given follow the broker's defaults.
        """
        count = self.config.partitions if partitions is None else partitions
        topic_config = self._new_topic_config(configs, retention_ms, retention_bytes)
        TopicSettings(count)  # the count's own check, before the name's
        validate_topic(name)
        with self._lock:
            self._check_open()
            self._create_locked(name, count, topic_config)
        self.groups.topics_changed()

    def validate_topic_creation(
        self,
        name: str,
        partitions: int | None = None,
        *,
        retention_ms: int | None = None,
        retention_bytes: int | None = None,
        configs: Mapping[str, str | None] | TopicConfig | None = None,
    ) -> None:
        """Everything :meth:`create_topic` checks, creating nothing (Kafka's ``validate_only``)."""
        count = self.config.partitions if partitions is None else partitions
        self._new_topic_config(configs, retention_ms, retention_bytes)
        TopicSettings(count)
        validate_topic(name)
        self._check_open()
        if name in self._topics:
            raise TopicExistsError(name)
        existing = sum(len(t.partitions) for t in self._topics.values())
        if existing + count > self.config.max_partitions:
            raise PartitionLimitError(name, count, existing, self.config.max_partitions)

    def _new_topic_config(
        self,
        configs: Mapping[str, str | None] | TopicConfig | None,
        retention_ms: int | None,
        retention_bytes: int | None,
    ) -> TopicConfig:
        """The validated overrides of a topic being created (checked against this broker's limits)."""
        shorthands = {
            name: str(value)
            for name, value in (("retention.ms", retention_ms), ("retention.bytes", retention_bytes))
            if value is not None
        }
        base = configs if isinstance(configs, TopicConfig) else TopicConfig.parse(configs or {})
        topic_config = base.with_changes(set=shorthands) if shorthands else base
        topic_config.checked(self.config)
        return topic_config

    def auto_create_topic(self, name: str, *, requester: str) -> int:
        """The partition count of ``name``, auto-creating it first if it is missing, as a caller's
        request that names it does (a produce, a Kafka Metadata request).

        ``requester`` is who asks (a principal, or a client address): each has a budget
        (:mod:`lkstream.broker.autocreate`). Raises :class:`UnknownTopicError` when auto-creation
        is off, :class:`AutoCreateThrottledError` when the requester's budget is spent and
        :class:`PartitionLimitError` past ``max_partitions``; nothing is created then. Admin work:
        surfaces call it in a worker thread.
        """
        try:
            return self.partitions_for(name)
        except UnknownTopicError:
            if not self.config.auto_create_topics:
                raise
        validate_topic(name)
        partitions = self.config.partitions
        self.auto_creates.take(requester, partitions, name)
        try:
            self.create_topic(name)
        except TopicExistsError:  # another caller created it meanwhile: this one created nothing
            self.auto_creates.give_back(requester, partitions)
        except BaseException:
            self.auto_creates.give_back(requester, partitions)
            raise
        return self.partitions_for(name)

    def _create_locked(self, name: str, partitions: int, configs: TopicConfig | None = None) -> OpenTopic:
        """Create and open a topic, all or nothing. Caller holds ``_lock``.

        The directory appears in one rename (TopicStore.create); if opening it then fails
        (no descriptors, a read-only disk), it is moved out again, so a failed create
        leaves no half topic that describe says is missing and create says exists.
        """
        existing = sum(len(t.partitions) for t in self._topics.values())
        if existing + partitions > self.config.max_partitions:
            raise PartitionLimitError(name, partitions, existing, self.config.max_partitions)
        self._store.create(name, partitions, configs)
        try:
            return self._publish(self._open_topic(name, new=True))
        except BaseException as exc:
            try:
                self._store.delete(name)
            except LkstreamError as undo:  # the next start opens it whole, or sweeps it
                log.error("could not remove topic %r after its creation failed (%s): %s", name, exc, undo)
            raise

    def delete_topic(self, name: str) -> None:
        """Delete a topic and all its data, all or nothing.

        The one rename into ``trash/`` is the commit point: if it fails (a read-only
        disk), the topic stays whole and open and the error says why; once it is done,
        the partitions close and the topic's committed offsets are forgotten. A crash
        in between is finished by the next start (see docs/durability.md).
        """
        with self._lock:
            self._check_open()
            topic = self._topic(name, create=False)
            trashed = self._store.move_to_trash(name)
            self._topics = {key: value for key, value in self._topics.items() if key != name}
            self.topics_version += 1
            for partition in topic.partitions.close():
                with contextlib.suppress(LkstreamError):  # its files are already in the trash
                    partition.close()
            # Blocking waits on the topic end now (a partition never built has no close to wake them).
            self._data_arrived.notify()
            # A topic created later under the same name must not inherit old positions. They are
            # stored with this incarnation's id, so if forgetting them fails they are still never
            # read for a new topic, and the next start forgets them (_reconcile_offsets).
            try:
                self.offset_store.forget_topic(name)
            except LkstreamError as exc:
                log.warning("topic %r deleted, but its committed offsets stay until the next start: %s", name, exc)
        self.groups.topics_changed()
        # The topic is gone; removing thousands of directories is left to a thread of its own, so
        # neither this caller nor the next admin call (an auto-create takes the lock) waits for it.
        self._trash.submit(trashed)

    def settle_trash(self) -> None:
        """Block until the files of every topic deleted so far are removed from the disk."""
        self._trash.settle()

    def create_partitions(self, name: str, count: int) -> None:
        """Grow ``name`` to ``count`` partitions (Kafka's CreatePartitions; a count never shrinks).

        The new partition directories are created first and ``topic.json`` is
        rewritten last (atomically): after a crash in between, the topic opens with
        its old count. Keyed records route differently afterwards, as in Kafka.
        """
        with self._lock:
            self._check_open()
            topic = self.validate_partition_count(name, count)
            fresh: list[Partition] = []
            try:
                fresh.extend(
                    self._open_partition(name, pid, self._log_config(topic.effective))
                    for pid in range(len(topic.partitions), count)
                )
                self._store.update(name, StoredTopic(count, topic.topic_id, topic.configs))
            except BaseException:
                for partition in fresh:  # topic.json still has the old count: the topic opens as before
                    with contextlib.suppress(Exception):
                        partition.close()
                raise
            topic.partitions.grow(fresh)
            self.topics_version += 1
        self.groups.topics_changed()

    def validate_partition_count(self, name: str, count: int) -> OpenTopic:
        """What :meth:`create_partitions` checks, changing nothing (Kafka's ``validate_only``)."""
        topic = self._topic(name, create=False)
        if not isinstance(count, int) or isinstance(count, bool) or count <= len(topic.partitions):
            raise InvalidArgumentError(
                f"topic {name!r} has {count_of(len(topic.partitions), 'partition')}; "
                f"a new count must be larger, not {count!r}"
            )
        existing = sum(len(t.partitions) for t in self._topics.values())
        added = count - len(topic.partitions)
        if existing + added > self.config.max_partitions:
            raise PartitionLimitError(name, added, existing, self.config.max_partitions)
        TopicSettings(count)  # the count's own bound
        return topic

    def list_topics(self) -> list[str]:
        return sorted(self._topics)

    def describe_topic(self, name: str) -> TopicDescription:
        topic = self._topic(name, create=False)
        table = topic.partitions
        stats = [table.stats(pid) for pid in range(len(table))]
        if self._cleaner_policy(name) is not None:  # a compacted topic: how much the cleaner has to do
            stats = [self._with_dirty_ratio(table.peek(pid), stat) for pid, stat in enumerate(stats)]
        return TopicDescription(name, topic.settings, stats, topic.topic_id, topic.configs)

    @staticmethod
    def _with_dirty_ratio(partition: Partition | None, stats: PartitionStats) -> PartitionStats:
        ratio = 0.0 if partition is None else partition.log.dirty_ratio()
        return dataclasses.replace(stats, dirty_ratio=ratio)

    # -- topic configs ----------------------------------------------------------------------------

    def topic_overrides(self, name: str) -> TopicConfig:
        """The config overrides set on topic ``name`` (cheap: no partition stats, unlike :meth:`describe_topic`)."""
        return self._topic(name, create=False).configs

    def topic_config(self, name: str) -> EffectiveTopicConfig:
        """The configs that apply to topic ``name``: its overrides over the broker's defaults."""
        return self._topic(name, create=False).effective

    def describe_topic_configs(self, name: str) -> list[ConfigEntry]:
        """Every topic config of ``name`` with its value, source and synonyms (Kafka's DescribeConfigs)."""
        return self._topic(name, create=False).configs.describe(self.config)

    def validate_topic_configs(
        self, name: str, set: Mapping[str, str | None] | None = None, delete: Iterable[str] = ()
    ) -> TopicConfig:
        """The overrides :meth:`alter_topic_configs` would leave, checked; nothing changes (``validate_only``)."""
        configs = self._topic(name, create=False).configs.with_changes(set=set, delete=delete)
        configs.checked(self.config)
        return configs

    def alter_topic_configs(
        self, name: str, set: Mapping[str, str | None] | None = None, delete: Iterable[str] = ()
    ) -> TopicConfig:
        """Set and delete config overrides of topic ``name`` (Kafka's IncrementalAlterConfigs); return them.

        All or nothing: the new overrides are validated (:class:`InvalidConfigError`,
        :class:`UnsupportedConfigError`), written to ``topic.json`` atomically, then applied to every
        partition (retention, segment size and index spacing of new segments) and announced to
        :attr:`topic_config_observers`. A deleted override falls back to the broker's default.
        """
        with self._lock:
            self._check_open()
            topic = self._topic(name, create=False)
            configs = topic.configs.with_changes(set=set, delete=delete)
            effective = configs.checked(self.config)
            self._store.update(name, StoredTopic(len(topic.partitions), topic.topic_id, configs))
            topic.configs, topic.effective = configs, effective
            log_config = self._log_config(effective)
            topic.partitions.each_built(lambda partition: partition.log.reconfigure(log_config))
        for observer in list(self.topic_config_observers):
            try:
                observer(name, effective)
            except Exception:  # an observer's failure must not undo or fail the alter
                log.exception("a topic config observer failed for %r", name)
        return configs

    def topic_id(self, name: str) -> uuid.UUID:
        """The id of the topic's current incarnation (see :class:`TopicDescription`)."""
        return self._topic(name, create=False).topic_id

    def topic_ids(self) -> dict[str, uuid.UUID]:
        """``{topic: id}`` of every topic."""
        return {name: t.topic_id for name, t in self._topics.items()}

    # -- DeleteRecords --------------------------------------------------------------------------

    def delete_records(self, topic: str, before: Mapping[int, int]) -> dict[int, int]:
        """Delete the records of ``topic`` below ``before[partition]`` (Kafka's DeleteRecords).

        Returns each partition's log start offset after it (Kafka's low watermark). An offset
        of -1 means the high watermark. Every partition is checked first (:class:`InvalidArgumentError`
        for one the topic does not have, :class:`OffsetOutOfRangeError` for an offset above its
        high watermark), then each is applied: the new log start is durable when this returns,
        reads below it are out of range, and the whole segments below it are deleted. An offset at
        or below the current log start changes nothing.
        """
        self._check_open()
        if not self._topic(topic, create=False).effective.delete:
            # Kafka refuses it too (POLICY_VIOLATION): a compacted topic keeps every key's latest record.
            raise PolicyViolationError(
                f"the records of {topic!r} cannot be deleted: its cleanup.policy has no 'delete' "
                "(a compacted topic keeps the latest record of every key)"
            )
        targets = []
        for pid, offset in before.items():
            partition = self.partition(topic, pid)
            high = partition.high_watermark
            wanted = high if offset == -1 else offset
            if not isinstance(wanted, int) or isinstance(wanted, bool) or not 0 <= wanted <= high:
                raise OffsetOutOfRangeError(topic, pid, offset, partition.log_start_offset, high)
            targets.append((pid, partition, wanted))
        return {pid: partition.log.delete_records(wanted) for pid, partition, wanted in targets}
