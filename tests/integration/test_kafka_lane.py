"""The produce lane against a real daemon: produce_many through its Kafka listener, gRPC for the rest.

Which path a call took is read from the outside: the client's TCP connections to the
listener's port (/proc/net/tcp), and the records read back.
"""

from __future__ import annotations

import asyncio
import collections
import os
import re
import signal
import threading
import time
import urllib.request

import pytest

import lkstream
from lkstream.errors import InvalidArgumentError, OffsetOutOfRangeError, RecordTooLargeError, UnknownTopicError
from tests.integration.conftest import DaemonFactory, DaemonProcess, RestartDaemon
from tests.integration.raw_sockets import established_connections

DEADLINE_S = 60.0


def values(broker: lkstream.RemoteBroker, topic: str) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {}
    for pid in range(broker.partitions_for(topic)):
        out[pid] = [r.value for r in broker.read_from(topic, pid, 0, max_bytes=64 * 1024 * 1024)]
    return out


def latency_count(daemon: DaemonProcess, what: str) -> float:
    """How many calls the daemon's ``lk_{what}_latency_seconds`` histogram counted."""
    with urllib.request.urlopen(f"http://{daemon.http_address}/metrics", timeout=10) as response:
        text = response.read().decode()
    return float(re.findall(rf"^lk_{what}_latency_seconds_count (\S+)$", text, re.MULTILINE)[0])


def test_produce_many_goes_to_the_kafka_listener_and_reads_back(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as broker:
        assert broker.kafka_lane == daemon.kafka_address
        broker.create_topic("lane.t", 3)
        before = latency_count(daemon, "produce")
        keyless = broker.produce_many_sync("lane.t", [(None, f"a{i}".encode()) for i in range(50)])
        assert established_connections(daemon.kafka_address) >= 1
        keyed = broker.produce_many_sync("lane.t", [(f"k{i % 7}", f"b{i}".encode()) for i in range(70)])
        explicit = broker.produce_many_sync("lane.t", [(b"x", b"c")], partition=2)

        async def produce_async() -> list[tuple[int, int]]:
            return await broker.produce_many("lane.t", [(f"k{i % 7}", f"d{i}".encode()) for i in range(70)])

        keyed_async = asyncio.run(produce_async())
        # Four calls, each one Kafka Produce: the daemon's produce latency counts the listener's too.
        assert latency_count(daemon, "produce") == before + 4
        stored = values(broker, "lane.t")
        for results, prefix in ((keyless, "a"), (keyed, "b"), (explicit, "c"), (keyed_async, "d")):
            got = [stored[pid][offset] for pid, offset in results]
            assert got == ([b"c"] if prefix == "c" else [f"{prefix}{i}".encode() for i in range(len(results))])
        assert len({pid for pid, _ in keyless}) == 1  # one sticky partition per keyless call
        assert explicit[0][0] == 2
    # The same keys land on the same partitions as through gRPC (one partitioner, client-side).
    with lkstream.connect(daemon.address, kafka_lane=False) as broker:
        assert broker.kafka_lane is None
        through_grpc = broker.produce_many_sync("lane.t", [(f"k{i % 7}", b"e") for i in range(70)])
        assert [pid for pid, _ in through_grpc] == [pid for pid, _ in keyed]


def test_a_refused_batch_raises_what_grpc_raises(start_daemon: DaemonFactory) -> None:
    # 1,000 records of 200 B make a 210 KB batch: within the client's limits (each record is below
    # max_message_bytes), above the daemon's max_batch_bytes. The listener refuses it, and the client
    # sends it again through gRPC, whose error carries its class and fields.
    daemon = start_daemon(max_batch_bytes=64 * 1024, max_message_bytes=64 * 1024)
    records = [(None, b"x" * 200)] * 1000
    raised = []
    for transport in ("auto", "grpc"):
        with lkstream.connect(daemon.address, kafka_lane=transport == "auto") as broker:
            assert (broker.kafka_lane is not None) == (transport == "auto")
            with pytest.raises(RecordTooLargeError) as refused:
                broker.produce_many_sync("lane.big", records)
            raised.append((str(refused.value), refused.value.size, refused.value.limit))
            assert broker.produce_many_sync("lane.big", records[:100])[-1][1] >= 99  # smaller calls go on
    assert raised[0] == raised[1]
    assert raised[0][2] == 64 * 1024


def test_a_topic_recreated_smaller_is_written_through_grpc_and_the_count_learned_again(
    daemon: DaemonProcess,
) -> None:
    with lkstream.connect(daemon.address) as writer, lkstream.connect(daemon.address) as admin:
        admin.create_topic("lane.shrink", 4)
        writer.produce_many_sync("lane.shrink", [(None, b"first")], partition=3)
        admin.delete_topic("lane.shrink")
        admin.create_topic("lane.shrink", 1)
        # The writer still believes in 4 partitions: partition 3 is refused by the listener, and the call
        # goes through gRPC as a gRPC call would (an error naming the partition).
        with pytest.raises(InvalidArgumentError):
            writer.produce_many_sync("lane.shrink", [(None, b"lost?")], partition=3)
        for _ in range(20):  # keyless calls now pick among the one partition left
            assert writer.produce_many_sync("lane.shrink", [(None, b"ok")])[0][0] == 0
        assert values(admin, "lane.shrink") == {0: [b"ok"] * 20}


def test_without_a_kafka_listener_or_with_grpc_asked_for_produce_stays_on_grpc(start_daemon: DaemonFactory) -> None:
    daemon = start_daemon(kafka_port=-1)
    with lkstream.connect(daemon.address) as broker:
        assert broker.kafka_lane is None
        assert broker.produce_many_sync("lane.off", [(None, b"v")]) == [(0, 0)]


def test_many_threads_share_at_most_four_lane_connections_and_lose_nothing(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as broker:
        broker.create_topic("lane.threads", 3)
        peak: list[int] = []
        errors: list[BaseException] = []

        def produce(worker: int) -> None:
            try:
                for n in range(40):
                    broker.produce_many_sync("lane.threads", [(f"k{worker}", f"{worker}:{n}".encode())] * 20)
                    peak.append(broker._lane._open)  # the client's own count (/proc/net/tcp is not read atomically)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=produce, args=(w,)) for w in range(10)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(DEADLINE_S)
        assert not errors, errors
        assert 1 <= max(peak) <= 4, peak  # the calls beyond four at once went through gRPC
        assert established_connections(daemon.kafka_address) >= 1
        stored = sorted(v for part in values(broker, "lane.threads").values() for v in part)
        wanted = sorted(f"{w}:{n}".encode() for w in range(10) for n in range(40) for _ in range(20))
        assert stored == wanted, f"{len(stored)} records stored, {len(wanted)} produced"


def test_the_lane_goes_to_the_bound_loopback_address_not_the_advertised_host(start_daemon: DaemonFactory) -> None:
    daemon = start_daemon(kafka_advertised_host="kafka.invalid")  # for Kafka clients elsewhere; resolves nowhere
    bound = "127.0.0.1:" + daemon.kafka_address.rsplit(":", 1)[1]
    with lkstream.connect(daemon.address) as broker:
        assert broker.kafka_lane == bound
        assert broker.produce_many_sync("lane.adv", [(None, b"v")]) == [(0, 0)]
        assert established_connections(bound) >= 1


def test_each_event_loop_has_its_connection_and_closed_loops_are_forgotten(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as broker:
        for run in range(5):
            results = asyncio.run(broker.produce_many("lane.loops", [(None, f"{run}".encode())]))
            assert results == [(0, run)]
        assert len(broker._async_lanes) == 1  # the four closed loops' lanes were dropped
    deadline = time.monotonic() + 10
    while established_connections(daemon.kafka_address) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert established_connections(daemon.kafka_address) == 0, "close() leaves no lane connection open"


def test_nothing_acknowledged_is_lost_when_the_daemon_is_killed_and_restarted_on_another_kafka_port(
    daemon: DaemonProcess, restart_daemon: RestartDaemon
) -> None:
    acknowledged: list[bytes] = []
    stop = threading.Event()
    failures: list[BaseException] = []
    broker = lkstream.connect(daemon.address, retry_timeout_s=DEADLINE_S)
    first_lane = broker.kafka_lane
    assert first_lane == daemon.kafka_address

    def produce() -> None:
        n = 0
        try:
            while not stop.is_set():
                batch = [(None, f"v{n + i}".encode()) for i in range(100)]
                broker.produce_many_sync("lane.kill", batch)
                acknowledged.extend(value for _, value in batch)
                n += 100
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len(acknowledged) < 5_000 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert daemon.process is not None
        os.kill(daemon.process.pid, signal.SIGKILL)
        daemon.process.wait()
        before_kill = len(acknowledged)
        restarted = restart_daemon(daemon)
        assert restarted.kafka_address != first_lane
        while len(acknowledged) < before_kill + 5_000 and time.monotonic() < deadline and not failures:
            time.sleep(0.01)
    finally:
        stop.set()
        thread.join(DEADLINE_S)
    assert not failures, failures
    assert broker.kafka_lane == restarted.kafka_address  # asked again after the lost connection
    assert established_connections(restarted.kafka_address) >= 1
    stored = set(values(broker, "lane.kill")[0])
    missing = [v for v in acknowledged if v not in stored]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:3]}"
    broker.close()


def test_a_clean_restart_under_a_producing_thread_appends_each_record_once(
    start_daemon: DaemonFactory, restart_daemon: RestartDaemon
) -> None:
    # The listener answers every request it already read before it closes (SIGTERM's grace): an
    # answer lost to the close would make the client send appended records again through gRPC.
    # Before that, sync mode appended about ten records twice per restart here.
    daemon = start_daemon(fsync_mode="sync", partitions=1)
    acknowledged: list[bytes] = []
    stop = threading.Event()
    failures: list[BaseException] = []
    broker = lkstream.connect(daemon.address, retry_timeout_s=DEADLINE_S)
    assert broker.kafka_lane is not None

    def produce() -> None:
        n = 0
        try:
            while not stop.is_set():
                batch = [(None, f"v{n + i}".encode()) for i in range(10)]
                broker.produce_many_sync("lane.term", batch)
                acknowledged.extend(value for _, value in batch)
                n += 10
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        deadline = time.monotonic() + DEADLINE_S
        for _ in range(2):
            wanted = len(acknowledged) + 1_000
            while len(acknowledged) < wanted and time.monotonic() < deadline and not failures:
                time.sleep(0.01)
            assert daemon.terminate() == 0
            daemon = restart_daemon(daemon)
        wanted = len(acknowledged) + 1_000
        while len(acknowledged) < wanted and time.monotonic() < deadline and not failures:
            time.sleep(0.01)
    finally:
        stop.set()
        thread.join(DEADLINE_S)
    assert not failures, failures
    stored = values(broker, "lane.term")[0]
    twice = [v for v, count in collections.Counter(stored).items() if count > 1]
    assert not twice, f"{len(twice)} records appended twice, e.g. {twice[:3]}"
    assert set(acknowledged) <= set(stored)
    broker.close()


def test_a_blocking_fetch_reads_through_the_lane_what_grpc_reads(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as lane, lkstream.connect(daemon.address, kafka_lane=False) as grpc:
        lane.create_topic("lane.read", 2)
        for n in range(40):  # 40 batches of 1,000 records of 200 B: about 8 MB
            lane.produce_many_sync(
                "lane.read", [(None, f"{n}:{i}".encode().ljust(200)) for i in range(1000)], partition=0
            )
        high = lane.bounds("lane.read", 0)[1]
        for offset in (0, 1, 999, 1000, 17_345, high - 1, high):
            for max_bytes in (1, 64 * 1024, 4 * 1024 * 1024):
                got, want = lane.fetch("lane.read", 0, offset, max_bytes), grpc.fetch("lane.read", 0, offset, max_bytes)
                assert (got.data, got.log_start_offset, got.high_watermark) == (
                    want.data,
                    want.log_start_offset,
                    want.high_watermark,
                )
        assert lane.fetch("lane.read", 1, 0).data == b""
        fetches = latency_count(daemon, "fetch")
        direct = lane._lane.fetch("lane.read", 0, 0, 1024)  # the lane itself answered, not the gRPC fallback
        assert direct.error_code == 0 and direct.records == grpc.fetch("lane.read", 0, 0, 1024).data
        assert latency_count(daemon, "fetch") == fetches + 2  # the listener's read and gRPC's
        assert established_connections(daemon.kafka_address) >= 1
        # What the listener refuses is asked again through gRPC, which raises the error with its fields.
        errors = []
        for client in (lane, grpc):
            with pytest.raises(OffsetOutOfRangeError) as beyond:
                client.fetch("lane.read", 0, high + 5)
            errors.append((str(beyond.value), beyond.value.earliest, beyond.value.latest))
            with pytest.raises(UnknownTopicError):
                client.fetch("lane.missing", 0, 0)
        assert errors[0] == errors[1]
        records = lane.read_from("lane.read", 0, 5, max_msgs=3)
        assert [r.offset for r in records] == [5, 6, 7] and records[0].value.startswith(b"0:5")
