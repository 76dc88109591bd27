"""A handler that fails unexpectedly answers Produce and Fetch partition by partition, never a closed socket."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from lkstream import Broker
from lkstream.format.codec import encode_batch
from tests.kafka_wire.test_fuzz import exchange, request

UNKNOWN_SERVER_ERROR = -1


def _string(value: str) -> bytes:
    return struct.pack(">h", len(value)) + value.encode()


def _boom(*_args: Any, **_kwargs: Any) -> Any:
    raise RuntimeError("injected handler failure")


def test_a_failing_produce_handler_answers_every_partition_with_an_error(
    kafka_bootstrap: str, kafka_broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    kafka_broker.create_topic("f", 2)
    monkeypatch.setattr(kafka_broker, "begin_produce_batch", _boom)
    batch = bytes(encode_batch([(b"k", b"v")]))
    partitions = b"".join(struct.pack(">ii", pid, len(batch)) + batch for pid in (0, 1))
    body = struct.pack(">hhi", -1, 1, 5000) + struct.pack(">i", 1) + _string("f") + struct.pack(">i", 2) + partitions
    answer = exchange(kafka_bootstrap, request(0, 8, body, correlation=41))
    size, correlation, topics = struct.unpack_from(">iii", answer)
    assert (size, correlation, topics) == (len(answer) - 4, 41, 1)
    pos = 12 + 2 + 1  # the topic name "f"
    (count,) = struct.unpack_from(">i", answer, pos)
    pos += 4
    errors = []
    for _ in range(count):
        pid, code, base = struct.unpack_from(">ihq", answer, pos)
        errors.append((pid, code, base))
        pos += 4 + 2 + 8 + 8 + 8  # ... log_append_time, log_start_offset
        pos += 4  # record_errors: empty array
        (message_len,) = struct.unpack_from(">h", answer, pos)
        pos += 2 + max(0, message_len)
    assert errors == [(0, UNKNOWN_SERVER_ERROR, -1), (1, UNKNOWN_SERVER_ERROR, -1)]
    assert kafka_broker.describe_topic("f").partitions[0].next_offset == 0


def test_a_failing_fetch_handler_answers_every_partition_with_an_error(
    kafka_bootstrap: str, kafka_broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    kafka_broker.create_topic("g", 1)
    monkeypatch.setattr(kafka_broker, "fetch_for_send", _boom)
    partitions = struct.pack(">i", 1) + struct.pack(">iqi", 0, 0, 1 << 20)
    body = struct.pack(">iiiib", -1, 100, 1, 1 << 20, 0) + struct.pack(">i", 1) + _string("g") + partitions
    answer = exchange(kafka_bootstrap, request(1, 4, body, correlation=42))
    _size, correlation, _throttle, topics = struct.unpack_from(">iiii", answer)
    assert (correlation, topics) == (42, 1)
    pos = 16 + 2 + 1
    count, pid, code = struct.unpack_from(">iih", answer, pos)
    assert (count, pid, code) == (1, 0, UNKNOWN_SERVER_ERROR)
