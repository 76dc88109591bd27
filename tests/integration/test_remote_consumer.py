"""The Consumer over ``lkstream.connect()``: seed section 7 against a real daemon.

Waits are checked with deadlines and events, never by sleep-polling: the consumer
is known to be waiting because its source's wait method was entered.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

import lkstream
from lkstream import Consumer, InvalidArgumentError, OffsetStore, UnknownTopicError
from lkstream.client.consumer import ConsumerSource
from lkstream.client.remote import RemoteBroker
from lkstream.format.codec import Record
from lkstream.wire._proto import messaging_pb2 as pb
from lkstream.wire._proto import messaging_pb2_grpc as pb_grpc
from tests.integration.conftest import DaemonProcess

pytestmark = pytest.mark.timeout(120)

TOPIC = "market.ticks"
WAKE_DEADLINE_S = 5.0


def _ticks(n: int, start: int = 0) -> list[tuple[str, bytes]]:
    return [(("AAPL", "TSLA", "IBM", "ORCL")[i % 4], b'{"p":%d}' % i) for i in range(start, start + n)]


def _spy_async_wait(broker: RemoteBroker) -> asyncio.Event:
    """An event set each time the consumer starts waiting for data on ``broker``."""
    entered = asyncio.Event()
    original = broker.wait_for_data

    async def wait_for_data(positions: dict[tuple[str, int], int], timeout: float | None = None) -> bool:
        entered.set()
        return await original(positions, timeout)

    broker.wait_for_data = wait_for_data  # type: ignore[method-assign]
    return entered


def test_remote_broker_is_a_consumer_source(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as broker:
        source: ConsumerSource = broker  # checked by mypy too
        assert isinstance(source, ConsumerSource)
        with pytest.raises(InvalidArgumentError, match="ConsumerSource"):
            Consumer(object(), group="g")  # type: ignore[arg-type]


async def test_seed_section_7_flow_and_resume_from_committed_offset(daemon: DaemonProcess) -> None:
    broker = lkstream.connect(daemon.address)  # instead of Broker(persist_dir=...)
    try:
        broker.create_topic(TOPIC, 3)
        res = await broker.produce_many(TOPIC, [("AAPL", b'{"p":123}')])
        assert res == [(res[0][0], 0)]
        await broker.produce_many(TOPIC, _ticks(29))

        seen: list[tuple[int, int, bytes | None]] = []

        async def handler(pid: int, offset: int, record: Record) -> None:
            seen.append((pid, offset, record.value))

        consumer = Consumer(broker, group="strategy-v1")
        consumer.subscribe(TOPIC, from_committed=True)
        assert consumer.assignment() == [(TOPIC, 0), (TOPIC, 1), (TOPIC, 2)]
        assert await consumer.consume(TOPIC, handler, idle_timeout=1.0) == 30
        assert len(set(seen)) == 30
        for pid in range(3):  # per-partition offset order
            offsets = [o for p, o, _ in seen if p == pid]
            assert offsets == sorted(offsets)
        # consume() committed on the way out: the offsets are in the daemon.
        ends = {pid: broker.bounds(TOPIC, pid)[1] for pid in range(3)}
        assert len([e for e in ends.values() if e]) > 1  # the keys spread over partitions
        assert broker.committed_offsets("strategy-v1", TOPIC) == ends
        assert consumer.committed(TOPIC, res[0][0]) == ends[res[0][0]]
        consumer.close()  # leave the group: the next member gets every partition at once
    finally:
        broker.close()

    # A second consumer of the group (another connection) resumes after the committed offsets.
    await_more = _ticks(6, start=100)
    with lkstream.connect(daemon.address) as again:
        second = Consumer(again, group="strategy-v1")
        second.subscribe(TOPIC, from_committed=True)
        assert {pid: second.position(TOPIC, pid) for pid in range(3)} == ends
        await again.produce_many(TOPIC, await_more)
        values: list[bytes | None] = []
        handled = await second.consume(TOPIC, lambda _p, _o, r: values.append(r.value), idle_timeout=1.0)
        assert handled == 6
        assert sorted(v or b"" for v in values) == sorted(v for _, v in await_more)

        # A third with another group starts from earliest (no commit), unaffected by strategy-v1.
        other = Consumer(again, group="backtest", auto_commit=False)
        other.subscribe(TOPIC)
        assert {pid: other.position(TOPIC, pid) for pid in range(3)} == dict.fromkeys(range(3), 0)


async def test_consume_wakes_on_new_data_within_a_deadline(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as broker:
        broker.create_topic("wake", 3)
        entered = _spy_async_wait(broker)
        consumer = Consumer(broker, group="g")
        consumer.subscribe("wake")
        got: list[Record] = []
        task = asyncio.create_task(
            consumer.consume("wake", lambda _p, _o, r: got.append(r), max_records=1, idle_timeout=60)
        )
        await asyncio.wait_for(entered.wait(), WAKE_DEADLINE_S)  # the consumer is waiting (long poll)
        started = time.monotonic()
        await broker.produce_many("wake", [(b"x", b"late")], partition=2)
        assert await asyncio.wait_for(task, WAKE_DEADLINE_S) == 1
        assert time.monotonic() - started < WAKE_DEADLINE_S
        assert [(r.partition, r.offset, r.value) for r in got] == [(2, 0, b"late")]
        assert broker.committed_offsets("g", "wake") == {0: 0, 1: 0, 2: 1}


async def test_read_ahead_keeps_order_across_many_fetches_and_a_seek(daemon: DaemonProcess) -> None:
    """Remote consume reads the next range while decoding this one; order and seeks are unaffected."""
    with lkstream.connect(daemon.address) as broker:
        broker.create_topic("ahead", 1)
        for start in range(0, 2000, 100):  # 20 batches
            await broker.produce_many("ahead", [(None, b"%d" % i) for i in range(start, start + 100)], partition=0)
        fetched: list[int] = []
        original = broker.fetch_async

        async def fetch_async(topic: str, partition: int, offset: int, max_bytes: int = 1 << 20) -> Any:
            fetched.append(offset)
            return await original(topic, partition, offset, max_bytes)

        broker.fetch_async = fetch_async  # type: ignore[method-assign]
        consumer = Consumer(broker, group="g", auto_commit=False, fetch_max_bytes=4096)  # a few batches per fetch
        consumer.subscribe("ahead")
        seen: list[int] = []

        def handler(_pid: int, offset: int, record: Record) -> None:
            assert record.value == b"%d" % offset
            seen.append(offset)
            if offset == 1234 and len(seen) == 1235:
                consumer.seek("ahead", 0, 100)  # back: the read-ahead past 1234 is discarded

        assert await consumer.consume("ahead", handler, max_records=2000 + 1135, idle_timeout=5) == 3135
        assert seen == list(range(0, 1235)) + list(range(100, 2000))
        # Every read but the first of each run was asked for before its predecessor was decoded.
        assert len(fetched) > 2 and fetched[0] == 0 and 100 in fetched


async def test_consume_returns_after_idle_timeout_without_data(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as broker:
        broker.create_topic("quiet", 2)
        consumer = Consumer(broker, group="g")
        started = time.monotonic()
        assert await consumer.consume("quiet", lambda *_: None, idle_timeout=0.3) == 0
        assert 0.25 <= time.monotonic() - started < WAKE_DEADLINE_S


def test_poll_over_remote_waits_and_wakes(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as broker:
        broker.create_topic("polled", 2)
        broker.produce_many_sync("polled", [(None, b"a"), (None, b"b")], partition=0)
        consumer = Consumer(broker, group="g", auto_commit=False)
        consumer.subscribe("polled")
        assert [r.value for r in consumer.poll(timeout=1.0)] == [b"a", b"b"]

        started = time.monotonic()
        assert consumer.poll(timeout=0.3) == []
        assert 0.25 <= time.monotonic() - started < WAKE_DEADLINE_S

        entered = threading.Event()
        original = broker.wait_for_data_sync

        def wait_for_data_sync(positions: dict[tuple[str, int], int], timeout: float | None = None) -> bool:
            entered.set()
            return original(positions, timeout)

        broker.wait_for_data_sync = wait_for_data_sync  # type: ignore[method-assign]
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            polled = pool.submit(consumer.poll, 60.0)
            assert entered.wait(WAKE_DEADLINE_S)
            started = time.monotonic()
            broker.produce_many_sync("polled", [(None, b"c")], partition=1)
            records = polled.result(WAKE_DEADLINE_S)
        assert time.monotonic() - started < WAKE_DEADLINE_S
        assert [(r.partition, r.offset, r.value) for r in records] == [(1, 0, b"c")]
        consumer.commit()
        assert broker.committed_offsets("g", "polled") == {0: 2, 1: 1}


def test_offset_store_is_ignored_with_a_remote_broker(
    daemon: DaemonProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    local = OffsetStore(str(tmp_path / "local-offsets"))
    with lkstream.connect(daemon.address) as broker, caplog.at_level(logging.WARNING, "lkstream.consumer"):
        broker.produce_many_sync("ignored", [(None, b"1"), (None, b"2")], partition=0)
        consumer = Consumer(broker, group="g", offset_store=local)
        assert "offset_store is ignored" in caplog.text
        consumer.subscribe("ignored")
        assert len(consumer.poll(timeout=1.0)) == 2
        consumer.close()
        assert broker.read_committed("g", "ignored", 0) == 2
    assert local.read_committed("g", "ignored", 0) is None


def test_fetch_committed_offsets_errors(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as broker:
        with pytest.raises(UnknownTopicError):
            broker.committed_offsets("g", "missing")
        broker.create_topic("two", 2)
        with pytest.raises(InvalidArgumentError):
            broker.committed_offsets("g", "two", [5])
        with pytest.raises(InvalidArgumentError):
            broker.committed_offsets("", "two")  # any other group id is Kafka's (issue 24)
        assert broker.read_committed("g", "two", 1) is None
        broker.commit_offset("g", "two", 1, 0)
        assert broker.committed_offsets("g", "two") == {1: 0}


def test_long_poll_fetch_waits_for_the_append(daemon: DaemonProcess) -> None:
    channel = grpc.insecure_channel(daemon.address)
    stub: Any = pb_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]
    try:
        with lkstream.connect(daemon.address) as broker:
            broker.create_topic("lp", 1)
            request = pb.FetchRequest(topic="lp", partition=0, offset=0, raw_batches=True, max_wait_ms=300)
            started = time.monotonic()
            empty = stub.Fetch(request, timeout=10)
            assert (empty.high_watermark, empty.record_batches) == (0, b"")
            assert 0.25 <= time.monotonic() - started < WAKE_DEADLINE_S

            waiting = stub.Fetch.future(_with_wait(request, 60_000), timeout=30)
            broker.produce_many_sync("lp", [(None, b"v")])
            answer = waiting.result(WAKE_DEADLINE_S)
            assert answer.high_watermark == 1 and answer.record_batches
    finally:
        channel.close()


def _with_wait(request: pb.FetchRequest, max_wait_ms: int) -> pb.FetchRequest:
    copy = pb.FetchRequest()
    copy.CopyFrom(request)
    copy.max_wait_ms = max_wait_ms
    return copy
