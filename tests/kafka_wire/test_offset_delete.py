"""OffsetDelete (API 47): an admin client forgets some of a group's committed offsets, as Kafka does.

kafka-python's ``KafkaAdminClient.delete_group_offsets`` sends it (the Java admin's
``deleteConsumerGroupOffsets`` and ``kafka-consumer-groups --delete-offsets`` do too). Kafka's
rules: partitions of a topic a live member subscribes to keep their offsets
(GROUP_SUBSCRIBED_TO_TOPIC), the others are forgotten; a partition the topic does not have is
UNKNOWN_TOPIC_OR_PARTITION; a group nobody knows is GROUP_ID_NOT_FOUND for the whole request.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import GroupIdNotFoundError, GroupSubscribedToTopicError, NoError, UnknownTopicOrPartitionError

from lkstream import Broker, UnknownGroupError
from lkstream import GroupSubscribedToTopicError as LkGroupSubscribedToTopicError

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def admin(kafka_bootstrap: str) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=kafka_bootstrap, request_timeout_ms=20_000)
    try:
        yield client
    finally:
        client.close()


def _fill(broker: Broker, topic: str, partitions: int, count: int) -> None:
    for pid in range(partitions):
        broker.produce_many_sync(topic, [(b"k", b"v")] * count, partition=pid)


def _committed(broker: Broker, group: str) -> dict[tuple[str, int], int]:
    return {(t, p): offset for (g, t, p), offset in broker.list_committed().items() if g == group}


def test_an_empty_group_forgets_the_offsets_asked_and_keeps_the_rest(
    kafka_broker: Broker, admin: KafkaAdminClient
) -> None:
    kafka_broker.create_topic("orders", 3)
    kafka_broker.create_topic("audit", 1)
    _fill(kafka_broker, "orders", 3, 10)
    _fill(kafka_broker, "audit", 1, 10)
    for pid in range(3):
        kafka_broker.commit_offsets("billing", {("orders", pid): 5 + pid})
    kafka_broker.commit_offsets("billing", {("audit", 0): 2})

    results = admin.delete_group_offsets(
        "billing", [TopicPartition("orders", 0), TopicPartition("orders", 2), TopicPartition("orders", 9)]
    )

    assert results == {
        TopicPartition("orders", 0): NoError,
        TopicPartition("orders", 2): NoError,
        TopicPartition("orders", 9): UnknownTopicOrPartitionError,
    }
    assert _committed(kafka_broker, "billing") == {("orders", 1): 6, ("audit", 0): 2}
    # Durable: a new broker over the same directory reads the same.
    directory = kafka_broker.persist_dir
    kafka_broker.close()
    with Broker(persist_dir=directory) as reopened:
        assert _committed(reopened, "billing") == {("orders", 1): 6, ("audit", 0): 2}


def test_a_live_member_s_topics_keep_their_offsets_and_the_others_go(
    kafka_broker: Broker, kafka_bootstrap: str, admin: KafkaAdminClient
) -> None:
    kafka_broker.create_topic("watched", 1)
    kafka_broker.create_topic("old", 1)
    kafka_broker.produce_many_sync("watched", [(b"k", b"v")])
    kafka_broker.commit_offsets("readers", {("old", 0): 0})
    member = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "readers", "auto.offset.reset": "earliest"})
    member.subscribe(["watched"])
    try:
        for _ in range(100):  # joined and assigned once it delivers the record
            message = member.poll(0.2)
            if message is not None and message.error() is None:
                break
        member.commit(asynchronous=False)
        assert _committed(kafka_broker, "readers") == {("watched", 0): 1, ("old", 0): 0}

        results = admin.delete_group_offsets("readers", [TopicPartition("watched", 0), TopicPartition("old", 0)])

        assert results == {
            TopicPartition("watched", 0): GroupSubscribedToTopicError,
            TopicPartition("old", 0): NoError,
        }
        assert _committed(kafka_broker, "readers") == {("watched", 0): 1}
    finally:
        member.close()


def test_a_group_nobody_knows_is_group_id_not_found(kafka_broker: Broker, admin: KafkaAdminClient) -> None:
    kafka_broker.create_topic("orders", 1)
    with pytest.raises(GroupIdNotFoundError):
        admin.delete_group_offsets("nobody", [TopicPartition("orders", 0)])


def test_the_embedded_call_reports_each_partition(kafka_broker: Broker) -> None:
    kafka_broker.create_topic("t", 2)
    kafka_broker.create_topic("u", 1)
    _fill(kafka_broker, "t", 2, 1)
    kafka_broker.commit_offsets("g", {("t", 0): 1, ("t", 1): 1, ("u", 0): 0})
    kafka_broker.join_group("g", ["t"], session_timeout_ms=30_000)

    outcome = kafka_broker.delete_offsets("g", [("t", 0), ("u", 0)])

    assert outcome[("u", 0)] is None
    assert isinstance(outcome[("t", 0)], LkGroupSubscribedToTopicError)
    assert "subscribes to the topic" in str(outcome[("t", 0)])
    assert _committed(kafka_broker, "g") == {("t", 0): 1, ("t", 1): 1}
    with pytest.raises(UnknownGroupError):
        kafka_broker.delete_offsets("never-seen", [("t", 0)])
