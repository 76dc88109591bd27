"""The daemon end to end: a real `python -m lkstream.grpc_server` subprocess on loopback."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

import lkstream
from lkstream import (
    BackpressureError,
    BrokerUnavailableError,
    InvalidArgumentError,
    LkstreamError,
    OffsetOutOfRangeError,
    ProtocolVersionError,
    RecordTooLargeError,
    TopicExistsError,
    UnknownTopicError,
)
from lkstream.format.codec import decode_batches, encode_batch
from lkstream.wire._proto import messaging_pb2 as pb
from lkstream.wire._proto import messaging_pb2_grpc as pb_grpc
from lkstream.wire.contract import VERSION_METADATA_KEY
from tests.integration.conftest import DaemonFactory, DaemonProcess

pytestmark = pytest.mark.timeout(120)


def raw_stub(daemon: DaemonProcess) -> tuple[grpc.Channel, pb_grpc.BrokerStub]:
    channel = grpc.insecure_channel(daemon.address)
    return channel, pb_grpc.BrokerStub(channel)


def status_of(call: object) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as info:
        call()  # type: ignore[operator]
    return info.value.code()  # type: ignore[attr-defined,no-any-return]


# -- round trips ---------------------------------------------------------------------------------


def test_produce_and_fetch_round_trip_through_connect(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as broker:
        results = broker.produce_many_sync("ticks", [(b"AAPL", b'{"p":1}'), (None, b'{"p":2}'), ("MSFT", "x")])
        assert results == [(0, 0), (0, 1), (0, 2)]
        fetched = broker.fetch("ticks", 0, 0)
        assert (fetched.log_start_offset, fetched.high_watermark) == (0, 3)
        records = decode_batches(fetched.data, "ticks", 0)
        assert [(r.offset, r.key, r.value) for r in records] == [
            (0, b"AAPL", b'{"p":1}'),
            (1, None, b'{"p":2}'),
            (2, b"MSFT", b"x"),
        ]
        assert [r.value for r in broker.read_from("ticks", 0, 1, max_msgs=1)] == [b'{"p":2}']


async def test_async_produce_routes_keys_like_the_embedded_broker(daemon: DaemonProcess, tmp_path: Path) -> None:
    records = [(f"key-{i}".encode(), f"v{i}".encode()) for i in range(200)]
    async with lkstream.connect(daemon.address) as remote:
        remote.create_topic("keyed", 3)
        results = await remote.produce_many("keyed", records)
        assert {pid for pid, _ in results} == {0, 1, 2}
        with lkstream.Broker(persist_dir=str(tmp_path / "embedded"), partitions=3) as embedded:
            embedded.create_topic("keyed", 3)
            expected = await embedded.produce_many("keyed", records)
        assert [pid for pid, _ in results] == [pid for pid, _ in expected]
        for pid in range(3):
            got = [r.value for r in remote.read_from("keyed", pid, 0)]
            assert got == [records[i][1] for i, (p, _) in enumerate(results) if p == pid]
        description = remote.describe_topic("keyed")
        assert sum(p.next_offset for p in description.partitions) == 200
        assert remote.list_topics() == ["keyed"]


def test_large_calls_are_split_into_batches_and_pre_encoded_batches_append_as_is(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address, batch_bytes=4096) as broker:
        results = broker.produce_many_sync("big", [(None, bytes([i % 256]) * 100) for i in range(500)])
        assert [offset for _, offset in results] == list(range(500))
        base, last = broker.produce_batch_sync("big", 0, encode_batch([(None, b"a"), (None, b"b")]))
        assert (base, last) == (500, 501)
        assert broker.describe_topic("big").partitions[0].next_offset == 502


def test_a_client_built_from_the_seed_proto_alone_works(daemon: DaemonProcess, tmp_path: Path) -> None:
    script = Path(__file__).with_name("seed_client.py")
    out = subprocess.run(
        [sys.executable, str(script), daemon.address, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["partition"] == 0
    assert result["offsets"] == [0, 1, 2]
    assert [r[:3] for r in result["fetched"]] == [[0, "AAPL", "p=1"], [1, "AAPL", "p=2"], [2, "AAPL", "p=3"]]
    assert all(r[3] > 1_600_000_000_000 for r in result["fetched"])  # milliseconds since the epoch
    assert result["streamed"] == [1, 2]


# -- error codes ---------------------------------------------------------------------------------


def test_unknown_topic_is_not_found(daemon: DaemonProcess) -> None:
    channel, stub = raw_stub(daemon)
    with channel:
        assert status_of(lambda: stub.Fetch(pb.FetchRequest(topic="nope"))) is grpc.StatusCode.NOT_FOUND
    with lkstream.connect(daemon.address) as broker, pytest.raises(UnknownTopicError, match="nope"):
        broker.fetch("nope", 0, 0)


def test_bad_arguments_are_invalid_argument(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as broker:
        broker.create_topic("t", 1)
        with pytest.raises(TopicExistsError):
            broker.create_topic("t", 1)
        with pytest.raises(InvalidArgumentError, match="partition 7"):
            broker.fetch("t", 7, 0)
        with pytest.raises(InvalidArgumentError):
            broker.produce_many_sync("bad/name", [(None, b"x")])
        with pytest.raises(RecordTooLargeError) as info:
            broker.produce_many_sync("t", [(None, b"x" * (2 * 1024 * 1024))])
        assert info.value.limit == 1024 * 1024
        with pytest.raises(InvalidArgumentError, match="producer batch"):
            broker.produce_batch_sync("t", 0, b"\x00" * 80)
    channel, stub = raw_stub(daemon)
    with channel:
        code = status_of(lambda: stub.Fetch(pb.FetchRequest(topic="t", partition=7)))
        assert code is grpc.StatusCode.INVALID_ARGUMENT
        too_large = pb.ProduceRequest(topic="t", values=[b"x" * (2 * 1024 * 1024)])
        assert status_of(lambda: stub.Produce(too_large)) is grpc.StatusCode.INVALID_ARGUMENT


def test_offsets_outside_the_log_are_out_of_range_with_bounds(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as broker:
        broker.produce_many_sync("t", [(None, b"a"), (None, b"b")])
        with pytest.raises(OffsetOutOfRangeError, match="earliest is 0, latest is 2") as info:
            broker.fetch("t", 0, 10)
        assert (info.value.earliest, info.value.latest, info.value.offset) == (0, 2, 10)
    channel, stub = raw_stub(daemon)
    with channel:
        code = status_of(lambda: stub.Fetch(pb.FetchRequest(topic="t", offset=10)))
        assert code is grpc.StatusCode.OUT_OF_RANGE


async def test_backpressure_is_resource_exhausted_with_the_limit(start_daemon: DaemonFactory) -> None:
    daemon = start_daemon(fsync_mode="sync", max_inflight_bytes=1)
    async with lkstream.connect(daemon.address) as broker:
        calls = [broker.produce_many("t", [(None, b"x" * 1000)], partition=0) for _ in range(50)]
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    assert errors, "50 concurrent sync-mode produces should exceed max_inflight_bytes=1"
    assert all(isinstance(e, BackpressureError) for e in errors), errors
    assert all(e.limit == 1 and e.retriable for e in errors if isinstance(e, BackpressureError))
    assert "max_inflight_bytes=1" in str(errors[0])


def test_an_unreachable_daemon_is_reported_with_its_address() -> None:
    with pytest.raises(BrokerUnavailableError, match=r"127\.0\.0\.1:1\b") as info:
        lkstream.connect("127.0.0.1:1", connect_timeout=2)
    assert info.value.retriable


def test_protocol_version_mismatch_is_failed_precondition(daemon: DaemonProcess) -> None:
    with pytest.raises(ProtocolVersionError, match=r"client protocol version 99.*server speaks protocol version 1"):
        lkstream.connect(daemon.address, protocol_version=99)
    channel, stub = raw_stub(daemon)
    with channel:
        code = status_of(
            lambda: stub.Admin(pb.AdminRequest(list_topics=pb.ListTopics()), metadata=((VERSION_METADATA_KEY, "99"),))
        )
        assert code is grpc.StatusCode.FAILED_PRECONDITION
        response = stub.Handshake(pb.HandshakeRequest(client_protocol_version=1))
        assert response.server_protocol_version == 1


def test_health_check_reports_serving(daemon: DaemonProcess) -> None:
    with grpc.insecure_channel(daemon.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "lkstream.Broker"):
            response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert response.status == health_pb2.HealthCheckResponse.SERVING


# -- Subscribe -----------------------------------------------------------------------------------


async def test_subscribe_receives_records_appended_after_it_started(daemon: DaemonProcess) -> None:
    async with lkstream.connect(daemon.address) as broker:
        await broker.produce_many("live", [(None, b"before")])
        received: list[bytes | None] = []
        got_three = asyncio.Event()

        async def listen() -> None:
            async for record in broker.subscribe("live", 0, 0):
                received.append(record.value)
                if len(received) == 3:
                    got_three.set()
                    return

        task = asyncio.create_task(listen())
        await asyncio.sleep(0.2)  # the stream is open and waiting at offset 1
        await broker.produce_many("live", [(None, b"after-1"), (None, b"after-2")])
        await asyncio.wait_for(got_three.wait(), 10)
        await task
    assert received == [b"before", b"after-1", b"after-2"]


async def test_subscribe_gives_up_with_unavailable_when_the_daemon_stays_down(daemon: DaemonProcess) -> None:
    # A stream waits out a restart for retry_timeout_s (tests/integration/test_reconnect.py), then says so.
    async with lkstream.connect(daemon.address, retry_timeout_s=1.0) as broker:
        await broker.produce_many("live", [(None, b"x")])
        stream = broker.subscribe("live", 0, 1)
        waiting = asyncio.create_task(stream.__anext__())
        await asyncio.sleep(0.2)
        assert await asyncio.to_thread(daemon.terminate) == 0
        with pytest.raises(LkstreamError) as info:
            await asyncio.wait_for(waiting, 10)
        assert isinstance(info.value, lkstream.BrokerClosedError | BrokerUnavailableError)


async def test_subscribe_batches_pushes_whole_batches_from_inside_a_batch(daemon: DaemonProcess) -> None:
    async with lkstream.connect(daemon.address) as broker:
        broker.create_topic("pushed", 1)
        await broker.produce_many("pushed", [(None, b"a"), (None, b"b"), (None, b"c")])  # one batch, offsets 0-2
        stream = broker.subscribe_batches("pushed", 0, 1)
        first = await asyncio.wait_for(stream.__anext__(), 10)
        # The batch holding offset 1 comes whole; the caller decodes from offset 1.
        assert [r.value for r in decode_batches(first.data, "pushed", 0)] == [b"a", b"b", b"c"]
        assert [r.value for r in decode_batches(first.data, "pushed", 0, 1)] == [b"b", b"c"]
        assert (first.log_start_offset, first.high_watermark) == (0, 3)
        later = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0.1)
        assert not later.done()  # nothing new yet: the stream waits for an append
        await broker.produce_many("pushed", [(None, b"d")])
        second = await asyncio.wait_for(later, 10)
        assert [(r.offset, r.value) for r in decode_batches(second.data, "pushed", 0)] == [(3, b"d")]
        assert second.high_watermark == 4
        await stream.aclose()


async def test_subscribe_batches_refuses_an_offset_past_the_end(daemon: DaemonProcess) -> None:
    async with lkstream.connect(daemon.address) as broker:
        broker.create_topic("short", 1)
        await broker.produce_many("short", [(None, b"x")])
        with pytest.raises(OffsetOutOfRangeError, match="earliest is 0, latest is 1"):
            await anext(broker.subscribe_batches("short", 0, 5))


# -- shutdown --------------------------------------------------------------------------------------


def test_sigterm_under_load_keeps_every_acknowledged_record(start_daemon: DaemonFactory, tmp_path: Path) -> None:
    data = tmp_path / "durable"
    daemon = start_daemon(data_dir=data)
    acked: list[tuple[int, int, bytes]] = []
    started = threading.Event()

    def produce() -> None:
        with lkstream.connect(daemon.address) as broker:
            n = 0
            while True:
                values = [f"r{n + i}".encode() for i in range(50)]
                try:
                    results = broker.produce_many_sync("load", [(None, v) for v in values])
                except LkstreamError:
                    return
                acked.extend((pid, off, v) for (pid, off), v in zip(results, values, strict=True))
                n += 50
                started.set()

    worker = threading.Thread(target=produce)
    worker.start()
    assert started.wait(20)
    threading.Event().wait(0.5)
    assert daemon.terminate() == 0, "".join(daemon.output)
    worker.join(30)
    assert acked
    assert "stopped cleanly" in "".join(daemon.output)

    restarted = start_daemon(data_dir=data)
    with lkstream.connect(restarted.address) as broker:
        stored: dict[int, bytes | None] = {}
        offset = 0
        while True:
            records = broker.read_from("load", 0, offset)
            if not records:
                break
            stored.update((r.offset, r.value) for r in records)
            offset = records[-1].offset + 1
    missing = [(off, v) for _, off, v in acked if stored.get(off) != v]
    assert not missing, f"{len(missing)} acknowledged records lost, first {missing[:3]}"


# -- HTTP: health, readiness, metrics ----------------------------------------------------------------


def http_get(daemon: DaemonProcess, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://{daemon.http_address}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def produced_total(metrics_text: str, topic: str) -> float:
    pattern = rf'^lk_produced_total\{{[^}}]*topic="{re.escape(topic)}"[^}}]*\}} (\S+)$'
    return sum(float(m.group(1)) for m in re.finditer(pattern, metrics_text, re.MULTILINE))


def test_http_health_and_readiness_once_the_daemon_is_ready(daemon: DaemonProcess) -> None:
    assert daemon.http_address and not daemon.http_address.endswith(":0")
    assert http_get(daemon, "/healthz") == (200, "ok\n")
    assert http_get(daemon, "/ready") == (200, "ready\n")


def test_metrics_move_as_records_flow_through_connect(daemon: DaemonProcess) -> None:
    status, before = http_get(daemon, "/metrics")
    assert status == 200
    assert produced_total(before, "flow") == 0
    with lkstream.connect(daemon.address) as broker:
        broker.produce_many_sync("flow", [(None, f"v{i}".encode()) for i in range(25)])
        broker.produce_many_sync("flow", [(None, b"more")] * 5)
        broker.read_from("flow", 0, 0)
        broker.commit_offset("g1", "flow", 0, 30)
        with pytest.raises(UnknownTopicError):
            broker.fetch("missing", 0, 0)
    _, after = http_get(daemon, "/metrics")
    assert produced_total(after, "flow") == 30
    assert 'lk_partition_next_offset{partition="0",topic="flow"} 30.0' in after
    assert 'lk_partition_committed_offset{group="g1",partition="0",topic="flow"} 30.0' in after
    assert 'lk_request_errors_total{code="NOT_FOUND"} 1.0' in after
    assert re.search(r"^lk_produce_latency_seconds_count (\S+)$", after, re.MULTILINE)
    assert float(re.findall(r"^lk_produce_latency_seconds_count (\S+)$", after, re.MULTILINE)[0]) >= 2
    assert float(re.findall(r"^lk_fetch_latency_seconds_count (\S+)$", after, re.MULTILINE)[0]) >= 1


def test_fetch_naming_a_group_counts_consumed_records(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as broker:
        broker.produce_many_sync("eaten", [(None, b"a"), (None, b"b"), (None, b"c")])
    channel, stub = raw_stub(daemon)
    with channel:
        stub.Fetch(pb.FetchRequest(topic="eaten", offset=1, group="readers"))
        stub.Fetch(pb.FetchRequest(topic="eaten", offset=0, raw_batches=True, group="readers"))
        stub.Fetch(pb.FetchRequest(topic="eaten", offset=0))  # no group: not counted
    _, text = http_get(daemon, "/metrics")
    assert 'lk_consumed_total{group="readers",partition="0",topic="eaten"} 5.0' in text


def test_sigterm_exits_0_and_stops_http(daemon: DaemonProcess) -> None:
    assert http_get(daemon, "/ready")[0] == 200
    assert daemon.terminate() == 0, "".join(daemon.output)
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://{daemon.http_address}/healthz", timeout=2)
