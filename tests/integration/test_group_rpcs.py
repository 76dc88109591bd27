"""The consumer-group RPCs against a real daemon, through RemoteBroker's group calls.

The Consumer's use of them (threads, callbacks) is tested in test_consumer_groups.py;
here each RPC, its error mapping and its long poll are checked directly.
"""

from __future__ import annotations

import threading
import time

import pytest

import lkstream
from lkstream import (
    GroupNotEmptyError,
    InconsistentGroupProtocolError,
    InvalidArgumentError,
    NotPartitionOwnerError,
    OffsetOutOfRangeError,
    OffsetRegressionError,
    StaleGenerationError,
    UnknownMemberError,
)
from lkstream.broker.groups.types import GroupState, HeartbeatResult
from lkstream.client.remote import RemoteBroker
from tests.integration.conftest import DaemonProcess

pytestmark = pytest.mark.timeout(120)

DEADLINE_S = 10.0


def settle(broker: RemoteBroker, group: str, members: list[str]) -> dict[str, HeartbeatResult]:
    """Heartbeat every member (releasing what it is told to revoke) until all are stable."""
    released: dict[str, frozenset[tuple[str, int]]] = {m: frozenset() for m in members}
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        results = {}
        for member in members:
            results[member] = broker.heartbeat(group, member, released=released[member])
            released[member] = results[member].revoke
        if all(r.stable for r in results.values()):
            return results
    raise AssertionError(f"group {group} did not settle: {results}")


def test_two_members_split_a_topic_and_describe_shows_them(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as broker:
        broker.create_topic("split", 4)
        a = broker.join_group("g", ["split"], client_id="a")
        b = broker.join_group("g", ["split"], client_id="b")
        assert b.generation > a.generation
        results = settle(broker, "g", [a.member_id, b.member_id])
        owned = {m: r.owned for m, r in results.items()}
        assert owned[a.member_id].isdisjoint(owned[b.member_id])
        assert owned[a.member_id] | owned[b.member_id] == {("split", p) for p in range(4)}
        assert broker.sync_group("g", a.member_id, results[a.member_id].generation).assignment == owned[a.member_id]

        description = broker.describe_group("g")
        assert description.state is GroupState.STABLE
        assert description.assignor == "range"
        assert {m.member_id: m.owned for m in description.members} == owned
        assert all(m.client_host for m in description.members)  # the daemon fills in the peer
        assert [(g.group, g.members) for g in broker.list_groups()] == [("g", 2)]

        with pytest.raises(InconsistentGroupProtocolError, match="range"):
            broker.join_group("g", ["split"], assignor="roundrobin")
        broker.leave_group("g", a.member_id)
        with pytest.raises(UnknownMemberError):
            broker.heartbeat("g", a.member_id)
        assert settle(broker, "g", [b.member_id])[b.member_id].owned == {("split", p) for p in range(4)}


def test_commits_are_fenced_and_never_move_backward(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as broker:
        broker.create_topic("fenced", 2)
        broker.produce_many_sync("fenced", [(None, b"x")] * 10, partition=0)
        broker.produce_many_sync("fenced", [(None, b"x")] * 3, partition=1)  # commits stay within the log
        a = broker.join_group("g", ["fenced"])
        generation = settle(broker, "g", [a.member_id])[a.member_id].generation
        broker.commit_offsets("g", {("fenced", 0): 5}, member_id=a.member_id, generation=generation)
        assert broker.committed_offsets("g", "fenced") == {0: 5}

        with pytest.raises(OffsetRegressionError, match="backward"):
            broker.commit_offsets("g", {("fenced", 0): 3}, member_id=a.member_id, generation=generation)
        with pytest.raises(GroupNotEmptyError, match="without a member id"):
            broker.commit_offsets("g", {("fenced", 0): 6})  # a standalone commit must not overwrite a member's
        with pytest.raises(GroupNotEmptyError):
            broker.commit_offset("g", "fenced", 0, 6)  # the seed's CommitOffset is checked the same way

        b = broker.join_group("g", ["fenced"])  # a rebalance begins
        # Commit before revoke: until a releases its partitions it may still commit them.
        broker.commit_offsets("g", {("fenced", 1): 1}, member_id=a.member_id, generation=generation)
        results = settle(broker, "g", [a.member_id, b.member_id])
        with pytest.raises(StaleGenerationError, match="stale generation"):
            broker.commit_offsets("g", {("fenced", 1): 2}, member_id=a.member_id, generation=generation)
        not_b = next(iter(results[a.member_id].owned))
        with pytest.raises(NotPartitionOwnerError, match=r"does not own fenced\[\d\]"):
            broker.commit_offsets("g", {not_b: 9}, member_id=b.member_id, generation=results[b.member_id].generation)
        assert broker.committed_offsets("g", "fenced") == {0: 5, 1: 1}  # nothing refused was applied


def test_operator_reset_is_refused_while_members_live_then_resolves_targets(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as broker:
        broker.create_topic("reset", 2)
        broker.produce_many_sync("reset", [(None, b"a")] * 4, partition=0)
        time.sleep(0.01)
        middle = int(time.time() * 1000)
        time.sleep(0.01)
        broker.produce_many_sync("reset", [(None, b"b")] * 3, partition=0)
        member = broker.join_group("ops", ["reset"])
        with pytest.raises(GroupNotEmptyError, match="live member"):
            broker.reset_offsets("ops", "reset", to="earliest")
        broker.leave_group("ops", member.member_id)

        assert broker.reset_offsets("ops", "reset", to="latest") == {0: 7, 1: 0}
        assert broker.reset_offsets("ops", "reset", [0], to=2) == {0: 2}
        assert broker.reset_offsets("ops", "reset", [0], timestamp_ms=middle) == {0: 4}
        assert broker.reset_offsets("ops", "reset", to="earliest") == {0: 0, 1: 0}  # backward: operators may
        assert broker.committed_offsets("ops", "reset") == {0: 0, 1: 0}
        with pytest.raises(OffsetOutOfRangeError):
            broker.reset_offsets("ops", "reset", [0], to=99)
        with pytest.raises(InvalidArgumentError, match="exactly one"):
            broker.reset_offsets("ops", "reset")


def test_heartbeat_long_poll_is_woken_by_a_joining_member(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as broker:
        broker.create_topic("wake", 2)
        a = broker.join_group("g", ["wake"], assignor="cooperative-sticky")
        settle(broker, "g", [a.member_id])
        answered: list[HeartbeatResult] = []
        started = threading.Event()

        def long_poll() -> None:
            started.set()
            answered.append(broker.heartbeat("g", a.member_id, max_wait_ms=20_000))

        poller = threading.Thread(target=long_poll)
        poller.start()
        assert started.wait(DEADLINE_S)
        time.sleep(0.2)  # the poll is waiting on the daemon
        begun = time.monotonic()
        broker.join_group("g", ["wake"], assignor="cooperative-sticky")
        poller.join(DEADLINE_S)
        assert answered, "the long poll did not return"
        assert time.monotonic() - begun < 5.0  # woken by the join, not by its 20 s deadline
        assert len(answered[0].revoke) == 1  # cooperative: only the partition that moves


def test_describe_reports_lag_in_messages_and_seconds(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as broker:
        broker.create_topic("lagging", 1)
        broker.produce_many_sync("lagging", [(None, b"v")] * 5)
        broker.commit_offsets("lagging-group", {("lagging", 0): 2})
        time.sleep(0.05)
        [lag] = broker.group_lag("lagging-group")
        assert (lag.topic, lag.partition, lag.committed, lag.high_watermark, lag.lag_messages) == (
            "lagging",
            0,
            2,
            5,
            3,
        )
        assert lag.lag_seconds >= 0.05
        assert lag.owner is None
        assert broker.describe_group("lagging-group").state is GroupState.EMPTY
        broker.commit_offsets("lagging-group", {("lagging", 0): 5})
        assert broker.group_lag("lagging-group")[0].lag_seconds == 0.0
