"""Conversions between Python values and wire messages that both ends need."""

from __future__ import annotations

from collections.abc import Iterable

from lkstream.wire._proto import messaging_pb2 as pb

TopicPartition = tuple[str, int]


def to_topic_partitions(partitions: Iterable[TopicPartition]) -> list[pb.TopicPartitions]:
    """``[(topic, pid)]`` as one ``TopicPartitions`` message per topic, topics and partitions sorted."""
    by_topic: dict[str, list[int]] = {}
    for topic, pid in partitions:
        by_topic.setdefault(topic, []).append(pid)
    return [pb.TopicPartitions(topic=t, partitions=sorted(p)) for t, p in sorted(by_topic.items())]


def from_topic_partitions(messages: Iterable[pb.TopicPartitions]) -> frozenset[TopicPartition]:
    """The inverse of :func:`to_topic_partitions`."""
    return frozenset((m.topic, int(pid)) for m in messages for pid in m.partitions)
