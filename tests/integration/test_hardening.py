"""Issue 12's findings, reproduced against a real daemon on loopback (one test per rule)."""

from __future__ import annotations

import grpc
import pytest

from lkstream.wire._proto import messaging_pb2 as pb
from lkstream.wire._proto import messaging_pb2_grpc as pb_grpc
from tests.integration.conftest import DaemonProcess


def _stub(daemon: DaemonProcess) -> tuple[grpc.Channel, pb_grpc.BrokerStub]:
    channel = grpc.insecure_channel(daemon.address)
    return channel, pb_grpc.BrokerStub(channel)


def test_a_topic_name_with_a_trailing_newline_is_refused_over_grpc(daemon: DaemonProcess) -> None:
    """Finding 11: ``orders\\n`` and ``orders`` must not coexist."""
    channel, stub = _stub(daemon)
    with channel:
        stub.Admin(pb.AdminRequest(create_topic=pb.CreateTopic(name="orders", partitions=1)))
        for name in ("orders\n", "orders\r\n"):
            with pytest.raises(grpc.RpcError) as info:
                stub.Admin(pb.AdminRequest(create_topic=pb.CreateTopic(name=name, partitions=1)))
            assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            with pytest.raises(grpc.RpcError) as info:
                stub.Produce(pb.ProduceRequest(topic=name, values=[b"x"]))
            assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert list(stub.Admin(pb.AdminRequest(list_topics=pb.ListTopics())).topics) == ["orders"]


def test_group_member_and_instance_names_are_validated_over_grpc(daemon: DaemonProcess) -> None:
    """Finding 11: every name a client sends is checked by a full match."""
    channel, stub = _stub(daemon)
    with channel:
        stub.Admin(pb.AdminRequest(create_topic=pb.CreateTopic(name="t", partitions=1)))
        bad_joins = [
            pb.JoinGroupRequest(group="g\n", topics=["t"]),
            pb.JoinGroupRequest(group="g", topics=["t\n"]),
            pb.JoinGroupRequest(group="g", topics=["t"], instance_id="host-1\n"),
            pb.JoinGroupRequest(group="g", topics=["t"], client_id="app\n"),
        ]
        for request in bad_joins:
            with pytest.raises(grpc.RpcError) as info:
                stub.JoinGroup(request)
            assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT, request
        with pytest.raises(grpc.RpcError) as info:
            stub.CommitOffset(pb.CommitRequest(group="g\n", topic="t", partition=0, offset=0))
        assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
