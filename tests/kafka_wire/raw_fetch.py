"""Fetch v4 by hand: requests no client would send (huge limits, a partition named 200 times) and their answers."""

from __future__ import annotations

import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from tests.kafka_wire.test_fuzz import request

MAX_INT32 = 2**31 - 1


def _string(value: str) -> bytes:
    return struct.pack(">h", len(value)) + value.encode()


def fetch_v4(
    topics: Sequence[tuple[str, Sequence[tuple[int, int, int]]]],
    *,
    max_bytes: int = MAX_INT32,
    max_wait_ms: int = 100,
    correlation: int = 7,
) -> bytes:
    """A Fetch v4 frame: ``topics`` as ``(name, [(partition, fetch_offset, partition_max_bytes)])``."""
    body = struct.pack(">iiiib", -1, max_wait_ms, 1, max_bytes, 0) + struct.pack(">i", len(topics))
    for name, partitions in topics:
        body += _string(name) + struct.pack(">i", len(partitions))
        for partition, offset, limit in partitions:
            body += struct.pack(">iqi", partition, offset, limit)
    return request(1, 4, body, correlation=correlation)


@dataclass
class FetchedPartition:
    topic: str
    partition: int
    error_code: int
    high_watermark: int
    records: bytes


def read_answer(sock: socket.socket) -> tuple[int, bytes]:
    """One answer off ``sock``: its correlation id and body."""

    def exactly(size: int) -> bytes:
        data = bytearray()
        while len(data) < size:
            chunk = sock.recv(min(size - len(data), 1 << 20))
            assert chunk, "the connection closed"
            data += chunk
        return bytes(data)

    (size,) = struct.unpack(">i", exactly(4))
    body = exactly(size)
    return struct.unpack_from(">i", body)[0], body[4:]


def parse_fetch_v4(body: bytes) -> list[FetchedPartition]:
    """The partitions of a Fetch v4 answer body (after the correlation id)."""
    pos = 4  # throttle time
    (topic_count,) = struct.unpack_from(">i", body, pos)
    pos += 4
    out = []
    for _ in range(topic_count):
        (name_length,) = struct.unpack_from(">h", body, pos)
        name = body[pos + 2 : pos + 2 + name_length].decode()
        pos += 2 + name_length
        (partition_count,) = struct.unpack_from(">i", body, pos)
        pos += 4
        for _ in range(partition_count):
            partition, code, high, _stable, aborted = struct.unpack_from(">ihqqi", body, pos)
            pos += 4 + 2 + 8 + 8 + 4 + max(aborted, 0) * 16
            (size,) = struct.unpack_from(">i", body, pos)
            pos += 4
            records = body[pos : pos + max(size, 0)]
            pos += max(size, 0)
            out.append(FetchedPartition(name, partition, code, high, records))
    assert pos == len(body), f"{len(body) - pos} bytes after the last partition"
    return out


def fetch_once(bootstrap: str, frame: bytes, *, timeout: float = 30.0) -> list[FetchedPartition]:
    """Send one Fetch v4 on a new connection and parse its answer."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(frame)
        _correlation, body = read_answer(sock)
    return parse_fetch_v4(body)
