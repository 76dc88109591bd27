"""Kafka's consumer protocol payloads: what "consumer" groups carry as JoinGroup metadata and SyncGroup assignment.

The classic group protocol treats them as opaque bytes; LKSTREAM reads them to describe
Kafka clients' groups (``lkstream groups describe``) and, when a group holds members of
both protocols (KIP-848's online upgrade and downgrade), to give a classic member the
assignment the coordinator computed. Layouts (Kafka's ``ConsumerProtocolSubscription`` and
``ConsumerProtocolAssignment``, big-endian)::

    subscription: int16 version, [string topic], bytes user_data, (v1+) [string topic, [int32]] owned, ...
    assignment:   int16 version, [string topic, [int32 partition]], bytes user_data

Readers never raise: unreadable bytes give an empty result (a client's payload is not trusted).
"""

from __future__ import annotations

import struct

TopicPartitions = frozenset[tuple[str, int]]


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(value)

    def string(self) -> str:
        size = self.take(">h")
        if size < 0 or self.pos + size > len(self.data):
            raise struct.error("string past the end")
        text = self.data[self.pos : self.pos + size].decode()
        self.pos += size
        return text

    def skip_bytes(self) -> None:
        size = self.take(">i")
        self.pos += max(0, size)
        if self.pos > len(self.data):
            raise struct.error("bytes past the end")

    def count(self) -> int:
        # Every element takes at least two bytes: a count beyond that is garbage, not a reason to loop.
        n = self.take(">i")
        if n > (len(self.data) - self.pos) // 2 + 1:
            raise struct.error("count past the end")
        return max(0, n)

    def topic_partitions(self) -> set[tuple[str, int]]:
        found = set()
        for _ in range(self.count()):
            topic = self.string()
            n = self.count()
            for pid in struct.unpack_from(f">{n}i", self.data, self.pos):
                found.add((topic, pid))
            self.pos += 4 * n
        return found


def decode_subscription(metadata: bytes) -> frozenset[str]:
    """Topics of a ConsumerProtocolSubscription; empty if unreadable."""
    try:
        reader = _Reader(metadata)
        reader.take(">h")
        return frozenset(reader.string() for _ in range(reader.count()))
    except (struct.error, UnicodeDecodeError):
        return frozenset()


def decode_owned(metadata: bytes) -> TopicPartitions:
    """The partitions a ConsumerProtocolSubscription v1+ says the member still owns; empty if absent or unreadable."""
    try:
        reader = _Reader(metadata)
        if reader.take(">h") < 1:
            return frozenset()
        for _ in range(reader.count()):
            reader.string()
        reader.skip_bytes()
        return frozenset(reader.topic_partitions())
    except (struct.error, UnicodeDecodeError):
        return frozenset()


def decode_assignment(assignment: bytes) -> TopicPartitions:
    """Partitions of a ConsumerProtocolAssignment; empty if unreadable."""
    try:
        reader = _Reader(assignment)
        reader.take(">h")
        return frozenset(reader.topic_partitions())
    except (struct.error, UnicodeDecodeError):
        return frozenset()


def protocol_version(metadata: bytes) -> int:
    """The version a subscription was written with (0 if unreadable): the assignment is answered in it."""
    return struct.unpack_from(">h", metadata)[0] if len(metadata) >= 2 else 0


def encode_assignment(partitions: TopicPartitions, version: int = 0) -> bytes:
    """A ConsumerProtocolAssignment of ``partitions`` (no user data), as Kafka's coordinator writes it."""
    by_topic: dict[str, list[int]] = {}
    for topic, pid in sorted(partitions):
        by_topic.setdefault(topic, []).append(pid)
    out = [struct.pack(">hi", max(0, min(version, 3)), len(by_topic))]
    for topic, pids in by_topic.items():
        name = topic.encode()
        out.append(struct.pack(f">h{len(name)}si{len(pids)}i", len(name), name, len(pids), *pids))
    out.append(struct.pack(">i", -1))  # user data: null
    return b"".join(out)
