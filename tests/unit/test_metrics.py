"""BrokerMetrics over a real broker: exact names and labels, and values that move."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from lkstream import Broker, Consumer
from lkstream.broker.metrics import METRIC_NAMES, BrokerMetrics
from lkstream.format.codec import encode_batch
from lkstream.storage.names import group_label
from lkstream.storage.offsets import OffsetStore

from .support import DEADLINE_S

# Exposed sample name -> (type, label names) required by the seed (section 9) and the issue.
EXPECTED: dict[str, tuple[str, set[str]]] = {
    "lk_produced_total": ("counter", {"topic", "partition"}),
    "lk_consumed_total": ("counter", {"topic", "group", "partition"}),
    "lk_partition_next_offset": ("gauge", {"topic", "partition"}),
    "lk_partition_committed_offset": ("gauge", {"topic", "group", "partition"}),
    "lk_consumer_lag_seconds": ("gauge", {"topic", "group", "partition"}),
    "lk_segment_size_bytes": ("gauge", {"topic", "partition"}),
    "lk_inflight_bytes": ("gauge", set()),
    "lk_admitted_bytes": ("gauge", set()),
    "lk_admission_refused_total": ("counter", {"listener"}),
    "lk_fsync_latency_seconds": ("histogram", set()),
    "lk_produce_latency_seconds": ("histogram", set()),
    "lk_fetch_latency_seconds": ("histogram", set()),
    "lk_request_errors_total": ("counter", {"code"}),
    "lk_recovery_truncations_total": ("counter", set()),
    "lk_disk_free_bytes": ("gauge", set()),
    "lk_disk_total_bytes": ("gauge", set()),
    "lk_cleaner_dirty_ratio": ("gauge", {"topic", "partition"}),
    "lk_cleaner_passes_total": ("counter", set()),
    "lk_cleaner_failures_total": ("counter", set()),
    "lk_cleaner_read_bytes_total": ("counter", set()),
    "lk_cleaner_written_bytes_total": ("counter", set()),
    "lk_cleaner_removed_bytes_total": ("counter", set()),
    "lk_cleaner_last_clean_timestamp_seconds": ("gauge", set()),
    "lk_cleaner_last_clean_duration_seconds": ("gauge", set()),
}

Samples = dict[str, list[tuple[dict[str, str], float]]]


def scrape(metrics: BrokerMetrics) -> tuple[Samples, dict[str, str]]:
    """``({sample name: [(labels, value)]}, {family name: type})`` from the text exposition."""
    samples: Samples = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        types[family.name] = family.type
        for s in family.samples:
            samples.setdefault(s.name, []).append((dict(s.labels), s.value))
    return samples, types


def value(samples: Samples, name: str, **labels: str) -> float | None:
    for got, v in samples.get(name, []):
        if got == labels:
            return v
    return None


@pytest.fixture
def group_broker(data_dir: str) -> Iterator[Broker]:
    b = Broker(persist_dir=data_dir, fsync_mode="group", fsync_interval_ms=10, partitions=2)
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def metrics(group_broker: Broker) -> Iterator[BrokerMetrics]:
    m = BrokerMetrics(group_broker)
    try:
        yield m
    finally:
        m.close()


def test_exact_names_types_and_labels(group_broker: Broker, metrics: BrokerMetrics) -> None:
    group_broker.produce_many_sync("orders", [(b"k", b"v")])
    group_broker.alter_topic_configs("orders", set={"cleanup.policy": "compact"})
    assert group_broker.cleaner is not None
    group_broker.cleaner.run_once()  # looks at the partition: its dirty ratio is known
    group_broker.offset_store.commit("billing", "orders", 0, 0)
    metrics.record_consumed("orders", "billing", 0, 1)
    metrics.count_error("NOT_FOUND")
    metrics.observe_produce(0.001)
    metrics.observe_fetch(0.002)

    samples, types = scrape(metrics)
    assert set(METRIC_NAMES) == set(EXPECTED)
    for name, (kind, labels) in EXPECTED.items():
        family = name.removesuffix("_total") if kind == "counter" else name
        assert types.get(family) == kind, f"{name}: type {types.get(family)!r}"
        sample = f"{name}_count" if kind == "histogram" else name
        assert sample in samples, f"{sample} missing from the exposition"
        for got, _ in samples[sample]:
            assert set(got) == labels, f"{sample} has labels {sorted(got)}, expected {sorted(labels)}"
    families = {n for n in types if n.startswith("lk_")}
    assert families == {n.removesuffix("_total") if EXPECTED[n][0] == "counter" else n for n in EXPECTED}


def test_produced_and_next_offset_increase(group_broker: Broker, metrics: BrokerMetrics) -> None:
    group_broker.create_topic("events", 2)
    before, _ = scrape(metrics)
    assert value(before, "lk_produced_total", topic="events", partition="1") == 0
    assert value(before, "lk_partition_next_offset", topic="events", partition="1") == 0
    assert value(before, "lk_partition_next_offset", topic="events", partition="0") == 0

    group_broker.produce_many_sync("events", [(None, b"x" * 100)] * 5, partition=1)
    group_broker.produce_many_sync("events", [(None, b"y" * 100)] * 3, partition=1)
    after, _ = scrape(metrics)
    assert value(after, "lk_produced_total", topic="events", partition="1") == 8
    assert value(after, "lk_partition_next_offset", topic="events", partition="1") == 8
    assert value(after, "lk_partition_next_offset", topic="events", partition="0") == 0
    size = value(after, "lk_segment_size_bytes", topic="events", partition="1")
    assert size is not None and size > 800
    assert value(after, "lk_inflight_bytes") == 0
    assert value(after, "lk_recovery_truncations_total") == 0
    free, total = value(after, "lk_disk_free_bytes"), value(after, "lk_disk_total_bytes")
    assert free is not None and total is not None and 0 < free <= total


def test_fsync_histogram_grows_in_group_mode(group_broker: Broker, metrics: BrokerMetrics) -> None:
    samples, _ = scrape(metrics)
    start = value(samples, "lk_fsync_latency_seconds_count") or 0.0
    group_broker.produce_many_sync("t", [(None, b"v")] * 10)
    deadline = time.monotonic() + DEADLINE_S
    count = start
    while count <= start and time.monotonic() < deadline:
        time.sleep(0.02)  # the group-commit thread fsyncs within fsync_interval_ms (10 ms)
        samples, _ = scrape(metrics)
        count = value(samples, "lk_fsync_latency_seconds_count") or 0.0
    assert count > start
    fsync_sum = value(samples, "lk_fsync_latency_seconds_sum")
    assert fsync_sum is not None and fsync_sum >= 0
    assert value(samples, "lk_fsync_latency_seconds_bucket", le="+Inf") == count


def test_committed_offset_and_lag(group_broker: Broker) -> None:
    clock = [time.time()]
    metrics = BrokerMetrics(group_broker, now=lambda: clock[0])
    try:
        group_broker.produce_many_sync("orders", [(None, b"a")] * 4, partition=0)
        produced_at = time.time()
        group_broker.offset_store.commit("billing", "orders", 0, 1)
        clock[0] = produced_at + 120.0
        samples, _ = scrape(metrics)
        labels = {"topic": "orders", "group": "billing", "partition": "0"}
        assert value(samples, "lk_partition_committed_offset", **labels) == 1
        lag = value(samples, "lk_consumer_lag_seconds", **labels)
        assert lag is not None and 119.0 <= lag <= 122.0

        group_broker.offset_store.commit("billing", "orders", 0, 4)  # caught up
        samples, _ = scrape(metrics)
        assert value(samples, "lk_partition_committed_offset", **labels) == 4
        assert value(samples, "lk_consumer_lag_seconds", **labels) == 0

        # A commit reported by a surface shows up even without an offset file.
        metrics.record_committed("orders", "audit", 1, 0)
        metrics.record_consumed("orders", "audit", 1, 7)
        metrics.record_consumed("orders", "audit", 1, 3)
        samples, _ = scrape(metrics)
        audit = {"topic": "orders", "group": "audit", "partition": "1"}
        assert value(samples, "lk_partition_committed_offset", **audit) == 0
        assert value(samples, "lk_consumer_lag_seconds", **audit) == 0  # partition 1 is empty
        assert value(samples, "lk_consumed_total", **audit) == 10

        # Commits of topics the broker does not have are not exported.
        group_broker.delete_topic("orders")
        metrics.record_committed("orders", "audit", 1, 0)
        samples, _ = scrape(metrics)
        assert value(samples, "lk_partition_committed_offset", **labels) is None
    finally:
        metrics.close()


def test_latency_and_error_counters(metrics: BrokerMetrics) -> None:
    metrics.observe_produce(0.0005)
    metrics.observe_produce(2.0)
    metrics.observe_fetch(0.003)
    metrics.count_error("NOT_FOUND")
    metrics.count_error("NOT_FOUND")
    metrics.count_error("RESOURCE_EXHAUSTED")
    samples, _ = scrape(metrics)
    assert value(samples, "lk_produce_latency_seconds_count") == 2
    assert value(samples, "lk_produce_latency_seconds_bucket", le="1.0") == 1
    assert value(samples, "lk_fetch_latency_seconds_count") == 1
    assert value(samples, "lk_request_errors_total", code="NOT_FOUND") == 2
    assert value(samples, "lk_request_errors_total", code="RESOURCE_EXHAUSTED") == 1


def test_registries_are_independent_and_close_detaches(group_broker: Broker) -> None:
    first = BrokerMetrics(group_broker)
    second = BrokerMetrics(group_broker)  # no duplicate-registration error: each has its own registry
    assert first.registry is not second.registry
    assert len(group_broker.fsync_observers) == 2
    first.close()
    first.close()
    second.close()
    assert group_broker.fsync_observers == []


def test_list_committed_skips_junk(data_dir: str) -> None:
    directory = os.path.join(data_dir, "offsets")
    os.makedirs(directory)
    files = {
        "g__t__part0.offset": b'{"offset": 5, "committed_ms": 1}\n',
        "g__a__part1__part2.offset": b'{"offset": 6, "committed_ms": 1}\n',
        "g__t__partx.offset": b'{"offset": 1}\n',
        "g__t__part3.offset": b"not json",
        "g__t__part4.offset": b'{"offset": -1}\n',
        "g__t__part5.offset.tmp": b'{"offset": 1}\n',
    }
    for name, body in files.items():
        with open(os.path.join(directory, name), "wb") as f:
            f.write(body)
    assert OffsetStore(data_dir).list_committed() == {("g", "t", 0): 5, ("g", "a__part1", 2): 6}


def test_scrape_after_close_does_not_fail(data_dir: str) -> None:
    b = Broker(persist_dir=data_dir, fsync_mode="group", partitions=1)
    metrics = BrokerMetrics(b)
    b.produce_many_sync("t", [(None, b"v")])
    b.close()
    samples, _ = scrape(metrics)
    assert value(samples, "lk_inflight_bytes") == 0


def test_lag_seconds_uses_the_committed_records_own_timestamp(group_broker: Broker) -> None:
    """A commit in the middle of a batch: the lag is the age of that record, not of the batch's first one."""
    base_ms = 1_700_000_000_000
    batch = encode_batch(
        [(None, b"a"), (None, b"b"), (None, b"c")], timestamps=[base_ms, base_ms + 30_000, base_ms + 60_000]
    )
    group_broker.produce_batch_sync("ticks", 0, batch)
    now = [base_ms / 1000.0 + 100.0]
    metrics = BrokerMetrics(group_broker, now=lambda: now[0])
    try:
        labels = {"topic": "ticks", "group": "g", "partition": "0"}
        for committed, expected_lag in ((0, 100.0), (1, 70.0), (2, 40.0), (3, 0.0)):
            group_broker.commit_offsets("g", {("ticks", 0): committed})
            samples, _ = scrape(metrics)
            assert value(samples, "lk_partition_committed_offset", **labels) == committed
            assert value(samples, "lk_consumer_lag_seconds", **labels) == pytest.approx(expected_lag)
        now[0] += 5.0  # caught up stays 0 however old the records are
        samples, _ = scrape(metrics)
        assert value(samples, "lk_consumer_lag_seconds", **labels) == 0
    finally:
        metrics.close()


def test_a_group_members_commits_show_as_committed_offset_and_lag(group_broker: Broker) -> None:
    group_broker.create_topic("jobs", 2)
    for pid in range(2):
        group_broker.produce_many_sync("jobs", [(None, b"j")] * 5, partition=pid)
    metrics = BrokerMetrics(group_broker)
    consumer = Consumer(group_broker, group="workers", heartbeat_interval_ms=100, auto_commit=False)
    try:
        consumer.subscribe("jobs")
        records = consumer.poll(timeout=1.0, max_records=3)
        assert len(records) == 3
        consumer.commit()
        samples, _ = scrape(metrics)
        by_partition = {
            int(labels["partition"]): v
            for labels, v in samples["lk_partition_committed_offset"]
            if labels["group"] == "workers"
        }
        assert by_partition == {pid: consumer.position("jobs", pid) for pid in range(2)}
        lags = {
            int(labels["partition"]): v
            for labels, v in samples["lk_consumer_lag_seconds"]
            if labels["group"] == "workers"
        }
        for pid, lag in lags.items():
            assert (lag > 0) == (by_partition[pid] < 5)
    finally:
        consumer.close()
        metrics.close()


# -- issue 12, finding 4: names are validated, label sets bounded and dropped with their object ----


def _label_sets(metrics: BrokerMetrics, name: str) -> list[dict[str, str]]:
    samples, _ = scrape(metrics)
    return [labels for labels, _ in samples.get(name, [])]


def test_consumed_rejects_an_invalid_group_or_topic_name(metrics: BrokerMetrics) -> None:
    from lkstream.errors import InvalidArgumentError

    for topic, group in (("orders", "x" * 32_768), ("orders", ""), ("bad topic", "g")):
        with pytest.raises(InvalidArgumentError):
            metrics.record_consumed(topic, group, 0, 1)
        with pytest.raises(InvalidArgumentError):
            metrics.record_committed(topic, group, 0, 1)
    assert _label_sets(metrics, "lk_consumed_total") == []


def test_any_kafka_group_id_becomes_a_printable_bounded_label(group_broker: Broker, metrics: BrokerMetrics) -> None:
    group_broker.produce_many_sync("orders", [(None, b"v")])
    groups = ["x" * 16_000, "g\n", "ünï code", "a/b:c@d"]
    for group in groups:
        metrics.record_consumed("orders", group, 0, 1)
        group_broker.commit_offsets(group, {("orders", 0): 1})
    consumed = {labels["group"] for labels in _label_sets(metrics, "lk_consumed_total")}
    committed = {labels["group"] for labels in _label_sets(metrics, "lk_partition_committed_offset")}
    assert consumed == committed == {group_label(g) for g in groups}
    assert {"ünï code", "a/b:c@d"} <= consumed  # printable and short: as they are
    assert all(label.isprintable() and len(label) <= 249 for label in consumed)


def test_group_label_sets_are_bounded(group_broker: Broker) -> None:
    group_broker.produce_many_sync("orders", [(None, b"v")])
    metrics = BrokerMetrics(group_broker, max_label_sets=50)
    try:
        for n in range(200):
            metrics.record_consumed("orders", f"g{n}", 0, 1)
            metrics.record_committed("orders", f"g{n}", 0, 1)
        assert len(_label_sets(metrics, "lk_consumed_total")) == 50
        assert len(_label_sets(metrics, "lk_partition_committed_offset")) == 50
        assert metrics.dropped_label_sets == 300
    finally:
        metrics.close()


def test_label_sets_disappear_with_their_topic(group_broker: Broker, metrics: BrokerMetrics) -> None:
    group_broker.produce_many_sync("doomed", [(None, b"v")])
    group_broker.commit_offsets("billing", {("doomed", 0): 1})
    metrics.record_consumed("doomed", "billing", 0, 1)
    metrics.record_committed("doomed", "billing", 0, 1)
    assert _label_sets(metrics, "lk_consumed_total")
    group_broker.delete_topic("doomed")
    for name in ("lk_consumed_total", "lk_partition_committed_offset", "lk_produced_total"):
        assert [s for s in _label_sets(metrics, name) if s.get("topic") == "doomed"] == [], name
    assert metrics.label_sets() == 0


def test_label_sets_of_an_unknown_group_expire_once_idle(group_broker: Broker) -> None:
    group_broker.produce_many_sync("orders", [(None, b"v")])
    now = [1000.0]
    metrics = BrokerMetrics(group_broker, now=lambda: now[0], label_idle_s=60.0)
    try:
        metrics.record_consumed("orders", "ad-hoc", 0, 1)  # a Fetch naming a group nobody joined
        group_broker.commit_offsets("kept", {("orders", 0): 1})
        metrics.record_consumed("orders", "kept", 0, 1)
        assert len(_label_sets(metrics, "lk_consumed_total")) == 2
        now[0] += 61.0
        assert [s["group"] for s in _label_sets(metrics, "lk_consumed_total")] == ["kept"]
    finally:
        metrics.close()


def test_the_cleaner_metrics_follow_its_passes(tmp_path: Path) -> None:
    """Issue 24: the dirty ratio per compacted partition, and what the passes read, wrote and removed."""
    with Broker(persist_dir=str(tmp_path / "d"), segment_max_bytes=4096, log_cleaner_backoff_ms=3_600_000) as broker:
        metrics = BrokerMetrics(broker)
        broker.create_topic("compacted", 1, configs={"cleanup.policy": "compact"})
        broker.create_topic("plain", 1)
        for n in range(30):
            for topic in ("compacted", "plain"):
                broker.produce_many_sync(topic, [(b"k", f"{n}".encode() * 500)], partition=0)
        assert broker.cleaner is not None
        samples, _ = scrape(metrics)
        assert value(samples, "lk_cleaner_passes_total") == 0
        assert value(samples, "lk_cleaner_last_clean_timestamp_seconds") == 0
        assert broker.cleaner.run_once() is not None
        samples, _ = scrape(metrics)
        assert value(samples, "lk_cleaner_passes_total") == 1
        assert value(samples, "lk_cleaner_removed_bytes_total") > 0  # type: ignore[operator]
        assert value(samples, "lk_cleaner_read_bytes_total") > value(samples, "lk_cleaner_written_bytes_total")  # type: ignore[operator]
        assert value(samples, "lk_cleaner_last_clean_timestamp_seconds") > 0  # type: ignore[operator]
        assert value(samples, "lk_cleaner_dirty_ratio", topic="compacted", partition="0") == 1.0
        assert value(samples, "lk_cleaner_dirty_ratio", topic="plain", partition="0") is None
        broker.cleaner.run_once()  # assesses again: nothing dirty now
        samples, _ = scrape(metrics)
        assert value(samples, "lk_cleaner_dirty_ratio", topic="compacted", partition="0") == 0.0
        broker.delete_topic("compacted")
        broker.cleaner.run_once()
        samples, _ = scrape(metrics)
        assert value(samples, "lk_cleaner_dirty_ratio", topic="compacted", partition="0") is None, "gone with its topic"
        metrics.close()
