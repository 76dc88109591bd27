"""The produce lane against a real daemon: produce_many through its Kafka listener, gRPC for the rest.

Which path a call took is read from the outside: the client's TCP connections to the
listener's port (/proc/net/tcp), and the records read back.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import os
import re
import signal
import socket
import threading
import time
import urllib.request

import pytest

import lkstream
from lkstream.broker.partitioner import partition_for_key
from lkstream.client.remote.kafka_lane import correlation_ids
from lkstream.errors import (
    BrokerUnavailableError,
    InvalidArgumentError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnknownTopicError,
)
from lkstream.format.codec import encode_batch
from tests.integration.conftest import DaemonFactory, DaemonProcess, RestartDaemon
from tests.integration.raw_sockets import established_connections, read_exactly

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


def test_a_pre_encoded_batch_goes_through_the_lane_and_answers_as_grpc_does(daemon: DaemonProcess) -> None:
    """produce_batch_sync (the Spark sink's call): offsets, records and refusals as through gRPC."""
    batch = encode_batch([(b"k", b"v%d" % i) for i in range(10)])
    damaged = bytearray(batch)
    damaged[-1] ^= 0xFF  # the CRC no longer matches
    outcomes = []
    for lane in (True, False):
        topic = f"lane.batch.{lane}"
        with lkstream.connect(daemon.address, kafka_lane=lane) as broker:
            assert (broker.kafka_lane is not None) == lane
            broker.create_topic(topic, 2)
            before = established_connections(daemon.kafka_address)
            spans = [broker.produce_batch_sync(topic, 1, batch), broker.produce_batch_sync(topic, 1, bytes(batch))]
            assert (established_connections(daemon.kafka_address) > before) == lane
            spans.append(broker.produce_batch_sync(f"{topic}.created", 0, batch))  # a topic created on first use
            errors = []
            for partition, bad in ((2, batch), (1, damaged)):
                with pytest.raises(InvalidArgumentError) as refused:
                    broker.produce_batch_sync(topic, partition, bad)
                errors.append(str(refused.value).replace(topic, "T"))
            outcomes.append((spans, errors, values(broker, topic)))
    assert outcomes[0] == outcomes[1]
    spans, errors, stored = outcomes[0]
    assert spans == [(0, 9), (10, 19), (0, 9)]
    assert stored == {0: [], 1: [b"v%d" % i for i in range(10)] * 2}
    assert "partition 2 does not exist" in errors[0]
    assert "CRC-32C mismatch" in errors[1]


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


class ProducingThread:
    """A thread calling ``produce_many_sync`` of ``per_call`` distinct records in a loop; ``acknowledged``
    holds every value of every call that returned, ``failures`` what a call raised (which ends it)."""

    def __init__(self, broker: lkstream.RemoteBroker, topic: str, per_call: int) -> None:
        self.acknowledged: list[bytes] = []
        self.failures: list[BaseException] = []
        self._stop = threading.Event()
        self._deadline = time.monotonic() + DEADLINE_S
        self._thread = threading.Thread(target=self._produce, args=(broker, topic, per_call))
        self._thread.start()

    def _produce(self, broker: lkstream.RemoteBroker, topic: str, per_call: int) -> None:
        n = 0
        try:
            while not self._stop.is_set():
                batch = [(None, f"v{n + i}".encode()) for i in range(per_call)]
                broker.produce_many_sync(topic, batch)
                self.acknowledged.extend(value for _, value in batch)
                n += per_call
        except BaseException as exc:
            self.failures.append(exc)

    def wait_for_more(self, count: int) -> None:
        """Until ``count`` more records are acknowledged (or a call failed, or the test's deadline)."""
        wanted = len(self.acknowledged) + count
        while len(self.acknowledged) < wanted and time.monotonic() < self._deadline and not self.failures:
            time.sleep(0.01)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(DEADLINE_S)
        assert not self.failures, self.failures


def test_nothing_acknowledged_is_lost_when_the_daemon_is_killed_and_restarted_on_another_kafka_port(
    daemon: DaemonProcess, restart_daemon: RestartDaemon
) -> None:
    broker = lkstream.connect(daemon.address, retry_timeout_s=DEADLINE_S)
    first_lane = broker.kafka_lane
    assert first_lane == daemon.kafka_address
    producing = ProducingThread(broker, "lane.kill", 100)
    try:
        producing.wait_for_more(5_000)
        assert daemon.process is not None
        os.kill(daemon.process.pid, signal.SIGKILL)
        daemon.process.wait()
        restarted = restart_daemon(daemon)
        assert restarted.kafka_address != first_lane
        producing.wait_for_more(5_000)
    finally:
        producing.stop()
    assert broker.kafka_lane == restarted.kafka_address  # asked again after the lost connection
    assert established_connections(restarted.kafka_address) >= 1
    stored = set(values(broker, "lane.kill")[0])
    missing = [v for v in producing.acknowledged if v not in stored]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:3]}"
    broker.close()


def test_a_clean_restart_under_a_producing_thread_appends_each_record_once(
    start_daemon: DaemonFactory, restart_daemon: RestartDaemon
) -> None:
    # The listener answers every request it already read before it closes (SIGTERM's grace): an
    # answer lost to the close would make the client send appended records again through gRPC.
    # Before that, sync mode appended about ten records twice per restart here.
    daemon = start_daemon(fsync_mode="sync", partitions=1)
    broker = lkstream.connect(daemon.address, retry_timeout_s=DEADLINE_S)
    assert broker.kafka_lane is not None
    producing = ProducingThread(broker, "lane.term", 10)
    try:
        for _ in range(2):
            producing.wait_for_more(1_000)
            assert daemon.terminate() == 0
            daemon = restart_daemon(daemon)
        producing.wait_for_more(1_000)
    finally:
        producing.stop()
    stored = values(broker, "lane.term")[0]
    twice = [v for v, count in collections.Counter(stored).items() if count > 1]
    assert not twice, f"{len(twice)} records appended twice, e.g. {twice[:3]}"
    assert set(producing.acknowledged) <= set(stored)
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


# -- failures part-way, timeouts, odd arguments (found in review) ---------------------------------


class CuttingProxy:
    """A loopback proxy to the Kafka listener, frame by frame, that closes the client's connection when
    request ``cut_at`` (counted over all connections, from 1) arrives, without forwarding it: what the
    listener itself does with a request it will not read (admission or read timeout, frame limit).
    It cuts once the answers to the requests before it have reached the client."""

    def __init__(self, upstream: str, cut_at: int) -> None:
        self.upstream = upstream
        self.cut_at = cut_at
        self.requests = 0
        self.answers = 0
        self._answered = threading.Condition()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._server.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._server.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            host, port = self.upstream.rsplit(":", 1)
            server = socket.create_connection((host, int(port)))
            threading.Thread(target=self._requests, args=(client, server), daemon=True).start()
            threading.Thread(target=self._answers, args=(client, server), daemon=True).start()

    def _requests(self, client: socket.socket, server: socket.socket) -> None:
        try:
            while True:
                head = read_exactly(client, 4)
                body = read_exactly(client, int.from_bytes(head, "big"))
                self.requests += 1
                if self.requests == self.cut_at:
                    with self._answered:
                        self._answered.wait_for(lambda: self.answers >= self.cut_at - 1, timeout=DEADLINE_S)
                    # An end of stream after the answers, then the client's own close: closing with its
                    # later requests unread would send a reset, which can discard an answer the client
                    # has not read yet (a lost answer is resent: a duplicate this test would count).
                    client.shutdown(socket.SHUT_WR)
                    client.settimeout(DEADLINE_S)
                    while client.recv(65536):
                        pass
                    break
                server.sendall(head + body)
        except OSError:
            pass
        client.close()
        server.close()

    def _answers(self, client: socket.socket, server: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while True:
                head = read_exactly(server, 4)
                client.sendall(head + read_exactly(server, int.from_bytes(head, "big")))
                with self._answered:
                    self.answers += 1
                    self._answered.notify_all()
        client.close()


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_connection_lost_part_way_through_a_call_resends_only_what_was_not_answered(
    start_daemon: DaemonFactory, kind: str
) -> None:
    # 4 partitions of about 41 KB with max_batch_bytes 64 KB: the call is four Kafka requests. The
    # connection is lost when the second arrives, after the first was appended and its answer came
    # back, so gRPC carries the other three only. (An answer lost with the connection is sent again,
    # as gRPC resends: at-least-once.)
    daemon = start_daemon(max_batch_bytes=64 * 1024, max_message_bytes=64 * 1024)
    with lkstream.connect(daemon.address) as broker:
        broker.create_topic("lane.cut", 4)
        keys: dict[int, bytes] = {}
        for n in itertools.count():
            keys.setdefault(partition_for_key(f"k{n}".encode(), 4), f"k{n}".encode())
            if len(keys) == 4:
                break
        records = [(keys[p], f"p{p}-{n}-".encode() + b"x" * 1000) for p in range(4) for n in range(40)]
        proxy = CuttingProxy(daemon.kafka_address, cut_at=2)
        broker._lane_state.address = proxy.address
        try:
            if kind == "sync":
                results = broker.produce_many_sync("lane.cut", records)
            else:

                async def produce() -> list[tuple[int, int]]:
                    return await broker.produce_many("lane.cut", records)

                results = asyncio.run(produce())
        finally:
            proxy.close()
        assert proxy.requests >= 2
        stored = values(broker, "lane.cut")
        assert [len(stored[p]) for p in range(4)] == [40] * 4  # each record once
        assert [stored[pid][offset] for pid, offset in results] == [value for _, value in records]


def test_no_answer_in_time_fails_as_grpc_does_and_sends_nothing_again(start_daemon: DaemonFactory) -> None:
    daemon = start_daemon(partitions=1)
    assert daemon.process is not None
    raised = []
    for lane in (True, False):
        topic = f"lane.stop.{lane}"
        with lkstream.connect(daemon.address, timeout=1.0, kafka_lane=lane) as broker:
            assert broker.produce_many_sync(topic, [(None, b"warm")]) == [(0, 0)]  # connections open
            os.kill(daemon.process.pid, signal.SIGSTOP)
            resume = threading.Timer(1.6, os.kill, (daemon.process.pid, signal.SIGCONT))
            resume.start()
            started = time.monotonic()
            try:
                with pytest.raises(BrokerUnavailableError) as timed_out:
                    broker.produce_many_sync(topic, [(None, b"once")])
                raised.append((type(timed_out.value), time.monotonic() - started))
            finally:
                resume.join()
            deadline = time.monotonic() + DEADLINE_S
            while broker.fetch(topic, 0, 0).high_watermark < 2 and time.monotonic() < deadline:
                time.sleep(0.05)  # the paused daemon appends what it had read once it resumes
            assert [r.value for r in broker.read_from(topic, 0, 0)] == [b"warm", b"once"]
    assert all(took < 1.5 for _, took in raised), raised  # one timeout, not one per path


def test_correlation_ids_wrap_at_the_int32_limit_and_calls_go_on(daemon: DaemonProcess) -> None:
    assert list(itertools.islice(correlation_ids(2**31 - 2), 4)) == [2**31 - 2, 2**31 - 1, 1, 2]
    with lkstream.connect(daemon.address) as broker:
        broker.create_topic("lane.ids", 1)
        broker._lane._ids = correlation_ids(2**31 - 2)
        sent = [broker.produce_many_sync("lane.ids", [(None, f"v{n}".encode())]) for n in range(4)]
        assert sent == [[(0, n)] for n in range(4)]
        assert broker.fetch("lane.ids", 0, 0).high_watermark == 4
        assert established_connections(daemon.kafka_address) >= 1  # all of them on the lane


def test_the_lane_answers_odd_arguments_as_grpc_does(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as lane, lkstream.connect(daemon.address, kafka_lane=False) as grpc:
        lane.create_topic("lane.args", 2)
        lane.produce_many_sync("lane.args", [(None, b"v")] * 10, partition=0)
        for args in [("lane.args", 0, 0, 0), ("lane.args", 0, 0, 2**31), ("lane.args", 0, 2**63, 1024)]:
            outcomes = []
            for broker in (lane, grpc):
                try:
                    outcomes.append(broker.fetch(*args))
                except Exception as exc:  # the two paths must raise the same
                    outcomes.append((type(exc), str(exc)))
            assert outcomes[0] == outcomes[1], args
        # More partitions in one call than one sendmsg takes (IOV_MAX buffers): still on the lane.
        lane.create_topic("lane.wide", 700)
        before = latency_count_of(daemon)
        assert len(lane.produce_many_sync("lane.wide", [(f"k{n}", b"v") for n in range(5000)])) == 5000
        assert lane.kafka_lane is not None and not lane._lane_state.stale
        assert latency_count_of(daemon) == before + 1  # one Kafka Produce


def latency_count_of(daemon: DaemonProcess) -> float:
    return latency_count(daemon, "produce")


def test_a_closed_client_refuses_async_produce_and_opens_nothing(daemon: DaemonProcess) -> None:
    broker = lkstream.connect(daemon.address)
    broker.create_topic("lane.closed", 1)
    broker.close()

    async def produce() -> list[tuple[int, int]]:
        return await broker.produce_many("lane.closed", [(None, b"after close")])

    with pytest.raises(InvalidArgumentError, match="closed"):
        asyncio.run(produce())
    assert not broker._async_lanes
