"""Topic configs that change what a producer's batch becomes (issue 24), through confluent-kafka (librdkafka).

message.timestamp.type=LogAppendTime, compression.type, max.message.bytes and the
message.timestamp.*.max.ms bounds, each shown by what a Kafka client gets back and by the
batch on disk, as Kafka's broker would answer.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from lkstream import Broker
from lkstream.format.batch import HEADER
from lkstream.format.codec import iter_batches

DEADLINE_S = 30.0


def _create(bootstrap: str, name: str, configs: dict[str, str], *, validate_only: bool = False) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, 1, config=configs)], validate_only=validate_only)
    futures[name].result(DEADLINE_S)


def _produce(bootstrap: str, topic: str, values: list[bytes], **extra: Any) -> list[Any]:
    """Produce ``values`` (optionally with ``timestamp=``); the delivered messages or the errors, in order."""
    timestamp = extra.pop("timestamp", 0)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "message.max.bytes": 10_000_000, **extra})
    outcomes: list[Any] = []
    for value in values:
        producer.produce(
            topic, value=value, timestamp=timestamp, on_delivery=lambda err, msg: outcomes.append(err or msg)
        )
    assert producer.flush(DEADLINE_S) == 0
    return outcomes


def _consume(bootstrap: str, topic: str, count: int) -> list[Any]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[Any] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                got.append(message)
    finally:
        consumer.close()
    return got


def _stored_batches(broker: Broker, topic: str) -> list[tuple[Any, ...]]:
    """The header fields of every batch in ``topic[0]``, as stored."""
    data = broker.fetch(topic, 0, 0, 16 * 1024 * 1024).data
    return [HEADER.unpack_from(batch) for _, batch in iter_batches(data)]


def test_log_append_time_stamps_batches_and_the_produce_answer(kafka_bootstrap: str, kafka_broker: Broker) -> None:
    _create(kafka_bootstrap, "stamped", {"message.timestamp.type": "LogAppendTime"})
    _create(kafka_bootstrap, "created", {})
    old = 1_500_000_000_000
    before = int(time.time() * 1000)
    stamped = _produce(kafka_bootstrap, "stamped", [b"a", b"b"], timestamp=old)
    kept = _produce(kafka_bootstrap, "created", [b"a"], timestamp=old)
    after = int(time.time() * 1000)
    for message in stamped:
        kind, value = message.timestamp()
        assert kind == TIMESTAMP_LOG_APPEND_TIME and before <= value <= after
    assert kept[0].timestamp() == (TIMESTAMP_CREATE_TIME, old)
    consumed = _consume(kafka_bootstrap, "stamped", 2)
    assert [m.timestamp() for m in consumed] == [m.timestamp() for m in stamped]
    attributes = [fields[5] for fields in _stored_batches(kafka_broker, "stamped")]
    assert attributes and all(a & 0x08 for a in attributes)


@pytest.mark.parametrize(
    ("topic_codec", "codec_bits", "producer_codec"), [("zstd", 4, "none"), ("uncompressed", 0, "gzip")]
)
def test_compression_type_recompresses_and_keeps_the_idempotent_producer_fields(
    kafka_bootstrap: str, kafka_broker: Broker, topic_codec: str, codec_bits: int, producer_codec: str
) -> None:
    _create(kafka_bootstrap, "squeezed", {"compression.type": topic_codec})
    values = [b"value-%d " % i * 20 for i in range(50)]
    delivered = _produce(
        kafka_bootstrap, "squeezed", values, **{"enable.idempotence": True, "compression.type": producer_codec}
    )
    assert all(not isinstance(d, KafkaError) for d in delivered), delivered
    batches = _stored_batches(kafka_broker, "squeezed")
    assert {fields[5] & 0x07 for fields in batches} == {codec_bits}
    assert all(fields[9] >= 0 and fields[10] >= 0 and fields[11] >= 0 for fields in batches)  # pid, epoch, seq
    assert [m.value() for m in _consume(kafka_bootstrap, "squeezed", len(values))] == values


def test_producer_keeps_the_producers_codec(kafka_bootstrap: str, kafka_broker: Broker) -> None:
    _create(kafka_bootstrap, "as-sent", {"compression.type": "producer"})
    _produce(kafka_bootstrap, "as-sent", [b"x" * 500] * 10, **{"compression.type": "lz4"})
    assert {fields[5] & 0x07 for fields in _stored_batches(kafka_broker, "as-sent")} == {3}


def test_max_message_bytes_refuses_larger_batches_with_message_too_large(
    kafka_bootstrap: str, kafka_broker: Broker
) -> None:
    _create(kafka_bootstrap, "small", {"max.message.bytes": "2000"})
    outcomes = _produce(
        kafka_bootstrap, "small", [b"x" * 100, b"y" * 5000], **{"linger.ms": 0, "batch.num.messages": 1}
    )
    assert not isinstance(outcomes[0], KafkaError)
    assert isinstance(outcomes[1], KafkaError) and outcomes[1].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert kafka_broker.describe_topic("small").partitions[0].next_offset == 1


def test_timestamp_bounds_refuse_with_invalid_timestamp(kafka_bootstrap: str, kafka_broker: Broker) -> None:
    _create(
        kafka_bootstrap,
        "bounded",
        {"message.timestamp.after.max.ms": "60000", "message.timestamp.before.max.ms": "60000"},
    )
    now = int(time.time() * 1000)
    for timestamp in (now + 3_600_000, now - 3_600_000):
        (outcome,) = _produce(kafka_bootstrap, "bounded", [b"late or early"], timestamp=timestamp)
        assert isinstance(outcome, KafkaError) and outcome.code() == KafkaError.INVALID_TIMESTAMP, outcome
    (fine,) = _produce(kafka_bootstrap, "bounded", [b"on time"], timestamp=now)
    assert not isinstance(fine, KafkaError)
    assert kafka_broker.describe_topic("bounded").partitions[0].next_offset == 1
