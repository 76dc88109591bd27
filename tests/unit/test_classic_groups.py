"""lkstream.broker.groups.classic: Kafka's classic group protocol, every state transition, on a manual clock."""

from __future__ import annotations

import struct
from concurrent.futures import Future

import pytest

from lkstream.broker.groups.classic import (
    ClassicGroups,
    ClassicState,
    ClassicStats,
    JoinAnswer,
    MemberIdRequiredError,
    decode_assignment,
    decode_subscription,
)
from lkstream.broker.groups.limits import GroupLimits
from lkstream.errors import (
    FencedInstanceError,
    GroupNotEmptyError,
    InconsistentGroupProtocolError,
    InvalidArgumentError,
    RebalanceInProgressError,
    StaleGenerationError,
    UnknownMemberError,
)
from lkstream.storage.clock import ManualClock

SESSION_MS = 10_000
REBALANCE_MS = 30_000


class Env:
    def __init__(self, *, other: set[str] | None = None, limits: GroupLimits | None = None) -> None:
        self.clock = ManualClock()
        taken = other or set()
        self.groups = ClassicGroups(
            self.clock, in_other_coordinator=lambda group: group in taken, limits=limits or GroupLimits()
        )

    def join(
        self,
        member_id: str = "",
        *,
        group: str = "g",
        instance_id: str | None = None,
        protocols: tuple[tuple[str, bytes], ...] = (("range", b"meta"),),
        protocol_type: str = "consumer",
        known: bool = False,
        session_ms: int = SESSION_MS,
        rebalance_ms: int = REBALANCE_MS,
    ) -> Future[JoinAnswer]:
        return self.groups.join(
            group,
            member_id=member_id,
            instance_id=instance_id,
            protocol_type=protocol_type,
            protocols=protocols,
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms,
            client_id="c",
            client_host="h",
            require_known_member_id=known,
        )

    def new_member(self, **kwargs: object) -> JoinAnswer:
        """Join through MEMBER_ID_REQUIRED like a v4+ client; the answer must be ready at once."""
        with pytest.raises(MemberIdRequiredError) as required:
            self.join(known=True, **kwargs)  # type: ignore[arg-type]
        return self.join(required.value.member_id, known=True, **kwargs).result(0)  # type: ignore[arg-type]

    def state(self, group: str = "g") -> ClassicState:
        snapshot = self.groups.snapshot(group)
        assert snapshot is not None
        return snapshot.state


def stable_pair(env: Env) -> tuple[str, str]:
    """Two members, synced and Stable; returns (leader, follower)."""
    first = env.new_member()
    env.groups.sync("g", first.member_id, first.generation, {first.member_id: b"a1"}).result(0)
    with pytest.raises(MemberIdRequiredError) as required:
        env.join(known=True)
    second = env.join(required.value.member_id, known=True)
    assert not second.done()  # waits for the first member to rejoin
    first_again = env.join(first.member_id, known=True).result(0)
    answer = second.result(0)
    assert first_again.generation == answer.generation == 2
    env.groups.sync("g", first.member_id, 2, {first.member_id: b"a1", answer.member_id: b"a2"}).result(0)
    assert env.state() is ClassicState.STABLE
    return first.member_id, answer.member_id


# -- Empty -> PreparingRebalance -> CompletingRebalance -> Stable ---------------------------------------------


def test_a_first_join_without_member_id_is_answered_member_id_required() -> None:
    env = Env()
    with pytest.raises(MemberIdRequiredError) as required:
        env.join(known=True)
    assert required.value.member_id.startswith("c-")
    assert env.groups.snapshot("g") is not None and not env.groups.snapshot("g").members  # type: ignore[union-attr]


def test_the_only_member_completes_the_join_at_once_as_leader_with_every_subscription() -> None:
    env = Env()
    answer = env.new_member()
    assert answer.generation == 1
    assert answer.leader == answer.member_id
    assert answer.members == ((answer.member_id, None, b"meta"),)
    assert env.state() is ClassicState.COMPLETING_REBALANCE


def test_an_old_client_without_member_id_support_joins_directly() -> None:
    env = Env()
    answer = env.join(known=False).result(0)
    assert answer.generation == 1 and answer.leader == answer.member_id


def test_a_member_id_never_handed_out_is_unknown() -> None:
    env = Env()
    with pytest.raises(UnknownMemberError):
        env.join("made-up", known=True)


def test_a_pending_member_id_expires_after_the_session_timeout() -> None:
    env = Env()
    with pytest.raises(MemberIdRequiredError) as required:
        env.join(known=True)
    env.clock.advance(SESSION_MS + 1)
    with pytest.raises(UnknownMemberError):
        env.join(required.value.member_id, known=True)


def test_the_leaders_sync_makes_the_group_stable_and_answers_every_waiting_follower() -> None:
    env = Env()
    leader, follower = stable_pair(env)
    assert env.groups.sync("g", follower, 2, {}).result(0) == b"a2"  # Stable: answered at once
    assert env.groups.sync("g", leader, 2, {}).result(0) == b"a1"


def test_a_follower_sync_waits_until_the_leader_synced() -> None:
    env = Env()
    first = env.new_member()
    env.groups.sync("g", first.member_id, 1, {}).result(0)
    with pytest.raises(MemberIdRequiredError) as required:
        env.join(known=True)
    second = env.join(required.value.member_id, known=True)
    env.join(first.member_id, known=True).result(0)
    follower = second.result(0).member_id
    waiting = env.groups.sync("g", follower, 2, {})
    assert not waiting.done()
    env.groups.sync("g", first.member_id, 2, {follower: b"yours"}).result(0)
    assert waiting.result(0) == b"yours"


def test_sync_with_another_generation_is_stale() -> None:
    env = Env()
    answer = env.new_member()
    with pytest.raises(StaleGenerationError):
        env.groups.sync("g", answer.member_id, answer.generation + 1, {})


# -- Stable -> PreparingRebalance (join, leave, expiry) -----------------------------------------------------


def test_a_new_member_rebalances_and_heartbeats_say_rebalance_in_progress() -> None:
    env = Env()
    leader, _ = stable_pair(env)
    with pytest.raises(MemberIdRequiredError) as required:
        env.join(known=True)
    third = env.join(required.value.member_id, known=True)
    assert env.state() is ClassicState.PREPARING_REBALANCE
    with pytest.raises(RebalanceInProgressError):
        env.groups.heartbeat("g", leader, 2)
    with pytest.raises(RebalanceInProgressError):
        env.groups.sync("g", leader, 2, {})
    assert not third.done()


def test_a_waiting_sync_of_the_old_generation_is_told_to_rejoin_when_a_rebalance_starts() -> None:
    env = Env()
    first = env.new_member()
    follower_join = None
    with pytest.raises(MemberIdRequiredError) as required:
        env.join(known=True)
    follower_join = env.join(required.value.member_id, known=True)
    env.join(first.member_id, known=True).result(0)
    follower = follower_join.result(0).member_id
    waiting = env.groups.sync("g", follower, 2, {})  # the leader has not synced yet
    env.groups.leave("g", [(first.member_id, None)])
    with pytest.raises(RebalanceInProgressError):
        waiting.result(0)


def test_members_that_do_not_rejoin_within_the_rebalance_timeout_are_removed() -> None:
    env = Env()
    leader, follower = stable_pair(env)
    env.join(leader, known=True)  # the leader rejoins (say, a changed subscription); the follower is silent
    rejoined = env.join(leader, known=True, protocols=(("range", b"new"),))
    assert not rejoined.done()
    env.clock.advance(REBALANCE_MS + 1)
    env.groups.tick()
    answer = rejoined.result(0)
    assert answer.generation == 3
    assert [m for m, _, _ in answer.members] == [leader]
    with pytest.raises(UnknownMemberError):
        env.groups.heartbeat("g", follower, 3)


def test_a_silent_member_is_expired_after_its_session_timeout_and_the_rest_rebalance() -> None:
    env = Env()
    _leader, follower = stable_pair(env)
    env.clock.advance(SESSION_MS // 2)
    env.groups.heartbeat("g", follower, 2)
    env.clock.advance(SESSION_MS // 2 + 1)
    env.groups.tick()  # the leader was last heard SESSION_MS + 1 ago
    assert env.state() is ClassicState.PREPARING_REBALANCE
    snapshot = env.groups.snapshot("g")
    assert snapshot is not None and list(snapshot.members) == [follower]
    answer = env.join(follower, known=True).result(0)
    assert answer.leader == follower and answer.generation == 3


def test_the_last_member_expiring_forgets_the_group() -> None:
    env = Env()
    answer = env.new_member()
    env.groups.sync("g", answer.member_id, 1, {}).result(0)
    env.clock.advance(SESSION_MS + 1)
    env.groups.tick()
    assert env.groups.snapshot("g") is None  # no member left: nothing to remember (offsets are in the store)
    assert not env.groups.has_members("g") and env.groups.stats() == ClassicStats(0, 0, 0, 0)
    with pytest.raises(UnknownMemberError):
        env.groups.heartbeat("g", answer.member_id, 1)


def test_leaving_rebalances_the_rest_and_the_last_leave_empties_the_group() -> None:
    env = Env()
    leader, follower = stable_pair(env)
    assert env.groups.leave("g", [(leader, None)]) == [None]
    assert env.state() is ClassicState.PREPARING_REBALANCE
    answer = env.join(follower, known=True).result(0)
    assert answer.leader == follower  # leadership moves to a member that is left
    env.groups.leave("g", [(follower, None)])
    assert env.groups.snapshot("g") is None and env.groups.groups() == []


def test_leaving_as_an_unknown_member_is_reported_per_member() -> None:
    env = Env()
    leader, _ = stable_pair(env)
    results = env.groups.leave("g", [("nobody", None), (leader, None)])
    assert isinstance(results[0], UnknownMemberError) and results[1] is None
    assert isinstance(env.groups.leave("other", [("x", None)])[0], UnknownMemberError)


def test_a_member_removed_while_its_join_waits_gets_unknown_member() -> None:
    env = Env()
    leader, follower = stable_pair(env)
    waiting = env.join(leader, known=True, protocols=(("range", b"v2"),))
    env.groups.leave("g", [(leader, None)])
    with pytest.raises(UnknownMemberError):
        waiting.result(0)
    assert env.join(follower, known=True).result(0).generation == 3


# -- static membership (KIP-345) -------------------------------------------------------------------------------


def test_a_static_member_joins_without_member_id_required() -> None:
    env = Env()
    answer = env.join(known=True, instance_id="i-1").result(0)
    assert answer.generation == 1


def test_a_restarted_static_follower_takes_over_without_a_rebalance_and_fences_its_old_id() -> None:
    env = Env()
    leader = env.join(known=True, instance_id="i-1").result(0).member_id
    follower_join = env.join(known=True, instance_id="i-2")
    env.join(leader, known=True, instance_id="i-1").result(0)
    old = follower_join.result(0).member_id
    env.groups.sync("g", leader, 2, {leader: b"L", old: b"F"}).result(0)
    again = env.join(known=True, instance_id="i-2").result(0)  # restarted: no member id
    assert again.member_id != old and again.generation == 2
    assert env.state() is ClassicState.STABLE
    assert env.groups.sync("g", again.member_id, 2, {}).result(0) == b"F"  # its previous assignment
    with pytest.raises(FencedInstanceError):
        env.groups.heartbeat("g", old, 2)
    with pytest.raises(FencedInstanceError):
        env.join(old, known=True)


def test_a_restarted_static_leader_takes_over_through_a_rebalance() -> None:
    env = Env()
    leader = env.join(known=True, instance_id="i-1").result(0).member_id
    env.groups.sync("g", leader, 1, {leader: b"L"}).result(0)
    again = env.join(known=True, instance_id="i-1").result(0)  # the only member: the rebalance completes at once
    assert again.member_id != leader and again.leader == again.member_id
    assert again.generation == 2


def test_a_static_member_with_a_wrong_member_id_is_fenced() -> None:
    env = Env()
    env.join(known=True, instance_id="i-1").result(0)
    with pytest.raises(FencedInstanceError):
        env.join("someone-else", known=True, instance_id="i-1")


# -- protocols -------------------------------------------------------------------------------------------------


def test_a_member_with_another_protocol_type_is_refused() -> None:
    env = Env()
    env.new_member()
    with pytest.raises(InconsistentGroupProtocolError):
        env.join(known=False, protocol_type="connect")


def test_a_member_with_no_protocol_in_common_is_refused() -> None:
    env = Env()
    env.new_member()
    with pytest.raises(InconsistentGroupProtocolError):
        env.join(known=False, protocols=(("cooperative-sticky", b""),))


def test_the_protocol_is_voted_among_those_every_member_supports() -> None:
    env = Env()
    first = env.join(known=False, protocols=(("roundrobin", b"r"), ("range", b"a"))).result(0)
    second = env.join(known=False, protocols=(("range", b"b"), ("roundrobin", b"s")))
    third = env.join(known=False, protocols=(("range", b"c"),))
    env.join(first.member_id, known=False, protocols=(("roundrobin", b"r"), ("range", b"a"))).result(0)
    # "range" is the only protocol all three support, so it wins whatever the first choices are.
    assert second.result(0).protocol == third.result(0).protocol == "range"


def test_a_group_with_live_lkstream_members_refuses_kafka_clients() -> None:
    env = Env(other={"taken"})
    with pytest.raises(InconsistentGroupProtocolError):
        env.join(group="taken")


@pytest.mark.parametrize(
    ("protocols", "session_ms"),
    [((), SESSION_MS), ((("range", b""),), 0)],
)
def test_a_join_without_protocols_or_with_a_non_positive_timeout_is_invalid(
    protocols: tuple[tuple[str, bytes], ...], session_ms: int
) -> None:
    env = Env()
    with pytest.raises(InvalidArgumentError):
        env.join(protocols=protocols, session_ms=session_ms)


# -- commit fencing, inspection --------------------------------------------------------------------------------


def test_commit_checks_follow_the_member_and_generation() -> None:
    env = Env()
    assert env.groups.check_commit("g", "", -1) is False  # standalone commit into an unknown group
    assert env.groups.check_commit("g", "assign-only", -1) is False  # any member id, as Kafka (KIP-848 assign())
    answer = env.new_member()
    with pytest.raises(UnknownMemberError):  # Kafka's answer to a commit without member id into a live group
        env.groups.check_commit("g", "", -1)
    with pytest.raises(RebalanceInProgressError):  # CompletingRebalance: the assignment is not out yet
        env.groups.check_commit("g", answer.member_id, 1)
    env.groups.sync("g", answer.member_id, 1, {}).result(0)
    assert env.groups.check_commit("g", answer.member_id, 1) is True
    with pytest.raises(StaleGenerationError):
        env.groups.check_commit("g", answer.member_id, 0)
    with pytest.raises(UnknownMemberError):
        env.groups.check_commit("g", "nobody", 1)


def test_forget_refuses_a_group_with_members_and_drops_an_empty_one() -> None:
    env = Env()
    answer = env.new_member()
    with pytest.raises(GroupNotEmptyError):
        env.groups.forget("g")
    pending = pytest.raises(MemberIdRequiredError)
    with pending:
        env.join(known=True)
    assert env.groups.stats().pending == 1
    env.groups.leave("g", [(answer.member_id, None)])
    assert env.groups.snapshot("g") is not None  # a pending member id keeps the group
    env.groups.forget("g")
    assert env.groups.snapshot("g") is None and env.groups.groups() == []
    assert env.groups.stats() == ClassicStats(0, 0, 0, 0)


def _subscription(*topics: str) -> bytes:
    body = struct.pack(">hi", 1, len(topics))
    for topic in topics:
        body += struct.pack(">h", len(topic)) + topic.encode()
    return body + struct.pack(">i", -1)  # user data: null


def _assignment(owned: dict[str, list[int]]) -> bytes:
    body = struct.pack(">hi", 1, len(owned))
    for topic, pids in owned.items():
        body += struct.pack(">h", len(topic)) + topic.encode() + struct.pack(f">i{len(pids)}i", len(pids), *pids)
    return body + struct.pack(">i", -1)


def test_consumer_protocol_payloads_decode_and_garbage_decodes_to_nothing() -> None:
    assert decode_subscription(_subscription("a", "b")) == {"a", "b"}
    assert decode_assignment(_assignment({"a": [0, 2], "b": [1]})) == {("a", 0), ("a", 2), ("b", 1)}
    assert decode_subscription(b"\x00") == frozenset()
    assert decode_assignment(b"\x00\x01\x00\x00\x00\x05") == frozenset()


def test_a_member_answered_after_a_long_rebalance_is_not_expired_at_once() -> None:
    """Its session restarts with the answer (Kafka's completeAndScheduleNextHeartbeatExpiration): a
    member that waited longer than its session for the others must still have time to sync."""
    env = Env()
    first = env.new_member()
    env.groups.sync("g", first.member_id, first.generation, {}).result(0)
    second = env.join(pending_id(env), known=True)  # waits for the first member to rejoin
    for _ in range(5):  # the first member keeps its session alive, but rejoins only after 25 s
        env.clock.advance(5_000)
        with pytest.raises(RebalanceInProgressError):
            env.groups.heartbeat("g", first.member_id, first.generation)
    env.join(first.member_id, known=True).result(0)
    answer = second.result(0)
    env.clock.advance(1)
    env.groups.tick()
    snapshot = env.groups.snapshot("g")
    assert snapshot is not None and answer.member_id in snapshot.members  # still there, free to sync
    synced = env.groups.sync("g", answer.member_id, answer.generation, {})
    env.groups.sync("g", first.member_id, answer.generation, {answer.member_id: b"a"}).result(0)  # the leader's
    assert synced.result(0) == b"a"


def pending_id(env: Env) -> str:
    with pytest.raises(MemberIdRequiredError) as required:
        env.join(known=True)
    return required.value.member_id
