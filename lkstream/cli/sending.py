"""Sending records for ``lkstream produce`` and ``lkstream topics copy``: requests of one partition each.

Records without a timestamp go through ``produce_many_sync`` (the client or the broker
routes keys); records that carry one (``produce --json`` lines with ``timestamp``, a
copy's records) are encoded here into v2 batches that keep their times, routed as every
LKSTREAM and Kafka producer routes: murmur2 of the key, keyless records of one request to
one partition.
"""

from __future__ import annotations

from contextlib import suppress
from typing import Final, NamedTuple

from lkstream.broker.broker import Broker
from lkstream.broker.partitioner import StickyPartitioner, partition_for_key
from lkstream.client.remote import RemoteBroker
from lkstream.errors import InvalidArgumentError, TopicExistsError, UnknownTopicError, no_such_partition
from lkstream.format.codec import Compression, Headers, encode_batch, now_ms
from lkstream.format.produce import chunk_by_size, record_sizes

COMPRESSIONS: Final = ("none", "gzip", "snappy", "lz4", "zstd")
#: Records per request.
PRODUCE_BATCH_LINES: Final = 1000
#: Key and value bytes of one batch of records that carry their own timestamps.
TIMED_BATCH_BYTES: Final = 1024 * 1024

#: Where records go: a daemon, or an embedded broker on a data directory.
Target = RemoteBroker | Broker


class Line(NamedTuple):
    """One input line as a record: where it goes (None: the partitioner decides) and its time (None: now)."""

    key: bytes | None
    value: bytes | None
    headers: Headers
    partition: int | None = None
    timestamp: int | None = None


def partition_count(target: Target, topic: str) -> int:
    """Partitions of ``topic``, created first (the broker's default count) where a produce would create it."""
    if isinstance(target, RemoteBroker):
        return target.partitions_for(topic, create=True)
    try:
        return target.partitions_for(topic)
    except UnknownTopicError:
        if not target.config.auto_create_topics:
            raise
        with suppress(TopicExistsError):  # created meanwhile
            target.create_topic(topic)
        return target.partitions_for(topic)


class Sender:
    """Sends lines in requests of up to 1,000 records of one partition, counting what was acknowledged.

    Lines without a timestamp go through ``produce_many_sync`` (the client or broker routes
    keys); lines that carry one are encoded here into batches that keep their times, routed
    as every LKSTREAM and Kafka producer routes (murmur2 of the key; keyless lines of one
    request to one partition).
    """

    def __init__(self, target: Target, topic: str, compression: Compression) -> None:
        self.target = target
        self.topic = topic
        self.compression = compression
        self.acknowledged = 0
        self._held: list[Line] = []
        self._partitions: int | None = None
        self._sticky = StickyPartitioner()

    def add(self, line: Line) -> None:
        held = self._held
        if held and (
            line.partition != held[0].partition
            or (line.timestamp is None) != (held[0].timestamp is None)
            or len(held) == PRODUCE_BATCH_LINES
        ):
            self.flush()
        self._held.append(line)

    def flush(self) -> None:
        lines, self._held = self._held, []
        if not lines:
            return
        if lines[0].timestamp is None:
            records = [(line.key, line.value, line.headers) for line in lines]
            sent = self.target.produce_many_sync(
                self.topic, records, partition=lines[0].partition, compression=self.compression
            )
            self.acknowledged += len(sent)
            return
        for pid, group in self._routed(lines).items():
            sizes = record_sizes([(line.key, line.value) for line in group])
            for chunk in chunk_by_size(list(range(len(group))), sizes, TIMED_BATCH_BYTES):
                self._send_timed(pid, [group[i] for i in chunk])

    def _routed(self, lines: list[Line]) -> dict[int, list[Line]]:
        if self._partitions is None:
            self._partitions = partition_count(self.target, self.topic)
        count = self._partitions
        keyless = self._sticky.next(count)
        routed: dict[int, list[Line]] = {}
        for line in lines:
            pid = line.partition
            if pid is None:
                pid = keyless if line.key is None else partition_for_key(line.key, count)
            elif pid >= count:
                raise InvalidArgumentError(
                    f"{no_such_partition(self.topic, pid, count)}: create {self.topic!r} with as many partitions "
                    "as the records name first (lkstream topics create), or copy a whole topic with "
                    "`lkstream topics copy`, which does"
                )
            routed.setdefault(pid, []).append(line)
        return routed

    def _send_timed(self, pid: int, lines: list[Line]) -> None:
        now = now_ms()
        batch = encode_batch(
            [(line.key, line.value) for line in lines],
            headers=[line.headers for line in lines],
            timestamps=[now if line.timestamp is None else line.timestamp for line in lines],
            compression=self.compression,
        )
        self.target.produce_batch_sync(self.topic, pid, batch)
        self.acknowledged += len(lines)
