"""ProduceStream and FetchStream against a real daemon: answers in request order, per-request errors, fallbacks.

The raw-stub tests speak the wire protocol directly (a request iterator in, answers
out), as a client in another language would; the others go through
``lkstream.connect``, whose produce and fetch ride these streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

import lkstream
from lkstream.broker.broker import Broker
from lkstream.broker.metrics import BrokerMetrics
from lkstream.errors import BrokerUnavailableError, InvalidArgumentError, UnknownTopicError
from lkstream.format.codec import decode_batches, encode_batch
from lkstream.server.grpc.server import BrokerService
from lkstream.wire._proto import messaging_pb2 as pb
from lkstream.wire._proto import messaging_pb2_grpc as pb_grpc
from lkstream.wire.streams import StreamAnswer
from tests.integration.conftest import DaemonFactory, DaemonProcess

pytestmark = pytest.mark.timeout(120)


def _batch(*values: bytes) -> bytes:
    return bytes(encode_batch([(None, v) for v in values]))


@pytest.fixture
def stub(daemon: DaemonProcess) -> Iterator[Any]:
    with grpc.insecure_channel(daemon.address) as channel:
        yield pb_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]


def test_produce_stream_answers_every_request_in_order_and_goes_on_after_a_refused_one(
    daemon: DaemonProcess, stub: Any
) -> None:
    with lkstream.connect(daemon.address) as rb:
        rb.create_topic("s.order", 2)
    requests = [
        pb.ProduceRequest(topic="s.order", partition=0, record_batch=_batch(b"a", b"b")),
        pb.ProduceRequest(topic="s.order", partition=0, record_batch=b"\x00" * 80),  # not a batch
        pb.ProduceRequest(topic="s.order", partition=7, record_batch=_batch(b"c")),  # no such partition
        pb.ProduceRequest(topic="s.order", partition=0, values=[b"seed-style"]),  # not a record_batch
        pb.ProduceRequest(topic="s.order", partition=0, record_batch=_batch(b"d")),
    ]
    answers = list(stub.ProduceStream(iter(requests), timeout=30))
    assert len(answers) == len(requests)
    assert (answers[0].partition, answers[0].base_offset, answers[0].last_offset) == (0, 0, 1)
    for refused in answers[1:4]:
        assert refused.HasField("error")
        assert StreamAnswer(refused.error).code() is grpc.StatusCode.INVALID_ARGUMENT
        assert refused.error.error_class == "InvalidArgumentError"
    assert "partition" in answers[2].error.message
    assert (answers[4].base_offset, answers[4].last_offset) == (2, 2)
    assert not answers[4].HasField("error")


def test_produce_stream_appends_pipelined_requests_in_the_order_they_were_sent(
    daemon: DaemonProcess, stub: Any
) -> None:
    requests = [
        pb.ProduceRequest(topic="s.pipe", record_batch=_batch(*(f"{n}-{i}".encode() for i in range(10))))
        for n in range(100)
    ]
    answers = list(stub.ProduceStream(iter(requests), timeout=30))  # all written before the first is read
    assert [a.base_offset for a in answers] == [10 * n for n in range(100)]
    with lkstream.connect(daemon.address) as rb:
        records = rb.read_from("s.pipe", 0, 0, max_bytes=1 << 20)
    assert [r.value for r in records] == [f"{n}-{i}".encode() for n in range(100) for i in range(10)]


def test_an_unknown_topic_fails_its_own_request_only(start_daemon: DaemonFactory) -> None:
    daemon = start_daemon(auto_create_topics=False)
    with lkstream.connect(daemon.address) as rb:
        rb.create_topic("s.known", 1)
        with pytest.raises(UnknownTopicError):
            rb.produce_many_sync("s.missing", [(None, b"x")])
        assert rb.produce_many_sync("s.known", [(None, b"y")]) == [(0, 0)]  # the same stream goes on


def test_appends_of_a_stream_the_client_abandons_give_their_in_flight_bytes_back(
    start_daemon: DaemonFactory,
) -> None:
    daemon = start_daemon(fsync_mode="sync")  # acknowledgements wait for an fsync: answers lag appends
    requests = [pb.ProduceRequest(topic="s.gone", record_batch=_batch(b"x" * 100_000)) for _ in range(12)]
    with grpc.insecure_channel(daemon.address) as channel:
        call = pb_grpc.BrokerStub(channel).ProduceStream(iter(requests), timeout=30)  # type: ignore[no-untyped-call]
        next(call)  # the daemon is appending them
        call.cancel()  # and nobody will read the answers
    deadline = time.monotonic() + 20
    while (inflight := _inflight_bytes(daemon)) != 0:
        assert time.monotonic() < deadline, f"{inflight} bytes still in flight after the client left"
        time.sleep(0.05)
    with lkstream.connect(daemon.address) as rb:
        assert rb.describe_topic("s.gone").partitions[0].high_watermark >= 1


def _metric(daemon: DaemonProcess, name: str) -> float:
    with urllib.request.urlopen(f"http://{daemon.http_address}/metrics", timeout=10) as response:
        text = response.read().decode()
    match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} is missing from /metrics"
    return float(match.group(1))


def _inflight_bytes(daemon: DaemonProcess) -> float:
    return _metric(daemon, "lk_inflight_bytes")


async def test_a_wake_up_brings_the_new_batches_so_the_next_fetch_asks_nothing(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as rb:
        rb.produce_many_sync("s.park", [(None, b"old")])

        async def append_soon() -> None:
            await asyncio.sleep(0.3)
            await asyncio.to_thread(rb.produce_many_sync, "s.park", [(None, b"new 1"), (None, b"new 2")])

        writer = asyncio.ensure_future(append_soon())
        assert await rb.wait_for_data({("s.park", 0): 1}, timeout=30)
        await writer
        fetches = _metric(daemon, "lk_fetch_latency_seconds_count")
        fetched = await rb.fetch_async("s.park", 0, 1)
        assert [r.value for r in decode_batches(fetched.data, "s.park", 0, 1)] == [b"new 1", b"new 2"]
        assert _metric(daemon, "lk_fetch_latency_seconds_count") == fetches  # served by the wake-up's answer
        # Only once, only at that offset: the next fetch asks the daemon again.
        again = await rb.fetch_async("s.park", 0, 1)
        assert again.data == fetched.data
        assert _metric(daemon, "lk_fetch_latency_seconds_count") == fetches + 1


def test_fetch_stream_answers_each_fetch_like_the_unary_call(daemon: DaemonProcess, stub: Any) -> None:
    with lkstream.connect(daemon.address) as rb:
        rb.produce_many_sync("s.fetch", [(None, f"v{i}".encode()) for i in range(5)])
    requests = [
        pb.FetchRequest(topic="s.fetch", partition=0, offset=2, raw_batches=True),
        pb.FetchRequest(topic="s.fetch", partition=0, offset=99, raw_batches=True),  # past the end
        pb.FetchRequest(topic="s.nope", partition=0, offset=0, raw_batches=True),
        pb.FetchRequest(topic="s.fetch", partition=0, offset=0, raw_batches=True),
    ]
    answers = list(stub.FetchStream(iter(requests), timeout=30))
    values = [r.value for r in decode_batches(answers[0].record_batches, "s.fetch", 0, 2)]
    assert values == [b"v2", b"v3", b"v4"] and answers[0].high_watermark == 5
    assert StreamAnswer(answers[1].error).code() is grpc.StatusCode.OUT_OF_RANGE
    assert StreamAnswer(answers[2].error).code() is grpc.StatusCode.NOT_FOUND
    assert len(decode_batches(answers[3].record_batches, "s.fetch", 0, 0)) == 5


def test_threads_producing_through_one_client_share_its_stream_and_lose_nothing(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as rb:
        rb.create_topic("s.threads", 1)

        def produce(worker: int) -> None:
            for n in range(50):
                rb.produce_many_sync("s.threads", [(None, f"{worker}:{n}:{i}".encode()) for i in range(20)])

        threads = [threading.Thread(target=produce, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        records = []
        while len(records) < 4 * 50 * 20:
            batch = rb.read_from("s.threads", 0, len(records))
            assert batch, f"only {len(records)} records"
            records.extend(batch)
    by_worker: dict[str, list[tuple[int, int]]] = {}
    for record in records:
        worker, n, i = record.value.decode().split(":")
        by_worker.setdefault(worker, []).append((int(n), int(i)))
    assert sorted(by_worker) == ["0", "1", "2", "3"]
    for sent in by_worker.values():  # each thread's records in the order it sent them
        assert sent == [(n, i) for n in range(50) for i in range(20)]


def test_a_client_used_from_many_event_loops_closes_without_grpc_errors(
    daemon: DaemonProcess, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    rb = lkstream.connect(daemon.address)
    rb.produce_many_sync("s.loops", [(None, b"sync first")])
    for n in range(3):  # each asyncio.run ends its loop while the client lives on

        async def produce(n: int = n) -> None:
            await rb.produce_many("s.loops", [(None, f"async {n}".encode())])

        asyncio.run(produce())
    rb.produce_many_sync("s.loops", [(None, b"sync last")])
    rb.close()
    time.sleep(0.5)  # late gRPC events for a closed loop would be logged by now
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def test_a_stalled_daemon_fails_the_request_after_the_client_timeout(start_daemon: DaemonFactory) -> None:
    daemon = start_daemon()
    assert daemon.process is not None
    with lkstream.connect(daemon.address, timeout=1.0, retries=0) as rb:
        rb.produce_many_sync("s.stall", [(None, b"before")])
        os.kill(daemon.process.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            with pytest.raises(BrokerUnavailableError):
                rb.produce_many_sync("s.stall", [(None, b"during")])
            assert time.monotonic() - started < 10
        finally:
            os.kill(daemon.process.pid, signal.SIGCONT)
        # A new stream is opened for the next request.
        assert rb.produce_many_sync("s.stall", [(None, b"after")])[0][0] == 0


def test_streams_the_daemon_ends_as_idle_while_the_client_writes_lose_and_duplicate_nothing(
    start_daemon: DaemonFactory,
) -> None:
    # An idle timeout as short as the pause between produces: the daemon often ends the stream just as
    # the client writes the next request (the write fails, or the request is in flight and never read).
    idle_s = 0.05
    daemon = start_daemon(grpc_idle_timeout_s=idle_s)
    count = 120
    with lkstream.connect(daemon.address) as rb:
        rb.create_topic("s.idle", 1)
        for n in range(count):
            assert rb.produce_many_sync("s.idle", [(None, str(n).encode())]) == [(0, n)]
            time.sleep(idle_s * (0.8 + 0.4 * (n % 5) / 4))
        records = []
        while len(records) < count:
            batch = rb.read_from("s.idle", 0, len(records))
            assert batch, f"only {len(records)} records"
            records.extend(batch)
        assert rb.bounds("s.idle", 0) == (0, count)
    assert [int(r.value or b"") for r in records] == list(range(count))


def test_a_stream_busy_for_several_idle_timeouts_is_not_ended(start_daemon: DaemonFactory) -> None:
    # The idle watchdog fires once per timeout; a stream that got a request meanwhile is looked at again, not ended.
    idle_s = 0.5
    daemon = start_daemon(grpc_idle_timeout_s=idle_s)
    with lkstream.connect(daemon.address) as rb:
        rb.create_topic("s.busy", 1)
    with grpc.insecure_channel(daemon.address) as channel:
        stub = pb_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]

        def paced() -> Iterator[pb.ProduceRequest]:
            for n in range(12):  # 12 x 0.3 s: over seven idle timeouts, never one of them without a request
                yield pb.ProduceRequest(topic="s.busy", partition=0, record_batch=_batch(str(n).encode()))
                time.sleep(idle_s * 0.6)

        answers = list(stub.ProduceStream(paced(), timeout=60))
    assert [a.base_offset for a in answers] == list(range(12)), "the stream ended before the client was done"
    assert not any(a.HasField("error") for a in answers)


# -- a daemon without the streams (an older one) ----------------------------------------------------


class _OlderDaemon:
    """A real BrokerService over a real Broker, serving only the unary RPCs an older daemon had.

    Its Handshake names no streams; ProduceStream and FetchStream are not served at all
    (UNIMPLEMENTED), so a client that used them anyway would fail this test.
    """

    METHODS = ("Handshake", "Produce", "Fetch", "Admin")

    def __init__(self, data: str) -> None:
        self.broker = Broker(persist_dir=data)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.port = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(30)

    async def _start(self) -> int:
        service = BrokerService(self.broker, BrokerMetrics(self.broker), max_fetch_bytes=1 << 20)
        complete = pb_grpc.add_BrokerServicer_to_server  # the full table, to pick methods from
        handlers: dict[str, Any] = {}

        class Collect:
            def add_generic_rpc_handlers(self, generic: Any) -> None:
                pass  # the same handlers come again, by name, below

            def add_registered_method_handlers(self, service: str, methods: dict[str, Any]) -> None:
                handlers.update(methods)

        complete(service, Collect())
        self.server = grpc.aio.server()
        kept = {name: handlers[name] for name in self.METHODS}

        async def handshake(request: pb.HandshakeRequest, context: Any) -> pb.HandshakeResponse:
            answer = await service.Handshake(request, context)
            del answer.streams[:]  # an older daemon names no streams
            return answer

        kept["Handshake"] = grpc.unary_unary_rpc_method_handler(
            handshake,
            request_deserializer=pb.HandshakeRequest.FromString,
            response_serializer=pb.HandshakeResponse.SerializeToString,
        )
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("lkstream.Broker", kept),))
        port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        return port

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(None), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.broker.close()


def test_a_daemon_without_the_streams_is_asked_with_unary_calls(tmp_path: Any) -> None:
    older = _OlderDaemon(str(tmp_path / "data"))
    try:
        with lkstream.connect(f"127.0.0.1:{older.port}") as rb:
            assert rb.produce_many_sync("s.old", [(None, b"a"), (None, b"b")]) == [(0, 0), (0, 1)]

            async def both() -> list[tuple[int, int]]:
                fetched = await rb.fetch_async("s.old", 0, 0)
                assert len(decode_batches(fetched.data, "s.old", 0, 0)) == 2
                return await rb.produce_many("s.old", [(None, b"c")])

            assert asyncio.run(both()) == [(0, 2)]
            with pytest.raises(InvalidArgumentError):
                rb.produce_many_sync("s.old", [(None, b"x")], partition=5)
    finally:
        older.close()
    with contextlib.suppress(Exception):
        older.loop.close()
