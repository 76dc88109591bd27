"""confluent-kafka (librdkafka) against the Kafka listener: produce, consume in a group, commit, resume, admin."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from lkstream import Broker

DEADLINE_S = 30.0


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions)]).values():
        future.result(DEADLINE_S)


def produce(bootstrap: str, topic: str, count: int, *, start: int = 0, **extra: object) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2, **extra})
    failures: list[KafkaError] = []
    for i in range(start, start + count):
        producer.produce(
            topic,
            key=f"k{i % 7}".encode(),
            value=f"v{i}".encode(),
            headers=[("seq", str(i).encode())],
            on_delivery=lambda err, _msg: failures.append(err) if err else None,
        )
    assert producer.flush(DEADLINE_S) == 0
    assert not failures, failures


def consume(bootstrap: str, topic: str, group: str, count: int) -> list[tuple[bytes, bytes, int]]:
    """Consume ``count`` records as member of ``group``, commit synchronously, close (leave the group)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got: list[tuple[bytes, bytes, int]] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            headers = dict(message.headers() or [])
            got.append((message.key(), message.value(), int(headers["seq"])))
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


def test_keyed_records_with_headers_round_trip_through_a_group(kafka_bootstrap: str) -> None:
    create_topic(kafka_bootstrap, "orders", 3)
    produce(kafka_bootstrap, "orders", 300)
    got = consume(kafka_bootstrap, "orders", "billing", 300)
    assert sorted(seq for _, _, seq in got) == list(range(300))
    assert all(value == f"v{seq}".encode() and key == f"k{seq % 7}".encode() for key, value, seq in got)


def test_a_restarted_member_resumes_after_its_commit_without_rereading(kafka_bootstrap: str) -> None:
    create_topic(kafka_bootstrap, "events", 2)
    produce(kafka_bootstrap, "events", 100)
    first = consume(kafka_bootstrap, "events", "g", 100)
    produce(kafka_bootstrap, "events", 50, start=100)
    second = consume(kafka_bootstrap, "events", "g", 50)
    assert sorted(seq for _, _, seq in first) == list(range(100))
    assert sorted(seq for _, _, seq in second) == list(range(100, 150))


def test_records_are_ordered_per_key_partition(kafka_bootstrap: str) -> None:
    create_topic(kafka_bootstrap, "ordered", 3)
    produce(kafka_bootstrap, "ordered", 200)
    got = consume(kafka_bootstrap, "ordered", "o", 200)
    by_key: dict[bytes, list[int]] = {}
    for key, _, seq in got:
        by_key.setdefault(key, []).append(seq)
    assert all(seqs == sorted(seqs) for seqs in by_key.values())


def test_offsets_for_times_finds_the_first_record_at_or_after(kafka_bootstrap: str) -> None:
    create_topic(kafka_bootstrap, "timed", 1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i, ts in enumerate((1_000, 2_000, 3_000)):
        producer.produce("timed", value=f"v{i}".encode(), timestamp=ts)
        producer.flush(DEADLINE_S)  # one batch per record: the lookup must be exact inside the log
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "t"})
    try:
        found = consumer.offsets_for_times([TopicPartition("timed", 0, 1_500)], DEADLINE_S)
        assert found[0].offset == 1
        after = consumer.offsets_for_times([TopicPartition("timed", 0, 9_000)], DEADLINE_S)
        assert after[0].offset == -1  # Kafka's answer when no record is that new
        low, high = consumer.get_watermark_offsets(TopicPartition("timed", 0), DEADLINE_S)
        assert (low, high) == (0, 3)
    finally:
        consumer.close()


def test_admin_describes_configs_grows_and_deletes_a_topic(kafka_bootstrap: str, kafka_broker: Broker) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_topics([NewTopic("admin.t", 1, config={"retention.ms": "60000"})]).values():
        future.result(DEADLINE_S)
    configs = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "admin.t")])
    described = next(iter(configs.values())).result(DEADLINE_S)
    assert described["retention.ms"].value == "60000"
    assert "segment.bytes" in described
    for future in admin.create_partitions([NewPartitions("admin.t", 4)]).values():
        future.result(DEADLINE_S)
    assert kafka_broker.partitions_for("admin.t") == 4
    for future in admin.delete_topics(["admin.t"]).values():
        future.result(DEADLINE_S)
    assert "admin.t" not in kafka_broker.list_topics()


def test_creating_an_existing_topic_is_refused(kafka_bootstrap: str) -> None:
    create_topic(kafka_bootstrap, "dup", 1)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    future = admin.create_topics([NewTopic("dup", 1)])["dup"]
    with pytest.raises(Exception, match=r"TOPIC_ALREADY_EXISTS|already exists"):
        future.result(DEADLINE_S)


def test_kafka_records_are_read_by_the_embedded_api_and_the_other_way_round(
    kafka_bootstrap: str, kafka_broker: Broker
) -> None:
    create_topic(kafka_bootstrap, "shared", 1)
    produce(kafka_bootstrap, "shared", 5)
    records = kafka_broker.read_from("shared", 0, 0)
    assert [r.value for r in records] == [f"v{i}".encode() for i in range(5)]
    assert list(records[0].headers) == [("seq", b"0")]
    kafka_broker.produce_many_sync("shared", [(b"native", b"from-lkstream")])
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "mixed", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition("shared", 0, 5)])
    try:
        message = None
        deadline = time.monotonic() + DEADLINE_S
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
        assert message is not None and message.error() is None
        assert (message.key(), message.value(), message.offset()) == (b"native", b"from-lkstream", 5)
    finally:
        consumer.close()


def test_committed_offsets_show_in_lkstream_groups(kafka_bootstrap: str, kafka_broker: Broker) -> None:
    create_topic(kafka_bootstrap, "lagged", 1)
    produce(kafka_bootstrap, "lagged", 10)
    consume(kafka_bootstrap, "lagged", "reporting", 10)
    produce(kafka_bootstrap, "lagged", 4, start=10)
    lag = kafka_broker.group_lag("reporting")
    assert [(x.topic, x.partition, x.committed, x.lag_messages) for x in lag] == [("lagged", 0, 10, 4)]
    assert "reporting" in [g.group for g in kafka_broker.list_groups()]


def test_max_timestamp_lookup_finds_the_newest_record_not_the_last(kafka_bootstrap: str, kafka_broker: Broker) -> None:
    from confluent_kafka.admin import OffsetSpec

    kafka_broker.create_topic("skewed", 1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i, ts in enumerate((1_000, 9_000, 4_000, 9_000, 2_000)):  # the newest twice, neither last
        producer.produce("skewed", value=f"v{i}".encode(), timestamp=ts)
        producer.flush(DEADLINE_S)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    answers = admin.list_offsets({TopicPartition("skewed", 0): OffsetSpec.max_timestamp()})
    found = next(iter(answers.values())).result(DEADLINE_S)
    assert (found.offset, found.timestamp) == (1, 9_000)  # Kafka's answer: the first record holding it
