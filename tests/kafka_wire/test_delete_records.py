"""DeleteRecords (API 21) through the admin clients people use (issue 24).

Kafka Streams purges repartition topics with it; ``AdminClient.delete_records`` of
confluent-kafka, kafka-python and aiokafka all send it. After the call the partition's
log start (ListOffsets earliest, the low watermark) is the offset asked, a consumer
that starts from the earliest reads from there, and a fetch below it is
OFFSET_OUT_OF_RANGE, as Kafka answers; the log start survives a restart.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from lkstream import Broker
from lkstream.kafka.inprocess import kafka_server

pytestmark = pytest.mark.timeout(120)


def _fill(broker: Broker, topic: str, count: int, partitions: int = 1) -> None:
    broker.create_topic(topic, partitions)
    for pid in range(partitions):
        broker.produce_many_sync(topic, [(b"k", f"{pid}-{n}".encode()) for n in range(count)], partition=pid)


def _earliest_values(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        for _ in range(200):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
            if len(values) >= expected:
                break
    finally:
        consumer.close()
    return values


def test_confluent_kafka_delete_records_moves_the_low_watermark(kafka_broker: Broker, kafka_bootstrap: str) -> None:
    _fill(kafka_broker, "purge", 10, partitions=2)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    futures = admin.delete_records([TopicPartition("purge", 0, 7), TopicPartition("purge", 1, -1)])
    lows = {tp.partition: future.result(timeout=20).low_watermark for tp, future in futures.items()}
    assert lows == {0: 7, 1: 10}
    assert kafka_broker.partition("purge", 0).log_start_offset == 7
    probe = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "probe"})
    try:
        low, high = probe.get_watermark_offsets(TopicPartition("purge", 0), timeout=10)
    finally:
        probe.close()
    assert (low, high) == (7, 10)
    assert _earliest_values(kafka_bootstrap, "purge", 3) == [b"0-7", b"0-8", b"0-9"]
    with pytest.raises(KafkaException, match=r"OFFSET_OUT_OF_RANGE|out of range"):
        admin.delete_records([TopicPartition("purge", 0, 11)])[TopicPartition("purge", 0, 11)].result(timeout=20)


def test_kafka_python_and_aiokafka_delete_records(kafka_broker: Broker, kafka_bootstrap: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
    from aiokafka.structs import TopicPartition as AioPartition
    from kafka.admin import KafkaAdminClient
    from kafka.structs import TopicPartition as KpPartition

    _fill(kafka_broker, "kp", 6)
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        answer = admin.delete_records({KpPartition("kp", 0): 4})
    finally:
        admin.close()
    assert [meta["low_watermark"] for meta in answer.values()] == [4]

    async def aio() -> dict[AioPartition, int]:
        client = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        await client.start()
        try:
            return await client.delete_records({AioPartition("kp", 0): RecordsToDelete(before_offset=5)})
        finally:
            await client.close()

    assert list(asyncio.run(aio()).values()) == [5]
    assert kafka_broker.partition("kp", 0).log_start_offset == 5


def test_the_log_start_survives_a_restart_and_a_fetch_below_it_is_out_of_range(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    with Broker(persist_dir=data) as broker, kafka_server(broker) as bootstrap:
        _fill(broker, "kept", 8)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.delete_records([TopicPartition("kept", 0, 5)])[TopicPartition("kept", 0, 5)].result(timeout=20)
        del admin  # before its server goes
    with Broker(persist_dir=data) as broker, kafka_server(broker) as bootstrap:
        assert broker.partition("kept", 0).log_start_offset == 5
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "low",
                "auto.offset.reset": "error",
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.assign([TopicPartition("kept", 0, 2)])
            errors = []
            for _ in range(50):
                message = consumer.poll(0.2)
                if message is not None and message.error() is not None:
                    errors.append(message.error())
                    break
        finally:
            consumer.close()
        assert errors and "out of range" in str(errors[0]).lower(), errors


def test_a_compacted_topic_refuses_keyless_records_and_delete_records_as_kafka(
    kafka_broker: Broker, kafka_bootstrap: str
) -> None:
    """Issue 24: INVALID_RECORD for a record without a key, POLICY_VIOLATION for DeleteRecords."""
    from confluent_kafka import KafkaError, Producer

    kafka_broker.create_topic("compacted", 1, configs={"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": False, "retries": 0})
    outcomes: list[KafkaError | None] = []
    producer.produce("compacted", value=b"no key", partition=0, on_delivery=lambda err, _msg: outcomes.append(err))
    assert producer.flush(20) == 0  # its own batch: Kafka refuses a whole batch holding a keyless record
    producer.produce("compacted", key=b"k", value=b"keyed", partition=0, on_delivery=lambda e, _m: outcomes.append(e))
    assert producer.flush(20) == 0
    assert outcomes[0] is not None and outcomes[0].code() == KafkaError.INVALID_RECORD, outcomes
    assert outcomes[1] is None
    assert kafka_broker.partition("compacted", 0).high_watermark == 1
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    future = admin.delete_records([TopicPartition("compacted", 0, 1)])[TopicPartition("compacted", 0, 1)]
    with pytest.raises(KafkaException) as refused:
        future.result(timeout=20)
    assert refused.value.args[0].code() == KafkaError.POLICY_VIOLATION
