"""The Kafka bridge against a real daemon and a real Kafka-compatible broker (Tansu).

What Kafka holds is read back with aiokafka's consumer, a real Kafka client.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import NewTopic as NewKafkaTopic

import lkstream
from lkstream.bridge import BridgeMetrics, BridgeSettings, KafkaBridge
from lkstream.broker.partitioner import partition_for_key
from lkstream.client.remote import RemoteBroker
from lkstream.errors import BrokerUnavailableError, InvalidArgumentError
from tests.integration.conftest import REPO, DaemonFactory, DaemonProcess
from tests.integration.kafka_peer import kafka  # noqa: F401  (a fixture)

pytestmark = pytest.mark.timeout(180)

DEADLINE_S = 60.0


async def read_kafka(bootstrap: str, topic: str, expected: int, timeout_s: float = DEADLINE_S) -> dict[int, list[Any]]:
    """Every message of ``topic`` by partition, once ``expected`` messages arrived (or the deadline passed)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.subscribe([topic])  # only to learn the partitions: then assign them all
        await consumer.getmany(timeout_ms=100)
        parts = consumer.partitions_for_topic(topic) or set()
        consumer.unsubscribe()
        consumer.assign([TopicPartition(topic, p) for p in sorted(parts)])
        await consumer.seek_to_beginning()
        out: dict[int, list[Any]] = {p: [] for p in parts}
        deadline = time.monotonic() + timeout_s
        while sum(len(v) for v in out.values()) < expected and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for tp, messages in batch.items():
                out[tp.partition].extend(messages)
        return out
    finally:
        await consumer.stop()


async def wait_bridged(source: RemoteBroker, group: str, topic: str, bridge: asyncio.Task[None] | None = None) -> None:
    """Until ``group`` committed the high watermark of every partition of ``topic`` (or ``bridge`` failed)."""
    deadline = time.monotonic() + DEADLINE_S
    count = source.partitions_for(topic)
    while time.monotonic() < deadline:
        if bridge is not None and bridge.done():
            bridge.result()  # raises the bridge's error
            raise AssertionError("the bridge returned before committing everything")
        committed = await asyncio.to_thread(source.committed_offsets, group, topic)
        if all(committed.get(p) == source.bounds(topic, p)[1] for p in range(count)):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"bridge did not commit everything within {DEADLINE_S}s: {committed}")


def _values(messages: Iterable[Any]) -> list[bytes]:
    return [m.value for m in messages]


async def test_bridge_keeps_key_value_timestamp_headers_and_partition(daemon: DaemonProcess, kafka: str) -> None:  # noqa: F811
    with lkstream.connect(daemon.address) as source:
        source.create_topic("ticks", 3)
        sent: dict[int, list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]]] = {0: [], 1: [], 2: []}
        for pid in range(3):
            records = [
                (b"k%d" % (i % 5) if i % 2 else None, b"p%d-%d" % (pid, i), [("h", b"%d" % i)]) for i in range(40)
            ]
            await source.produce_many("ticks", records, partition=pid)
            sent[pid] = records
        produced_ts = source.read_from("ticks", 0, 0, max_msgs=1)[0].timestamp

        metrics = BridgeMetrics()
        bridge = KafkaBridge(
            source, BridgeSettings(topics=["ticks"], kafka_bootstrap=kafka, commit_every=25), metrics=metrics
        )
        task = asyncio.create_task(bridge.run())
        await wait_bridged(source, "lkstream-bridge", "ticks", task)
        bridge.stop()
        await asyncio.wait_for(task, DEADLINE_S)

        got = await read_kafka(kafka, "ticks", 120)
        assert sorted(got) == [0, 1, 2]
        for pid in range(3):
            assert [(m.key, m.value, list(m.headers)) for m in got[pid]] == [(k, v, h) for k, v, h in sent[pid]]
        assert got[0][0].timestamp == produced_ts
        total = sum(
            metrics.registry.get_sample_value("lk_bridge_records_total", {"topic": "ticks", "partition": str(p)}) or 0
            for p in range(3)
        )
        assert total == 120
        assert metrics.registry.get_sample_value("lk_bridge_lag_records", {"topic": "ticks", "partition": "0"}) == 0


async def test_two_bridges_of_one_group_split_the_partitions(daemon: DaemonProcess, kafka: str) -> None:  # noqa: F811
    with lkstream.connect(daemon.address) as source, lkstream.connect(daemon.address) as other_source:
        source.create_topic("shared", 4)
        for pid in range(4):
            await source.produce_many("shared", [(None, b"%d-%d" % (pid, i)) for i in range(50)], partition=pid)
        settings = BridgeSettings(topics=["shared"], kafka_bootstrap=kafka, group="pair", commit_every=10)
        first, second = KafkaBridge(source, settings), KafkaBridge(other_source, settings)
        tasks = [asyncio.create_task(first.run()), asyncio.create_task(second.run())]
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:  # both bridges are members and own partitions
            owners = {lag.owner for lag in source.group_lag("pair")}
            if len(owners - {None}) == 2:
                break
            await asyncio.sleep(0.05)
        assert len(source.describe_group("pair").members) == 2
        await wait_bridged(source, "pair", "shared")
        owners = {lag.owner for lag in source.group_lag("pair")}
        assert len(owners - {None}) == 2, owners  # the work was split, not done by one
        first.stop()
        second.stop()
        await asyncio.wait_for(asyncio.gather(*tasks), DEADLINE_S)
        got = await read_kafka(kafka, "shared", 200)
        for pid in range(4):
            values = _values(got[pid])
            first_seen = list(dict.fromkeys(values))
            assert first_seen == [b"%d-%d" % (pid, i) for i in range(50)]


async def test_key_hash_partitioning_lets_kafka_choose_by_key(daemon: DaemonProcess, kafka: str) -> None:  # noqa: F811
    with lkstream.connect(daemon.address) as source:
        source.create_topic("keyed", 1)
        await source.produce_many("keyed", [(b"sym%d" % i, b"v%d" % i) for i in range(60)])
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka)
        await admin.start()
        try:
            await admin.create_topics([NewTopic("keyed.kafka", 4, 1)])
        finally:
            await admin.close()
        settings = BridgeSettings(
            topics=["keyed"], kafka_bootstrap=kafka, target_topic="{topic}.kafka", partitioning="key-hash"
        )
        bridge = KafkaBridge(source, settings)
        task = asyncio.create_task(bridge.run())
        await wait_bridged(source, "lkstream-bridge", "keyed", task)
        bridge.stop()
        await asyncio.wait_for(task, DEADLINE_S)
        got = await read_kafka(kafka, "keyed.kafka", 60)
        # Kafka's default partitioner is murmur2 of the key, like LKSTREAM's.
        for pid, messages in got.items():
            for m in messages:
                assert partition_for_key(m.key, 4) == pid
        assert sorted(v for msgs in got.values() for v in _values(msgs)) == sorted(b"v%d" % i for i in range(60))


async def test_bridge_errors_are_clear(daemon: DaemonProcess, kafka: str) -> None:  # noqa: F811
    with pytest.raises(InvalidArgumentError, match="at least one topic"):
        BridgeSettings(topics=[], kafka_bootstrap=kafka)
    with pytest.raises(InvalidArgumentError, match="partitioning"):
        BridgeSettings(topics=["a"], kafka_bootstrap=kafka, partitioning="random")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=r"\{topic\}"):
        BridgeSettings(topics=["a", "b"], kafka_bootstrap=kafka, target_topic="fixed")
    with lkstream.connect(daemon.address) as source:
        source.create_topic("wide", 3)
        await source.produce_many("wide", [(None, b"x")])
        with pytest.raises(BrokerUnavailableError, match="cannot reach Kafka"):
            await KafkaBridge(source, BridgeSettings(topics=["wide"], kafka_bootstrap="127.0.0.1:1")).run()
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka)
        await admin.start()
        try:
            await admin.create_topics([NewTopic("narrow", 1, 1)])
        finally:
            await admin.close()
        narrow = BridgeSettings(topics=["wide"], kafka_bootstrap=kafka, target_topic="narrow")
        with pytest.raises(InvalidArgumentError, match="'narrow' has 1 partition but 'wide' has 3"):
            await KafkaBridge(source, narrow).run()
        assert source.committed_offsets("lkstream-bridge", "wide") == {}  # nothing committed on failure


def _start_bridge(daemon: DaemonProcess, kafka_address: str, log: Path) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        str(REPO / "examples" / "kafka_bridge.py"),
        "--topics", "stream",
        "--kafka-bootstrap", kafka_address,
        "--bootstrap", daemon.address,
        "--commit-every", "100",
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(cmd, stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env, cwd=REPO)


@pytest.mark.slow
async def test_bridge_killed_mid_stream_loses_nothing_and_duplicates_only_after_its_commit(
    daemon: DaemonProcess,
    kafka: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    per_partition = 3000
    with lkstream.connect(daemon.address) as source:
        source.create_topic("stream", 2)

        async def produce() -> None:
            for start in range(0, per_partition, 100):
                for pid in range(2):
                    values = [(None, b"%d:%d" % (pid, i)) for i in range(start, start + 100)]
                    await source.produce_many("stream", values, partition=pid)
                await asyncio.sleep(0.01)

        producing = asyncio.create_task(produce())
        log = tmp_path / "bridge.log"
        bridge = _start_bridge(daemon, kafka, log)
        try:
            deadline = time.monotonic() + DEADLINE_S
            while time.monotonic() < deadline:  # some progress committed, the stream still running
                committed = source.committed_offsets("lkstream-bridge", "stream")
                if sum(committed.values()) >= 500:
                    break
                await asyncio.sleep(0.02)
            else:
                raise AssertionError(f"bridge made no progress: {log.read_text()[-2000:]}")
            os.kill(bridge.pid, signal.SIGKILL)
            bridge.wait()
            at_kill = source.committed_offsets("lkstream-bridge", "stream")
            await producing
            bridge = _start_bridge(daemon, kafka, log)
            await wait_bridged(source, "lkstream-bridge", "stream")
            bridge.send_signal(signal.SIGTERM)
            assert bridge.wait(30) == 0, log.read_text()[-2000:]
        finally:
            if bridge.poll() is None:
                bridge.kill()
                bridge.wait()
            if not producing.done():
                producing.cancel()

        got = await read_kafka(kafka, "stream", 2 * per_partition)
        for pid in range(2):
            values = _values(got[pid])
            first_seen: list[bytes] = []
            seen: set[bytes] = set()
            for value in values:
                if value in seen:
                    # A duplicate is a record the killed bridge sent but had not committed.
                    offset = int(value.split(b":")[1])
                    assert offset >= at_kill.get(pid, 0), (pid, offset, at_kill)
                    continue
                seen.add(value)
                first_seen.append(value)
            assert first_seen == [b"%d:%d" % (pid, i) for i in range(per_partition)]


async def test_a_compacted_topic_is_bridged_across_its_gaps(start_daemon: DaemonFactory, kafka: str) -> None:  # noqa: F811
    """Issue 24: the records that survived a clean are copied across the offsets it removed, and the
    group commits up to the high watermark (its lag reaches 0)."""
    daemon = start_daemon(segment_max_bytes=4096, log_cleaner_backoff_ms=100, retention_check_interval_ms=100)
    configs = {"cleanup.policy": "compact", "segment.ms": "200", "delete.retention.ms": "0"}
    admin = AdminClient({"bootstrap.servers": daemon.kafka_address})
    admin.create_topics([NewKafkaTopic("table", 1, 1, config=configs)])["table"].result(20)
    with lkstream.connect(daemon.address) as source:
        for n in range(60):
            await source.produce_many("table", [(b"k%d" % (n % 4), b"v%d" % n * 20)], partition=0)
        await source.produce_many("table", [(b"gone", None)], partition=0)
        deadline = time.monotonic() + DEADLINE_S
        # Left: each key's latest record, and the tombstone while it is the log's last record.
        while source.describe_topic("table").partitions[0].dirty_ratio != 0.0 or _count(source, "table") > 5:
            assert time.monotonic() < deadline, "the daemon's cleaner did not clean the topic"
            await asyncio.sleep(0.2)
        survivors = [(r.key, r.value) for r in source.read_from("table", 0, 0)]
        assert len(survivors) == 5 and survivors[-1] == (b"gone", None)
        bridge = KafkaBridge(source, BridgeSettings(topics=["table"], kafka_bootstrap=kafka, commit_every=10))
        task = asyncio.create_task(bridge.run())
        await wait_bridged(source, "lkstream-bridge", "table", task)
        bridge.stop()
        await asyncio.wait_for(task, DEADLINE_S)
    got = await read_kafka(kafka, "table", 5)
    assert [(m.key, m.value) for m in got[0]] == survivors


def _count(source: RemoteBroker, topic: str) -> int:
    """Records of partition 0 a read from its start returns (stepping over what the cleaner removed)."""
    count, offset, end = 0, 0, source.bounds(topic, 0)[1]
    while offset < end:
        records = source.read_from(topic, 0, offset)
        if not records:
            break
        count += len(records)
        offset = records[-1].offset + 1
    return count
