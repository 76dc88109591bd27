"""Issue 28, finding 5: JoinGroup floods against the Kafka listener, test-sized.

The issue's flood: joins under many group names with a 24.8-day session, none of which
ever joins again, while another group's member keeps consuming. Wanted and checked here:
Kafka's session bounds (INVALID_SESSION_TIMEOUT), pending member ids and empty groups
forgotten, every count bounded, and the other group undisturbed. The latency side (another
group's heartbeat while the flood runs) is measured by ``benchmarks/bench_join_flood.py``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from kio.schema.errors import ErrorCode

from lkstream import Broker
from lkstream.kafka.inprocess import kafka_server
from lkstream.kafka.protocol import ApiKey
from tests.security.kafka_raw import RawKafka

DEADLINE_S = 30.0
FLOOD_SESSION_MS = 500  # the broker below allows it, so the flood's ids expire within the test
MAX_MEMBERS = 300
LONG_SESSION_MS = 2**31 - 1  # the 24.8 days


@pytest.fixture
def flood_target(tmp_path: Path) -> Iterator[tuple[Broker, str]]:
    with (
        Broker(
            persist_dir=str(tmp_path / "data"),
            group_min_session_timeout_ms=FLOOD_SESSION_MS,
            max_group_members=MAX_MEMBERS,
        ) as broker,
        kafka_server(broker) as bootstrap,
    ):
        yield broker, bootstrap


def join(raw: RawKafka, group: str, member_id: str = "", session_ms: int = FLOOD_SESSION_MS) -> object:
    return raw.call(
        ApiKey.JOIN_GROUP,
        5,
        group_id=group,
        session_timeout=session_ms,
        rebalance_timeout=session_ms,
        member_id=member_id,
        group_instance_id=None,
        protocol_type="consumer",
        protocols=[{"name": "range", "metadata": b""}],
    )


def steady_consumer(bootstrap: str, group: str, **extra: object) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **extra,
        }
    )
    consumer.subscribe(["work"])
    return consumer


def read_one(consumer: Consumer) -> bytes:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        message = consumer.poll(0.1)
        if message is not None:
            assert message.error() is None, message.error()
            return bytes(message.value())
    raise AssertionError("nothing consumed")


def test_a_join_flood_is_bounded_forgotten_and_leaves_another_group_alone(flood_target: tuple[Broker, str]) -> None:
    broker, bootstrap = flood_target
    broker.create_topic("work", 1)
    producer = Producer({"bootstrap.servers": bootstrap})
    steady = steady_consumer(bootstrap, "steady")
    try:
        producer.produce("work", b"before")
        producer.flush(DEADLINE_S)
        assert read_one(steady) == b"before"
        with RawKafka(bootstrap) as raw:
            refused = join(raw, "flood-long", session_ms=LONG_SESSION_MS)
            assert refused.error_code == ErrorCode.invalid_session_timeout  # type: ignore[attr-defined]
            for i in range(2_000):
                answer = join(raw, f"flood-{i}")
                assert answer.error_code == ErrorCode.member_id_required  # type: ignore[attr-defined]
                if i % 100 == 0:
                    stats = broker.classic_groups.stats()
                    assert stats.members + stats.pending <= MAX_MEMBERS, stats
        stats = broker.classic_groups.stats()
        assert stats.pending <= MAX_MEMBERS and stats.groups <= MAX_MEMBERS + 1, stats
        producer.produce("work", b"during")
        producer.flush(DEADLINE_S)
        assert read_one(steady) == b"during"  # the steady member kept its partition and its session
        time.sleep(2 * FLOOD_SESSION_MS / 1000)
        broker.classic_groups.tick()
        stats = broker.classic_groups.stats()
        assert (stats.groups, stats.members, stats.pending) == (1, 1, 0), stats  # only "steady" is left
        assert broker.classic_groups.has_members("steady")
    finally:
        steady.close()
    broker.classic_groups.tick()
    assert broker.classic_groups.stats().groups == 0


def test_members_that_joined_and_left_leave_nothing_behind(flood_target: tuple[Broker, str]) -> None:
    broker, bootstrap = flood_target
    with RawKafka(bootstrap) as raw:
        for i in range(200):
            group = f"come-and-go-{i}"
            member_id = join(raw, group).member_id  # type: ignore[attr-defined]
            joined = join(raw, group, member_id)
            assert joined.error_code == ErrorCode.none  # type: ignore[attr-defined]
            left = raw.call(
                ApiKey.LEAVE_GROUP, 3, group_id=group, members=[{"member_id": member_id, "group_instance_id": None}]
            )
            assert left.error_code == ErrorCode.none  # type: ignore[attr-defined]
            pending = join(raw, f"pending-{i}").member_id  # type: ignore[attr-defined]
            raw.call(  # a member id from MEMBER_ID_REQUIRED that leaves is forgotten too, as in Kafka
                ApiKey.LEAVE_GROUP,
                3,
                group_id=f"pending-{i}",
                members=[{"member_id": pending, "group_instance_id": None}],
            )
    stats = broker.classic_groups.stats()
    assert (stats.groups, stats.members, stats.pending) == (0, 0, 0), stats
    assert [g.group for g in broker.list_groups()] == []


def test_members_with_the_longest_session_that_close_do_not_hold_the_group(
    kafka_bootstrap: str, kafka_broker: Broker
) -> None:
    """The issue's group stuck in PreparingRebalance: here one member closes, the other gets everything
    at once, and when it closes too the group is gone, whatever their session and poll timeouts."""
    kafka_broker.create_topic("work", 2)
    long = {"session.timeout.ms": 1_800_000, "max.poll.interval.ms": 86_400_000}  # librdkafka's longest poll
    first = steady_consumer(kafka_bootstrap, "long-sessions", **long)
    second = steady_consumer(kafka_bootstrap, "long-sessions", **long)
    deadline = time.monotonic() + DEADLINE_S
    while len(first.assignment()) + len(second.assignment()) < 2 or not (first.assignment() and second.assignment()):
        assert time.monotonic() < deadline, "the two members never split the partitions"
        first.poll(0.05)
        second.poll(0.05)
    first.close()
    started = time.monotonic()
    while len(second.assignment()) < 2:
        assert time.monotonic() < deadline, kafka_broker.classic_groups.snapshot("long-sessions")
        second.poll(0.05)
    assert time.monotonic() - started < 10.0  # a rejoin round trip, not a timeout
    second.close()
    assert kafka_broker.classic_groups.snapshot("long-sessions") is None
