"""Prometheus metrics of one broker (seed section 9).

``BrokerMetrics(broker, registry=None)`` registers, in ``registry`` (a fresh
:class:`~prometheus_client.CollectorRegistry` when None, never the global one,
so several brokers in one process do not collide):

Read from broker state at scrape time (nothing on the produce path):

- ``lk_produced_total{topic,partition}`` counter: records appended since the broker opened
  (``Partition.produced_records``);
- ``lk_partition_next_offset{topic,partition}`` gauge: the offset the next record gets;
- ``lk_segment_size_bytes{topic,partition}`` gauge: bytes of all the partition's segments;
- ``lk_partition_committed_offset{topic,group,partition}`` gauge: the group's committed
  offset (the next offset it will read), from the broker's offset files, else from
  :meth:`BrokerMetrics.record_committed`;
- ``lk_consumer_lag_seconds{topic,group,partition}`` gauge: age of the oldest record the
  group has not consumed (now minus the timestamp of the record at its committed offset,
  read with ``broker.read_from(..., max_msgs=1)``); 0 when caught up;
- ``lk_inflight_bytes`` gauge: produce bytes accepted and not yet acknowledged;
- ``lk_admitted_bytes`` gauge and ``lk_admission_refused_total{listener}`` counter: request
  bytes the daemon's listeners hold before answering, and requests refused by
  ``max_admitted_bytes`` (:mod:`lkstream.broker.admission`; ``listener`` is grpc, http or kafka);
- ``lk_recovery_truncations_total`` counter: partitions whose log was truncated at open;
- ``lk_disk_free_bytes`` and ``lk_disk_total_bytes`` gauges: the filesystem of ``persist_dir``;
- the log cleaner (:mod:`lkstream.broker.cleaning`, issue 24): ``lk_cleaner_dirty_ratio{topic,partition}``
  gauge, the share of a compacted partition's sealed bytes not cleaned yet (only compacted
  partitions the cleaner looked at: at most one label set per open partition, gone with it);
  ``lk_cleaner_passes_total`` and ``lk_cleaner_failures_total`` counters;
  ``lk_cleaner_read_bytes_total``, ``lk_cleaner_written_bytes_total`` and
  ``lk_cleaner_removed_bytes_total`` counters (what the passes read, wrote, and took off the
  disk); ``lk_cleaner_last_clean_timestamp_seconds`` and ``lk_cleaner_last_clean_duration_seconds``
  gauges of the last pass (0 before the first).

Observed as events happen:

- ``lk_fsync_latency_seconds`` histogram, through ``broker.fsync_observers``;
- ``lk_consumed_total{topic,group,partition}`` counter: :meth:`BrokerMetrics.record_consumed`;
- ``lk_produce_latency_seconds`` / ``lk_fetch_latency_seconds`` histograms:
  :meth:`BrokerMetrics.observe_produce` / :meth:`BrokerMetrics.observe_fetch`;
- ``lk_request_errors_total{code}`` counter: :meth:`BrokerMetrics.count_error` (a gRPC
  status name such as ``NOT_FOUND``).

Serving surfaces (the gRPC daemon, the HTTP app) call those methods; this
module is synchronous and thread-safe (no asyncio). Expose the registry with
``prometheus_client.generate_latest(metrics.registry)``.

Label sets are bounded (issue 12, finding 4): a topic or group name becomes a label
only after :mod:`lkstream.storage.names` accepted it, and a group id (any string, as in
Kafka) as its printable label of at most 249 characters (``group_label``); the per-group families
(``lk_consumed_total``, ``lk_partition_committed_offset``, ``lk_consumer_lag_seconds``)
hold at most ``max_label_sets`` label sets each (new ones beyond are dropped and
counted in :attr:`BrokerMetrics.dropped_label_sets`); and a label set disappears
with its object: at each scrape, those of a deleted topic or partition go, and those
of a group the coordinator does not know (no member, no commit) go once they were
not updated for ``label_idle_s``.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from lkstream.broker.broker import Broker
from lkstream.broker.partition_table import EMPTY_STATS
from lkstream.errors import LkstreamError
from lkstream.storage.names import group_label, validate_group, validate_topic

log = logging.getLogger("lkstream.metrics")

#: Label sets each per-group family may hold; a broker's real (topic, group, partition) triples
#: stay far below it, a client inventing group names cannot grow memory past it.
DEFAULT_MAX_LABEL_SETS = 10_000
#: A label set of a group nobody joined or committed for goes after this long without an update.
DEFAULT_LABEL_IDLE_S = 600.0

#: Latency buckets (seconds) shared by the produce, fetch and fsync histograms: from
#: 100 us (a page-cache write) to 10 s (a stalled disk); the fsync alert's 1 s is a bound.
LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)

#: Every metric name this module exports (as exposed, counters with ``_total``).
METRIC_NAMES = (
    "lk_produced_total",
    "lk_consumed_total",
    "lk_partition_next_offset",
    "lk_partition_committed_offset",
    "lk_consumer_lag_seconds",
    "lk_segment_size_bytes",
    "lk_inflight_bytes",
    "lk_admitted_bytes",
    "lk_admission_refused_total",
    "lk_fsync_latency_seconds",
    "lk_produce_latency_seconds",
    "lk_fetch_latency_seconds",
    "lk_request_errors_total",
    "lk_recovery_truncations_total",
    "lk_disk_free_bytes",
    "lk_disk_total_bytes",
    "lk_cleaner_dirty_ratio",
    "lk_cleaner_passes_total",
    "lk_cleaner_failures_total",
    "lk_cleaner_read_bytes_total",
    "lk_cleaner_written_bytes_total",
    "lk_cleaner_removed_bytes_total",
    "lk_cleaner_last_clean_timestamp_seconds",
    "lk_cleaner_last_clean_duration_seconds",
)

#: The listeners that reserve request bytes in the broker's admission budget (a fixed label set).
ADMISSION_LISTENERS = ("grpc", "http", "kafka")

GroupKey = tuple[str, str, int]  # (topic, group, partition)
_Family = CounterMetricFamily | GaugeMetricFamily


@dataclass(frozen=True)
class _PartitionView:
    topic: str
    pid: int
    produced: int
    next_offset: int
    log_start_offset: int
    high_watermark: int
    size_bytes: int


class BrokerMetrics:
    """The Prometheus metrics of ``broker``; see the module docstring for the names.

    ``now`` (seconds since the epoch) is injectable for lag tests. Call
    :meth:`close` to stop observing fsyncs (the broker keeps working either way).
    """

    def __init__(
        self,
        broker: Broker,
        registry: CollectorRegistry | None = None,
        *,
        now: Callable[[], float] = time.time,
        max_label_sets: int = DEFAULT_MAX_LABEL_SETS,
        label_idle_s: float = DEFAULT_LABEL_IDLE_S,
    ) -> None:
        self.broker = broker
        self.registry = registry if registry is not None else CollectorRegistry()
        self._now = now
        self._lock = threading.Lock()
        self.max_label_sets = max_label_sets
        self.label_idle_s = label_idle_s
        #: Label sets refused because a family was full (each refusal counts once).
        self.dropped_label_sets = 0
        # (topic, group, partition) -> [value, last update (now())]: bounded, pruned at each scrape.
        self._committed: dict[GroupKey, list[float]] = {}
        self._consumed: dict[GroupKey, list[float]] = {}
        # The event metrics live in a private registry that the collector re-exports without
        # their ``_created`` series, so the exposition holds exactly the documented names.
        self._events = CollectorRegistry()
        self.fsync_latency = Histogram(
            "lk_fsync_latency_seconds",
            "Duration of each log fsync (group commit, sync-mode ack, flush).",
            buckets=LATENCY_BUCKETS,
            registry=self._events,
        )
        self.produce_latency = Histogram(
            "lk_produce_latency_seconds",
            "Produce request latency, receipt to acknowledgement.",
            buckets=LATENCY_BUCKETS,
            registry=self._events,
        )
        self.fetch_latency = Histogram(
            "lk_fetch_latency_seconds",
            "Fetch request latency.",
            buckets=LATENCY_BUCKETS,
            registry=self._events,
        )
        self.request_errors = Counter(
            "lk_request_errors",
            "Failed requests by status code (NOT_FOUND, INVALID_ARGUMENT, OUT_OF_RANGE, ...).",
            ["code"],
            registry=self._events,
        )
        self._collector = _BrokerCollector(self)
        self.registry.register(self._collector)
        broker.fsync_observers.append(self._observe_fsync)

    # -- called by serving surfaces ----------------------------------------------------------------

    def observe_produce(self, seconds: float) -> None:
        self.produce_latency.observe(seconds)

    def observe_fetch(self, seconds: float) -> None:
        self.fetch_latency.observe(seconds)

    def count_error(self, code: str) -> None:
        self.request_errors.labels(code=code).inc()

    def record_consumed(self, topic: str, group: str, partition: int, count: int) -> None:
        """``count`` records of ``topic[partition]`` were delivered to ``group`` (names validated first)."""
        key = _group_key(topic, group, partition)
        if count > 0:
            with self._lock:
                entry = self._entry_locked(self._consumed, key)
                if entry is not None:
                    entry[0] += count

    def record_committed(self, topic: str, group: str, partition: int, offset: int) -> None:
        """``group`` committed ``offset`` (the next it will read); the offset file wins when there is one."""
        key = _group_key(topic, group, partition)
        with self._lock:
            entry = self._entry_locked(self._committed, key)
            if entry is not None:
                entry[0] = offset

    def _entry_locked(self, family: dict[GroupKey, list[float]], key: GroupKey) -> list[float] | None:
        entry = family.get(key)
        if entry is None:
            if len(family) >= self.max_label_sets:
                if self.dropped_label_sets == 0:
                    log.warning("metric label sets are full (%d): new groups are not labelled", self.max_label_sets)
                self.dropped_label_sets += 1
                return None
            entry = family[key] = [0.0, 0.0]
        entry[1] = self._now()
        return entry

    def label_sets(self) -> int:
        """How many per-group label sets are held (consumed and committed)."""
        with self._lock:
            return len(self._consumed) + len(self._committed)

    def prune(self, partitions: set[tuple[str, int]], live_groups: set[str]) -> None:
        """Drop label sets of partitions that are gone, and of unknown groups idle for ``label_idle_s``."""
        cutoff = self._now() - self.label_idle_s
        with self._lock:
            for family in (self._consumed, self._committed):
                doomed = [
                    key
                    for key, (_, updated) in family.items()
                    if (key[0], key[2]) not in partitions or (key[1] not in live_groups and updated < cutoff)
                ]
                for key in doomed:
                    del family[key]

    def close(self) -> None:
        """Stop observing the broker's fsyncs. Idempotent."""
        if self._observe_fsync in self.broker.fsync_observers:
            self.broker.fsync_observers.remove(self._observe_fsync)

    # -- internals ------------------------------------------------------------------------------

    def _observe_fsync(self, seconds: float) -> None:
        self.fsync_latency.observe(seconds)

    def event_metrics(self) -> list[Metric]:
        """The event-driven families (histograms, event counters), without ``_created`` samples."""
        families = list(self._events.collect())
        for family in families:
            family.samples = [s for s in family.samples if not s.name.endswith("_created")]
        return families

    def recorded_commits(self) -> dict[GroupKey, int]:
        with self._lock:
            return {key: int(entry[0]) for key, entry in self._committed.items()}

    def consumed_counts(self) -> dict[GroupKey, float]:
        with self._lock:
            return {key: entry[0] for key, entry in self._consumed.items()}

    def now(self) -> float:
        return self._now()


class _BrokerCollector(Collector):
    """Reads the broker's state on each scrape."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self._metrics = metrics
        # (topic, pid, offset) -> batch timestamp (ms) of the record at offset; kept for one scrape.
        self._timestamps: dict[tuple[str, int, int], int] = {}
        self._ts_lock = threading.Lock()

    def describe(self) -> Iterable[Metric]:
        return [*self._families(), *self._metrics.event_metrics()]

    def _families(self) -> Iterator[_Family]:
        yield CounterMetricFamily(
            "lk_produced", "Records appended since the broker opened.", labels=["topic", "partition"]
        )
        yield GaugeMetricFamily(
            "lk_partition_next_offset", "Offset the next appended record gets.", labels=["topic", "partition"]
        )
        yield GaugeMetricFamily(
            "lk_segment_size_bytes", "Bytes of all segments of the partition.", labels=["topic", "partition"]
        )
        yield CounterMetricFamily(
            "lk_consumed", "Records delivered to a consumer group.", labels=["topic", "group", "partition"]
        )
        yield GaugeMetricFamily(
            "lk_partition_committed_offset",
            "Committed offset of a consumer group (the next offset it reads).",
            labels=["topic", "group", "partition"],
        )
        yield GaugeMetricFamily(
            "lk_consumer_lag_seconds",
            "Age of the oldest record the group has not consumed; 0 when caught up.",
            labels=["topic", "group", "partition"],
        )
        yield GaugeMetricFamily("lk_inflight_bytes", "Produce bytes accepted and not yet acknowledged.")
        yield GaugeMetricFamily("lk_admitted_bytes", "Request bytes the listeners hold, read and not yet answered.")
        yield CounterMetricFamily(
            "lk_admission_refused",
            "Requests refused (or, Kafka, not read in time) by max_admitted_bytes.",
            labels=["listener"],
        )
        yield CounterMetricFamily("lk_recovery_truncations", "Partitions whose log was truncated when opened.")
        yield GaugeMetricFamily("lk_disk_free_bytes", "Free bytes on the filesystem of persist_dir.")
        yield GaugeMetricFamily("lk_disk_total_bytes", "Total bytes of the filesystem of persist_dir.")
        yield from _cleaner_families()

    def collect(self) -> Iterable[Metric]:
        m = self._metrics
        broker = m.broker
        families = {f.name: f for f in self._families()}
        produced = families["lk_produced"]
        next_offset = families["lk_partition_next_offset"]
        segment_bytes = families["lk_segment_size_bytes"]
        committed_family = families["lk_partition_committed_offset"]
        lag = families["lk_consumer_lag_seconds"]

        partitions = self._partitions()
        for view in partitions.values():
            labels = [view.topic, str(view.pid)]
            produced.add_metric(labels, view.produced)
            next_offset.add_metric(labels, view.next_offset)
            segment_bytes.add_metric(labels, view.size_bytes)

        stored = broker.list_committed()
        m.prune(set(partitions), {group_label(listing.group) for listing in broker.list_groups()})
        for (topic, group, pid), count in sorted(m.consumed_counts().items()):
            families["lk_consumed"].add_metric([topic, group, str(pid)], count)
        committed = m.recorded_commits()
        committed.update({(topic, group_label(group), pid): offset for (group, topic, pid), offset in stored.items()})
        now = m.now()
        used: set[tuple[str, int, int]] = set()
        shown = 0
        for (topic, group, pid), offset in sorted(committed.items()):
            found = partitions.get((topic, pid))
            if found is None:
                continue  # a deleted topic or a partition this broker does not have
            if shown >= m.max_label_sets:
                break  # bounded like the event families; the offsets themselves stay in the store
            shown += 1
            labels = [topic, group, str(pid)]
            committed_family.add_metric(labels, offset)
            lag.add_metric(labels, self._lag_seconds(found, offset, now, used))
        with self._ts_lock:
            self._timestamps = {k: v for k, v in self._timestamps.items() if k in used}

        stats = broker.stats()
        families["lk_inflight_bytes"].add_metric([], stats.inflight_bytes)
        families["lk_admitted_bytes"].add_metric([], broker.admission.held)
        refused = dict(broker.admission.refused)
        for listener in ADMISSION_LISTENERS:
            families["lk_admission_refused"].add_metric([listener], refused.get(listener, 0))
        families["lk_recovery_truncations"].add_metric([], stats.recovery_truncations)
        try:
            usage = shutil.disk_usage(broker.persist_dir)
        except OSError:
            usage = None
        if usage is not None:
            families["lk_disk_free_bytes"].add_metric([], usage.free)
            families["lk_disk_total_bytes"].add_metric([], usage.total)
        _collect_cleaner(broker, families, set(partitions))
        return [*families.values(), *m.event_metrics()]

    def _partitions(self) -> dict[tuple[str, int], _PartitionView]:
        broker = self._metrics.broker
        views: dict[tuple[str, int], _PartitionView] = {}
        for topic in broker.list_topics():
            try:
                count = broker.partitions_for(topic)
                for pid in range(count):
                    partition = broker.opened_partition(topic, pid)  # a scrape must not build idle ones
                    st = EMPTY_STATS if partition is None else partition.stats()
                    views[(topic, pid)] = _PartitionView(
                        topic,
                        pid,
                        0 if partition is None else partition.produced_records,
                        st.next_offset,
                        st.log_start_offset,
                        st.high_watermark,
                        st.size_bytes,
                    )
            except LkstreamError:
                continue  # deleted while we looked
        return views

    def _lag_seconds(self, view: _PartitionView, offset: int, now: float, used: set[tuple[str, int, int]]) -> float:
        """Seconds since the first record at or after ``offset`` was produced; 0 when none is left.

        The record's own timestamp, not its batch's base timestamp: a group that
        committed in the middle of a batch (a producer's linger window, a
        rebalance) would otherwise look older than it is. One decoded record
        per (partition, offset), cached while the committed offset stays put.
        """
        if offset >= view.high_watermark:
            return 0.0
        first = max(offset, view.log_start_offset)
        key = (view.topic, view.pid, first)
        used.add(key)
        with self._ts_lock:
            ts_ms = self._timestamps.get(key)
        if ts_ms is None:
            try:
                oldest = self._metrics.broker.read_from(view.topic, view.pid, first, max_msgs=1)
            except LkstreamError:
                return 0.0  # retention or a deletion ran in between: the next scrape sees the new state
            if not oldest:
                return 0.0
            ts_ms = oldest[0].timestamp
            with self._ts_lock:
                self._timestamps[key] = ts_ms
        return max(0.0, now - ts_ms / 1000.0)


def _cleaner_families() -> Iterator[_Family]:
    yield GaugeMetricFamily(
        "lk_cleaner_dirty_ratio",
        "Compacted partitions: the share of the sealed bytes the log cleaner has not cleaned yet.",
        labels=["topic", "partition"],
    )
    yield CounterMetricFamily("lk_cleaner_passes", "Log cleaner passes completed.")
    yield CounterMetricFamily("lk_cleaner_failures", "Log cleaner passes that failed (the partition waits).")
    yield CounterMetricFamily("lk_cleaner_read_bytes", "Bytes the log cleaner read (key maps and rewrites).")
    yield CounterMetricFamily("lk_cleaner_written_bytes", "Bytes of the segments the log cleaner wrote.")
    yield CounterMetricFamily("lk_cleaner_removed_bytes", "Bytes the log cleaner took off the disk.")
    yield GaugeMetricFamily(
        "lk_cleaner_last_clean_timestamp_seconds", "When the last log cleaner pass ended (0: none yet)."
    )
    yield GaugeMetricFamily("lk_cleaner_last_clean_duration_seconds", "How long the last log cleaner pass took.")


def _collect_cleaner(broker: Broker, families: dict[str, _Family], partitions: set[tuple[str, int]]) -> None:
    cleaner = broker.cleaner
    if cleaner is None:
        totals = None
    else:
        totals = cleaner.snapshot_totals()
        for (topic, pid), state in sorted(cleaner.statuses().items()):
            if (topic, pid) in partitions:
                families["lk_cleaner_dirty_ratio"].add_metric([topic, str(pid)], state.dirty_ratio)
    families["lk_cleaner_passes"].add_metric([], 0 if totals is None else totals.passes)
    families["lk_cleaner_failures"].add_metric([], 0 if totals is None else totals.failures)
    families["lk_cleaner_read_bytes"].add_metric([], 0 if totals is None else totals.bytes_read)
    families["lk_cleaner_written_bytes"].add_metric([], 0 if totals is None else totals.bytes_written)
    families["lk_cleaner_removed_bytes"].add_metric([], 0 if totals is None else totals.bytes_removed)
    last = 0.0 if totals is None or totals.last_clean_ms < 0 else totals.last_clean_ms / 1000.0
    families["lk_cleaner_last_clean_timestamp_seconds"].add_metric([], last)
    families["lk_cleaner_last_clean_duration_seconds"].add_metric([], 0.0 if totals is None else totals.last_duration_s)


def _group_key(topic: str, group: str, partition: int) -> GroupKey:
    """A validated (topic, group label, partition) label set: only names the broker accepts become labels,
    and a group id becomes its bounded, printable label (:func:`~lkstream.storage.names.group_label`)."""
    validate_topic(topic)
    validate_group(group)
    return (topic, group_label(group), partition)
