"""A connection that closes with produce requests in flight gives all their in-flight bytes back.

Before: in ``sync`` mode a Produce awaited its partitions' acknowledgements one at a time; when
the client went away the connection cancelled it, only the acknowledgement being awaited gave
its bytes back, and the later partitions' bytes stayed counted in ``max_inflight_bytes`` for
good (after 256 MiB every produce on every listener failed with BackpressureError).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lkstream import Broker
from lkstream.format.codec import encode_batch
from lkstream.kafka.context import ListenerSettings
from lkstream.kafka.inprocess import KafkaServerThread
from tests.kafka_wire.test_fuzz import request

DEADLINE_S = 10.0
PARTITIONS = 3


def _string(value: str) -> bytes:
    return struct.pack(">h", len(value)) + value.encode()


def produce_request(topic: str, batch: bytes, partitions: range, *, correlation: int = 1) -> bytes:
    """Produce v8, acks=-1, one batch per partition (the raw frame, size prefix included)."""
    body = struct.pack(">hhi", -1, -1, 5000) + struct.pack(">i", 1) + _string(topic)
    body += struct.pack(">i", len(partitions))
    body += b"".join(struct.pack(">ii", pid, len(batch)) + batch for pid in partitions)
    return request(0, 8, body, correlation=correlation)


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


@pytest.fixture
def sync_broker(tmp_path: Path) -> Iterator[Broker]:
    with Broker(persist_dir=str(tmp_path / "data"), fsync_mode="sync") as broker:
        yield broker


def test_a_connection_closed_before_the_answer_releases_every_partitions_inflight_bytes(sync_broker: Broker) -> None:
    sync_broker.create_topic("t", PARTITIONS)
    # The fsync of partition 0 waits for the test, so the answer cannot come before the client leaves.
    log = sync_broker.partition("t", 0).log
    fsync_may_run = threading.Event()
    flush = log.flush

    def held_flush() -> int:
        fsync_may_run.wait(DEADLINE_S * 3)
        return flush()

    log.flush = held_flush  # type: ignore[method-assign]
    runner = KafkaServerThread(sync_broker, ListenerSettings(port=0))
    host, port = runner.start().rsplit(":", 1)
    try:
        batch = bytes(encode_batch([(b"k", b"v" * 1000)]))
        with socket.create_connection((host, int(port)), timeout=DEADLINE_S) as sock:
            sock.sendall(produce_request("t", batch, range(PARTITIONS)))
            wait_until(lambda: sync_broker.stats().inflight_bytes == PARTITIONS * len(batch), "not appended")
        # The connection is gone: the listener cancels the produce, and the acknowledgement it
        # was awaiting (partition 0's) gives its bytes back at once.
        wait_until(lambda: sync_broker.stats().inflight_bytes <= (PARTITIONS - 1) * len(batch), "not cancelled")
        fsync_may_run.set()
        wait_until(lambda: sync_broker.stats().inflight_bytes == 0, "in-flight bytes were never given back")
        for pid in range(PARTITIONS):
            assert sync_broker.bounds("t", pid) == (0, 1)  # appended and durable, though never answered
    finally:
        fsync_may_run.set()
        runner.stop()
        log.flush = flush  # type: ignore[method-assign]
