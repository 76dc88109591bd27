"""KIP-848's group conversion on the two coordinators with a manual clock (lkstream.broker.groups.conversion).

The Kafka clients' side is tests/kafka_wire/test_group_conversion.py; here each rule is checked
exactly: what an upgrade keeps, what a classic member inside a consumer-protocol group is told,
and when the group goes back.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

from lkstream.broker.groups.classic import ClassicGroups, ClassicState, JoinAnswer
from lkstream.broker.groups.consumer_protocol import decode_assignment, encode_assignment
from lkstream.broker.groups.conversion import NotUpgradableError, run_downgrades, upgrade_if_classic
from lkstream.broker.groups.coordinator import GroupCoordinator
from lkstream.errors import RebalanceInProgressError, StaleGenerationError, UnknownMemberError
from lkstream.storage.clock import ManualClock
from lkstream.storage.offsets import OffsetStore

SESSION_MS = 10_000
PAIR_GENERATION = 2  # of stable_classic_pair's group: what its members heartbeat with after an upgrade


def subscription(*topics: str, owned: dict[str, list[int]] | None = None) -> bytes:
    """A ConsumerProtocolSubscription v1 (topics, null user data, owned partitions)."""
    body = struct.pack(">hi", 1, len(topics))
    for topic in topics:
        body += struct.pack(">h", len(topic)) + topic.encode()
    body += struct.pack(">i", -1)
    owned = owned or {}
    body += struct.pack(">i", len(owned))
    for topic, pids in owned.items():
        body += struct.pack(">h", len(topic)) + topic.encode() + struct.pack(f">i{len(pids)}i", len(pids), *pids)
    return body


class Env:
    def __init__(self, tmp_path: Path) -> None:
        self.clock = ManualClock()
        self.store = OffsetStore(str(tmp_path), clock=self.clock)
        self.coordinator = GroupCoordinator(self.store, lambda topic: 4, self.clock)
        self.classic = ClassicGroups(self.clock, in_other_coordinator=self.coordinator.has_members)

    def classic_join(self, member_id: str = "", *topics: str) -> Future[JoinAnswer]:
        return self.classic.join(
            "g",
            member_id=member_id,
            instance_id=None,
            protocol_type="consumer",
            protocols=[("range", subscription(*(topics or ("t",))))],
            session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=30_000,
            require_known_member_id=False,
        )

    def upgrade(self) -> str:
        """A consumer-protocol member joins (the KIP-848 heartbeat's path); returns its member id."""
        upgrade_if_classic(self.classic, self.coordinator, "g", "cooperative-sticky", "bidirectional")
        return self.coordinator.join("g", ["t"], assignor="cooperative-sticky", new_member_id="modern").member_id


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    made = Env(tmp_path)
    yield made
    made.store.close()


def stable_classic_pair(env: Env) -> tuple[str, str]:
    """Two classic members, the leader's assignment synced: a gets t0, t1; b gets t2, t3."""
    a = env.classic_join().result(0)
    env.classic.sync("g", a.member_id, a.generation, {}).result(0)
    b_future = env.classic_join()
    a_again = env.classic_join(a.member_id).result(0)
    b = b_future.result(0)
    assignments = {
        a.member_id: encode_assignment(frozenset({("t", 0), ("t", 1)})),
        b.member_id: encode_assignment(frozenset({("t", 2), ("t", 3)})),
    }
    env.classic.sync("g", a.member_id, a_again.generation, assignments).result(0)
    env.classic.sync("g", b.member_id, b.generation, {}).result(0)
    assert b.generation == PAIR_GENERATION
    return a.member_id, b.member_id


def test_an_upgrade_keeps_every_classic_members_partitions(env: Env) -> None:
    a, b = stable_classic_pair(env)
    modern = env.upgrade()
    assert not env.classic.has_members("g") and env.coordinator.has_members("g")
    described = {m.member_id: m for m in env.coordinator.describe("g").members}
    assert described[a].owned == {("t", 0), ("t", 1)} and described[b].owned == {("t", 2), ("t", 3)}
    assert described[modern].owned == frozenset()  # granted only once a classic member released some
    with pytest.raises(RebalanceInProgressError):  # the classic members are told to rejoin
        env.coordinator.heartbeat_classic("g", a, PAIR_GENERATION)


def test_waiting_classic_calls_hear_rebalance_in_progress_at_the_upgrade(env: Env) -> None:
    a, _ = stable_classic_pair(env)
    waiting = env.classic_join(a, "t", "u")  # a new subscription: a rebalance, b must rejoin
    assert not waiting.done()
    env.upgrade()
    with pytest.raises(RebalanceInProgressError):
        waiting.result(0)


def test_a_classic_member_rejoins_releases_and_syncs_its_share(env: Env) -> None:
    a, _ = stable_classic_pair(env)
    env.upgrade()
    # a rejoins as an eager client does: owning nothing any more.
    joined = env.coordinator.join_classic(
        "g",
        member_id=a,
        instance_id=None,
        protocol_type="consumer",
        protocols=(("range", subscription("t")),),
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=30_000,
        client_id="c",
        client_host="h",
        owner=None,
    )
    assignment = decode_assignment(env.coordinator.sync_classic("g", a, joined.generation))
    assert assignment <= {("t", 0), ("t", 1)}  # the cooperative assignor moves what it must, nothing more
    with pytest.raises(StaleGenerationError):
        env.coordinator.heartbeat_classic("g", a, joined.generation - 1)
    assert assignment  # the cooperative assignor keeps some of a's partitions with a
    env.coordinator.commit("g", a, joined.generation, dict.fromkeys(assignment, 0))  # fenced with its generation
    owners = [tp for m in env.coordinator.describe("g").members for tp in m.owned]
    assert len(owners) == len(set(owners))  # never one partition twice


def test_a_classic_join_into_a_consumer_group_is_answered_at_once_without_a_leader(env: Env) -> None:
    env.coordinator.join("g", ["t"], assignor="cooperative-sticky", new_member_id="modern")
    with pytest.raises(Exception, match="consumer protocol"):  # the classic coordinator refuses to hold it
        env.classic_join()
    joined = env.coordinator.join_classic(
        "g",
        member_id="classic-1",
        instance_id=None,
        protocol_type="consumer",
        protocols=(("range", subscription("t")), ("roundrobin", subscription("t"))),
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=30_000,
        client_id="c",
        client_host="h",
        owner=None,
    )
    assert (joined.member_id, joined.protocol) == ("classic-1", "range")
    assert env.coordinator.is_classic_member("g", "classic-1") and not env.coordinator.is_classic_member("g", "modern")


def test_the_last_consumer_protocol_member_leaving_hands_the_group_back(env: Env) -> None:
    a, b = stable_classic_pair(env)
    modern = env.upgrade()
    assert run_downgrades(env.classic, env.coordinator, "bidirectional") == []  # a consumer member is there
    env.coordinator.leave("g", modern)
    assert run_downgrades(env.classic, env.coordinator, "bidirectional") == ["g"]
    snapshot = env.classic.snapshot("g")
    assert snapshot is not None and set(snapshot.members) == {a, b}
    assert snapshot.state is ClassicState.PREPARING_REBALANCE  # they rejoin the classic way
    assert decode_assignment(snapshot.members[a].assignment) == {("t", 0), ("t", 1)}
    assert not env.coordinator.has_members("g")


def test_an_expired_consumer_protocol_member_hands_the_group_back_too(env: Env) -> None:
    stable_classic_pair(env)
    env.upgrade()
    for _ in range(3):
        env.clock.advance(SESSION_MS // 2)
        for member in env.coordinator.describe("g").members:  # the classic members keep heartbeating
            if member.member_id != "modern":
                with pytest.raises(RebalanceInProgressError):
                    env.coordinator.heartbeat_classic("g", member.member_id, PAIR_GENERATION)
    env.coordinator.tick()
    assert run_downgrades(env.classic, env.coordinator, "bidirectional") == ["g"]
    assert env.classic.has_members("g")


def test_policies_decide_which_way_a_group_may_convert(env: Env) -> None:
    stable_classic_pair(env)
    for policy in ("disabled", "downgrade"):
        with pytest.raises(NotUpgradableError, match="not a consumer group"):
            upgrade_if_classic(env.classic, env.coordinator, "g", "cooperative-sticky", policy)  # type: ignore[arg-type]
    assert upgrade_if_classic(env.classic, env.coordinator, "g", "cooperative-sticky", "upgrade")
    modern = env.coordinator.join("g", ["t"], assignor="cooperative-sticky", new_member_id="modern").member_id
    env.coordinator.leave("g", modern)
    assert run_downgrades(env.classic, env.coordinator, "upgrade") == []  # one way only
    assert env.coordinator.has_members("g")


def test_a_consumer_protocol_member_cannot_use_the_classic_calls(env: Env) -> None:
    env.coordinator.join("g", ["t"], assignor="cooperative-sticky", new_member_id="modern")
    with pytest.raises(UnknownMemberError, match="consumer protocol"):
        env.coordinator.heartbeat_classic("g", "modern", 1)
    with pytest.raises(UnknownMemberError):
        env.coordinator.sync_classic("g", "modern", 1)
