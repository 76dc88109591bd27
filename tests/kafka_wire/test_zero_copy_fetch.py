"""Fetch sends stored batches with sendfile(2) on plaintext connections, copies them on TLS (issue 25).

Real clients that check every batch's CRC (librdkafka with ``check.crcs``, aiokafka) read a log of
several segments through each path and must see every record, in order, byte for byte; the
listener's counters say which path carried the bytes. A raw connection checks that an answer
being sent (a large Fetch) is never interleaved with the answer of a request pipelined after it.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AioPartition
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from lkstream import Broker
from lkstream.kafka.context import ListenerSettings
from lkstream.kafka.inprocess import KafkaServerThread
from lkstream.kafka.writer import SendStats
from lkstream.security.tls import ServerTls
from tests.kafka_wire.raw_fetch import fetch_v4, read_answer
from tests.kafka_wire.test_fuzz import request
from tests.security.certs import make_pki

RECORDS = 30_000
TOPIC = "zc"


def _values() -> list[bytes]:
    return [f"{i:08d}".encode() * 25 for i in range(RECORDS)]  # 200 B, each naming its offset


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    """A log of several segments (1 MiB each), written through the Kafka listener; no hot tail."""
    with Broker(persist_dir=str(tmp_path / "data"), segment_max_bytes=1 << 20, hot_tail_bytes=0) as opened:
        yield opened


@pytest.fixture
def one_segment_broker(tmp_path: Path) -> Iterator[Broker]:
    with Broker(persist_dir=str(tmp_path / "data"), hot_tail_bytes=0) as opened:
        yield opened


def _listener(broker: Broker, **settings: object) -> KafkaServerThread:
    runner = KafkaServerThread(broker, ListenerSettings(port=0, **settings))  # type: ignore[arg-type]
    runner.start()
    return runner


def _produce(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 200_000})
    for value in _values():
        producer.produce(TOPIC, value, partition=0)
    assert producer.flush(30) == 0


def _consume_confluent(bootstrap: str, **extra: object) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "zc", "enable.auto.commit": False, "check.crcs": True, **extra}
    )
    consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    try:
        while len(values) < RECORDS:
            messages = consumer.consume(10_000, 10.0)
            assert messages, f"no records after {len(values)}"
            for message in messages:
                assert message.error() is None, message.error()
                values.append(message.value())
    finally:
        consumer.close()
    return values


async def _consume_aiokafka(bootstrap: str, **extra: object) -> list[bytes]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, check_crcs=True, **extra)
    await consumer.start()
    values: list[bytes] = []
    try:
        partition = AioPartition(TOPIC, 0)
        consumer.assign([partition])
        await consumer.seek_to_beginning(partition)
        while len(values) < RECORDS:
            batches = await asyncio.wait_for(consumer.getmany(timeout_ms=1000, max_records=10_000), 30)
            for records in batches.values():
                values.extend(record.value for record in records)
    finally:
        await consumer.stop()
    return values


def test_plaintext_fetches_send_stored_batches_with_sendfile(broker: Broker) -> None:
    runner = _listener(broker)
    try:
        _produce(runner.bootstrap)
        assert broker.describe_topic(TOPIC).partitions[0].segment_count > 3
        stats = runner.server.send_stats
        assert _consume_confluent(runner.bootstrap) == _values()
        assert asyncio.run(_consume_aiokafka(runner.bootstrap)) == _values()
        stored = sum(part.size_bytes for part in broker.describe_topic(TOPIC).partitions)
        assert stats.sendfile_bytes >= 2 * stored  # both consumers, every batch through sendfile
        assert stats.copied_range_bytes == 0
    finally:
        runner.stop()


def test_with_zero_copy_off_the_same_records_are_copied(broker: Broker) -> None:
    runner = _listener(broker, zero_copy=False)
    try:
        _produce(runner.bootstrap)
        assert _consume_confluent(runner.bootstrap) == _values()
        assert runner.server.send_stats == SendStats()  # no range at all: read, checked, written
    finally:
        runner.stop()


def test_tls_keeps_the_copying_path(broker: Broker, tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    tls = ServerTls(str(pki.server_cert), str(pki.server_key)).ssl_context()
    runner = _listener(broker, ssl_context=tls)
    client_tls = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}
    try:
        producer = Producer({"bootstrap.servers": runner.bootstrap, **client_tls, "linger.ms": 5})
        for value in _values():
            producer.produce(TOPIC, value, partition=0)
        assert producer.flush(30) == 0
        assert _consume_confluent(runner.bootstrap, **client_tls) == _values()
        context = ssl.create_default_context(cafile=str(pki.ca))
        aio = asyncio.run(_consume_aiokafka(runner.bootstrap, security_protocol="SSL", ssl_context=context))
        assert aio == _values()
        assert runner.server.send_stats.sendfile_bytes == 0
    finally:
        runner.stop()


@pytest.mark.parametrize("zero_copy", [True, False])
def test_an_answer_being_sent_is_never_interleaved_with_a_later_one(
    one_segment_broker: Broker, zero_copy: bool
) -> None:
    """A Fetch answer of megabytes, then a Produce sent on the same connection while it is being written.

    The client reads nothing at first, so the large answer is still being written (the socket is
    full) when the Produce arrives; its answer must wait for the Fetch's, whole and in order.
    """
    broker = one_segment_broker
    runner = _listener(broker, zero_copy=zero_copy)
    try:
        _produce(runner.bootstrap)
        host, port = runner.bootstrap.rsplit(":", 1)
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)  # the answer cannot all fit
            sock.settimeout(30)
            sock.connect((host, int(port)))
            records = struct.pack(">i", 1) + struct.pack(">h", len(TOPIC)) + TOPIC.encode()
            batch = bytes(broker.fetch(TOPIC, 0, 0, 1).data)  # a stored batch, produced again below
            produce = struct.pack(">hhi", -1, 1, 5000) + records + struct.pack(">ii", 1, 0)
            produce += struct.pack(">i", len(batch)) + batch
            sock.sendall(fetch_v4([(TOPIC, [(0, 0, 8 << 20)])], max_bytes=8 << 20, correlation=1))
            time.sleep(0.3)  # the Fetch is answered and its answer written, as far as the socket takes it
            sock.sendall(request(0, 3, produce, correlation=2))
            time.sleep(0.3)  # the Produce is appended and answered meanwhile
            answers = [read_answer(sock) for _ in range(2)]
        assert [correlation for correlation, _ in answers] == [1, 2]
        assert len(answers[0][1]) > 4 << 20
        # Produce v3 answer: [topic, [partition, error, base offset, ...]]: partition 0, no error, appended at the end
        assert struct.unpack_from(">iihq", answers[1][1], 4 + 2 + len(TOPIC)) == (1, 0, 0, RECORDS)
    finally:
        runner.stop()


def test_a_client_that_leaves_in_the_middle_of_an_answer_gives_its_file_back(tmp_path: Path) -> None:
    # fsync_mode none: no group commit pins a file meanwhile, so every pin seen is the answer's range
    with Broker(persist_dir=str(tmp_path / "data"), hot_tail_bytes=0, fsync_mode="none") as broker:
        runner = _listener(broker)
        try:
            _produce(runner.bootstrap)
            assert broker.files.pins == 0
            host, port = runner.bootstrap.rsplit(":", 1)
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
            sock.connect((host, int(port)))
            sock.sendall(fetch_v4([(TOPIC, [(0, 0, 8 << 20)])], max_bytes=8 << 20))
            deadline = time.monotonic() + 10
            while broker.files.pins == 0:  # the range is held while sendfile waits for the socket
                assert time.monotonic() < deadline, "no range was sent"
                time.sleep(0.01)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()  # a reset in the middle of the answer
            deadline = time.monotonic() + 10
            while broker.files.pins:
                assert time.monotonic() < deadline, f"{broker.files.pins} descriptors still pinned"
                time.sleep(0.01)
            assert runner.server.send_stats.sendfile_bytes == 0  # the answer was never sent whole
            assert _consume_confluent(runner.bootstrap) == _values()  # the listener serves on
        finally:
            runner.stop()
