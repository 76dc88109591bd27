"""Issue 12's findings, reproduced against a real daemon on loopback (one test per rule)."""

from __future__ import annotations

import struct
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
import pytest

from lkstream import Broker
from lkstream.wire._proto import messaging_pb2 as pb
from lkstream.wire._proto import messaging_pb2_grpc as pb_grpc
from tests.integration.conftest import DaemonFactory, DaemonProcess, RestartDaemon
from tests.integration.http_support import Api


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
            pb.JoinGroupRequest(group="", topics=["t"]),  # any other group id is Kafka's (issue 24)
            pb.JoinGroupRequest(group="g", topics=["t\n"]),
            pb.JoinGroupRequest(group="g", topics=["t"], instance_id="host-1\n"),
            pb.JoinGroupRequest(group="g", topics=["t"], client_id="app\n"),
        ]
        for request in bad_joins:
            with pytest.raises(grpc.RpcError) as info:
                stub.JoinGroup(request)
            assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT, request
        with pytest.raises(grpc.RpcError) as info:
            stub.CommitOffset(pb.CommitRequest(group="x" * 32_768, topic="t", partition=0, offset=0))
        assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_commit_offset_above_the_high_watermark_is_out_of_range(daemon: DaemonProcess) -> None:
    """Finding 5: ``CommitOffset(offset=10**15)`` must not wedge the group."""
    channel, stub = _stub(daemon)
    with channel:
        stub.Produce(pb.ProduceRequest(topic="t", values=[b"a", b"b"]))
        for call in (
            lambda: stub.CommitOffset(pb.CommitRequest(group="g", topic="t", partition=0, offset=10**15)),
            lambda: stub.CommitOffsets(
                pb.CommitOffsetsRequest(group="g", offsets=[pb.PartitionOffset(topic="t", partition=0, offset=3)])
            ),
        ):
            with pytest.raises(grpc.RpcError) as info:
                call()
            assert info.value.code() is grpc.StatusCode.OUT_OF_RANGE
        stub.CommitOffset(pb.CommitRequest(group="g", topic="t", partition=0, offset=2))
        committed = stub.FetchCommittedOffsets(pb.FetchCommittedRequest(group="g", topic="t"))
        assert dict(committed.offsets) == {0: 2}


def test_an_http_group_wedged_before_the_check_existed_recovers(start_daemon: DaemonFactory, tmp_path: Path) -> None:
    """Finding 5: a group whose stored offset lies past the log re-reads once, then commits and moves on."""
    data = tmp_path / "data"
    with Broker(persist_dir=str(data)) as broker:
        broker.produce_many_sync("t", [(None, b"a"), (None, b"b")])
        broker.offset_store.commit("g", "t", 0, 10**15)  # what CommitOffset accepted before the fix
    daemon = start_daemon(data)
    api = Api(daemon.http_address)
    first = api.post("/consume", {"partitions": [{"topic": "t", "partition": 0}], "group": "g"})
    assert first.status == 200, first.body
    assert [r["value"] for r in first.body["partitions"][0]["records"]] == ["a", "b"]
    again = api.post("/consume", {"partitions": [{"topic": "t", "partition": 0}], "group": "g"})
    assert again.body["partitions"][0]["records"] == []
    assert api.get("/groups/g").body["partitions"][0]["committed_offset"] == 2


def test_fetch_and_subscribe_refuse_an_invalid_group_label(daemon: DaemonProcess) -> None:
    """Finding 4: ``FetchRequest.group`` becomes a Prometheus label, so it is validated first, and since
    issue 24 (any Kafka group id) it becomes a printable label of at most 249 characters."""
    channel, stub = _stub(daemon)
    with channel:
        stub.Produce(pb.ProduceRequest(topic="t", values=[b"a"]))
        too_long = "x" * 32_768  # one byte more than a Kafka string holds
        with pytest.raises(grpc.RpcError) as info:
            stub.Fetch(pb.FetchRequest(topic="t", partition=0, offset=0, group=too_long))
        assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as info:
            next(iter(stub.Subscribe(pb.FetchRequest(topic="t", partition=0, offset=0, group=too_long))))
        assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        for group in ("y" * 16_000, "g\nforged", "a b"):  # Kafka group ids: served, labelled safely
            stub.Fetch(pb.FetchRequest(topic="t", partition=0, offset=0, group=group))
    with urllib.request.urlopen(f"http://{daemon.http_address}/metrics", timeout=30) as response:
        exposition = response.read().decode()
    assert "x" * 100 not in exposition and "y" * 100 not in exposition  # bounded labels
    assert "\nforged" not in exposition  # no raw newline: no forged exposition line
    assert 'group="a b"' in exposition


def test_a_decoded_fetch_stays_within_the_message_limit_and_the_reader_advances(start_daemon: DaemonFactory) -> None:
    """Finding 10: ``Fetch(max_bytes=2**32-1)`` of small records must not build a response above the limit."""
    limit = 1024 * 1024
    daemon = start_daemon(max_request_bytes=limit, max_batch_bytes=limit // 2, max_message_bytes=1024)
    total = 200_000
    channel = grpc.insecure_channel(
        daemon.address, options=[("grpc.max_receive_message_length", 64 * limit)]
    )  # the client would accept more: the daemon's own limit is what must hold
    with channel:
        stub = pb_grpc.BrokerStub(channel)
        for _ in range(total // 20_000):
            stub.Produce(pb.ProduceRequest(topic="tiny", values=[b"x"] * 20_000))
        offset, fetches = 0, 0
        while offset < total:
            response = stub.Fetch(pb.FetchRequest(topic="tiny", partition=0, offset=offset, max_bytes=2**32 - 1))
            assert response.ByteSize() <= limit
            assert response.records, f"no progress at offset {offset}"
            assert [r.offset for r in response.records] == list(range(offset, offset + len(response.records)))
            offset = response.records[-1].offset + 1
            fetches += 1
        assert fetches >= 2  # the cap did cut the answer


def _poison_batch() -> bytearray:
    from lkstream.format.batch import compute_crc
    from lkstream.format.codec import encode_batch

    batch = encode_batch([(None, b"x"), (None, b"y")])
    struct.pack_into(">ii", batch, 23, 2, 0)  # last_offset_delta 2 (records_count patched below)
    struct.pack_into(">i", batch, 57, 3)  # records_count 3 over 2 records
    struct.pack_into(">I", batch, 17, compute_crc(batch))
    return batch


def test_a_record_batch_whose_records_do_not_match_its_header_is_invalid_argument(daemon: DaemonProcess) -> None:
    """Finding 2: the batch of the report (header 3 records, 2 present, CRC recomputed) is refused."""
    channel, stub = _stub(daemon)
    with channel:
        with pytest.raises(grpc.RpcError) as info:
            stub.Produce(pb.ProduceRequest(topic="t", partition=0, record_batch=bytes(_poison_batch())))
        assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "records_count is 3 but the batch holds 2" in (info.value.details() or "")
        described = stub.Admin(pb.AdminRequest(describe_topic=pb.DescribeTopic(name="t")))
        assert described.topic.partition_stats[0].next_offset == 0


def test_a_poison_batch_already_on_disk_never_blocks_the_records_before_it(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    """Finding 2: Fetch, Subscribe, HTTP consume and the CLI deliver the good records, then report the damage."""
    data = tmp_path / "data"
    with Broker(persist_dir=str(data)) as broker:  # as the daemon before the fix would have stored it
        broker.produce_many_sync("t", [(None, b"good1"), (None, b"good2")])
        broker.partition("t", 0).append_batch(_poison_batch())
    daemon = start_daemon(data)
    channel, stub = _stub(daemon)
    with channel:
        fetched = stub.Fetch(pb.FetchRequest(topic="t", partition=0, offset=0))
        assert [r.value for r in fetched.records] == [b"good1", b"good2"]
        with pytest.raises(grpc.RpcError) as info:
            stub.Fetch(pb.FetchRequest(topic="t", partition=0, offset=2))
        assert info.value.code() is grpc.StatusCode.DATA_LOSS
        stream = stub.Subscribe(pb.FetchRequest(topic="t", partition=0, offset=0))
        got = []
        with pytest.raises(grpc.RpcError) as info:
            for record in stream:
                got.append(record.value)
        assert got == [b"good1", b"good2"] and info.value.code() is grpc.StatusCode.DATA_LOSS
    consumed = Api(daemon.http_address).post("/consume", {"partitions": [{"topic": "t", "partition": 0}]})
    assert [r["value"] for r in consumed.body["partitions"][0]["records"]] == ["good1", "good2"]
    cli = subprocess.run(
        [sys.executable, "-m", "lkstream.cli", "consume", "t", "--bootstrap", daemon.address, "--output", "raw"],
        capture_output=True,
        text=True,
        env=daemon.env,
        timeout=60,
        check=False,
    )
    assert cli.stdout.splitlines() == ["good1", "good2"], cli.stderr
    assert cli.returncode != 0 and "corrupt" in cli.stderr.lower()


def test_a_topic_past_max_partitions_is_refused_at_once_and_the_daemon_restarts(
    start_daemon: DaemonFactory, restart_daemon: RestartDaemon
) -> None:
    """Finding 1: ``POST /topics {"partitions": 10000}`` answered 500 after 8 s and the daemon could not restart."""
    daemon = start_daemon(max_partitions=4096)
    api = Api(daemon.http_address)
    refused = api.post("/topics", {"name": "huge", "partitions": 10_000})
    # A limit reached, not a bad argument (issue 28, finding 6): 409 / RESOURCE_EXHAUSTED.
    assert refused.status == 409 and refused.error_code == "partition_limit", refused.body
    assert "max_partitions is 4096" in refused.body["error"]["message"]
    channel, stub = _stub(daemon)
    with channel:
        with pytest.raises(grpc.RpcError) as info:
            stub.Admin(pb.AdminRequest(create_topic=pb.CreateTopic(name="huge", partitions=5000)))
        assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        stub.Admin(pb.AdminRequest(create_topic=pb.CreateTopic(name="wide", partitions=2000)))
        stub.Produce(pb.ProduceRequest(topic="wide", partition=1999, values=[b"last"]))
    assert daemon.terminate() == 0
    again = restart_daemon(daemon)
    channel, stub = _stub(again)
    with channel:
        assert list(stub.Admin(pb.AdminRequest(list_topics=pb.ListTopics())).topics) == ["wide"]
        fetched = stub.Fetch(pb.FetchRequest(topic="wide", partition=1999, offset=0))
        assert [r.value for r in fetched.records] == [b"last"]
