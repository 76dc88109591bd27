"""The embedded broker: topics, partitions, produce, fetch, retention.

``Broker`` owns one data directory (``LOCK``), opens and recovers every
partition on construction, and runs background threads: the group-commit
thread (:mod:`lkstream.storage.durability`), the retention thread (which also
rolls quiet partitions by ``segment.ms``) and the log cleaner
(:mod:`lkstream.broker.cleaning`). This module holds the topic table, produce,
fetch and shutdown; the rest of ``Broker`` is three mixins over the same state:
group calls (:mod:`lkstream.broker.groups.facade`), topic administration
(:mod:`lkstream.broker.topic_admin`) and the background upkeep
(:mod:`lkstream.broker.maintenance`).

Produce runs on the caller's thread: the records of each target partition are
encoded into one v2 batch (split at ``max_batch_bytes``) by LKSTREAM's C encoder
and appended; the append and read paths never look inside a batch (only
the embedded client-side helpers encode and decode). The async methods
do the same work inline on the event loop (it is a memory copy and a
``write(2)`` into the page cache) and await only the fsync in ``sync`` mode.

Thread-safety: all methods are thread-safe. Lock order: ``Broker._lock``
(topic table), then ``Partition._lock``, then ``PartitionLog._lock``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, overload

from lkstream.broker.acks import Acknowledgement, InflightBytes
from lkstream.broker.admission import AdmissionBudget
from lkstream.broker.autocreate import AutoCreateBudget
from lkstream.broker.cleaning import Cleaner
from lkstream.broker.encoder import EncodedCall, encode_call
from lkstream.broker.groups.classic import ClassicGroups
from lkstream.broker.groups.coordinator import GroupCoordinator
from lkstream.broker.groups.facade import GroupCalls
from lkstream.broker.groups.limits import GroupLimits
from lkstream.broker.maintenance import Maintenance
from lkstream.broker.partition import DEFAULT_FETCH_BYTES, DataArrived, Partition
from lkstream.broker.partition_table import PartitionTable
from lkstream.broker.partitioner import StickyPartitioner, route_records
from lkstream.broker.tail import TailBudget
from lkstream.broker.topic_admin import TopicAdmin
from lkstream.broker.topic_policy import apply_topic_policy, check_size, topic_codec
from lkstream.broker.topics import OpenTopic
from lkstream.config import BrokerConfig
from lkstream.errors import (
    BrokerClosedError,
    InvalidArgumentError,
    LkstreamError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnknownTopicError,
    map_os_errors,
    no_such_partition,
)
from lkstream.format.batch import stamp_log_append_time
from lkstream.format.codec import Compression, Headers, Record, encode_batch
from lkstream.format.produce import (
    BATCH_OVERHEAD,
    RECORD_OVERHEAD,
    chunk_by_size,
    normalise_records,
    record_sizes,
)
from lkstream.format.rewrite import first_keyless_record
from lkstream.format.validate import Limits, records_of, validate_producer_batch
from lkstream.storage.clock import Clock, SystemClock
from lkstream.storage.durability import FsyncMode, GroupCommitter
from lkstream.storage.handles import FileBudget, derive_capacity
from lkstream.storage.lock import DataDirLock
from lkstream.storage.log import LogConfig, LogRecovery, PartitionLog, ReadResult
from lkstream.storage.names import validate_topic
from lkstream.storage.offsets import OffsetStore
from lkstream.storage.producer_ids import ProducerIdAllocator
from lkstream.storage.producers import ProducerStateBudget
from lkstream.storage.ranges import SendableRead
from lkstream.storage.topic_config import EffectiveTopicConfig
from lkstream.storage.topics import TopicSettings, TopicStore
from lkstream.storage.trash import TrashEmptier

log = logging.getLogger("lkstream.broker")

Key = str | bytes | None
Value = bytes | bytearray | memoryview | str | None
ProduceItem = tuple[Key, Value] | tuple[Key, Value, Headers]


@dataclass(frozen=True)
class BrokerStats:
    recovery_truncations: int
    recovery_truncated_bytes: int
    index_rebuilds: int
    checkpoint_problems: int
    inflight_bytes: int
    fsyncs: int


class Broker(GroupCalls, TopicAdmin, Maintenance):
    """An embedded LKSTREAM broker over one data directory.

    ``Broker(persist_dir=..., fsync_mode=..., fsync_interval_ms=...,
    segment_max_bytes=..., partitions=...)`` takes any :class:`BrokerConfig`
    field as a keyword (or a whole ``config=``). Use it as a context manager or
    call :meth:`close`.
    """

    def __init__(self, config: BrokerConfig | None = None, *, clock: Clock | None = None, **settings: Any) -> None:
        if config is not None and settings:
            config = BrokerConfig.build({**config.model_dump(), **settings})
        self.config = config or BrokerConfig.build(settings)
        self._clock = clock or SystemClock()
        self.persist_dir = os.path.abspath(self.config.persist_dir)
        with map_os_errors("create data directory", self.persist_dir):
            os.makedirs(self.persist_dir, exist_ok=True)
        self._dir_lock = DataDirLock(self.persist_dir)
        #: The one budget of open segment and index files, shared by every partition (issue 12).
        self.files = FileBudget(derive_capacity(self.config.max_open_files, self.config.open_files_reserve))
        #: The bytes of recent batches all partitions may keep in memory together (hot_tail_total_bytes).
        self.tail_budget = TailBudget(self.config.hot_tail_total_bytes)
        self._lock = threading.RLock()
        self._closed = False
        # Copy on write: replaced whole under _lock, never changed in place, so readers (produce,
        # fetch, listings, offsets) take no lock and never wait for an admin call (issue 12, finding 9).
        self._topics: dict[str, OpenTopic] = {}
        #: Bumped whenever a topic appears, disappears or changes its partition count (caches key on it).
        self.topics_version = 0
        self._sticky = StickyPartitioner()
        self.inflight = InflightBytes(self.config.max_inflight_bytes)
        #: Request bytes the daemon's listeners hold before decoding (issue 12, finding 8).
        self.admission = AdmissionBudget(self.config.max_admitted_bytes)
        #: How fast each principal or client address may auto-create topics (issue 28, finding 6).
        self.auto_creates = AutoCreateBudget(
            self.config.auto_create_partitions_per_s, self.config.auto_create_partitions_burst
        )
        #: Idempotent-producer states all partitions keep together (max_producer_states; issue 28, finding 7).
        self.producer_states = ProducerStateBudget(self.config.max_producer_states)
        self._limits = Limits(self.config.max_decompressed_bytes, self.config.max_compression_ratio)
        self.fsync_observers: list[Callable[[float], None]] = []
        #: Called as ``observer(topic, effective)`` after :meth:`alter_topic_configs` changed a topic's
        #: configs (from the altering thread, outside the broker's lock): the cleaner and anything else
        #: that caches per-topic values learn the new ones without a restart.
        self.topic_config_observers: list[Callable[[str, EffectiveTopicConfig], None]] = []
        #: What recovery found in each partition opened at start. Partitions created later are not
        #: recovered from anything, and a list that grew with every create would leak under topic churn.
        self.recoveries: list[LogRecovery] = []
        self._data_arrived = DataArrived()
        self._fsyncs = 0
        self._committer = GroupCommitter(
            FsyncMode(self.config.fsync_mode),
            self.config.fsync_interval_ms,
            self.config.fsync_group_bytes,
            on_fsync=self._observe_fsync,
        )
        try:
            self._store = TopicStore(self.persist_dir)
            self._open_existing_topics()
            self.offset_store = OffsetStore(self.persist_dir, clock=self._clock, sweep_tmp=True)
            self._producer_ids = ProducerIdAllocator(self.persist_dir)
            self._reconcile_offsets()
        except BaseException:
            self._abandon_open()
            raise
        # Lock order: the coordinator's lock before Broker._lock (it calls partitions_for under
        # its own), so the broker never calls the coordinator while holding _lock.
        self.groups = GroupCoordinator(
            self.offset_store,
            self.partitions_for,
            self._clock,
            bounds=self.bounds,
            topic_ids=self.topic_ids,
            in_other_coordinator=self._has_kafka_client_members,
            limits=GroupLimits.from_config(self.config),
        )
        # Kafka clients' groups (client-side assignment); a group name lives in one coordinator at a time.
        self.classic_groups = ClassicGroups(
            self._clock, in_other_coordinator=self._has_lkstream_members, limits=self.groups.limits
        )
        self._trash = TrashEmptier(self._store.empty)
        self._stop_maintenance = threading.Event()
        self._maintenance = threading.Thread(target=self._maintain, name="lkstream-retention", daemon=True)
        self._maintenance.start()
        # Session timeouts are seconds: the retention loop's interval (a minute) is too coarse.
        self._group_ticker = threading.Thread(target=self._tick_groups, name="lkstream-groups", daemon=True)
        self._group_ticker.start()
        #: The log cleaner of compacted topics (None with ``log_cleaner_enabled=False``).
        self.cleaner: Cleaner | None = None
        if self.config.log_cleaner_enabled:
            self.cleaner = Cleaner(
                self._open_logs,
                self._cleaner_policy,
                self._clock,
                budget_bytes=self.config.log_cleaner_dedupe_buffer_bytes,
                backoff_ms=self.config.log_cleaner_backoff_ms,
            )
            self.cleaner.start()
            # A topic altered to (or within) cleanup.policy=compact is looked at now, not after the backoff.
            self.topic_config_observers.append(lambda _topic, _effective: self._wake_cleaner())

    def _open_existing_topics(self) -> None:
        opened: dict[str, OpenTopic] = {}
        try:
            for name in self._store.list():
                try:
                    opened[name] = self._open_topic(name)
                    self.recoveries.extend(p.log.recovery for p in opened[name].partitions.opened())
                except (InvalidArgumentError, UnknownTopicError) as exc:
                    # A stray directory (lost+found, a hand-made folder) must not stop the broker;
                    # `lkstream verify` reports it.
                    log.warning("ignoring %s in %s: %s", name, self._store.root, exc)
        finally:
            self._topics = opened  # what _abandon_open closes if a later one failed
            self.topics_version += 1

    def _reconcile_offsets(self) -> None:
        """Committed offsets belong to topics that exist (issue 12, finding 6).

        A delete that a crash cut short (after the rename, before the offsets were
        forgotten) leaves offsets of a topic that is gone; they go now, before any
        topic of that name can be created again. Offsets from before topic ids get the
        current topic's id. Reads ignore other incarnations anyway: this only tidies.
        """
        topics = {name: t.topic_id for name, t in self._topics.items()}
        counts = {name: len(t.partitions) for name, t in self._topics.items()}
        try:
            forgotten, stamped = self.offset_store.reconcile(topics, counts)
        except LkstreamError as exc:  # a broken journal is verify's business; reads stay correct
            log.warning("could not reconcile committed offsets with the topics: %s", exc)
            return
        if forgotten or stamped:
            log.info("committed offsets: %d of deleted topics forgotten, %d stamped with topic ids", forgotten, stamped)

    def _abandon_open(self) -> None:
        """Undo a failed constructor: close what was opened and release the directory."""
        try:
            self._committer.close()
            for topic in self._topics.values():
                for partition in topic.partitions.close():
                    with contextlib.suppress(Exception):
                        partition.close()
            store = getattr(self, "offset_store", None)  # absent if opening the topics failed
            if store is not None:
                with contextlib.suppress(Exception):
                    store.close()
        finally:
            self._dir_lock.release()

    # -- topics ---------------------------------------------------------------------------------

    def _defaults(self) -> TopicSettings:
        return TopicSettings(self.config.partitions, self.config.retention_ms, self.config.retention_bytes)

    def _log_config(self, effective: EffectiveTopicConfig) -> LogConfig:
        # Retention deletes only with "delete" in cleanup.policy: a compacted topic keeps every key.
        return LogConfig(
            segment_max_bytes=effective.segment_bytes,
            index_interval_bytes=effective.index_interval_bytes,
            retention_ms=effective.retention_ms if effective.delete else -1,
            retention_bytes=max(-1, effective.retention_bytes) if effective.delete else -1,
            visible_after_fsync=self.config.fsync_mode == "sync",
            checkpoint_interval_ms=self.config.checkpoint_interval_ms,
            segment_ms=effective.segment_ms,
            segment_jitter_ms=effective.segment_jitter_ms,
            producer_id_expiration_ms=self.config.producer_id_expiration_ms,
        )

    def _open_topic(self, name: str, *, new: bool = False) -> OpenTopic:
        """Open a topic's partitions; ``new``: the topic was just created, every partition empty.

        A new topic's partitions are built at their first use (:mod:`lkstream.broker.partition_table`:
        thousands of idle partitions would be thousands of objects for the garbage collector to walk,
        issue 12, finding 9). An existing topic's are opened now: opening recovers them.
        """
        stored = self._store.load(name, self._defaults())
        topic = OpenTopic(name, stored.configs, stored.configs.effective(self.config), stored.topic_id)

        def build(pid: int) -> Partition:
            # Built once, on a directory TopicStore.create made empty (or grew with create_partitions),
            # with the configs that apply when it is built (an alter reconfigures the built ones).
            return self._open_partition(name, pid, self._log_config(topic.effective), new=new)

        if new:
            topic.partitions = PartitionTable(name, stored.partitions, build)
            return topic
        partitions: list[Partition] = []
        try:
            for pid in range(stored.partitions):
                partitions.append(self._open_partition(name, pid, self._log_config(topic.effective)))
        except BaseException:
            for partition in partitions:
                with contextlib.suppress(Exception):
                    partition.close()
            raise
        topic.partitions = PartitionTable(name, stored.partitions, build, partitions)
        return topic

    def _publish(self, topic: OpenTopic) -> OpenTopic:
        """Make ``topic`` visible (caller holds ``_lock``)."""
        self._topics = {**self._topics, topic.name: topic}
        self.topics_version += 1
        return topic

    def _open_partition(self, name: str, pid: int, log_config: LogConfig, *, new: bool = False) -> Partition:
        plog = PartitionLog(
            self._store.partition_dir(name, pid),
            name,
            pid,
            log_config,
            clock=self._clock,
            file_factory=self.files.file,
            # Files of a new, empty partition are created at its first write, if any.
            new_files=self.files.deferred_file if new else None,
            producer_budget=self.producer_states,
        )
        return Partition(
            name,
            pid,
            plog,
            self._committer,
            self.config.hot_tail_bytes,
            data_arrived=self._data_arrived,
            producer=self.produce_many,
            tail_budget=self.tail_budget,
        )

    def list_committed(self) -> dict[tuple[str, str, int], int]:
        """Committed offsets of the topics that exist, ``{(group, topic, partition): offset}``."""
        return self.offset_store.list_committed(topic_ids=self.topic_ids())

    def partition(self, topic: str, pid: int) -> Partition:
        """The :class:`Partition` ``pid`` of ``topic`` (InvalidArgument if it does not exist)."""
        partitions = self._topic(topic, create=False).partitions
        if not isinstance(pid, int) or isinstance(pid, bool) or not 0 <= pid < len(partitions):
            raise no_such_partition(topic, pid, len(partitions))
        return partitions[pid]

    def opened_partition(self, topic: str, pid: int) -> Partition | None:
        """Partition ``pid`` of ``topic`` if it is open, None if it was never used (it is then empty).

        For observers that must not build partitions (metrics): see :mod:`lkstream.broker.partition_table`.
        """
        partitions = self._topic(topic, create=False).partitions
        return partitions.peek(pid) if 0 <= pid < len(partitions) else None

    def partitions_for(self, topic: str) -> int:
        return len(self._topic(topic, create=False).partitions)

    def bounds(self, topic: str, pid: int) -> tuple[int, int]:
        """``(log_start_offset, high_watermark)`` of ``topic[pid]``."""
        target = self.partition(topic, pid)
        return target.log_start_offset, target.high_watermark

    def check_commit(self, topic: str, pid: int, offset: int) -> None:
        """Refuse a committed offset above ``topic[pid]``'s high watermark (:class:`OffsetOutOfRangeError`)."""
        start, high = self.bounds(topic, pid)
        if offset > high:
            raise OffsetOutOfRangeError(topic, pid, offset, start, high)

    def _topic(self, name: str, *, create: bool) -> OpenTopic:
        topic = self._topics.get(name)
        if topic is not None:
            return topic
        validate_topic(name)
        self._check_open()
        if not (create and self.config.auto_create_topics):
            raise UnknownTopicError(name)  # no lock: a read never waits for an admin call
        with self._lock:
            self._check_open()
            topic = self._topics.get(name)
            if topic is not None:
                return topic
            return self._create_locked(name, self.config.partitions)

    # -- produce --------------------------------------------------------------------------------

    async def produce_many(
        self,
        topic: str,
        records: Sequence[ProduceItem],
        *,
        partition: int | None = None,
        compression: Compression | str | None = None,
    ) -> list[tuple[int, int]]:
        """Append ``(key, value)`` or ``(key, value, headers)`` records; return ``[(partition, offset)]``.

        Keys pick partitions as Kafka's clients do; keyless records of one call
        share one partition. Returns once the records are acknowledged under
        ``fsync_mode`` (in ``sync``: fsynced).
        """
        results, ack = self._produce(topic, records, partition, compression)
        await ack.wait()
        return results

    def produce_many_sync(
        self,
        topic: str,
        records: Sequence[ProduceItem],
        *,
        partition: int | None = None,
        compression: Compression | str | None = None,
    ) -> list[tuple[int, int]]:
        """Blocking twin of :meth:`produce_many`, for code without an event loop."""
        results, ack = self._produce(topic, records, partition, compression)
        ack.wait_sync()
        return results

    async def produce_many_view(
        self,
        topic: str,
        records: Sequence[ProduceItem],
        *,
        partition: int | None = None,
        compression: Compression | str | None = None,
    ) -> Sequence[tuple[int, int]]:
        """:meth:`produce_many`, returning a read-only sequence of the results instead of a list.

        For callers that read few of the results (``Producer``, whose records are often never
        looked at): a call that went to one partition answers with an
        :class:`~lkstream.broker.encoder.OffsetRange` that computes ``(partition, offset)`` when
        indexed, instead of a tuple per record.
        """
        results, ack = self._produce(topic, records, partition, compression, view=True)
        await ack.wait()
        return results

    async def produce_batch(self, topic: str, partition: int, batch: bytearray) -> tuple[int, int]:
        """Append one pre-encoded v2 record batch; return ``(base_offset, last_offset)``."""
        result, ack = self._append_encoded(topic, partition, batch)
        await ack.wait()
        return result

    def produce_batch_sync(self, topic: str, partition: int, batch: bytearray) -> tuple[int, int]:
        """Blocking twin of :meth:`produce_batch`."""
        result, ack = self._append_encoded(topic, partition, batch)
        ack.wait_sync()
        return result

    def begin_produce_batch(
        self, topic: str, partition: int, batch: bytearray, *, owned: bool = False
    ) -> tuple[tuple[int, int], Acknowledgement]:
        """:meth:`produce_batch` in two halves: validate and append now, acknowledge later.

        Returns ``((base, last), ack)``; ``await ack.wait()`` (or ``ack.wait_sync()``)
        before telling the producer. For surfaces that pipeline requests (the Kafka
        listener, gRPC streams): appends happen in request order even while earlier
        acknowledgements are still waiting for their fsync. ``owned``: the caller made
        ``batch`` for this call and hands it over (the hot tail keeps it without a copy).
        """
        return self._append_encoded(topic, partition, batch, owned=owned)

    def _append_encoded(
        self, topic: str, pid: int, batch: bytearray, *, owned: bool = False
    ) -> tuple[tuple[int, int], Acknowledgement]:
        self._check_open()
        if not isinstance(batch, bytearray):
            batch = bytearray(batch)
        # A batch from outside (gRPC record_batch, the Kafka listener) is checked completely:
        # a correct CRC over wrong records would poison every read across it (issue 12).
        header = validate_producer_batch(batch, self.config.max_batch_bytes, self._limits)
        found = self._topic(topic, create=True)
        if found.effective.compact:
            section = records_of(batch, header, self._limits.max_decompressed_bytes)
            _refuse_keyless(found.name, first_keyless_record(section, header.records_count))
        target = self.partition(found.name, pid)
        # The topic's configs (max.message.bytes, timestamps, compression.type, LogAppendTime): topic_policy.
        policed, append_time = apply_topic_policy(
            found.name, batch, header, found.effective, now_ms=self._clock.now_ms(), limits=self._limits
        )
        with self._acknowledgement(len(policed)) as ack:
            result = ack.append(target, policed, owned=owned or policed is not batch)
        ack.log_append_time_ms = append_time
        return (result.base_offset, result.last_offset), ack

    def init_producer_id(self) -> tuple[int, int]:
        """A new ``(producer_id, epoch)`` for an idempotent producer; ids are never reused (persisted).

        Batches carrying the id are checked per partition by the log (duplicates
        answered with their original offsets, out-of-order sequences refused); see
        :mod:`lkstream.storage.producers`.
        """
        self._check_open()
        return self._producer_ids.allocate(), 0

    def _acknowledgement(self, reserved: int) -> Acknowledgement:
        return Acknowledgement(self.inflight, reserved, sync=self._committer.mode is FsyncMode.SYNC)

    @overload
    def _produce(
        self,
        topic_name: str,
        records: Sequence[ProduceItem],
        partition: int | None,
        compression: Compression | str | None,
    ) -> tuple[list[tuple[int, int]], Acknowledgement]: ...

    @overload
    def _produce(
        self,
        topic_name: str,
        records: Sequence[ProduceItem],
        partition: int | None,
        compression: Compression | str | None,
        *,
        view: bool,
    ) -> tuple[Sequence[tuple[int, int]], Acknowledgement]: ...

    def _produce(
        self,
        topic_name: str,
        records: Sequence[ProduceItem],
        partition: int | None,
        compression: Compression | str | None,
        *,
        view: bool = False,
    ) -> tuple[Sequence[tuple[int, int]], Acknowledgement]:
        """Encode and append; return the results and what acknowledges them.

        The topic's ``compression.type`` (unless ``producer``) picks the codec, batches are split at
        its ``max.message.bytes`` (within ``max_batch_bytes``), and a LogAppendTime topic's batches
        are stamped: what Kafka's broker would do to these batches (:mod:`lkstream.broker.topic_policy`).
        """
        self._check_open()
        topic = self._topic(topic_name, create=True)
        forced = topic_codec(topic.effective)
        codec = Compression.parse(compression) if forced is None else forced
        limit = min(self.config.max_batch_bytes, topic.effective.max_message_bytes)
        if partition is not None:
            self.partition(topic.name, partition)
        if topic.effective.compact:
            _refuse_keyless(topic.name, next((i for i, item in enumerate(records) if item[0] is None), None))
        partitions = len(topic.partitions)
        encoded = encode_call(
            records,
            partitions=partitions,
            explicit=partition,
            sticky=self._sticky,
            codec=codec,
            timestamp_ms=self._clock.now_ms(),
            route_cache=topic.route_cache(partitions),
        )
        if encoded is not None and all(len(batch) <= limit for _, batch in encoded.batches):
            return self._append_call(topic, encoded, view=view)
        pairs, headers = normalise_records(records)
        if not pairs:
            return [], self._acknowledgement(0)
        sizes = record_sizes(pairs)
        self._check_sizes(sizes)
        routes = route_records(pairs, len(topic.partitions), partition, self._sticky)
        # Every batch is built and checked before the first append: a refused one appends nothing.
        built = []
        for pid, indices in routes.items():
            for chunk in chunk_by_size(indices, sizes, limit):
                batch = encode_batch(
                    pairs if len(chunk) == len(pairs) else [pairs[i] for i in chunk],
                    headers=None if headers is None else [headers[i] for i in chunk],
                    compression=codec,
                    timestamp_ms=self._clock.now_ms(),
                )
                check_size(topic.name, len(batch), topic.effective)
                built.append((pid, chunk, batch))
        results: list[tuple[int, int]] = [(0, 0)] * len(pairs)
        with self._acknowledgement(sum(sizes) + RECORD_OVERHEAD * len(sizes) + BATCH_OVERHEAD) as ack:
            for pid, chunk, batch in built:
                self._stamp(topic, batch, ack)
                base = ack.append(topic.partitions[pid], batch, owned=True).base_offset
                for delta, i in enumerate(chunk):
                    results[i] = (pid, base + delta)
        return results, ack

    def _stamp(self, topic: OpenTopic, batch: bytearray, ack: Acknowledgement) -> None:
        """Stamp a batch the broker encoded with the append time, when the topic wants LogAppendTime."""
        if topic.effective.log_append_time:
            ack.log_append_time_ms = self._clock.now_ms()
            stamp_log_append_time(batch, ack.log_append_time_ms)

    def _append_call(
        self, topic: OpenTopic, encoded: EncodedCall, *, view: bool = False
    ) -> tuple[Sequence[tuple[int, int]], Acknowledgement]:
        """Append the fast path's batches (each fits the topic's limit); see :mod:`lkstream.broker.encoder`."""
        largest = max(encoded.largest)
        if largest > self.config.max_message_bytes:
            raise RecordTooLargeError(largest, self.config.max_message_bytes)
        total = sum(len(batch) for _, batch in encoded.batches)
        with self._acknowledgement(total) as ack:
            bases = []
            for pid, batch in encoded.batches:
                self._stamp(topic, batch, ack)
                bases.append(ack.append(topic.partitions[pid], batch, owned=True).base_offset)
        return encoded.results(bases, view=view), ack

    def _check_sizes(self, sizes: list[int]) -> None:
        limit = self.config.max_message_bytes
        if max(sizes) > limit:
            raise RecordTooLargeError(max(sizes), limit)

    # -- fetch ----------------------------------------------------------------------------------

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = DEFAULT_FETCH_BYTES) -> ReadResult:
        """Raw record batches of ``topic[partition]`` from ``offset``, with log bounds."""
        self._check_open()
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise InvalidArgumentError(f"offset must be an integer, got {offset!r}")
        return self.partition(topic, partition).read_raw(offset, max_bytes)

    def fetch_for_send(
        self, topic: str, partition: int, offset: int, max_bytes: int, *, min_one: bool = True, zero_copy: bool = True
    ) -> SendableRead:
        """:meth:`fetch` as stored bytes or a file range to send as is (:meth:`Partition.read_for_send`)."""
        self._check_open()
        return self.partition(topic, partition).read_for_send(offset, max_bytes, min_one=min_one, zero_copy=zero_copy)

    def read_from(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_msgs: int | None = None,
        max_bytes: int = DEFAULT_FETCH_BYTES,
    ) -> list[Record]:
        """Decoded records of ``topic[partition]`` from ``offset``."""
        self._check_open()
        return self.partition(topic, partition).read_from(offset, max_msgs, max_bytes)

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int:
        """The first offset of ``topic[partition]`` whose record timestamp is ``>= timestamp_ms``.

        Returns the high watermark when every record is older (reading from
        there waits for new records), as Kafka's ``offsetsForTimes`` + ``latest``.
        The storage lookup is batch-granular; this decodes that one batch to find
        the exact record, an administrative call and not on the produce/fetch path.
        """
        self._check_open()
        target = self.partition(topic, partition)
        base = target.log.offset_for_timestamp(timestamp_ms)
        if base is None:
            return target.high_watermark
        for record in target.read_from(base, max_bytes=1):
            if record.timestamp >= timestamp_ms:
                return record.offset
        return base

    # -- waiting for data ---------------------------------------------------------------------

    def _has_data(self, positions: dict[tuple[str, int], int]) -> bool:
        """Whether a wait over ``positions`` is over; runs under the DataArrived lock, so it takes no other lock.

        A partition that vanished (topic deleted) ends the wait too: the caller's next fetch reports why.
        """
        for (topic_name, pid), offset in positions.items():
            topic = self._topics.get(topic_name)
            if topic is None or self._closed or not 0 <= pid < len(topic.partitions):
                return True
            partition = topic.partitions.peek(pid)  # one never built has no data (and building takes locks)
            if partition is not None and partition.high_watermark > offset:
                return True
        return False

    async def wait_for_data(self, positions: dict[tuple[str, int], int], timeout: float | None = None) -> bool:
        """Wait until any ``(topic, partition)`` has a record at or past its offset; False on timeout."""
        if not positions:
            raise InvalidArgumentError("nothing to wait for: no partitions given")
        # One arrival future per partition, resolved by the append: no task per wait (a long-polling
        # Kafka consumer waits once per Fetch, on the produce-to-consume path).
        arrivals: list[tuple[Partition, asyncio.Future[None]]] = []
        try:
            for (topic, pid), offset in positions.items():
                partition = self.partition(topic, pid)
                try:
                    arrival = partition.arrival(offset)
                except BrokerClosedError:
                    return True  # deleted meanwhile: the caller's next read says so
                if arrival is None:
                    return True
                arrivals.append((partition, arrival))
            done, _ = await asyncio.wait([a for _, a in arrivals], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            for arrival in done:
                arrival.exception()  # a partition closed (topic deleted): the caller's next read says so
            return bool(done)
        finally:
            for partition, arrival in arrivals:
                partition.forget_arrival(arrival)
                arrival.cancel()

    def wait_for_data_sync(self, positions: dict[tuple[str, int], int], timeout: float | None = None) -> bool:
        """Blocking twin of :meth:`wait_for_data`."""
        if not positions:
            raise InvalidArgumentError("nothing to wait for: no partitions given")
        return self._data_arrived.wait_for(lambda: self._has_data(positions), timeout)

    def stats(self) -> BrokerStats:
        """Counters for operators and metrics: recovery outcomes, in-flight bytes, fsyncs."""
        truncations = [r for r in self.recoveries if r.truncated_bytes]
        return BrokerStats(
            recovery_truncations=len(truncations),
            recovery_truncated_bytes=sum(r.truncated_bytes for r in truncations),
            index_rebuilds=sum(1 for r in self.recoveries if r.report.index_rebuilt),
            checkpoint_problems=sum(1 for r in self.recoveries if r.checkpoint_problem),
            inflight_bytes=self.inflight.value,
            fsyncs=self._fsyncs,
        )

    # -- maintenance and shutdown -----------------------------------------------------------------

    def _observe_fsync(self, seconds: float) -> None:
        self._fsyncs += 1
        for observer in self.fsync_observers:
            observer(seconds)

    def _has_lkstream_members(self, group: str) -> bool:
        return self.groups.has_members(group)

    def _has_kafka_client_members(self, group: str) -> bool:
        return self.classic_groups.has_members(group)

    def _check_open(self) -> None:
        if self._closed:
            raise BrokerClosedError("broker is closed")

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Flush and fsync everything, close all partitions and release the data directory."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stop_maintenance.set()
        self._maintenance.join()
        self._group_ticker.join()
        if self.cleaner is not None:
            self.cleaner.close()  # after the pass in progress: its swaps stay whole
        self._trash.close()
        errors: list[BaseException] = []
        try:
            self._committer.close()
            # Every partition gets its final flush and checkpoint even if another one fails.
            for topic in self._topics.values():
                for partition in topic.partitions.close():
                    try:
                        partition.close()
                    except Exception as exc:
                        log.error("closing %s[%d] failed: %s", partition.topic, partition.pid, exc)
                        errors.append(exc)
            try:
                # Compacts the offsets journal into the per-group files and drops its lock.
                self.offset_store.close()
            except Exception as exc:
                log.error("closing the offset store failed: %s", exc)
                errors.append(exc)
        finally:
            self._dir_lock.release()
        if errors:
            raise errors[0]

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Broker:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


def _refuse_keyless(topic: str, index: int | None) -> None:
    """A compacted topic keeps records by key: one without a key is refused (Kafka's INVALID_RECORD)."""
    if index is not None:
        raise InvalidArgumentError(
            f"rejected producer batch: record {index} has no key, and topic {topic!r} is compacted "
            "(cleanup.policy=compact keeps the latest record of every key)"
        )
