"""Member ids belong to the principal that joined with them, in both group coordinators.

Anyone allowed to describe a group sees its member ids. The coordinators record the
joining principal (``owner``) and refuse every other principal that heartbeats,
syncs, commits, leaves, rejoins or takes over the static instance with such an id:
:class:`MemberOwnerError`, and nothing changes. ``owner=None`` is a trusted caller
(the embedded API, a daemon without authentication) and may act as anyone.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from lkstream.broker.groups.classic import ClassicGroups, MemberIdRequiredError
from lkstream.broker.groups.coordinator import GroupCoordinator
from lkstream.errors import MemberOwnerError, UnknownTopicError
from lkstream.storage.clock import ManualClock
from lkstream.storage.offsets import OffsetStore

PROTOCOLS = [("range", b"meta")]


@pytest.fixture
def coordinator(tmp_path: Path) -> GroupCoordinator:
    topics = {"t": 2}

    def partitions_for(topic: str) -> int:
        if topic not in topics:
            raise UnknownTopicError(topic)
        return topics[topic]

    ids = itertools.count()
    return GroupCoordinator(
        OffsetStore(str(tmp_path), clock=ManualClock()),
        partitions_for,
        ManualClock(),
        member_id_factory=lambda c: f"m-{next(ids)}",
    )


def test_lkstream_member_calls_by_another_principal_are_refused(coordinator: GroupCoordinator) -> None:
    joined = coordinator.join("g", ["t"], owner="alice")
    member, generation = joined.member_id, joined.generation
    owned = coordinator.heartbeat("g", member, owner="alice").owned
    assert owned, "alice's member was granted the partitions"
    tp = sorted(owned)[0]
    refused = [
        lambda: coordinator.heartbeat("g", member, owner="mallory"),
        lambda: coordinator.sync("g", member, generation, owner="mallory"),
        lambda: coordinator.commit("g", member, generation, {tp: 0}, owner="mallory"),
        lambda: coordinator.leave("g", member, owner="mallory"),
        lambda: coordinator.join("g", ["t"], member_id=member, owner="mallory"),
    ]
    for call in refused:
        with pytest.raises(MemberOwnerError, match=r"mallory.*another principal"):
            call()
    description = coordinator.describe("g")
    assert [m.member_id for m in description.members] == [member], "nothing changed"
    assert coordinator.fetch_committed("g") == {}
    # The owner and trusted callers (owner None: the embedded API, auth off) still can.
    coordinator.heartbeat("g", member, owner="alice")
    coordinator.commit("g", member, generation, {tp: 0}, owner="alice")
    coordinator.heartbeat("g", member)
    coordinator.leave("g", member, owner="alice")


def test_lkstream_static_instance_cannot_be_taken_over_by_another_principal(coordinator: GroupCoordinator) -> None:
    first = coordinator.join("g", ["t"], instance_id="worker-1", owner="alice")
    with pytest.raises(MemberOwnerError):
        coordinator.join("g", ["t"], instance_id="worker-1", owner="mallory")
    assert [m.member_id for m in coordinator.describe("g").members] == [first.member_id], "alice was not fenced"
    again = coordinator.join("g", ["t"], instance_id="worker-1", owner="alice")
    assert again.member_id != first.member_id  # the owner's own restart takes over as before


def test_a_member_joined_by_a_trusted_caller_is_not_anyones(coordinator: GroupCoordinator) -> None:
    joined = coordinator.join("g", ["t"])  # the embedded API: owner None
    with pytest.raises(MemberOwnerError):
        coordinator.heartbeat("g", joined.member_id, owner="alice")


def join_classic(groups: ClassicGroups, owner: str | None, member_id: str = "", **kwargs: object) -> str:
    options: dict = {  # type: ignore[type-arg]
        "member_id": member_id,
        "instance_id": None,
        "protocol_type": "consumer",
        "protocols": PROTOCOLS,
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 10_000,
        "require_known_member_id": False,
        "owner": owner,
        **kwargs,
    }
    return groups.join("g", **options).result(timeout=5).member_id


def test_classic_member_calls_by_another_principal_are_refused() -> None:
    groups = ClassicGroups(ManualClock())
    member = join_classic(groups, "alice")
    generation = groups.snapshot("g").generation  # type: ignore[union-attr]
    groups.sync("g", member, generation, {member: b"assignment"}, owner="alice").result(timeout=5)
    refused = [
        lambda: groups.heartbeat("g", member, generation, owner="mallory"),
        lambda: groups.sync("g", member, generation, {}, owner="mallory"),
        lambda: groups.check_commit("g", member, generation, owner="mallory"),
        lambda: join_classic(groups, "mallory", member_id=member),
    ]
    for call in refused:
        with pytest.raises(MemberOwnerError):
            call()
    [left] = groups.leave("g", [(member, None)], owner="mallory")
    assert isinstance(left, MemberOwnerError)
    assert list(groups.snapshot("g").members) == [member], "still a member"  # type: ignore[union-attr]
    groups.heartbeat("g", member, generation, owner="alice")
    assert groups.check_commit("g", member, generation, owner="alice")
    assert groups.leave("g", [(member, None)], owner="alice") == [None]


def test_classic_pending_member_id_belongs_to_the_principal_it_was_handed_to() -> None:
    groups = ClassicGroups(ManualClock())
    with pytest.raises(MemberIdRequiredError) as handed:
        join_classic(groups, "alice", require_known_member_id=True)
    with pytest.raises(MemberOwnerError):
        join_classic(groups, "mallory", member_id=handed.value.member_id, require_known_member_id=True)
    assert join_classic(groups, "alice", member_id=handed.value.member_id) == handed.value.member_id


def test_classic_static_instance_cannot_be_taken_over_by_another_principal() -> None:
    groups = ClassicGroups(ManualClock())
    member = join_classic(groups, "alice", instance_id="worker-1")
    with pytest.raises(MemberOwnerError):
        join_classic(groups, "mallory", instance_id="worker-1")
    assert list(groups.snapshot("g").members) == [member]  # type: ignore[union-attr]
