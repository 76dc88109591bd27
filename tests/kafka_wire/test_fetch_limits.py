"""Kafka Fetch answers are bounded whatever the client asks (issue 28, finding 4).

Before: one Fetch of 8 partitions with ``max_bytes`` 2^31-1 returned 792 MB, and one naming the same
partition 200 times returned 1.62 GB. Now the broker's ``fetch_max_bytes`` caps every answer (only
the first partition with data may pass a limit, by its first batch, as in Kafka), a partition
named twice is answered once, and what an answer keeps in memory counts in the admission budget
until it is written.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lkstream import Broker
from lkstream.format.codec import decode_batches, encode_batch
from lkstream.kafka.context import ListenerSettings
from lkstream.kafka.inprocess import KafkaServerThread
from tests.kafka_wire.raw_fetch import MAX_INT32, fetch_once, fetch_v4, parse_fetch_v4, read_answer

CAP = 256 * 1024
LARGE_CAP = 16 * 1024 * 1024
BATCH_RECORDS = 100
VALUE = b"v" * 200
PARTITIONS = 8


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    """8 partitions of 40 batches of about 21 KB each (840 KB a partition); answers capped at 256 KiB."""
    with Broker(persist_dir=str(tmp_path / "data"), fetch_max_bytes=CAP, hot_tail_bytes=0) as opened:
        opened.create_topic("t", PARTITIONS)
        for pid in range(PARTITIONS):
            for _ in range(40):
                opened.produce_batch_sync("t", pid, encode_batch([(None, VALUE)] * BATCH_RECORDS))
        yield opened


@pytest.fixture
def large_broker(tmp_path: Path) -> Iterator[Broker]:
    """8 partitions of 4 MB: an answer (16 MiB at most) larger than what the sockets buffer."""
    with Broker(persist_dir=str(tmp_path / "large"), fetch_max_bytes=LARGE_CAP, hot_tail_bytes=0) as opened:
        opened.create_topic("t", PARTITIONS)
        batch = encode_batch([(None, VALUE)] * 5000)
        for pid in range(PARTITIONS):
            for _ in range(4):
                opened.produce_batch_sync("t", pid, bytearray(batch))
        yield opened


@pytest.fixture(params=[True, False], ids=["zero-copy", "copied"])
def bootstrap(broker: Broker, request: pytest.FixtureRequest) -> Iterator[str]:
    runner = KafkaServerThread(broker, ListenerSettings(port=0, zero_copy=request.param))
    yield runner.start()
    runner.stop()


def test_an_answer_holds_at_most_fetch_max_bytes_whatever_the_client_asks(bootstrap: str) -> None:
    every = [(pid, 0, MAX_INT32) for pid in range(PARTITIONS)]
    answer = fetch_once(bootstrap, fetch_v4([("t", every)], max_bytes=MAX_INT32))
    assert [p.partition for p in answer] == list(range(PARTITIONS))
    sizes = [len(p.records) for p in answer]
    assert 0 < sum(sizes) <= CAP, sizes
    assert sizes[0] > 0  # the answer is filled in the order asked, not spread thin
    for part in answer:
        records = decode_batches(part.records, "t", part.partition, 0)
        assert all(r.value == VALUE for r in records)  # whole batches only


def test_a_partition_named_200_times_is_answered_once(bootstrap: str) -> None:
    named = [(3, 0, MAX_INT32)] * 199 + [(3, 500, MAX_INT32)]  # Kafka keeps the last fetch position
    answer = fetch_once(bootstrap, fetch_v4([("t", named)], max_bytes=MAX_INT32))
    assert [(p.topic, p.partition) for p in answer] == [("t", 3)]
    assert len(answer[0].records) <= CAP
    assert decode_batches(answer[0].records, "t", 3, 500)[0].offset == 500


def test_only_the_first_partition_with_data_may_pass_a_limit_by_its_first_batch(bootstrap: str) -> None:
    """KIP-74: a first batch larger than the limits still comes (progress); later partitions stay within."""
    small = [(pid, 0, 1000) for pid in range(PARTITIONS)]  # every batch is larger than 1000 bytes
    answer = fetch_once(bootstrap, fetch_v4([("t", small)], max_bytes=MAX_INT32))
    sizes = [len(p.records) for p in answer]
    assert sizes[0] > 1000 and sizes[1:] == [0] * (PARTITIONS - 1), sizes
    assert len(decode_batches(answer[0].records, "t", 0, 0)) == BATCH_RECORDS


def test_what_an_answer_keeps_in_memory_is_admitted_until_it_is_written(large_broker: Broker) -> None:
    """The copying path (TLS, or zero copy off): the bytes read wait in memory for a slow reader."""
    broker = large_broker
    runner = KafkaServerThread(broker, ListenerSettings(port=0, zero_copy=False))
    host, port = runner.start().rsplit(":", 1)
    try:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
            sock.settimeout(30)
            sock.connect((host, int(port)))
            sock.sendall(fetch_v4([("t", [(pid, 0, MAX_INT32) for pid in range(PARTITIONS)])]))
            deadline = time.monotonic() + 10
            while broker.admission.held < LARGE_CAP // 2:  # the answer is read and waits for the socket
                assert time.monotonic() < deadline, f"admitted {broker.admission.held} bytes"
                time.sleep(0.01)
            answer = parse_fetch_v4(read_answer(sock)[1])
            assert LARGE_CAP // 2 < sum(len(p.records) for p in answer) <= LARGE_CAP
            deadline = time.monotonic() + 10
            while broker.admission.held:  # written: given back
                assert time.monotonic() < deadline, f"still admitted: {broker.admission.held} bytes"
                time.sleep(0.01)
    finally:
        runner.stop()


def test_an_answer_a_client_never_reads_gives_its_memory_back_when_it_leaves(large_broker: Broker) -> None:
    broker = large_broker
    runner = KafkaServerThread(broker, ListenerSettings(port=0, zero_copy=False))
    host, port = runner.start().rsplit(":", 1)
    try:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        sock.connect((host, int(port)))
        sock.sendall(fetch_v4([("t", [(pid, 0, MAX_INT32) for pid in range(PARTITIONS)])]))
        deadline = time.monotonic() + 10
        while broker.admission.held < LARGE_CAP // 2:
            assert time.monotonic() < deadline, f"admitted {broker.admission.held} bytes"
            time.sleep(0.01)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()  # a reset: the answer can never be written
        deadline = time.monotonic() + 10
        while broker.admission.held:
            assert time.monotonic() < deadline, f"still admitted: {broker.admission.held} bytes"
            time.sleep(0.01)
    finally:
        runner.stop()
