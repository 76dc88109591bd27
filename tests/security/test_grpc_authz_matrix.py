"""Every RPC of the lkstream.Broker service is refused without the right permission and allowed with it.

The cases are checked against the service descriptor: a new RPC without a case here
and a rule in :data:`RPC_NEEDS` fails :func:`test_every_rpc_has_a_rule_and_cases`.
Each case names a request and the ACL entries it needs; against a real daemon with
``auth: true`` the test checks that the call is refused (PERMISSION_DENIED naming the
missing operation and resource) with no entries and with each needed entry left out
in turn, allowed (no UNAUTHENTICATED / PERMISSION_DENIED) with all of them, and
refused (UNAUTHENTICATED) without a token.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

import lkstream
from lkstream.format.codec import encode_batch
from lkstream.security.acl import AclEntry
from lkstream.server.grpc.permissions import FILTERED, RPC_NEEDS
from lkstream.wire._proto import messaging_pb2 as pb
from lkstream.wire._proto import messaging_pb2_grpc as pb_grpc
from lkstream.wire.streams import StreamAnswer
from tests.security.conftest import SecureDaemon, SecureFactory

USER = "alice"


def acl(op: str, kind: str, name: str) -> AclEntry:
    return AclEntry.build(USER, op, kind, name)


@dataclass
class Case:
    request: Any
    needs: list[AclEntry]
    streaming: bool = False
    # A bidirectional stream (ProduceStream, FetchStream): one request sent, its answer read; a refused
    # request is answered with ``error`` set (the stream goes on), not with the call's status.
    bidi: bool = False
    # Filtered listings need nothing: without permissions they answer, but list nothing.
    filtered: bool = False
    label: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


ORDERS = "orders"
CASES: dict[str, list[Case]] = {
    "Produce": [
        Case(pb.ProduceRequest(topic=ORDERS, values=[b"v"]), [acl("write", "topic", ORDERS)], label="existing topic"),
        Case(
            pb.ProduceRequest(topic="auto.created", values=[b"v"]),
            [acl("write", "topic", "auto.created"), acl("create", "topic", "auto.created")],
            label="auto-created topic",
        ),
    ],
    "Fetch": [
        Case(pb.FetchRequest(topic=ORDERS, partition=0, offset=0), [acl("read", "topic", ORDERS)]),
        Case(
            pb.FetchRequest(topic=ORDERS, partition=0, offset=0, group="g1"),
            [acl("read", "topic", ORDERS), acl("read", "group", "g1")],
            label="naming a group",
        ),
    ],
    "Subscribe": [Case(pb.FetchRequest(topic=ORDERS, partition=0, offset=0), [acl("read", "topic", ORDERS)], True)],
    "SubscribeBatches": [
        Case(pb.FetchRequest(topic=ORDERS, partition=0, offset=0), [acl("read", "topic", ORDERS)], True)
    ],
    "CommitOffset": [
        Case(
            pb.CommitRequest(group="g1", topic=ORDERS, partition=0, offset=1),
            [acl("read", "group", "g1"), acl("read", "topic", ORDERS)],
        )
    ],
    "FetchCommittedOffsets": [
        Case(
            pb.FetchCommittedRequest(group="g1", topic=ORDERS),
            [acl("describe", "group", "g1"), acl("describe", "topic", ORDERS)],
        )
    ],
    "OffsetsForTimestamp": [
        Case(pb.OffsetsForTimestampRequest(topic=ORDERS, timestamp_ms=0), [acl("describe", "topic", ORDERS)])
    ],
    "Admin": [
        Case(
            pb.AdminRequest(create_topic=pb.CreateTopic(name="fresh", partitions=1)),
            [acl("create", "topic", "fresh")],
            label="create",
        ),
        Case(
            pb.AdminRequest(delete_topic=pb.DeleteTopic(name="doomed")),
            [acl("delete", "topic", "doomed")],
            label="delete",
        ),
        Case(
            pb.AdminRequest(describe_topic=pb.DescribeTopic(name=ORDERS)),
            [acl("describe", "topic", ORDERS)],
            label="describe",
        ),
        Case(
            pb.AdminRequest(describe_topic=pb.DescribeTopic(name="made.by.describe", create_if_missing=True)),
            [acl("describe", "topic", "made.by.describe"), acl("create", "topic", "made.by.describe")],
            label="describe creating",
        ),
        Case(
            pb.AdminRequest(
                alter_topic_configs=pb.AlterTopicConfigs(name=ORDERS, set={"retention.ms": "-1"}, validate_only=True)
            ),
            [acl("alter_configs", "topic", ORDERS)],
            label="alter configs",
        ),
        Case(
            pb.AdminRequest(create_partitions=pb.CreatePartitions(name=ORDERS, count=5, validate_only=True)),
            [acl("create", "topic", ORDERS)],
            label="create partitions",
        ),
        Case(
            pb.AdminRequest(list_topics=pb.ListTopics()),
            [acl("describe", "topic", ORDERS)],
            filtered=True,
            label="list_topics",
            extra={"listed": ORDERS},
        ),
    ],
    "Handshake": [Case(pb.HandshakeRequest(client_protocol_version=1), [])],
    "JoinGroup": [
        Case(
            pb.JoinGroupRequest(group="g1", topics=[ORDERS], session_timeout_ms=6000),
            [acl("read", "group", "g1"), acl("describe", "topic", ORDERS)],
        )
    ],
    "SyncGroup": [Case(pb.SyncGroupRequest(group="g1", member_id="m", generation=1), [acl("read", "group", "g1")])],
    "Heartbeat": [Case(pb.HeartbeatRequest(group="g1", member_id="m", generation=1), [acl("read", "group", "g1")])],
    "LeaveGroup": [Case(pb.LeaveGroupRequest(group="g1", member_id="m"), [acl("read", "group", "g1")])],
    "CommitOffsets": [
        Case(
            pb.CommitOffsetsRequest(group="g2", offsets=[pb.PartitionOffset(topic=ORDERS, partition=0, offset=1)]),
            [acl("read", "group", "g2"), acl("read", "topic", ORDERS)],
        )
    ],
    "DescribeGroup": [Case(pb.DescribeGroupRequest(group="g1"), [acl("describe", "group", "g1")])],
    "ListGroups": [
        Case(pb.ListGroupsRequest(), [acl("describe", "group", "g1")], filtered=True, extra={"listed": "g1"})
    ],
    "ResetOffsets": [
        Case(pb.ResetOffsetsRequest(group="g3", topic=ORDERS, earliest=True), [acl("admin", "cluster", "cluster")])
    ],
    "ProduceStream": [
        Case(
            pb.ProduceRequest(topic=ORDERS, record_batch=bytes(encode_batch([(None, b"v")]))),
            [acl("write", "topic", ORDERS)],
            bidi=True,
            label="existing topic",
        ),
        Case(
            pb.ProduceRequest(topic="auto.streamed", record_batch=bytes(encode_batch([(None, b"v")]))),
            [acl("write", "topic", "auto.streamed"), acl("create", "topic", "auto.streamed")],
            bidi=True,
            label="auto-created topic",
        ),
    ],
    "FetchStream": [
        Case(pb.FetchRequest(topic=ORDERS, partition=0, offset=0), [acl("read", "topic", ORDERS)], bidi=True),
        Case(
            pb.FetchRequest(topic=ORDERS, partition=0, offset=0, group="g1"),
            [acl("read", "topic", ORDERS), acl("read", "group", "g1")],
            bidi=True,
            label="naming a group",
        ),
    ],
}


def service_methods() -> list[str]:
    return [m.name for m in pb.DESCRIPTOR.services_by_name["Broker"].methods]


def test_every_rpc_has_a_rule_and_cases() -> None:
    methods = service_methods()
    assert set(RPC_NEEDS) == set(methods), "every RPC needs an access rule in lkstream.server.grpc.permissions"
    assert set(CASES) == set(methods), "every RPC needs cases in this matrix"
    assert {"Admin.list_topics", "ListGroups"} == FILTERED


def call(stub: Any, method: str, case: Case, token: str | None) -> grpc.StatusCode | Any:
    """Make the call; return the status code when refused, else the response (first one of a stream)."""
    metadata = () if token is None else (("authorization", f"Bearer {token}"),)
    try:
        if case.bidi:
            return _first_answer(getattr(stub, method)(iter([case.request]), metadata=metadata, timeout=10))
        if case.streaming:
            stream = getattr(stub, method)(case.request, metadata=metadata, timeout=10)
            try:
                return next(iter(stream))
            finally:
                stream.cancel()
        return getattr(stub, method)(case.request, metadata=metadata, timeout=10)
    except grpc.RpcError as exc:
        code = exc.code()  # type: ignore[attr-defined]
        if code in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED):
            return code, exc.details()  # type: ignore[attr-defined]
        return code  # admitted, then refused by the broker (unknown member, ...): not our concern here


def _first_answer(stream: Any) -> Any:
    """A bidirectional stream's answer to its one request; a per-request refusal as a call's would be."""
    try:
        answer = next(iter(stream))
    finally:
        stream.cancel()
    if answer.HasField("error"):
        code = StreamAnswer(answer.error).code()
        if code in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED):
            return code, answer.error.message
        return code
    return answer


def refused(result: Any) -> bool:
    return isinstance(result, tuple) and result[0] is grpc.StatusCode.PERMISSION_DENIED


@pytest.fixture
def matrix_daemon(secure_daemon: SecureFactory) -> Iterator[tuple[SecureDaemon, Any, str]]:
    daemon = secure_daemon()
    with lkstream.connect(daemon.address, token=daemon.admin_token) as admin:
        admin.create_topic(ORDERS, 1)
        admin.create_topic("doomed", 1)
        admin.produce_many_sync(ORDERS, [(None, b"first")])
    token = daemon.token(USER)
    channel = grpc.insecure_channel(daemon.address)
    try:
        yield daemon, pb_grpc.BrokerStub(channel), token  # type: ignore[no-untyped-call]
    finally:
        channel.close()


def all_cases() -> list[tuple[str, Case]]:
    return [(method, case) for method, cases in CASES.items() for case in cases]


def test_every_rpc_is_refused_without_its_permissions_and_allowed_with_them(
    matrix_daemon: tuple[SecureDaemon, Any, str],
) -> None:
    daemon, stub, token = matrix_daemon
    for method, case in all_cases():
        what = f"{method} {case.label}".strip()
        # No token at all: UNAUTHENTICATED, whatever the call.
        assert call(stub, method, case, None)[0] is grpc.StatusCode.UNAUTHENTICATED, what
        assert call(stub, method, case, "lkst_00000000_" + "x" * 43)[0] is grpc.StatusCode.UNAUTHENTICATED, what
        # Each needed entry left out in turn (all of them when the call needs one): refused, naming it.
        for missing in case.needs:
            daemon.set_acls(*[entry for entry in case.needs if entry != missing])
            result = call(stub, method, case, token)
            if case.filtered:
                assert case.extra["listed"] not in _listed(result), what
                continue
            assert refused(result), f"{what} without {missing.describe()}: {result}"
            assert f"not allowed to {missing.operation}" in result[1], result[1]
            if missing.resource_type != "cluster":
                assert repr(missing.name) in result[1], result[1]
        # Everything it needs: admitted.
        daemon.set_acls(*case.needs)
        result = call(stub, method, case, token)
        assert not isinstance(result, tuple), f"{what} with {[e.describe() for e in case.needs]}: {result}"
        if case.filtered:
            assert case.extra["listed"] in _listed(result), what
    daemon.set_acls()


def _listed(response: Any) -> list[str]:
    if hasattr(response, "groups"):
        return [g.group for g in response.groups]
    return list(response.topics)


def test_a_super_user_may_call_everything(matrix_daemon: tuple[SecureDaemon, Any, str]) -> None:
    daemon, stub, _ = matrix_daemon
    for method, case in all_cases():
        result = call(stub, method, case, daemon.admin_token)
        assert not isinstance(result, tuple), f"{method} {case.label}: {result}"


def test_docs_table_names_every_rpc() -> None:
    from tests.integration.conftest import REPO

    text = (REPO / "docs" / "security.md").read_text()
    table = text.split("## 5. What each gRPC call needs", 1)[1].split("## 6.", 1)[0]
    for method in service_methods():
        assert f"`{method}`" in table, f"docs/security.md section 5 does not say what {method} needs"
