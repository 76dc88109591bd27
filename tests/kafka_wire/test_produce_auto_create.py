"""A Kafka Produce to a missing topic auto-creates it off the event loop, and keeps request order.

Before: the append created the topic inline (``Broker._topic(create=True)``), on the listener's
event loop: every other client waited for the file-system work of a large topic. Now the
handler creates it in a worker thread first; a later request on the same connection still takes
effect after it.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lkstream import Broker
from lkstream.format.codec import encode_batch
from lkstream.kafka.context import ListenerSettings
from lkstream.kafka.inprocess import KafkaServerThread
from tests.kafka_wire.test_closed_connections import produce_request
from tests.kafka_wire.test_fuzz import exchange, request

DEADLINE_S = 10.0


class SlowCreation(Broker):
    """A broker whose creation of :attr:`SLOW` waits until the test lets it finish (as a large topic would)."""

    SLOW = "fresh"

    def __init__(self, **settings: Any) -> None:
        self.creating = threading.Event()
        self.creation_may_finish = threading.Event()
        super().__init__(**settings)

    def _create_locked(self, name: str, *args: Any) -> Any:
        if name == self.SLOW:
            self.creating.set()
            self.creation_may_finish.wait(DEADLINE_S * 3)
        return super()._create_locked(name, *args)


@pytest.fixture
def slow_creation(tmp_path: Path) -> Iterator[tuple[SlowCreation, str]]:
    broker = SlowCreation(persist_dir=str(tmp_path / "data"))
    runner = KafkaServerThread(broker, ListenerSettings(port=0))
    try:
        yield broker, runner.start()
    finally:
        broker.creation_may_finish.set()
        runner.stop()
        broker.close()


def read_answer(sock: socket.socket) -> bytes:
    def exactly(size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = sock.recv(size - len(data))
            assert chunk, "the listener closed the connection"
            data += chunk
        return data

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def produce_answer(answer: bytes) -> tuple[int, int, int]:
    """``(correlation id, error code, base offset)`` of a Produce v8 answer for one partition."""
    (correlation,) = struct.unpack_from(">i", answer)
    pos = 4 + 4 + 2 + struct.unpack_from(">h", answer, 8)[0] + 4  # topic count, name, partition count
    _pid, code, base = struct.unpack_from(">ihq", answer, pos)
    return correlation, code, base


def test_a_produce_to_a_new_topic_creates_it_off_the_event_loop_in_request_order(
    slow_creation: tuple[SlowCreation, str],
) -> None:
    broker, bootstrap = slow_creation
    broker.create_topic("existing", 1)
    host, port = bootstrap.rsplit(":", 1)
    first, second = (bytes(encode_batch([(None, value)])) for value in (b"first", b"second"))
    with socket.create_connection((host, int(port)), timeout=DEADLINE_S) as producer:
        # Two pipelined produces: the first to a topic that does not exist yet.
        producer.sendall(
            produce_request(SlowCreation.SLOW, first, range(1), correlation=1)
            + produce_request("existing", second, range(1), correlation=2)
        )
        assert broker.creating.wait(DEADLINE_S), "the produce did not create the topic"
        # While the creation runs, another client is served...
        versions = exchange(bootstrap, request(18, 0, b"", correlation=77))
        assert versions[4:8] == struct.pack(">i", 77), "the listener did not answer while a topic was created"
        # ... and the second produce has not taken effect before the first.
        assert broker.bounds("existing", 0) == (0, 0), "a later produce appended before the one creating a topic"
        broker.creation_may_finish.set()
        answers = [produce_answer(read_answer(producer)) for _ in range(2)]
    assert answers == [(1, 0, 0), (2, 0, 0)]
    assert [record.value for record in broker.read_from(SlowCreation.SLOW, 0, 0)] == [b"first"]
    assert [record.value for record in broker.read_from("existing", 0, 0)] == [b"second"]
