"""Every Kafka client of the matrix reads a compacted topic across its gaps (issue 24).

The topic is cleaned for real before the clients read it, so it holds what Kafka's clients
meet in a compacted Kafka log: batches that lost some records (their last offset kept),
empty batches over runs of removed batches, a tombstone removed past its horizon, compressed
batches compressed again, and offsets with no record between the ones that survived. Each
client reads partition 0 from the beginning to the record keyed ``end`` and must return
exactly the surviving records, with their offsets; the clients that can start from an offset
start from one that no longer holds a record and must get the next surviving one.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from lkstream import Broker
from lkstream.kafka.inprocess import kafka_server

from .test_java_client import classpath
from .test_kafkajs import JS_DIR, node  # noqa: F401 (the node fixture)

pytestmark = pytest.mark.timeout(300)

TOPIC = "compacted"
Row = tuple[int, str | None, str | None]


@pytest.fixture(scope="module")
def cleaned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[Row]]]:
    """``(bootstrap, surviving records)`` of a cleaned topic served by a Kafka listener."""
    data = str(tmp_path_factory.mktemp("compacted") / "data")
    with Broker(persist_dir=data, segment_max_bytes=4096, log_cleaner_backoff_ms=3_600_000) as broker:
        broker.create_topic(TOPIC, 1, configs={"cleanup.policy": "compact", "delete.retention.ms": "0"})
        send = broker.produce_many_sync
        for n in range(40):  # batches that keep some records and lose others (the last one among them)
            send(TOPIC, [(f"a{n % 7}".encode(), f"a-{n}".encode() * 4), (b"hot", f"hot-{n}".encode())], partition=0)
        for n in range(40):  # a run of batches that all go: one empty batch covers them
            send(TOPIC, [(b"hot", f"hot-run-{n}".encode() * 8)], partition=0)
        for n in range(20):  # compressed batches (gzip: every client has it), filtered and compressed again
            records = [(f"z{i}".encode(), f"z-{n}-{i}".encode()) for i in range(5)]
            send(TOPIC, records, partition=0, compression="gzip")
        send(TOPIC, [(b"gone", b"soon-deleted")], partition=0)
        send(TOPIC, [(b"gone", None)], partition=0)  # a tombstone, past its horizon at once
        for n in range(30):
            send(TOPIC, [(b"hot", f"hot-last-{n}".encode() * 8), (f"once-{n}".encode(), b"kept")], partition=0)
        assert broker.partition(TOPIC, 0).log.cleaning_snapshot().sealed, "the data must span segments"
        assert broker.cleaner is not None
        while broker.cleaner.run_once() is not None:
            pass
        send(TOPIC, [(b"end", b"end")], partition=0)
        survivors: list[Row] = []
        offset, end = 0, broker.partition(TOPIC, 0).high_watermark
        while offset < end:
            records = broker.read_from(TOPIC, 0, offset)
            survivors += [(r.offset, _text(r.key), _text(r.value)) for r in records]
            offset = records[-1].offset + 1
        assert len(survivors) < end / 2, "the clean removed most records"
        assert all(key != "gone" for _, key, _ in survivors), "the tombstone and its value are gone"
        with kafka_server(broker) as bootstrap:
            yield bootstrap, survivors


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode()


def _removed_offset(survivors: list[Row]) -> tuple[int, list[Row]]:
    """An offset that holds no record any more, and the survivors from it on."""
    offsets = [o for o, _, _ in survivors]
    gap = next(o + 1 for o, after in itertools.pairwise(offsets) if after > o + 1)
    return gap, [row for row in survivors if row[0] > gap]


def _until_end(rows: list[Row]) -> list[Row]:
    return rows[: next(i for i, row in enumerate(rows) if row[1] == "end") + 1]


# -- librdkafka: confluent-kafka and kcat -----------------------------------------------------------


def test_confluent_kafka(cleaned: tuple[str, list[Row]]) -> None:
    bootstrap, survivors = cleaned
    gap, after_gap = _removed_offset(survivors)
    for start, expected in ((0, survivors), (gap, after_gap)):
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ck-{start}", "enable.auto.commit": False})
        consumer.assign([TopicPartition(TOPIC, 0, start)])
        rows: list[Row] = []
        try:
            while not rows or rows[-1][1] != "end":
                message = consumer.poll(10)
                assert message is not None, f"stuck after {rows[-1:]}"
                assert message.error() is None, message.error()
                rows.append((message.offset(), _text(message.key()), _text(message.value())))
        finally:
            consumer.close()
        assert rows == expected


def test_kcat(cleaned: tuple[str, list[Row]]) -> None:
    bootstrap, survivors = cleaned
    kcat = shutil.which("kcat")
    assert kcat is not None, "kcat is not installed: run scripts/install-system-deps.sh"
    gap, after_gap = _removed_offset(survivors)
    for start, expected in (("beginning", survivors), (str(gap), after_gap)):
        done = subprocess.run(
            [kcat, "-b", bootstrap, "-t", TOPIC, "-p", "0", "-C", "-o", start, "-e", "-f", "%o %k %S %s\n", "-Z"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        rows = []
        for line in done.stdout.splitlines():
            offset, key, size, *value = line.split(" ")
            rows.append((int(offset), key, None if size == "-1" else " ".join(value)))
        assert rows == expected


# -- kafka-python and aiokafka ------------------------------------------------------------------------


def test_kafka_python(cleaned: tuple[str, list[Row]]) -> None:
    from kafka import KafkaConsumer
    from kafka.structs import TopicPartition as KpPartition

    bootstrap, survivors = cleaned
    gap, after_gap = _removed_offset(survivors)
    for start, expected in ((0, survivors), (gap, after_gap)):
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        partition = KpPartition(TOPIC, 0)
        consumer.assign([partition])
        consumer.seek(partition, start)
        rows: list[Row] = []
        try:
            while not rows or rows[-1][1] != "end":
                batch = consumer.poll(timeout_ms=10_000)
                assert batch, f"stuck after {rows[-1:]}"
                rows += [(r.offset, _text(r.key), _text(r.value)) for r in batch[partition]]
        finally:
            consumer.close()
        assert _until_end(rows) == expected


def test_aiokafka(cleaned: tuple[str, list[Row]]) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as AioPartition

    bootstrap, survivors = cleaned
    gap, after_gap = _removed_offset(survivors)

    async def read(start: int) -> list[Row]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        partition = AioPartition(TOPIC, 0)
        consumer.assign([partition])
        consumer.seek(partition, start)
        rows: list[Row] = []
        try:
            while not rows or rows[-1][1] != "end":
                message = await asyncio.wait_for(consumer.getone(), 10)
                rows.append((message.offset, _text(message.key), _text(message.value)))
        finally:
            await consumer.stop()
        return rows

    assert asyncio.run(read(0)) == survivors
    assert asyncio.run(read(gap)) == after_gap


# -- KafkaJS and Java kafka-clients -----------------------------------------------------------------------


def test_kafkajs(cleaned: tuple[str, list[Row]], node: str) -> None:  # noqa: F811 (the node fixture)
    bootstrap, survivors = cleaned
    done = subprocess.run(
        [node, str(JS_DIR / "read_all.js"), bootstrap, TOPIC, "jsg-compacted"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    rows = [tuple(row) for row in json.loads(done.stdout.strip().splitlines()[-1])]
    assert rows == survivors


def test_java_kafka_clients(cleaned: tuple[str, list[Row]]) -> None:
    bootstrap, survivors = cleaned
    java = shutil.which("java")
    assert java is not None, "java is not installed: run scripts/install-system-deps.sh"
    gap, after_gap = _removed_offset(survivors)
    program = Path(__file__).parent / "java" / "ReadAll.java"
    for start, expected in ((0, survivors), (gap, after_gap)):
        done = subprocess.run(
            [java, "-cp", classpath(), str(program), bootstrap, TOPIC, str(start)],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        rows = []
        for line in done.stdout.splitlines():
            if line.startswith("RECORD "):
                _, offset, key, value = line.split(" ", 3)
                rows.append((int(offset), None if key == "null" else key, None if value == "null" else value))
        assert rows == expected


def _trailing_tombstones(broker: Broker, topic: str) -> None:
    """A record, then five tombstones past their horizon at the log's end, sealed and cleaned."""
    broker.create_topic(topic, 1, configs={"cleanup.policy": "compact", "delete.retention.ms": "0"})
    broker.produce_many_sync(topic, [(b"k", b"kept")], partition=0)
    broker.produce_many_sync(topic, [(f"gone-{n}".encode(), None) for n in range(5)], partition=0)
    broker.alter_topic_configs(topic, set={"segment.ms": "1"})
    time.sleep(0.01)
    assert broker.partition(topic, 0).roll_if_due()
    assert broker.cleaner is not None and broker.cleaner.run_once() is not None


def test_a_client_reaches_the_end_of_a_partition_cleaned_up_to_its_last_record(tmp_path: Path) -> None:
    """Tombstones past their horizon at the end of a quiet partition (rolled by segment.ms, then cleaned):
    the last one stays, as in Kafka, whose active segment (never cleaned) holds the log's last record.
    A Kafka client's position then reaches the high watermark, which state restores wait for
    (quixstreams, Kafka Streams); with only empty batches left there, it stopped at the first record."""
    with Broker(persist_dir=str(tmp_path / "d"), log_cleaner_backoff_ms=3_600_000) as broker:
        _trailing_tombstones(broker, "tail")
        with kafka_server(broker) as bootstrap:
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tail", "enable.auto.commit": False})
            partition = TopicPartition("tail", 0, 0)
            consumer.assign([partition])
            try:
                deadline = time.monotonic() + 20
                while consumer.position([partition])[0].offset < 6 and time.monotonic() < deadline:
                    message = consumer.poll(0.5)
                    assert message is None or message.error() is None
                assert consumer.position([partition])[0].offset == 6 == consumer.get_watermark_offsets(partition)[1]
            finally:
                consumer.close()
        assert [(r.offset, r.value) for r in broker.read_from("tail", 0, 0)] == [(0, b"kept"), (5, None)]


def test_empty_batches_at_the_end_of_a_partition_are_answered_as_kafka_answers_its_end(tmp_path: Path) -> None:
    """A log ending in empty batches (the cleaner writes none there, but ``lkstream verify`` accepts
    them and a restored backup may hold such a log): a fetch there gets no records and waits for an
    append, as at Kafka's end, instead of empty batches at once, which KafkaJS fetched again in a loop."""
    from lkstream.format.rewrite import empty_batch
    from lkstream.kafka.protocol import ApiKey
    from tests.security.kafka_raw import RawKafka

    data = tmp_path / "d"
    with Broker(persist_dir=str(data)) as broker:
        broker.create_topic("tail", 1)
        broker.produce_many_sync("tail", [(b"k", b"kept")], partition=0)
    (segment,) = (data / "topics" / "tail" / "part0").glob("*.seg")
    with segment.open("ab") as f:  # offsets 1-5, no record: what a cleaner leaves over a removed run
        f.write(empty_batch(1, 4, int(time.time() * 1000)))
    with Broker(persist_dir=str(data)) as broker:
        assert broker.partition("tail", 0).high_watermark == 6
        assert [r.offset for r in broker.read_from("tail", 0, 0)] == [0]
        with kafka_server(broker) as bootstrap, RawKafka(bootstrap) as raw:

            def fetch(offset: int) -> tuple[float, Any]:
                started = time.monotonic()
                response = raw.call(
                    ApiKey.FETCH,
                    12,
                    replica_id=-1,
                    max_wait=600,
                    min_bytes=1,
                    max_bytes=1 << 20,
                    session_epoch=-1,
                    topics=[
                        {
                            "topic": "tail",
                            "partitions": [
                                {
                                    "partition": 0,
                                    "fetch_offset": offset,
                                    "current_leader_epoch": -1,
                                    "log_start_offset": -1,
                                    "partition_max_bytes": 1 << 20,
                                }
                            ],
                        }
                    ],
                )
                return time.monotonic() - started, response.responses[0].partitions[0]

            waited, answer = fetch(1)
            assert waited >= 0.5 and not answer.records and answer.high_watermark == 6
            waited, answer = fetch(0)
            assert waited < 0.5 and answer.records, "the last record is still served at once"
