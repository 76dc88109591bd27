"""KIP-848's group conversion (issue 24): a classic member and a consumer-protocol member in one group.

Kafka 4 converts the group (``group.consumer.migration.policy``, default ``bidirectional``): a
consumer-protocol member joining a classic group upgrades it, classic members go on with their
protocol inside it, and when the last consumer-protocol member leaves the group goes back to
the classic protocol. Checked with librdkafka's two protocols side by side, and Kafka's answer
where the conversion is not allowed (GROUP_ID_NOT_FOUND).
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
from tests.kafka_wire.test_kip848 import heartbeat
from tests.security.kafka_raw import RawKafka

DEADLINE_S = 30.0
PARTITIONS = 4
GROUP = "mixed"


def produce(bootstrap: str, first: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    for seq in range(first, first + count):
        producer.produce("mt", str(seq).encode(), partition=seq % PARTITIONS)
    assert producer.flush(DEADLINE_S) == 0


def member(bootstrap: str, protocol: str) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "group.protocol": protocol,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(["mt"])
    return consumer


class Run:
    """Polls members, commits every record, and checks that no partition is ever owned twice."""

    def __init__(self) -> None:
        self.seen: set[int] = set()

    def until(self, consumers: list[Consumer], done: object) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            for consumer in consumers:
                message = consumer.poll(0.05)
                if message is not None:
                    assert message.error() is None, message.error()
                    self.seen.add(int(message.value()))
                    consumer.commit(message=message, asynchronous=False)
            owned = [{tp.partition for tp in c.assignment()} for c in consumers]
            assert sum(len(o) for o in owned) == len(set().union(*owned)), owned  # never one partition twice
            if done():  # type: ignore[operator]
                return
        raise AssertionError(f"timed out: {[c.assignment() for c in consumers]}, seen {len(self.seen)}")


def owned(consumer: Consumer) -> int:
    return len(consumer.assignment())


@pytest.mark.parametrize("first", ["classic", "consumer"])
def test_members_of_both_protocols_share_a_group_and_it_converts_both_ways(
    kafka_bootstrap: str, kafka_broker: Broker, first: str
) -> None:
    second = "consumer" if first == "classic" else "classic"
    kafka_broker.create_topic("mt", PARTITIONS)
    produce(kafka_bootstrap, 0, 40)
    run = Run()
    a = member(kafka_bootstrap, first)
    run.until([a], lambda: owned(a) == PARTITIONS)
    assert kafka_broker.classic_groups.has_members(GROUP) == (first == "classic")
    b = member(kafka_bootstrap, second)
    run.until([a, b], lambda: owned(a) and owned(b) and owned(a) + owned(b) == PARTITIONS)
    # Either way the group is a consumer-protocol group now, its classic member inside it.
    assert kafka_broker.groups.has_members(GROUP) and not kafka_broker.classic_groups.has_members(GROUP)
    produce(kafka_bootstrap, 40, 40)
    run.until([a, b], lambda: len(run.seen) == 80)
    classic, modern = (a, b) if first == "classic" else (b, a)
    modern.close()  # the last consumer-protocol member leaves: back to a classic group
    run.until([classic], lambda: owned(classic) == PARTITIONS)
    assert kafka_broker.classic_groups.has_members(GROUP) and not kafka_broker.groups.has_members(GROUP)
    produce(kafka_bootstrap, 80, 8)
    run.until([classic], lambda: len(run.seen) == 88)
    classic.close()
    committed = kafka_broker.groups.fetch_committed(GROUP)
    assert sum(committed.values()) == 88  # every record committed, whichever protocol the committer spoke


@pytest.fixture
def no_migration(tmp_path: Path) -> Iterator[tuple[Broker, str]]:
    with (
        Broker(persist_dir=str(tmp_path / "data"), group_consumer_migration_policy="disabled") as broker,
        kafka_server(broker) as bootstrap,
    ):
        yield broker, bootstrap


def classic_join(raw: RawKafka, protocol_type: str = "consumer") -> str:
    """A classic member (JoinGroup v3: no MEMBER_ID_REQUIRED step) in group "gw"; returns its member id."""
    answer = raw.call(
        ApiKey.JOIN_GROUP,
        3,
        group_id="gw",
        session_timeout=30_000,
        rebalance_timeout=30_000,
        member_id="",
        protocol_type=protocol_type,
        protocols=[{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x01\x00\x04k848\xff\xff\xff\xff"}],
    )
    assert answer.error_code == ErrorCode.none
    return str(answer.member_id)


def test_with_the_migration_policy_disabled_kafka_answers_group_id_not_found(
    no_migration: tuple[Broker, str],
) -> None:
    broker, bootstrap = no_migration
    broker.create_topic("k848", 1)
    with RawKafka(bootstrap) as raw:
        classic_join(raw)
        refused = heartbeat(bootstrap, member_id="modern-1")
        assert refused.error_code == ErrorCode.group_id_not_found  # type: ignore[attr-defined]
        assert "not a consumer group" in refused.error_message  # type: ignore[attr-defined]
    assert broker.classic_groups.has_members("gw") and not broker.groups.has_members("gw")


def test_a_classic_group_of_another_protocol_type_is_not_upgraded(kafka_bootstrap: str, kafka_broker: Broker) -> None:
    kafka_broker.create_topic("k848", 1)
    with RawKafka(kafka_bootstrap) as raw:
        classic_join(raw, protocol_type="connect")  # Kafka Connect's workers use the classic protocol too
        refused = heartbeat(kafka_bootstrap, member_id="modern-1")
        assert refused.error_code == ErrorCode.group_id_not_found  # type: ignore[attr-defined]
    assert kafka_broker.classic_groups.has_members("gw")


def test_a_classic_kafka_client_joins_a_group_of_lkstream_consumers_as_a_classic_member(
    kafka_bootstrap: str, kafka_broker: Broker
) -> None:
    kafka_broker.create_topic("mt", PARTITIONS)
    native = kafka_broker.join_group(GROUP, ["mt"], assignor="cooperative-sticky")
    assert len(kafka_broker.heartbeat(GROUP, native.member_id).owned) == PARTITIONS
    classic = member(kafka_bootstrap, "classic")
    released: frozenset[tuple[str, int]] = frozenset()
    deadline = time.monotonic() + DEADLINE_S
    while owned(classic) != PARTITIONS // 2:
        assert time.monotonic() < deadline, classic.assignment()
        classic.poll(0.05)
        answer = kafka_broker.heartbeat(GROUP, native.member_id, released=released)  # the LKSTREAM member's loop
        released = answer.revoke
        assert not {("mt", tp.partition) for tp in classic.assignment()} & (answer.owned - answer.revoke)
    assert len(answer.owned - answer.revoke) == PARTITIONS // 2
    kafka_broker.leave_group(GROUP, native.member_id)
    classic.close()
