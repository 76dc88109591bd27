"""Where ``lkstream consume`` reads records from: a daemon, or a data directory read offline.

Both answer the same few questions (topics, partition counts, bounds, records from
an offset, the offset of a time), so the command reads either the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Protocol

import click

from lkstream.client.remote import RemoteBroker
from lkstream.errors import InvalidArgumentError, UnknownTopicError
from lkstream.format.codec import Record, decode_batch
from lkstream.storage.reader import DataDirReader


class Source(Protocol):
    def topics(self) -> list[str]: ...

    def partition_count(self, topic: str) -> int: ...

    def bounds(self, topic: str) -> list[tuple[int, int]]: ...

    def chunks(self, topic: str, pid: int, offset: int) -> Iterator[list[Record]]: ...

    def offsets_for_timestamp(self, topic: str, timestamp_ms: int, pids: list[int]) -> dict[int, int]: ...


class RemoteSource:
    """Records from a daemon, one Fetch per chunk."""

    def __init__(self, broker: RemoteBroker) -> None:
        self.broker = broker

    def topics(self) -> list[str]:
        return sorted(self.broker.list_topics())

    def partition_count(self, topic: str) -> int:
        return self.broker.partitions_for(topic)

    def bounds(self, topic: str) -> list[tuple[int, int]]:
        return [(p.log_start_offset, p.high_watermark) for p in self.broker.describe_topic(topic).partitions]

    def chunks(self, topic: str, pid: int, offset: int) -> Iterator[list[Record]]:
        while records := self.broker.read_from(topic, pid, offset):
            yield records
            offset = records[-1].offset + 1

    def offsets_for_timestamp(self, topic: str, timestamp_ms: int, pids: list[int]) -> dict[int, int]:
        return self.broker.offsets_for_timestamp(topic, timestamp_ms, pids)


class OfflineSource:
    """Records read from a data directory's segments, one batch per chunk, without the lock."""

    def __init__(self, reader: DataDirReader) -> None:
        self.reader = reader

    def topics(self) -> list[str]:
        return sorted(self.reader.topics())

    def partition_count(self, topic: str) -> int:
        if topic not in self.reader.topic_dirs():
            raise UnknownTopicError(topic)
        return len(self.reader.partitions(topic))

    def bounds(self, topic: str) -> list[tuple[int, int]]:
        parts = [self.reader.partition(topic, pid) for pid in self.reader.partitions(topic)]
        return [(part.log_start_offset, part.end_offset()) for part in parts]

    def chunks(self, topic: str, pid: int, offset: int) -> Iterator[list[Record]]:
        for batch in self.reader.partition(topic, pid).batches(offset):
            yield decode_batch(batch.data, topic, pid, offset)

    def offsets_for_timestamp(self, topic: str, timestamp_ms: int, pids: list[int]) -> dict[int, int]:
        found = {}
        for pid in pids:
            part = self.reader.partition(topic, pid)
            found[pid] = part.end_offset()  # every record older: the end, as the daemon answers
            for batch in part.batches(part.log_start_offset):
                if batch.header.max_timestamp >= timestamp_ms:
                    hits = [r.offset for r in decode_batch(batch.data, topic, pid) if r.timestamp >= timestamp_ms]
                    if hits:
                        found[pid] = hits[0]
                        break
        return found


def is_pattern(name: str) -> bool:
    """kcat's convention: a topic argument starting with ``^`` is a regular expression (no topic name can)."""
    return name.startswith("^")


def matching_topics(source: Source, names: tuple[str, ...], *, regex: bool) -> list[str]:
    """The topics ``names`` select: names as given, and every existing topic a pattern fully matches.

    A pattern that matches nothing is an error (a typo would otherwise print nothing and exit 0).
    """
    wanted: list[str] = []
    existing: list[str] | None = None
    for name in names:
        if not (regex or is_pattern(name)):
            wanted.append(name)
            continue
        try:
            pattern = re.compile(name)
        except re.error as exc:
            raise InvalidArgumentError(f"{name!r} is not a valid regular expression: {exc}") from None
        existing = source.topics() if existing is None else existing
        found = [topic for topic in existing if pattern.fullmatch(topic) or (is_pattern(name) and pattern.match(topic))]
        if not found:
            raise click.ClickException(f"NOT_FOUND: no topic matches {name!r}")
        wanted.extend(found)
    return list(dict.fromkeys(wanted))
