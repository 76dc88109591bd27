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

import grpc
import pytest
from kio.schema.errors import ErrorCode

import lkstream
from lkstream.broker.groups.classic import ClassicGroups, MemberIdRequiredError
from lkstream.broker.groups.coordinator import GroupCoordinator
from lkstream.errors import MemberOwnerError, UnknownTopicError
from lkstream.kafka.protocol import ApiKey
from lkstream.security.acl import AclEntry
from lkstream.storage.clock import ManualClock
from lkstream.storage.offsets import OffsetStore
from lkstream.wire._proto import messaging_pb2 as pb
from lkstream.wire._proto import messaging_pb2_grpc as pb_grpc
from tests.security.conftest import SecureFactory
from tests.security.kafka_raw import RawKafka

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


# -- through the daemon's surfaces: gRPC and the Kafka listener ------------------------------------------


def both_read(user: str) -> list[AclEntry]:
    return [
        AclEntry.build(user, "read", "group", "shared"),
        AclEntry.build(user, "read", "topic", "orders"),
        AclEntry.build(user, "describe", "group", "shared"),
    ]


def test_grpc_calls_with_another_principals_member_id_are_refused(secure_daemon: SecureFactory) -> None:
    daemon = secure_daemon()
    with lkstream.connect(daemon.address, token=daemon.admin_token) as admin:
        admin.create_topic("orders", 1)
    tokens = {user: daemon.token(user) for user in ("alice", "mallory")}
    daemon.set_acls(*both_read("alice"), *both_read("mallory"))
    channel = grpc.insecure_channel(daemon.address)
    stub = pb_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]

    def as_(user: str) -> tuple[tuple[str, str]]:
        return (("authorization", f"Bearer {tokens[user]}"),)

    try:
        joined = stub.JoinGroup(pb.JoinGroupRequest(group="shared", topics=["orders"]), metadata=as_("alice"))
        member, generation = joined.member_id, joined.generation
        seen = stub.DescribeGroup(pb.DescribeGroupRequest(group="shared"), metadata=as_("mallory"))
        assert [m.member_id for m in seen.members] == [member]  # the id is no secret
        hijacks = [
            lambda: stub.Heartbeat(pb.HeartbeatRequest(group="shared", member_id=member), metadata=as_("mallory")),
            lambda: stub.SyncGroup(
                pb.SyncGroupRequest(group="shared", member_id=member, generation=generation), metadata=as_("mallory")
            ),
            lambda: stub.CommitOffsets(
                pb.CommitOffsetsRequest(
                    group="shared",
                    member_id=member,
                    generation=generation,
                    offsets=[pb.PartitionOffset(topic="orders", partition=0, offset=0)],
                ),
                metadata=as_("mallory"),
            ),
            lambda: stub.LeaveGroup(pb.LeaveGroupRequest(group="shared", member_id=member), metadata=as_("mallory")),
            lambda: stub.JoinGroup(
                pb.JoinGroupRequest(group="shared", topics=["orders"], member_id=member), metadata=as_("mallory")
            ),
        ]
        for hijack in hijacks:
            with pytest.raises(grpc.RpcError) as refused:
                hijack()
            assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED  # type: ignore[attr-defined]
            assert "another principal joined" in refused.value.details()  # type: ignore[attr-defined]
        stub.Heartbeat(pb.HeartbeatRequest(group="shared", member_id=member), metadata=as_("alice"))
        after = stub.DescribeGroup(pb.DescribeGroupRequest(group="shared"), metadata=as_("alice"))
        assert [m.member_id for m in after.members] == [member], "alice is still the member"
    finally:
        channel.close()


def test_kafka_calls_with_another_principals_member_id_are_refused(secure_daemon: SecureFactory) -> None:
    daemon = secure_daemon()
    with lkstream.connect(daemon.address, token=daemon.admin_token) as admin:
        admin.create_topic("orders", 1)
    for user in ("alice", "mallory"):
        daemon.set_password(user, f"{user}-password")
    daemon.set_acls(*both_read("alice"), *both_read("mallory"))
    join = {
        "group_id": "shared",
        "session_timeout": 30_000,
        "rebalance_timeout": 30_000,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x00"}],
    }
    with RawKafka(daemon.kafka_address) as alice, RawKafka(daemon.kafka_address) as mallory:
        assert alice.login_scram("SCRAM-SHA-256", "alice", "alice-password").error_code == 0
        assert mallory.login_scram("SCRAM-SHA-256", "mallory", "mallory-password").error_code == 0
        first = alice.call(ApiKey.JOIN_GROUP, 7, member_id="", **join)
        assert first.error_code == ErrorCode.member_id_required
        joined = alice.call(ApiKey.JOIN_GROUP, 7, member_id=first.member_id, **join)
        assert joined.error_code == 0
        member, generation = joined.member_id, joined.generation_id
        synced = alice.call(ApiKey.SYNC_GROUP, 5, group_id="shared", generation_id=generation, member_id=member)
        assert synced.error_code == 0
        seen = mallory.call(ApiKey.DESCRIBE_GROUPS, 5, groups=["shared"])
        assert [m.member_id for m in seen.groups[0].members] == [member]
        same = {"group_id": "shared", "member_id": member}
        commit = {
            **same,
            "generation_id_or_member_epoch": generation,
            "topics": [{"name": "orders", "partitions": [{"partition_index": 0, "committed_offset": 0}]}],
        }
        hijacks = [
            mallory.call(ApiKey.HEARTBEAT, 4, generation_id=generation, **same).error_code,
            mallory.call(ApiKey.SYNC_GROUP, 5, generation_id=generation, **same).error_code,
            mallory.call(ApiKey.OFFSET_COMMIT, 8, **commit).topics[0].partitions[0].error_code,
            mallory.call(ApiKey.LEAVE_GROUP, 4, group_id="shared", members=[{"member_id": member}])
            .members[0]
            .error_code,
            mallory.call(ApiKey.JOIN_GROUP, 7, member_id=member, **join).error_code,
        ]
        assert hijacks == [ErrorCode.group_authorization_failed] * len(hijacks)
        assert alice.call(ApiKey.HEARTBEAT, 4, generation_id=generation, **same).error_code == 0
        assert alice.call(ApiKey.OFFSET_COMMIT, 8, **commit).topics[0].partitions[0].error_code == 0
