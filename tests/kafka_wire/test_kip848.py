"""KIP-848's consumer protocol (``group.protocol=consumer``) on LKSTREAM's group coordinator.

Served with the listener's topic-id switch on (``ListenerSettings.topic_ids``, the default): its
assignments name topics by their persisted ids.
"""

from __future__ import annotations

import struct
import time

import pytest
from confluent_kafka import Consumer, Producer

from lkstream import Broker
from lkstream.kafka.protocol import ApiKey
from tests.kafka_wire.test_fuzz import exchange, request

DEADLINE_S = 30.0
PARTITIONS = 4


def produce(bootstrap: str, first: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    for seq in range(first, first + count):
        producer.produce("k848", str(seq).encode(), partition=seq % PARTITIONS)
    assert producer.flush(DEADLINE_S) == 0


def member(bootstrap: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "g848",
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )


def poll_until(consumers: list[Consumer], done: object, seen: list[list[int]]) -> None:
    """Poll every consumer (records into ``seen``, committed one by one) until ``done()``."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        for consumer, got in zip(consumers, seen, strict=True):
            message = consumer.poll(0.05)
            if message is not None:
                assert message.error() is None, message.error()
                got.append(int(message.value()))
                consumer.commit(message=message, asynchronous=False)
        if done():  # type: ignore[operator]
            return
    raise AssertionError(f"timed out: {[sorted(s) for s in seen]}, {[c.assignment() for c in consumers]}")


def owned(consumer: Consumer) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


def test_two_kip848_members_split_the_partitions_and_a_restart_resumes_from_the_commits(
    kafka_bootstrap: str, kafka_broker: Broker
) -> None:
    kafka_broker.create_topic("k848", PARTITIONS)
    produce(kafka_bootstrap, 0, 100)
    a = member(kafka_bootstrap)
    a.subscribe(["k848"])
    seen: list[list[int]] = [[], []]
    poll_until([a], lambda: len(seen[0]) == 100, seen[:1])
    assert owned(a) == set(range(PARTITIONS))

    b = member(kafka_bootstrap)
    b.subscribe(["k848"])
    poll_until([a, b], lambda: owned(a) and owned(b) and owned(a) | owned(b) == set(range(PARTITIONS)), seen)
    assert not owned(a) & owned(b)  # never one partition in two members
    produce(kafka_bootstrap, 100, 40)
    poll_until([a, b], lambda: len(set(seen[0]) | set(seen[1])) == 140, seen)
    assert sorted(seen[1]) == sorted({s for s in seen[1] if s >= 100})  # b read only records after its join
    described = kafka_broker.describe_group("g848")
    assert described.assignor == "cooperative-sticky" and len(described.members) == 2
    a.close()
    b.close()
    assert kafka_broker.describe_group("g848").members == ()  # both left

    produce(kafka_bootstrap, 140, 20)
    again = member(kafka_bootstrap)
    again.subscribe(["k848"])
    resumed: list[list[int]] = [[]]
    poll_until([again], lambda: len(resumed[0]) >= 20, resumed)
    again.close()
    assert sorted(resumed[0]) == list(range(140, 160))  # from the commits: nothing re-read
    assert kafka_broker.groups.fetch_committed("g848") == {("k848", p): 40 for p in range(PARTITIONS)}


def api_versions(bootstrap: str) -> dict[int, tuple[int, int]]:
    answer = exchange(bootstrap, request(ApiKey.API_VERSIONS, 0, b""))
    _size, _correlation, code, count = struct.unpack_from(">iihi", answer)
    assert code == 0
    entries = struct.iter_unpack(">hhh", answer[14 : 14 + 6 * count])
    return {key: (low, high) for key, low, high in entries}


def test_without_the_topic_id_switch_neither_kip848_nor_topic_id_metadata_is_offered(
    name_only_bootstrap: str, kafka_bootstrap: str
) -> None:
    plain, with_ids = api_versions(name_only_bootstrap), api_versions(kafka_bootstrap)
    assert ApiKey.CONSUMER_GROUP_HEARTBEAT not in plain and plain[ApiKey.METADATA] == (0, 9)
    assert with_ids[ApiKey.CONSUMER_GROUP_HEARTBEAT] == (0, 1) and with_ids[ApiKey.METADATA] == (0, 12)
    assert plain[ApiKey.FETCH] == with_ids[ApiKey.FETCH] == (4, 12)  # below the topic-id Fetch either way


def test_an_lkstream_join_to_a_group_of_live_classic_kafka_members_is_refused(
    kafka_bootstrap: str, kafka_broker: Broker
) -> None:
    kafka_broker.create_topic("k848", PARTITIONS)
    classic = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "g848", "auto.offset.reset": "earliest"})
    classic.subscribe(["k848"])
    deadline = time.monotonic() + DEADLINE_S
    while not classic.assignment() and time.monotonic() < deadline:
        classic.poll(0.1)
    assert classic.assignment()
    # The coordinator's own join (an LKSTREAM Consumer) is refused; a KIP-848 heartbeat converts the
    # group instead (KIP-848's online upgrade: test_group_conversion.py).
    with pytest.raises(Exception, match="Kafka client group"):
        kafka_broker.groups.join("g848", ["k848"], new_member_id="kip848-member")
    classic.close()


def heartbeat(bootstrap: str, **fields: object) -> object:
    """One ConsumerGroupHeartbeat v0 exchange; the decoded response."""
    import datetime

    from kio.serial import entity_reader

    from lkstream.kafka import kio_codec

    values = {
        "group_id": "gw",
        "member_id": "",
        "member_epoch": 0,
        "instance_id": None,
        "rack_id": None,
        "rebalance_timeout": datetime.timedelta(seconds=30),
        "subscribed_topic_names": ("k848",),
        "server_assignor": None,
        "topic_partitions": (),
        **fields,
    }
    body = kio_codec.encode(kio_codec.make(kio_codec.request_type(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0), **values))
    header = struct.pack(">hhih", ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 9, 4) + b"test" + b"\x00"  # header v2
    answer = exchange(bootstrap, struct.pack(">i", len(header) + len(body)) + header + body)
    reader = entity_reader(kio_codec.response_type(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0))
    decoded, _size = reader(answer, 4 + 4 + 1)  # size, correlation id, response header tags
    return decoded


def test_heartbeats_join_assign_by_topic_id_refuse_strangers_and_leave(
    kafka_bootstrap: str, kafka_broker: Broker
) -> None:
    import uuid

    from kio.schema.errors import ErrorCode

    kafka_broker.create_topic("k848", PARTITIONS)
    joined = heartbeat(kafka_bootstrap, member_id=str(uuid.uuid4()))
    assert joined.error_code == ErrorCode.none and joined.member_epoch >= 1  # type: ignore[attr-defined]
    (entry,) = joined.assignment.topic_partitions  # type: ignore[attr-defined]
    assert entry.topic_id == kafka_broker.topic_id("k848")  # the persisted id of this incarnation
    assert sorted(entry.partitions) == list(range(PARTITIONS))
    stranger = heartbeat(kafka_bootstrap, member_id="nobody", member_epoch=3, subscribed_topic_names=None)
    assert stranger.error_code == ErrorCode.unknown_member_id  # type: ignore[attr-defined]
    vague = heartbeat(kafka_bootstrap, group_id="other", member_id="m", subscribed_topic_names=None)
    assert vague.error_code == ErrorCode.invalid_request  # type: ignore[attr-defined]  # a join names its topics
    odd = heartbeat(kafka_bootstrap, group_id="other", member_id="m", server_assignor="bogus")
    assert odd.error_code == ErrorCode.unsupported_assignor  # type: ignore[attr-defined]
    left = heartbeat(kafka_bootstrap, member_id=joined.member_id, member_epoch=-1)  # type: ignore[attr-defined]
    assert left.error_code == ErrorCode.none and kafka_broker.describe_group("gw").members == ()  # type: ignore[attr-defined]
