"""The blocking produce of the remote client against a real daemon: the caller's thread, no hop.

``produce_many_sync`` and ``produce_batch_sync`` run in the caller's thread on the
synchronous channel's stream (:mod:`lkstream.client.remote.sync`). They keep what the
async path guarantees: errors mapped to :mod:`lkstream.errors`, at-least-once retries over a
daemon restart, per-partition order, many threads at once, and ``close()`` leaving no thread.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

import lkstream
from lkstream.errors import InvalidArgumentError, UnknownTopicError
from lkstream.format.codec import encode_batch
from lkstream.wire._proto import messaging_pb2 as pb
from tests.integration.conftest import DaemonProcess, RestartDaemon
from tests.integration.raw_sockets import established_connections

pytestmark = pytest.mark.timeout(180)
DEADLINE_S = 60.0


def _wait_for(what: str, condition: Callable[[], bool], deadline_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _values(rb: lkstream.RemoteBroker, topic: str, partition: int) -> list[bytes]:
    end = rb.bounds(topic, partition)[1]
    out: list[bytes] = []
    while len(out) < end:
        records = rb.read_from(topic, partition, len(out))
        assert records, f"{topic}[{partition}] stalled at {len(out)} of {end}"
        out.extend(r.value or b"" for r in records)
    return out


def test_blocking_produce_runs_in_the_callers_thread_not_on_the_clients_loop_thread(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as rb:
        rb.create_topic("b.thread", 2)
        assert rb.produce_many_sync("b.thread", [(None, b"a"), (None, b"b")], partition=1) == [(1, 0), (1, 1)]
        assert rb.produce_many_sync("b.thread", [("k", b"c")]) in ([(0, 0)], [(1, 2)])
        assert rb.produce_batch_sync("b.thread", 0, encode_batch([(None, b"d")]))[0] in (0, 1)
        loop_thread = f"lkstream-client-{daemon.address}"
        assert loop_thread not in {t.name for t in threading.enumerate()}, "a blocking produce started the loop thread"
        assert [r.value for r in rb.read_from("b.thread", 1, 0)][:2] == [b"a", b"b"]
        assert rb.fetch("b.thread", 0, 0).high_watermark >= 1


@pytest.mark.parametrize("transport", ["grpc", "auto"])
def test_close_leaves_no_thread_of_the_client_behind(daemon: DaemonProcess, transport: str) -> None:
    before = set(threading.enumerate())
    rb = lkstream.connect(daemon.address, kafka_lane=transport == "auto")
    rb.create_topic("b.close", 2)

    def produce(worker: int) -> None:
        for n in range(20):
            rb.produce_many_sync("b.close", [(None, f"{worker}:{n}".encode())], partition=worker % 2)

    workers = [threading.Thread(target=produce, args=(w,)) for w in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(DEADLINE_S)
    if transport == "grpc":
        assert len(set(threading.enumerate()) - before) >= 2  # gRPC's sending threads, the watchdog
    else:  # the produce lane: the callers' own threads on plain sockets
        assert established_connections(daemon.kafka_address) >= 1
    rb.close()
    _wait_for("the client's threads to end", lambda: set(threading.enumerate()) <= before, 20)
    _wait_for("the lane's connections to close", lambda: established_connections(daemon.kafka_address) == 0, 20)
    with pytest.raises(InvalidArgumentError, match="closed"):
        rb.produce_many_sync("b.close", [(None, b"late")])
    with pytest.raises(InvalidArgumentError, match="closed"):
        rb.produce_batch_sync("b.close", 0, encode_batch([(None, b"late")]))


def test_close_after_blocking_and_async_calls_leaves_only_grpc_aios_process_poller(daemon: DaemonProcess) -> None:
    before = set(threading.enumerate())
    rb = lkstream.connect(daemon.address)
    rb.produce_many_sync("b.mixed", [(None, b"sync")])
    asyncio.run(rb.produce_many("b.mixed", [(None, b"async")]))
    rb.produce_many_sync("b.mixed", [(None, b"sync again")])
    assert len(rb.read_from("b.mixed", 0, 0)) == 3  # a blocking fetch, on the loop thread
    rb.close()
    with pytest.raises(InvalidArgumentError, match="closed"):
        rb.fetch("b.mixed", 0, 0)

    def only_the_poller_left() -> bool:
        # grpc.aio polls its completion queue in one thread per process (started by the first async call,
        # kept by gRPC after the channels close); every thread of the client itself ends.
        return all("_poll_wrapper" in t.name for t in set(threading.enumerate()) - before)

    _wait_for("the client's threads to end", only_the_poller_left, 20)


def test_many_threads_producing_keyed_records_keep_each_keys_order(daemon: DaemonProcess) -> None:
    threads, calls, per_call = 6, 40, 25
    with lkstream.connect(daemon.address) as rb:
        rb.create_topic("b.keys", 4)
        failures: list[BaseException] = []

        def produce(worker: int) -> None:
            try:
                for n in range(calls):
                    records = [(f"w{worker}-{i % 3}", f"{worker}:{n}:{i}".encode()) for i in range(per_call)]
                    placed = rb.produce_many_sync("b.keys", records)
                    assert len(placed) == per_call
            except BaseException as exc:  # handed to the test's thread
                failures.append(exc)

        workers = [threading.Thread(target=produce, args=(w,)) for w in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(DEADLINE_S)
        assert not failures, failures
        seen: dict[str, list[tuple[int, int]]] = {}
        for partition in range(4):
            for value in _values(rb, "b.keys", partition):
                worker, n, i = value.decode().split(":")
                seen.setdefault(f"{worker}-{int(i) % 3}", []).append((int(n), int(i)))
    assert sum(map(len, seen.values())) == threads * calls * per_call
    for key, order in seen.items():  # one key is one partition: its records in the order they were sent
        assert order == sorted(order), key


def test_errors_of_blocking_calls_are_lkstream_errors_and_the_stream_goes_on(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address, retries=0) as rb:
        rb.create_topic("b.errors", 1)
        with pytest.raises(InvalidArgumentError, match="partition"):
            rb.produce_batch_sync("b.errors", 7, encode_batch([(None, b"x")]))
        with pytest.raises(InvalidArgumentError):
            rb.produce_batch_sync("b.errors", 0, b"\x00" * 80)  # not a record batch
        with pytest.raises(InvalidArgumentError, match="partition"):
            rb.produce_batch_sync("b.errors", -1, encode_batch([(None, b"x")]))
        with pytest.raises(UnknownTopicError):
            rb.fetch("b.nothing", 0, 0)
        assert rb.produce_many_sync("b.errors", [(None, b"after")], partition=0) == [(0, 0)]


def test_a_sigkill_restart_under_a_blocking_producer_loses_no_acknowledged_record(
    daemon: DaemonProcess, restart_daemon: RestartDaemon
) -> None:
    with lkstream.connect(daemon.address, retry_timeout_s=60) as rb:
        rb.create_topic("b.restart", 2)
        acknowledged: list[tuple[int, int, bytes]] = []
        stop = threading.Event()
        failures: list[BaseException] = []

        def produce() -> None:
            n = 0
            try:
                while not stop.is_set():
                    values = [f"{n}:{i}".encode() for i in range(10)]
                    placed = rb.produce_many_sync("b.restart", [(None, v) for v in values], partition=n % 2)
                    acknowledged.extend((p, o, v) for (p, o), v in zip(placed, values, strict=True))
                    n += 1
            except BaseException as exc:  # handed to the test's thread
                failures.append(exc)

        producer = threading.Thread(target=produce)
        producer.start()
        try:
            _wait_for("acknowledged records before the kill", lambda: len(acknowledged) >= 500)
            daemon.kill()  # SIGKILL, while the producer is mid-call
            at_kill = len(acknowledged)
            restart_daemon(daemon)
            _wait_for("acknowledged records after the restart", lambda: len(acknowledged) >= at_kill + 500)
        finally:
            stop.set()
            producer.join(DEADLINE_S)
        assert not failures, failures
        logs = {p: _values(rb, "b.restart", p) for p in (0, 1)}
    for partition, offset, value in acknowledged:
        assert logs[partition][offset] == value, (partition, offset)
    for partition, values in logs.items():  # at-least-once: a resend may repeat a batch, never reorder
        calls = [int(v.split(b":")[0]) for v in values]
        assert calls == sorted(calls), partition
        assert {v for p, _, v in acknowledged if p == partition} <= set(values)


def test_batches_started_without_waiting_are_appended_in_order_and_each_result_says_where(
    daemon: DaemonProcess,
) -> None:
    with lkstream.connect(daemon.address) as rb:
        rb.create_topic("b.start", 1)
        handles = [rb.produce_batch_start("b.start", 0, encode_batch([(None, b"%d" % n)] * 3)) for n in range(40)]
        refused = rb.produce_batch_start("b.start", 9, encode_batch([(None, b"nowhere")]))
        after = rb.produce_batch_start("b.start", 0, encode_batch([(None, b"after")]))
        assert [h.result() for h in handles] == [(3 * n, 3 * n + 2) for n in range(40)]
        with pytest.raises(InvalidArgumentError, match="partition"):
            refused.result()
        assert after.result() == (120, 120)
        assert _values(rb, "b.start", 0) == [b"%d" % n for n in range(40) for _ in range(3)] + [b"after"]


def test_a_call_racing_close_raises_the_closed_client_error_not_grpcs(daemon: DaemonProcess) -> None:
    # A consumer's heartbeat thread checked the client was open, then close() (another thread)
    # closed the channel before its call started: gRPC raised a bare ValueError ("Cannot invoke
    # RPC on closed channel!") in that thread instead of the error the thread handles.
    rb = lkstream.connect(daemon.address)
    rb.create_topic("racing-close", partitions=1)

    def close_then_call(request: object, **options: object) -> object:
        rb.close()  # lands between _call's check and the call itself
        return rb._stub.Admin(request, **options)

    with pytest.raises(InvalidArgumentError, match="closed"):
        rb._call(close_then_call, pb.AdminRequest())
