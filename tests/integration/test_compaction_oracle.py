"""Log compaction end to end, as Kafka's LogCompactionTester checks it (issue 24).

N keys, each written D times in a random order, a share of them deleted at the end with a
tombstone, all produced through confluent-kafka to a real daemon whose cleaner runs on its
own (``cleanup.policy=compact`` set by CreateTopics, ``segment.ms`` rolling the quiet tail).
Once the cleaner caught up, a read from offset 0 through a Kafka client, through the remote
``Consumer`` and, after the daemon stopped, through the embedded ``Consumer`` gives exactly
the last value of every live key and nothing for the deleted ones, in offset order, but the
log's last record: the last tombstone, which stays while it ends the log (as in Kafka, whose
active segment holding it is never cleaned), so a Kafka client's position reaches the end.
"""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import lkstream
from lkstream import Broker, Consumer
from tests.integration.conftest import DaemonFactory

pytestmark = pytest.mark.timeout(300)

TOPIC = "oracle"
KEYS, DUPLICATES, DELETED_SHARE = 300, 5, 0.1
DEADLINE_S = 90.0


def _produce(bootstrap: str, seed: int) -> tuple[dict[str, str], set[str], int]:
    """Write every key DUPLICATES times, shuffled, then tombstone a share; ``(live, deleted, records)``."""
    rng = random.Random(seed)
    writes = [(f"key-{k}", n) for k in range(KEYS) for n in range(DUPLICATES)]
    rng.shuffle(writes)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    live: dict[str, str] = {}
    for key, n in writes:
        value = f"{key}-v{n}-{rng.randrange(10**6)}"
        producer.produce(TOPIC, key=key, value=value, partition=0)
        live[key] = value
    deleted = set(rng.sample(sorted(live), int(KEYS * DELETED_SHARE)))
    for key in sorted(deleted):
        producer.produce(TOPIC, key=key, value=None, partition=0)
        del live[key]
    assert producer.flush(30) == 0
    return live, deleted, len(writes) + len(deleted)


def _kafka_read(bootstrap: str, end: int) -> list[tuple[int, str, str | None]]:
    """Every record from offset 0 on, until the position reaches ``end`` (or nothing came for 2 s)."""
    consumer = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": f"oracle-{time.monotonic_ns()}"})
    partition = TopicPartition(TOPIC, 0, 0)
    consumer.assign([partition])
    rows: list[tuple[int, str, str | None]] = []
    quiet_since = time.monotonic()
    try:
        while consumer.position([partition])[0].offset < end and time.monotonic() - quiet_since < 2:
            message = consumer.poll(0.2)
            if message is None:
                continue
            assert message.error() is None, message.error()
            value = message.value()
            rows.append((message.offset(), message.key().decode(), None if value is None else value.decode()))
            quiet_since = time.monotonic()
    finally:
        consumer.close()
    return rows


def _lkstream_read(broker: Any, end: int) -> list[tuple[int, str, str | None]]:
    consumer = Consumer(broker, auto_offset_reset="earliest")
    consumer.assign([(TOPIC, 0)])
    rows: list[tuple[int, str, str | None]] = []
    try:
        while consumer.position(TOPIC, 0) < end:
            for record in consumer.poll(timeout=5):
                value = record.value
                rows.append((record.offset, record.key.decode(), None if value is None else value.decode()))
    finally:
        consumer.close()
    return rows


def _check(rows: list[tuple[int, str, str | None]], live: dict[str, str], deleted: set[str]) -> None:
    offsets = [offset for offset, _, _ in rows]
    assert offsets == sorted(set(offsets)), "offsets out of order"
    state = {key: value for _, key, value in rows}
    assert {k: v for k, v in state.items() if v is not None} == live, "the final state differs"
    assert {k for k, v in state.items() if v is None} <= deleted


def test_a_compacted_topic_holds_the_last_value_of_every_live_key(start_daemon: DaemonFactory) -> None:
    daemon = start_daemon(
        segment_max_bytes=64 * 1024, log_cleaner_backoff_ms=100, retention_check_interval_ms=100, fsync_mode="group"
    )
    bootstrap = daemon.kafka_address
    admin = AdminClient({"bootstrap.servers": bootstrap})
    configs = {"cleanup.policy": "compact", "delete.retention.ms": "1000", "segment.ms": "300"}
    admin.create_topics([NewTopic(TOPIC, 1, 1, config=configs)])[TOPIC].result(20)
    live, deleted, produced = _produce(bootstrap, seed=24)
    end = produced  # one partition: offsets 0 .. produced - 1
    deadline = time.monotonic() + DEADLINE_S
    while True:  # the daemon's cleaner works on its own: wait until the tombstones went too
        rows = _kafka_read(bootstrap, end)
        _check(rows, live, deleted)
        if len(rows) == len(live) + 1 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(rows) == len(live) + 1, f"{len(rows)} records left of {produced}: the cleaner did not catch up"
    assert rows[-1] == (end - 1, max(deleted), None), "the log's last record (a tombstone) stays"
    with lkstream.connect(daemon.address) as remote:
        assert [p.dirty_ratio for p in remote.describe_topic(TOPIC).partitions] == [0.0]
        _check(_lkstream_read(remote, end), live, deleted)
    assert daemon.terminate() == 0
    with Broker(persist_dir=str(daemon.data_dir), log_cleaner_enabled=False) as broker:
        embedded = _lkstream_read(broker, end)
    _check(embedded, live, deleted)
    assert embedded == rows
