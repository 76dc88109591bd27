"""The Broker's group calls (lkstream.broker.groups.facade) on a real embedded broker.

The RPC path is tested against the daemon in tests/integration/test_group_rpcs.py;
these cover what only the embedded broker does: the blocking heartbeat long poll
and the broker thread that expires members whose session timed out.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from pathlib import Path

import pytest

from lkstream import Broker, UnknownMemberError
from lkstream.broker.groups.classic import JoinAnswer
from lkstream.broker.groups.types import GroupState, HeartbeatResult

DEADLINE_S = 10.0


def test_blocking_heartbeat_long_poll_wakes_when_the_group_changes(tmp_path: Path) -> None:
    with Broker(persist_dir=str(tmp_path), partitions=2) as broker:
        broker.create_topic("t")
        a = broker.join_group("g", ["t"])
        broker.heartbeat("g", a.member_id)  # takes both partitions
        answers: list[HeartbeatResult] = []
        poller = threading.Thread(target=lambda: answers.append(broker.heartbeat("g", a.member_id, max_wait_ms=20_000)))
        poller.start()
        time.sleep(0.1)
        started = time.monotonic()
        broker.join_group("g", ["t"])
        poller.join(DEADLINE_S)
        assert answers and time.monotonic() - started < 5.0
        assert answers[0].revoke  # eager range: a gives everything back for the rebalance


def test_a_member_that_stops_heartbeating_is_expired_by_the_broker(tmp_path: Path) -> None:
    with Broker(persist_dir=str(tmp_path), partitions=1, group_min_session_timeout_ms=100) as broker:
        broker.create_topic("t")
        member = broker.join_group("g", ["t"], session_timeout_ms=300)
        broker.heartbeat("g", member.member_id)
        seen = broker.groups.changed.version("g")
        # No call into the group at all: only the broker's ticker can notice the silence,
        # and removing the member is a change the group's waiters are woken for.
        assert broker.groups.changed.wait("g", seen, DEADLINE_S)
        assert broker.describe_group("g").state is GroupState.DEAD  # no member and no offset: forgotten
        with pytest.raises(UnknownMemberError):
            broker.heartbeat("g", member.member_id)


def test_heartbeat_rejects_a_negative_wait(tmp_path: Path) -> None:
    with Broker(persist_dir=str(tmp_path)) as broker:
        broker.create_topic("t")
        member = broker.join_group("g", ["t"])
        with pytest.raises(ValueError, match="max_wait_ms"):
            broker.heartbeat("g", member.member_id, max_wait_ms=-1)


@pytest.mark.parametrize("to", [-1, True, "middle", 1.5])
def test_reset_rejects_a_target_that_is_not_earliest_latest_or_an_offset(tmp_path: Path, to: object) -> None:
    with Broker(persist_dir=str(tmp_path)) as broker:
        broker.create_topic("t")
        with pytest.raises(ValueError, match="earliest, latest or an offset"):
            broker.reset_offsets("g", "t", to=to)  # type: ignore[arg-type]
        assert broker.groups.fetch_committed("g") == {}


def _kafka_join(broker: Broker, group: str, *, require_known_member_id: bool = True) -> Future[JoinAnswer]:
    """A Kafka client's JoinGroup (classic protocol) straight into the broker's classic coordinator."""
    return broker.classic_groups.join(
        group,
        member_id="",
        instance_id=None,
        protocol_type="consumer",
        protocols=[("range", b"")],
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        require_known_member_id=require_known_member_id,
    )


def test_a_group_name_belongs_to_one_coordinator_at_a_time(tmp_path: Path) -> None:
    from lkstream import InconsistentGroupProtocolError
    from lkstream.broker.groups.classic import MemberIdRequiredError

    with Broker(persist_dir=str(tmp_path), partitions=1) as broker:
        broker.create_topic("t")
        # A live Kafka client (classic protocol) in "kafka-g" keeps LKSTREAM members out of it ...
        _kafka_join(broker, "kafka-g", require_known_member_id=False).result(DEADLINE_S)
        with pytest.raises(InconsistentGroupProtocolError, match="Kafka client"):
            broker.join_group("kafka-g", ["t"])
        # ... and a live LKSTREAM member in "lk-g" keeps Kafka clients out of that one.
        broker.join_group("lk-g", ["t"])
        with pytest.raises(InconsistentGroupProtocolError):
            _kafka_join(broker, "lk-g")
        with pytest.raises(MemberIdRequiredError):  # other names stay free for either
            _kafka_join(broker, "free")
