"""Issue 28, finding 5 (JoinGroup floods), on both group coordinators with a manual clock.

Kafka's session-timeout bounds; pending member ids and empty groups forgotten; the members of
one group and of all groups bounded; and a join that never walks the other groups.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from lkstream.broker.groups.classic import ClassicGroups, ClassicState, ClassicStats, JoinAnswer, MemberIdRequiredError
from lkstream.broker.groups.coordinator import GroupCoordinator
from lkstream.broker.groups.limits import GroupLimits
from lkstream.broker.groups.types import GroupState
from lkstream.errors import GroupMaxSizeReachedError, InvalidSessionTimeoutError, UnknownMemberError
from lkstream.storage.clock import ManualClock
from lkstream.storage.offsets import OffsetStore

SESSION_MS = 10_000
DAY_MS = 24 * 3600 * 1000


class NoWalk(dict[str, Any]):
    """A group table that fails the test when anyone iterates over all of it."""

    def _walk(self, *args: object) -> Any:
        raise AssertionError("a call walked every group")

    __iter__ = values = items = keys = _walk  # type: ignore[assignment]


def classic_join(
    groups: ClassicGroups, group: str, member_id: str = "", *, session_ms: int = SESSION_MS, rebalance_ms: int = 30_000
) -> Future[JoinAnswer]:
    return groups.join(
        group,
        member_id=member_id,
        instance_id=None,
        protocol_type="consumer",
        protocols=[("range", b"")],
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms,
        client_id="c",
    )


def pending_id(groups: ClassicGroups, group: str, **kwargs: Any) -> str:
    with pytest.raises(MemberIdRequiredError) as required:
        classic_join(groups, group, **kwargs)
    return required.value.member_id


def new_member(groups: ClassicGroups, group: str, **kwargs: Any) -> JoinAnswer:
    return classic_join(groups, group, pending_id(groups, group, **kwargs), **kwargs).result(0)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def coordinator(tmp_path: Path, clock: ManualClock) -> Iterator[GroupCoordinator]:
    store = OffsetStore(str(tmp_path), clock=clock)
    ids = itertools.count()
    yield GroupCoordinator(store, lambda topic: 2, clock, member_id_factory=lambda c: f"m{next(ids)}")
    store.close()


# -- session timeout bounds (INVALID_SESSION_TIMEOUT) -------------------------------------------------------


@pytest.mark.parametrize("session_ms", [100, 5_999, 1_800_001, 2**31 - 1])
def test_a_session_timeout_outside_kafkas_bounds_is_refused_by_both_coordinators(
    clock: ManualClock, coordinator: GroupCoordinator, session_ms: int
) -> None:
    groups = ClassicGroups(clock)
    with pytest.raises(InvalidSessionTimeoutError, match=r"6000\.\.1800000"):
        classic_join(groups, "g", session_ms=session_ms)
    with pytest.raises(InvalidSessionTimeoutError):
        coordinator.join("g", ["t"], session_timeout_ms=session_ms)
    assert groups.stats() == ClassicStats(0, 0, 0, 0) and coordinator.stats() == (0, 0, 0)


@pytest.mark.parametrize("session_ms", [6_000, 1_800_000])
def test_the_bounds_themselves_are_accepted(clock: ManualClock, coordinator: GroupCoordinator, session_ms: int) -> None:
    assert new_member(ClassicGroups(clock), "g", session_ms=session_ms).generation == 1
    assert coordinator.join("g", ["t"], session_timeout_ms=session_ms).generation == 1


def test_the_bounds_come_from_the_limits(clock: ManualClock) -> None:
    groups = ClassicGroups(clock, limits=GroupLimits(min_session_timeout_ms=100, max_session_timeout_ms=DAY_MS))
    assert new_member(groups, "g", session_ms=100).generation == 1
    with pytest.raises(InvalidSessionTimeoutError):
        classic_join(groups, "g", session_ms=DAY_MS + 1)


# -- pending member ids and empty groups are forgotten -------------------------------------------------------


def test_pending_member_ids_expire_with_their_session_and_their_groups_go(clock: ManualClock) -> None:
    groups = ClassicGroups(clock)
    for i in range(500):  # a flood: every join under a new group name, none joins again
        pending_id(groups, f"flood-{i}", session_ms=6_000 + i)
    assert groups.stats() == ClassicStats(groups=500, members=0, pending=500, deadlines=500)
    clock.advance(6_000 + 250)
    groups.tick()
    assert groups.stats().pending == groups.stats().groups == 249  # those whose session has not passed
    clock.advance(1_000)
    groups.tick()
    assert groups.stats() == ClassicStats(0, 0, 0, 0)


def test_a_pending_member_id_that_leaves_is_forgotten(clock: ManualClock) -> None:
    groups = ClassicGroups(clock)
    member_id = pending_id(groups, "g")
    assert groups.leave("g", [(member_id, None)]) == [None]  # Kafka answers NONE and forgets it
    assert groups.stats() == ClassicStats(0, 0, 0, 0)
    with pytest.raises(UnknownMemberError):
        classic_join(groups, "g", member_id)


def test_all_groups_together_hold_at_most_max_members_pending_ids_first_to_go(clock: ManualClock) -> None:
    groups = ClassicGroups(clock, limits=GroupLimits(max_members=100))
    oldest = pending_id(groups, "victim")
    for i in range(1_000):
        pending_id(groups, f"flood-{i}")
        assert groups.stats().pending <= 100
    assert groups.stats().groups <= 100
    with pytest.raises(UnknownMemberError):  # evicted: a real client starts over without a member id
        classic_join(groups, "victim", oldest)
    assert new_member(groups, "victim").generation == 1  # and gets in, evicting the oldest flood id
    members = [new_member(groups, f"real-{i}") for i in range(99)]
    assert groups.stats() == ClassicStats(groups=100, members=100, pending=0, deadlines=100)
    with pytest.raises(GroupMaxSizeReachedError, match="all groups together"):
        classic_join(groups, "one-too-many", pending_id(groups, "one-too-many"))
    assert len(members) == 99


def test_a_group_takes_at_most_max_group_size_members(clock: ManualClock, tmp_path: Path) -> None:
    groups = ClassicGroups(clock, limits=GroupLimits(max_group_size=2))
    first = new_member(groups, "g")
    groups.sync("g", first.member_id, first.generation, {}).result(0)
    second = classic_join(groups, "g", pending_id(groups, "g"))
    classic_join(groups, "g", first.member_id).result(0)
    second.result(0)
    with pytest.raises(GroupMaxSizeReachedError, match="the group"):
        classic_join(groups, "g", pending_id(groups, "g"))
    store = OffsetStore(str(tmp_path), clock=clock)
    coordinator = GroupCoordinator(store, lambda topic: 2, clock, limits=GroupLimits(max_group_size=2))
    coordinator.join("g", ["t"])
    coordinator.join("g", ["t"])
    with pytest.raises(GroupMaxSizeReachedError):
        coordinator.join("g", ["t"])
    store.close()


def test_the_coordinator_bounds_the_members_of_all_groups(tmp_path: Path, clock: ManualClock) -> None:
    store = OffsetStore(str(tmp_path), clock=clock)
    coordinator = GroupCoordinator(store, lambda topic: 2, clock, limits=GroupLimits(max_members=3))
    for i in range(3):
        coordinator.join(f"g{i}", ["t"])
    with pytest.raises(GroupMaxSizeReachedError, match="all groups together"):
        coordinator.join("g3", ["t"])
    assert coordinator.stats()[:2] == (3, 3)  # the refused join left nothing behind
    store.close()


def test_members_that_left_or_expired_leave_no_group_behind(clock: ManualClock, coordinator: GroupCoordinator) -> None:
    groups = ClassicGroups(clock)
    for i in range(50):
        answer = new_member(groups, f"left-{i}")
        groups.leave(f"left-{i}", [(answer.member_id, None)])
        coordinator.leave(f"left-{i}", coordinator.join(f"left-{i}", ["t"]).member_id)
        new_member(groups, f"silent-{i}")
        coordinator.join(f"silent-{i}", ["t"])
    assert groups.stats() == ClassicStats(groups=50, members=50, pending=0, deadlines=50)
    assert coordinator.stats() == (50, 50, 50)
    clock.advance(SESSION_MS + 1)
    groups.tick()
    coordinator.tick()
    assert groups.stats() == ClassicStats(0, 0, 0, 0)
    assert coordinator.stats() == (0, 0, 0)
    assert len(coordinator.changed) == 0  # the change counters of forgotten groups go too


# -- a join pays for its own group only -------------------------------------------------------------------------


def test_a_classic_join_never_walks_the_other_groups(clock: ManualClock) -> None:
    groups = ClassicGroups(clock)
    for i in range(2_000):
        pending_id(groups, f"flood-{i}", session_ms=1_800_000)
    groups._groups = NoWalk(groups._groups)  # type: ignore[assignment]
    answer = new_member(groups, "mine")
    groups.sync("mine", answer.member_id, answer.generation, {}).result(0)
    groups.heartbeat("mine", answer.member_id, answer.generation)
    clock.advance(SESSION_MS)
    groups.tick()  # nothing is due but the member's own session check
    assert groups.leave("mine", [(answer.member_id, None)]) == [None]


def test_a_coordinator_join_never_walks_the_other_groups(clock: ManualClock, coordinator: GroupCoordinator) -> None:
    for i in range(2_000):
        coordinator.join(f"other-{i}", ["t"], session_timeout_ms=1_800_000)
    coordinator._groups = NoWalk(coordinator._groups)  # type: ignore[assignment]
    member = coordinator.join("mine", ["t"])
    coordinator.heartbeat("mine", member.member_id)
    clock.advance(SESSION_MS - 1)
    coordinator.heartbeat("mine", member.member_id)
    coordinator.leave("mine", member.member_id)


# -- a group whose members left does not wait for their (long) timeouts --------------------------------------------


def test_a_leave_completes_the_rebalance_whatever_the_timeouts(clock: ManualClock) -> None:
    groups = ClassicGroups(clock)
    long = {"session_ms": 1_800_000, "rebalance_ms": 2**31 - 1}  # the longest session; a 24.8-day rebalance
    first = new_member(groups, "g", **long)
    groups.sync("g", first.member_id, first.generation, {}).result(0)
    second = classic_join(groups, "g", pending_id(groups, "g", **long), **long)
    assert not second.done() and groups.snapshot("g").state is ClassicState.PREPARING_REBALANCE  # type: ignore[union-attr]
    assert groups.leave("g", [(first.member_id, None)]) == [None]
    assert second.result(0).generation == 2  # completed by the leave, not after 24.8 days
    assert groups.snapshot("g").state is ClassicState.COMPLETING_REBALANCE  # type: ignore[union-attr]
    groups.leave("g", [(second.result(0).member_id, None)])
    assert groups.snapshot("g") is None


def test_a_dead_member_is_removed_at_its_session_timeout_not_the_rebalance_timeout(clock: ManualClock) -> None:
    groups = ClassicGroups(clock)
    long = {"session_ms": 6_000, "rebalance_ms": 2**31 - 1}
    first = new_member(groups, "g", **long)
    groups.sync("g", first.member_id, first.generation, {}).result(0)
    second = classic_join(groups, "g", pending_id(groups, "g", **long), **long)
    clock.advance(6_001)  # the first member died without a LeaveGroup
    groups.tick()
    assert second.result(0).leader == second.result(0).member_id


def test_an_empty_coordinator_group_with_offsets_is_listed_as_empty(coordinator: GroupCoordinator) -> None:
    member = coordinator.join("g", ["t"])
    coordinator.heartbeat("g", member.member_id)
    coordinator.leave("g", member.member_id)
    coordinator.commit("g", None, None, {("t", 0): 0})
    assert coordinator.describe("g").state is GroupState.EMPTY
    assert coordinator.stats()[0] == 0


def test_the_broker_tick_visits_every_group_only_after_a_topic_change(tmp_path: Path) -> None:
    from lkstream import Broker

    with Broker(persist_dir=str(tmp_path / "data")) as broker:
        broker.create_topic("t", 2)
        for i in range(100):
            broker.join_group(f"g{i}", ["t", "later"])
        broker.tick_groups()  # catches up with the topics as they are
        walled = broker.groups._groups
        broker.groups._groups = NoWalk(walled)  # type: ignore[assignment]
        broker.tick_groups()  # nothing changed: no visit of every group
        broker.groups._groups = walled
        broker.produce_many_sync("later", [(None, b"v")])  # auto-created: no topics_changed() call
        broker.tick_groups()
        assert broker.describe_group("g0").members[0].target == {("t", 0), ("t", 1), ("later", 0)}
