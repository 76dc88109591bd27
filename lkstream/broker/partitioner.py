"""Which partition a record goes to, exactly as Kafka's clients decide it.

Keyed records: ``(murmur2(key) & 0x7fffffff) % partitions``, the rule of Kafka's
Java client and librdkafka's ``murmur2_random``, so a key lands on the same
partition number here and after a move to Kafka. Records without a key are
*sticky*: one partition for a whole produce call, the next partition on the next
call (Kafka's sticky partitioner, KIP-480), which keeps batches large.
"""

from __future__ import annotations

import itertools
from functools import lru_cache

from lkstream.format.codec import KeyValue


@lru_cache(maxsize=65536)
def _key_hash(key: bytes | str) -> int:
    # Keys repeat (ticker symbols, account ids): caching the pure-Python hash
    # makes keyed produce cost one dict lookup per record. A str key is cached as
    # itself, so a repeated str key is not even encoded again.
    from aiokafka.partitioner import murmur2  # on the first keyed record: aiokafka is a large import

    return int(murmur2(key.encode() if isinstance(key, str) else key)) & 0x7FFFFFFF


def partition_for_key(key: bytes | str, partitions: int) -> int:
    """Kafka's default partition for ``key`` (a str counts as its UTF-8 bytes) among ``partitions``."""
    return _key_hash(key) % partitions


class StickyPartitioner:
    """Hands out partitions round-robin, one per produce call. Thread-safe (itertools.count)."""

    def __init__(self) -> None:
        self._counter = itertools.count()

    def next(self, partitions: int) -> int:
        return next(self._counter) % partitions


def route_records(
    pairs: list[KeyValue], partitions: int, explicit: int | None, sticky: StickyPartitioner
) -> dict[int, list[int]]:
    """Group record indices by target partition, keeping their order."""
    if explicit is not None:
        return {explicit: list(range(len(pairs)))}
    if partitions == 1:
        return {0: list(range(len(pairs)))}
    keyless = -1
    routes: dict[int, list[int]] = {}
    for i, (key, _) in enumerate(pairs):
        if key is None:
            if keyless < 0:
                keyless = sticky.next(partitions)
            pid = keyless
        else:
            pid = partition_for_key(key, partitions)
        routes.setdefault(pid, []).append(i)
    return routes
