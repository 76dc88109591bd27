"""lkstream.broker.groups.coordinator: membership, reconciliation, timeouts, static members, fenced commits."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from lkstream.broker.groups import (
    FencedInstanceError,
    GroupCoordinator,
    GroupNotEmptyError,
    GroupState,
    HeartbeatResult,
    InconsistentGroupProtocolError,
    NotPartitionOwnerError,
    OffsetRegressionError,
    RebalanceInProgressError,
    StaleGenerationError,
    UnknownAssignorError,
    UnknownMemberError,
)
from lkstream.broker.groups.limits import GroupLimits
from lkstream.broker.groups.types import TopicPartition
from lkstream.errors import InvalidArgumentError, LkstreamError, UnknownTopicError
from lkstream.storage.clock import ManualClock
from lkstream.storage.offsets import OffsetStore

SHORT_SESSIONS = GroupLimits(min_session_timeout_ms=1)


class Env:
    """A coordinator over a real OffsetStore, a mutable topic table and a manual clock."""

    def __init__(self, tmp_path: Path) -> None:
        self.clock = ManualClock()
        self.topics: dict[str, int] = {"t": 4, "u": 2}
        self.store = OffsetStore(str(tmp_path), clock=self.clock)
        ids = itertools.count()
        self.coord = GroupCoordinator(
            self.store,
            self.partitions_for,
            self.clock,
            member_id_factory=lambda c: f"{c or 'm'}-{next(ids)}",
            limits=SHORT_SESSIONS,  # a manual clock: seconds instead of Kafka's minimum
        )

    def partitions_for(self, topic: str) -> int:
        if topic not in self.topics:
            raise UnknownTopicError(topic)
        return self.topics[topic]

    def settle(self, group: str, members: Iterable[str], rounds: int = 4) -> dict[str, HeartbeatResult]:
        """Heartbeat every member, releasing whatever it was told to revoke, until nothing changes."""
        last: dict[str, HeartbeatResult] = {}
        pending: dict[str, frozenset[TopicPartition]] = {}
        for _ in range(rounds):
            for m in members:
                last[m] = self.coord.heartbeat(group, m, released=pending.get(m, frozenset()))
                pending[m] = last[m].revoke
        return last


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


def tp(topic: str, *pids: int) -> frozenset[TopicPartition]:
    return frozenset((topic, p) for p in pids)


# -- join, heartbeat, sync -------------------------------------------------------------------------


def test_first_member_gets_everything_and_the_group_is_stable(env: Env) -> None:
    joined = env.coord.join("g", ["t"])
    assert joined.generation == 1 and joined.rebalanced
    hb = env.coord.heartbeat("g", joined.member_id)
    assert hb.assigned == hb.owned == hb.target == tp("t", 0, 1, 2, 3) and hb.stable and not hb.revoke
    assert env.coord.heartbeat("g", joined.member_id).assigned == frozenset()  # granted once only
    assert env.coord.sync("g", joined.member_id, 1).assignment == tp("t", 0, 1, 2, 3)
    desc = env.coord.describe("g")
    assert desc.state is GroupState.STABLE and desc.generation == 1 and desc.assignor == "range"
    assert [m.member_id for m in desc.members] == [joined.member_id]


def test_eager_rebalance_revokes_everything_and_grants_nothing_until_all_released(env: Env) -> None:
    a = env.coord.join("g", ["t"]).member_id
    env.coord.heartbeat("g", a)
    b = env.coord.join("g", ["t"]).member_id
    hb_b = env.coord.heartbeat("g", b)
    assert hb_b.owned == frozenset() and hb_b.generation == 2  # barrier: a still owns everything
    hb_a = env.coord.heartbeat("g", a)
    assert hb_a.revoke == tp("t", 0, 1, 2, 3)  # a keeps t0,t1 in the target, but eager revokes all
    assert hb_a.target == tp("t", 0, 1)
    assert env.coord.describe("g").state is GroupState.REBALANCING
    hb_a = env.coord.heartbeat("g", a, released=hb_a.revoke)
    assert hb_a.owned == tp("t", 0, 1) and hb_a.stable  # barrier lifted by its own release
    assert env.coord.heartbeat("g", b).owned == tp("t", 2, 3)
    assert env.coord.describe("g").state is GroupState.STABLE


def test_cooperative_rebalance_revokes_only_what_moves(env: Env) -> None:
    a = env.coord.join("g", ["t"], assignor="cooperative-sticky").member_id
    env.coord.heartbeat("g", a)
    b = env.coord.join("g", ["t"], assignor="cooperative-sticky").member_id
    hb_a = env.coord.heartbeat("g", a)
    assert len(hb_a.revoke) == 2 and hb_a.owned == tp("t", 0, 1, 2, 3)
    kept = hb_a.owned - hb_a.revoke
    assert env.coord.heartbeat("g", b).owned == frozenset()  # moved partitions still owned by a
    env.coord.heartbeat("g", a, released=hb_a.revoke)
    assert env.coord.heartbeat("g", b).owned == hb_a.revoke
    assert env.coord.heartbeat("g", a).owned == kept


def test_no_partition_is_ever_owned_by_two_members(env: Env) -> None:
    ids = [env.coord.join("g", ["t", "u"], assignor="cooperative-sticky").member_id for _ in range(3)]
    env.settle("g", ids)
    ids.append(env.coord.join("g", ["t", "u"], assignor="cooperative-sticky").member_id)
    for m in ids:  # nobody releases: the newcomer can get only what nobody owns
        env.coord.heartbeat("g", m)
        owned = [tp for d in env.coord.describe("g").members for tp in d.owned]
        assert len(owned) == len(set(owned))
    final = env.settle("g", ids)
    assert sorted(p for r in final.values() for p in r.owned) == sorted(tp("t", 0, 1, 2, 3) | tp("u", 0, 1))


def test_sync_with_an_old_generation_asks_to_heartbeat(env: Env) -> None:
    a = env.coord.join("g", ["t"], assignor="cooperative-sticky").member_id
    env.coord.heartbeat("g", a)
    env.coord.join("g", ["t"], assignor="cooperative-sticky")
    with pytest.raises(RebalanceInProgressError, match="generation 2") as info:
        env.coord.sync("g", a, 1)
    assert info.value.retriable


def test_rejoin_with_a_new_subscription_rebalances(env: Env) -> None:
    a = env.coord.join("g", ["t"]).member_id
    env.settle("g", [a])
    again = env.coord.join("g", ["t", "u"], member_id=a)
    assert again.member_id == a and again.generation == 2 and again.rebalanced
    assert env.settle("g", [a])[a].owned == tp("t", 0, 1, 2, 3) | tp("u", 0, 1)
    same = env.coord.join("g", ["t", "u"], member_id=a)
    assert same.generation == 2 and not same.rebalanced


def test_partition_count_change_is_picked_up_by_tick(env: Env) -> None:
    a = env.coord.join("g", ["t", "new"]).member_id
    assert env.settle("g", [a])[a].owned == tp("t", 0, 1, 2, 3)
    env.topics["new"] = 2
    env.coord.topics_changed()
    assert env.settle("g", [a])[a].owned == tp("t", 0, 1, 2, 3) | tp("new", 0, 1)
    assert env.coord.describe("g").generation == 2


def test_join_validates_its_arguments(env: Env) -> None:
    with pytest.raises(InvalidArgumentError, match="at least one topic"):
        env.coord.join("g", [])
    with pytest.raises(InvalidArgumentError, match="not one string"):
        env.coord.join("g", "t")
    with pytest.raises(InvalidArgumentError, match="group id"):
        env.coord.join("", ["t"])
    with pytest.raises(UnknownAssignorError):
        env.coord.join("g", ["t"], assignor="sticky")
    with pytest.raises(InvalidArgumentError, match="session_timeout_ms"):
        env.coord.join("g", ["t"], session_timeout_ms=0)
    with pytest.raises(InvalidArgumentError, match="instance id"):
        env.coord.join("g", ["t"], instance_id="")


def test_members_must_agree_on_the_assignor(env: Env) -> None:
    a = env.coord.join("g", ["t"], assignor="roundrobin").member_id
    with pytest.raises(InconsistentGroupProtocolError, match="'roundrobin'"):
        env.coord.join("g", ["t"], assignor="range")
    # The only member may switch.
    assert env.coord.join("g", ["t"], member_id=a, assignor="range").rebalanced
    assert env.coord.describe("g").assignor == "range"


def test_unknown_member_and_future_generation_are_refused(env: Env) -> None:
    with pytest.raises(UnknownMemberError):
        env.coord.heartbeat("g", "nobody")
    a = env.coord.join("g", ["t"]).member_id
    with pytest.raises(UnknownMemberError, match="join again"):
        env.coord.join("g", ["t"], member_id="nobody")
    with pytest.raises(StaleGenerationError):
        env.coord.heartbeat("g", a, generation=7)


# -- leave and timeouts ------------------------------------------------------------------------------


def test_leave_frees_partitions_for_the_others(env: Env) -> None:
    a = env.coord.join("g", ["t"], assignor="cooperative-sticky").member_id
    b = env.coord.join("g", ["t"], assignor="cooperative-sticky").member_id
    env.settle("g", [a, b])
    env.coord.leave("g", b)
    assert env.coord.heartbeat("g", a).owned == tp("t", 0, 1, 2, 3)
    with pytest.raises(UnknownMemberError):
        env.coord.heartbeat("g", b)
    env.coord.leave("g", a)
    assert env.coord.describe("g").state is GroupState.DEAD  # no member, no offset: forgotten
    assert env.coord.stats() == (0, 0, 0)


def test_session_timeout_removes_a_silent_member(env: Env) -> None:
    a = env.coord.join("g", ["t"], session_timeout_ms=1000).member_id
    b = env.coord.join("g", ["t"], session_timeout_ms=5000).member_id
    env.settle("g", [a, b])
    env.clock.advance(1001)
    assert env.coord.tick() == 1
    with pytest.raises(UnknownMemberError):
        env.coord.heartbeat("g", a)
    assert env.settle("g", [b])[b].owned == tp("t", 0, 1, 2, 3)


def test_expiry_happens_on_any_call_even_without_a_tick(env: Env) -> None:
    a = env.coord.join("g", ["t"], session_timeout_ms=1000).member_id
    env.clock.advance(999)
    env.coord.heartbeat("g", a)  # still alive, deadline moves
    env.clock.advance(999)
    env.coord.heartbeat("g", a)
    env.clock.advance(1001)
    assert env.coord.describe("g").state is GroupState.DEAD


def test_rebalance_timeout_removes_a_member_that_never_releases(env: Env) -> None:
    a = env.coord.join("g", ["t"], rebalance_timeout_ms=3000, session_timeout_ms=10_000).member_id
    env.coord.heartbeat("g", a)
    b = env.coord.join("g", ["t"], rebalance_timeout_ms=3000, session_timeout_ms=10_000).member_id
    for _ in range(3):  # both keep heartbeating; a never releases its revoked partitions
        env.clock.advance(1000)
        env.coord.heartbeat("g", a)
        assert env.coord.heartbeat("g", b).owned == frozenset()
    env.clock.advance(1)
    with pytest.raises(UnknownMemberError):
        env.coord.heartbeat("g", a)
    assert env.settle("g", [b])[b].owned == tp("t", 0, 1, 2, 3)


# -- static membership ------------------------------------------------------------------------------


def test_static_member_restart_keeps_its_assignment_without_a_rebalance(env: Env) -> None:
    a = env.coord.join("g", ["t"], instance_id="host-1").member_id
    b = env.coord.join("g", ["t"], instance_id="host-2").member_id
    before = env.settle("g", [a, b])
    env.clock.advance(2000)  # a restarts well within the session timeout
    again = env.coord.join("g", ["t"], instance_id="host-1")
    assert again.member_id != a and again.generation == 2 and not again.rebalanced
    hb = env.coord.heartbeat("g", again.member_id)
    assert hb.owned == before[a].owned and hb.stable
    assert env.coord.describe("g").generation == 2
    with pytest.raises(FencedInstanceError, match="host-1"):
        env.coord.heartbeat("g", a)
    with pytest.raises(FencedInstanceError):
        env.coord.commit("g", a, 2, {("t", 0): 1})
    with pytest.raises(FencedInstanceError):  # the zombie cannot take its identity back
        env.coord.join("g", ["t"], member_id=a, instance_id="host-1")
    assert env.coord.heartbeat("g", again.member_id).owned == before[a].owned


def test_static_member_after_its_session_timeout_joins_as_new(env: Env) -> None:
    env.coord.join("g", ["t"], instance_id="host-1", session_timeout_ms=1000)
    env.clock.advance(1500)
    again = env.coord.join("g", ["t"], instance_id="host-1", session_timeout_ms=1000)
    assert again.rebalanced and again.generation == 1  # the expiry emptied the group: it starts afresh


# -- commits -----------------------------------------------------------------------------------------


def stable_pair(env: Env) -> tuple[str, str, int]:
    a = env.coord.join("g", ["t"]).member_id
    b = env.coord.join("g", ["t"]).member_id
    result = env.settle("g", [a, b])
    return a, b, result[a].generation


def test_owner_commits_and_reads_back(env: Env) -> None:
    a, _, gen = stable_pair(env)
    env.coord.commit("g", a, gen, {("t", 0): 5, ("t", 1): 7})
    assert env.coord.fetch_committed("g") == {("t", 0): 5, ("t", 1): 7}
    assert env.coord.fetch_committed("g", [("t", 1), ("t", 3)]) == {("t", 1): 7}
    assert env.store.read_committed("g", "t", 0) == 5  # durable, in the shared offset files


def test_commit_for_a_partition_it_does_not_own_is_not_applied(env: Env) -> None:
    a, _, gen = stable_pair(env)
    with pytest.raises(NotPartitionOwnerError, match=r"t\[2\]"):
        env.coord.commit("g", a, gen, {("t", 0): 5, ("t", 2): 5})
    assert env.coord.fetch_committed("g") == {}


def test_commit_from_a_stale_generation_is_not_applied(env: Env) -> None:
    a, _, gen = stable_pair(env)
    env.coord.join("g", ["t"])  # generation moves on; a has not heartbeated yet
    env.coord.heartbeat("g", a)
    with pytest.raises(StaleGenerationError) as info:
        env.coord.commit("g", a, gen, {("t", 0): 5})
    assert info.value.retriable and info.value.current == gen + 1
    env.coord.commit("g", a, gen + 1, {("t", 0): 5})  # revoking partitions may still be committed
    assert env.coord.fetch_committed("g") == {("t", 0): 5}


def test_commit_from_a_removed_member_is_not_applied(env: Env) -> None:
    a, _, gen = stable_pair(env)
    env.coord.leave("g", a)
    with pytest.raises(UnknownMemberError):
        env.coord.commit("g", a, gen, {("t", 0): 5})


def test_committed_offset_never_moves_backward(env: Env) -> None:
    a, _, gen = stable_pair(env)
    env.coord.commit("g", a, gen, {("t", 0): 10})
    env.coord.commit("g", a, gen, {("t", 0): 10})  # an idempotent retry is fine
    with pytest.raises(OffsetRegressionError, match="backward") as info:
        env.coord.commit("g", a, gen, {("t", 0): 9, ("t", 1): 3})
    assert info.value.committed == 10
    assert env.coord.fetch_committed("g") == {("t", 0): 10}  # nothing of the failed commit applied


def test_commit_without_member_only_when_the_group_is_empty(env: Env) -> None:
    env.coord.commit("g", None, None, {("t", 3): 4})
    assert env.coord.fetch_committed("g") == {("t", 3): 4}
    with pytest.raises(InvalidArgumentError, match="2 partition"):
        env.coord.commit("g", None, None, {("u", 2): 1})
    env.coord.join("g", ["t"])
    with pytest.raises(GroupNotEmptyError, match="1 live member"):
        env.coord.commit("g", None, None, {("t", 3): 5})


def test_commit_validates_offsets(env: Env) -> None:
    for bad in ({}, {("t", 0): -1}, {("t", -1): 0}, {"t": 0}, {("t", 0): True}):
        with pytest.raises(InvalidArgumentError):
            env.coord.commit("g", None, None, bad)  # type: ignore[arg-type]


def test_reset_offsets_only_when_empty_and_may_move_backward(env: Env) -> None:
    env.coord.commit("g", None, None, {("t", 0): 50})
    env.coord.reset_offsets("g", {("t", 0): 10})
    assert env.coord.fetch_committed("g") == {("t", 0): 10}
    a = env.coord.join("g", ["t"]).member_id
    with pytest.raises(GroupNotEmptyError, match="1 live member"):
        env.coord.reset_offsets("g", {("t", 0): 0})
    env.coord.leave("g", a)
    env.coord.reset_offsets("g", {("t", 0): 0})
    assert env.coord.fetch_committed("g") == {("t", 0): 0}


# -- describe and list -------------------------------------------------------------------------------


def test_describe_and_list_include_offset_only_groups(env: Env) -> None:
    assert env.coord.describe("nothing").state is GroupState.DEAD
    env.coord.commit("offsets-only", None, None, {("t", 0): 1})
    a = env.coord.join("live", ["t"], client_id="app", client_host="10.0.0.1").member_id
    env.coord.heartbeat("live", a)
    listing = {g.group: g for g in env.coord.list_groups()}
    assert set(listing) == {"offsets-only", "live"}
    assert listing["offsets-only"].state is GroupState.EMPTY and listing["live"].members == 1
    assert env.coord.describe("offsets-only").state is GroupState.EMPTY
    (member,) = env.coord.describe("live").members
    assert member.client_id == "app" and member.client_host == "10.0.0.1" and member.member_id.startswith("app-")
    assert member.topics == {"t"} and member.owned == member.target == tp("t", 0, 1, 2, 3)


def test_all_errors_are_lkstream_errors() -> None:
    for cls in (UnknownMemberError, StaleGenerationError, RebalanceInProgressError, NotPartitionOwnerError):
        assert issubclass(cls, LkstreamError)


# -- change notification -----------------------------------------------------------------------------


def test_blocking_waiter_is_woken_by_a_rebalance(env: Env) -> None:
    seen = env.coord.changed.version("g")
    assert not env.coord.changed.wait("g", seen, 0.01)
    woke: list[bool] = []
    t = threading.Thread(target=lambda: woke.append(env.coord.changed.wait("g", seen, 10)))
    t.start()
    env.coord.join("g", ["t"])
    t.join(10)
    assert woke == [True]


async def test_async_waiter_is_woken_from_another_thread(env: Env) -> None:
    seen = env.coord.changed.version("g")
    assert not await env.coord.changed.wait_async("g", seen, 0.01)
    waiter = asyncio.ensure_future(env.coord.changed.wait_async("g", seen, 10))
    await asyncio.sleep(0)
    await asyncio.to_thread(env.coord.join, "g", ["t"])
    assert await waiter
    assert await env.coord.changed.wait_async("g", seen, 0)  # already moved: returns at once


def test_reset_offsets_checks_that_the_partitions_exist(env: Env) -> None:
    with pytest.raises(InvalidArgumentError, match="4 partition"):
        env.coord.reset_offsets("g", {("t", 4): 0})
    with pytest.raises(InvalidArgumentError, match="0 partition"):
        env.coord.reset_offsets("g", {("ghost", 0): 0})


def test_concurrent_members_never_share_a_partition_and_commits_stay_monotonic(env: Env) -> None:
    """Real threads: each runs a cooperative member that heartbeats, commits what it owns, and releases."""
    errors: list[BaseException] = []
    stop = threading.Event()

    def member() -> None:
        try:
            me = env.coord.join("g", ["t", "u"], assignor="cooperative-sticky").member_id
            revoke: frozenset[TopicPartition] = frozenset()
            n = 0
            while not stop.is_set():
                hb = env.coord.heartbeat("g", me, released=revoke)
                n += 1
                # Commit before releasing, like a client: the offsets of everything it owns move forward.
                committed = env.coord.fetch_committed("g", hb.owned)
                if hb.owned:
                    env.coord.commit("g", me, hb.generation, {p: committed.get(p, 0) + 1 for p in hb.owned})
                revoke = hb.revoke
            env.coord.leave("g", me)
        except BaseException as exc:  # surfaced in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=member) for _ in range(4)]
    for t in threads:
        t.start()
    checks = 0
    give_up = time.monotonic() + 30  # the threads may start late on a loaded machine
    while not errors and time.monotonic() < give_up and (checks < 200 or len(env.coord.fetch_committed("g")) < 6):
        owned = [p for d in env.coord.describe("g").members for p in d.owned]
        assert len(owned) == len(set(owned))
        checks += 1
    stop.set()
    for t in threads:
        t.join(10)
    assert not errors, errors
    # Each commit was the owner's "committed + 1", so offsets only grew, and someone owned every partition.
    final = env.coord.fetch_committed("g")
    assert set(final) == set(tp("t", 0, 1, 2, 3) | tp("u", 0, 1)) and all(v >= 1 for v in final.values())
    assert env.coord.describe("g").state is GroupState.EMPTY
