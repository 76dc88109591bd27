"""Issue 24's group items: Kafka's behaviour where the Kafka clients' own integration suites expect it.

Each failing call the issue quotes is made directly, with the real clients (confluent-kafka,
kafka-python, aiokafka) or, where a client cannot send it, a raw request:

* group ids Kafka accepts (any non-empty string) are accepted, and their offsets survive a restart;
* OffsetCommit of an offset above the high watermark is accepted, and a commit may move back;
* commit metadata is stored and returned; beyond ``offset.metadata.max.bytes`` (4096):
  OFFSET_METADATA_TOO_LARGE;
* a session timeout outside 6 s .. 30 min: INVALID_SESSION_TIMEOUT;
* a ``group.protocol=consumer`` consumer using only ``assign()`` commits to an empty group;
* a transactional producer fails at once instead of waiting forever.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiokafka
import kafka
import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kio.schema.errors import ErrorCode

from lkstream import Broker
from lkstream.kafka.inprocess import kafka_server
from lkstream.kafka.protocol import ApiKey
from tests.security.kafka_raw import RawKafka

DEADLINE_S = 30.0
#: Group ids the rule before issue 24 refused (INVALID_GROUP_ID) and Kafka accepts.
KAFKA_GROUP_IDS = [
    "with space",
    "with:colon",
    "with/slash",
    "with@at",
    "double__underscore",
    "trailing_",
    "ünïcödé-grüppe",
    "g" * 300,
    "../../etc/passwd",
]


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    for i in range(count):
        producer.produce(topic, value=f"v{i}".encode(), partition=0)
    assert producer.flush(DEADLINE_S) == 0


def member(bootstrap: str, group: str, **extra: object) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **extra,
        }
    )


def read(consumer: Consumer, count: int) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None:
            assert message.error() is None, message.error()
            got.append(message.value())
    return got


# -- group ids --------------------------------------------------------------------------------------------------


def test_every_group_id_kafka_accepts_joins_commits_and_survives_a_restart(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    with Broker(persist_dir=data) as broker, kafka_server(broker) as bootstrap:
        broker.create_topic("ids", 1)
        produce(bootstrap, "ids", 3)
        for group in KAFKA_GROUP_IDS:
            consumer = member(bootstrap, group)
            consumer.subscribe(["ids"])
            assert read(consumer, 3) == [b"v0", b"v1", b"v2"], group
            consumer.commit(asynchronous=False)
            consumer.close()
        listed = {g.group for g in broker.list_groups()}
        assert set(KAFKA_GROUP_IDS) <= listed
    files = sorted(p.name for p in (tmp_path / "data" / "offsets").iterdir())
    assert all("/" not in name and len(name.encode()) <= 255 for name in files)
    with Broker(persist_dir=data) as broker, kafka_server(broker) as bootstrap:
        for group in KAFKA_GROUP_IDS:
            consumer = member(bootstrap, group)
            assert consumer.committed([TopicPartition("ids", 0)], DEADLINE_S)[0].offset == 3, group
            consumer.close()


def test_a_group_id_kafka_refuses_is_still_refused(kafka_bootstrap: str) -> None:
    with RawKafka(kafka_bootstrap) as raw:
        answer = raw.call(
            ApiKey.JOIN_GROUP,
            5,
            group_id="",
            session_timeout=10_000,
            rebalance_timeout=10_000,
            member_id="",
            group_instance_id=None,
            protocol_type="consumer",
            protocols=[{"name": "range", "metadata": b""}],
        )
    assert answer.error_code == ErrorCode.invalid_group_id


# -- offsets: any offset, metadata --------------------------------------------------------------------------------


def test_an_offset_above_the_high_watermark_is_committed_and_read_back(
    kafka_bootstrap: str, kafka_broker: Broker
) -> None:
    kafka_broker.create_topic("empty", 1)
    consumer = member(kafka_bootstrap, "ahead")
    consumer.assign([TopicPartition("empty", 0, 0)])
    consumer.commit(offsets=[TopicPartition("empty", 0, 1)], asynchronous=False)  # Kafka: accepted
    assert consumer.committed([TopicPartition("empty", 0)], DEADLINE_S)[0].offset == 1
    consumer.commit(offsets=[TopicPartition("empty", 0, 0)], asynchronous=False)  # and back again
    assert consumer.committed([TopicPartition("empty", 0)], DEADLINE_S)[0].offset == 0
    consumer.close()
    assert kafka_broker.groups.fetch_committed("ahead") == {("empty", 0): 0}


def test_commit_metadata_is_stored_and_returned(kafka_bootstrap: str, kafka_broker: Broker) -> None:
    kafka_broker.create_topic("meta", 2)
    consumer = kafka.KafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id="meta-group", enable_auto_commit=False)
    partitions = [kafka.TopicPartition("meta", 0), kafka.TopicPartition("meta", 1)]
    consumer.assign(partitions)
    note = "checkpoint: ✓ shard-7"
    consumer.commit(
        {
            partitions[0]: kafka.OffsetAndMetadata(0, note, -1),
            partitions[1]: kafka.OffsetAndMetadata(0, "", -1),
        }
    )
    found = consumer.committed(partitions[0], metadata=True)
    assert (found.offset, found.metadata) == (0, note)
    assert consumer.committed(partitions[1], metadata=True).metadata == ""
    consumer.close()
    assert kafka_broker.groups.fetch_committed_metadata("meta-group")[("meta", 0)].metadata == note


def test_metadata_over_offset_metadata_max_bytes_is_refused_for_that_partition_only(kafka_bootstrap: str) -> None:
    with RawKafka(kafka_bootstrap) as raw:
        raw.call(ApiKey.CREATE_TOPICS, 4, topics=[{"name": "big-meta", "num_partitions": 2, "replication_factor": 1}])
        answer = raw.call(
            ApiKey.OFFSET_COMMIT,
            8,
            group_id="g",
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=[
                {
                    "name": "big-meta",
                    "partitions": [
                        {"partition_index": 0, "committed_offset": 0, "committed_metadata": "x" * 4097},
                        {"partition_index": 1, "committed_offset": 0, "committed_metadata": "x" * 4096},
                    ],
                }
            ],
        )
        codes = [p.error_code for p in answer.topics[0].partitions]
        assert codes == [ErrorCode.offset_metadata_too_large, ErrorCode.none]
        fetched = raw.call(
            ApiKey.OFFSET_FETCH, 7, group_id="g", topics=[{"name": "big-meta", "partition_indexes": [0, 1]}]
        )
    by_partition = {p.partition_index: (p.committed_offset, p.metadata) for p in fetched.topics[0].partitions}
    assert by_partition == {0: (-1, ""), 1: (0, "x" * 4096)}


# -- sessions ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("session_ms", [100, 5_999, 1_800_001, 2**31 - 1])
def test_a_join_outside_the_session_bounds_gets_invalid_session_timeout(kafka_bootstrap: str, session_ms: int) -> None:
    with RawKafka(kafka_bootstrap) as raw:
        answer = raw.call(
            ApiKey.JOIN_GROUP,
            5,
            group_id="bounded",
            session_timeout=session_ms,
            rebalance_timeout=10_000,
            member_id="",
            group_instance_id=None,
            protocol_type="consumer",
            protocols=[{"name": "range", "metadata": b""}],
        )
    assert answer.error_code == ErrorCode.invalid_session_timeout


def test_a_consumer_with_a_100_ms_session_hears_invalid_session_timeout(
    kafka_bootstrap: str, kafka_broker: Broker
) -> None:
    kafka_broker.create_topic("short", 1)
    consumer = member(kafka_bootstrap, "short-sessions", **{"session.timeout.ms": 100, "heartbeat.interval.ms": 10})
    consumer.subscribe(["short"])
    deadline = time.monotonic() + DEADLINE_S
    error = None
    while error is None and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error() is not None:
            error = message.error()
    consumer.close()
    assert error is not None and "session timeout" in error.str().lower(), error
    assert not kafka_broker.classic_groups.has_members("short-sessions")


# -- KIP-848 assign() commit ------------------------------------------------------------------------------------------


def test_a_consumer_protocol_consumer_using_assign_commits_to_an_empty_group(
    kafka_bootstrap: str, kafka_broker: Broker
) -> None:
    kafka_broker.create_topic("assigned", 1)
    produce(kafka_bootstrap, "assigned", 2)
    consumer = member(kafka_bootstrap, "assign-only", **{"group.protocol": "consumer"})
    consumer.assign([TopicPartition("assigned", 0, 0)])
    assert read(consumer, 2) == [b"v0", b"v1"]
    consumer.commit(asynchronous=False)
    consumer.close()
    assert kafka_broker.groups.fetch_committed("assign-only") == {("assigned", 0): 2}


def test_a_commit_with_a_member_id_and_no_generation_into_an_empty_group_is_accepted(kafka_bootstrap: str) -> None:
    """The request a KIP-848 consumer outside any membership sends: its own member id, epoch -1."""
    with RawKafka(kafka_bootstrap) as raw:
        raw.call(ApiKey.CREATE_TOPICS, 4, topics=[{"name": "solo", "num_partitions": 1, "replication_factor": 1}])
        answer = raw.call(
            ApiKey.OFFSET_COMMIT,
            8,
            group_id="solo-group",
            generation_id_or_member_epoch=-1,
            member_id="a0b1c2d3-kip848-member",
            group_instance_id=None,
            topics=[{"name": "solo", "partitions": [{"partition_index": 0, "committed_offset": 0}]}],
        )
    assert answer.topics[0].partitions[0].error_code == ErrorCode.none


# -- transactions ---------------------------------------------------------------------------------------------------


def test_a_transactional_confluent_producer_fails_at_once_saying_why(kafka_bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": "exactly-once"})
    started = time.monotonic()
    with pytest.raises(KafkaException, match="transactions are not supported") as failed:
        producer.init_transactions(DEADLINE_S)
    assert time.monotonic() - started < 10.0
    assert failed.value.args[0].fatal()


async def test_a_transactional_aiokafka_producer_fails_at_once(kafka_bootstrap: str) -> None:
    producer = aiokafka.AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id="exactly-once")
    started = time.monotonic()
    try:
        with pytest.raises(aiokafka.errors.TransactionalIdAuthorizationFailed):
            await asyncio.wait_for(producer.start(), DEADLINE_S)
            await asyncio.wait_for(producer.begin_transaction(), DEADLINE_S)
    finally:
        await producer.stop()
    assert time.monotonic() - started < 10.0


def test_a_transactional_kafka_python_producer_fails_at_once(kafka_bootstrap: str) -> None:
    started = time.monotonic()
    producer = kafka.KafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id="exactly-once")
    try:
        with pytest.raises(kafka.errors.TransactionalIdAuthorizationFailedError):
            producer.init_transactions()
    finally:
        producer.close(timeout=5)
    assert time.monotonic() - started < 10.0


def test_a_coordinator_of_an_unknown_kind_is_an_invalid_request(kafka_bootstrap: str) -> None:
    with RawKafka(kafka_bootstrap) as raw:
        answer = raw.call(ApiKey.FIND_COORDINATOR, 3, key="x", key_type=7)
    assert answer.error_code == ErrorCode.invalid_request
