"""Encoded Metadata answers, cached until the topic table changes.

Encoding a Metadata response with kio costs milliseconds for hundreds of
partitions, and clients ask often (every ``metadata.max.age.ms``, on every
unknown-partition error, on every rebalance). The cache key is the request
(version, topics asked, auto-create flag); entries are dropped whenever the
broker's ``topics_version`` moves (a topic created, deleted or grown through
any surface). Bounded: at most :data:`MAX_ENTRIES` answers.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Final

MAX_ENTRIES: Final = 256


class MetadataCache:
    """Not thread-safe: used from the listener's event loop only."""

    def __init__(self, topics_version: Callable[[], int]) -> None:
        self._topics_version = topics_version
        self._version = -1
        self._entries: dict[Hashable, bytes] = {}

    def get(self, key: Hashable, build: Callable[[], bytes]) -> bytes:
        current = self._topics_version()
        if current != self._version:
            self._entries.clear()
            self._version = current
        cached = self._entries.get(key)
        if cached is None:
            cached = build()
            if self._topics_version() == current:  # building may auto-create a topic
                if len(self._entries) >= MAX_ENTRIES:
                    self._entries.clear()
                self._entries[key] = cached
        return cached
