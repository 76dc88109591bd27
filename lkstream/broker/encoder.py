"""The produce fast path: a whole produce call encoded as one batch per target partition.

Most produce calls hold ``(key, value)`` pairs of ``bytes`` values whose keys are
``bytes``, ``str`` or ``None``, and keys repeat (ticker symbols, account ids).
:func:`encode_call` handles them with one pass of Python work per record: each
distinct key is converted and routed once per call (a dict lookup for the
repeats), and each record is appended straight to its partition's list of
pairs, which aiokafka's C builder then encodes. Anything else (headers,
other types, a call larger than one batch, an unhashable key) makes it
return ``None``, and the broker's general path validates, routes and splits
the call, reporting any error precisely. Nothing is appended here: the caller
appends the batches only once every one of them is encoded, so a fallback never
follows a partial append.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import count, repeat
from typing import Any

from lkstream.broker.partitioner import StickyPartitioner, partition_for_key
from lkstream.errors import InvalidArgumentError
from lkstream.format.codec import Compression, KeyValue, encode_batch
from lkstream.format.produce import to_bytes

# The C encoder rejects malformed items with these; InvalidArgumentError is a ValueError.
_FALLBACK_ERRORS = (TypeError, ValueError, IndexError, KeyError)


@dataclass(frozen=True, slots=True)
class EncodedCall:
    """One produce call as batches, and which partition each record (in call order) went to.

    ``pids`` is None when every record went to the one partition of ``batches``.
    ``pairs`` holds each batch's records as bytes pairs, for size checks.
    """

    batches: list[tuple[int, bytearray]]
    pairs: list[Sequence[KeyValue]]
    pids: list[int] | None

    def results(self, bases: Sequence[int]) -> list[tuple[int, int]]:
        """``(partition, offset)`` per record in call order, given each batch's base offset."""
        if self.pids is None:
            (pid, _), base = self.batches[0], bases[0]
            return list(zip(repeat(pid), range(base, base + len(self.pairs[0])), strict=False))
        offsets = {
            pid: zip(repeat(pid), count(base), strict=False).__next__
            for (pid, _), base in zip(self.batches, bases, strict=True)
        }
        return [offsets[pid]() for pid in self.pids]


def encode_call(
    records: Sequence[Any],
    *,
    partitions: int,
    explicit: int | None,
    sticky: StickyPartitioner,
    codec: Compression,
    timestamp_ms: int,
) -> EncodedCall | None:
    """Encode ``records`` into one batch per target partition, or None to use the general path."""
    if type(records) not in (list, tuple) or not records:
        return None
    try:
        if explicit is not None or partitions == 1:
            pid = 0 if explicit is None else explicit
            return _one_target(records, pid, codec, timestamp_ms)
        if not any(r[0] is not None for r in records):
            return _one_target(records, sticky.next(partitions), codec, timestamp_ms)
        return _routed(records, partitions, sticky, codec, timestamp_ms)
    except _FALLBACK_ERRORS:
        return None


def _one_target(records: Sequence[Any], pid: int, codec: Compression, timestamp_ms: int) -> EncodedCall:
    try:
        batch = encode_batch(records, compression=codec, timestamp_ms=timestamp_ms)
    except InvalidArgumentError:
        # A str key (the common case) or some other type: convert each distinct key once.
        keys = {key: to_bytes(key, "key") for key in {key for key, _ in records}}
        records = [(keys[key], value) for key, value in records]
        batch = encode_batch(records, compression=codec, timestamp_ms=timestamp_ms)
    return EncodedCall([(pid, batch)], [records], None)


def _routed(
    records: Sequence[Any], partitions: int, sticky: StickyPartitioner, codec: Compression, timestamp_ms: int
) -> EncodedCall:
    groups: dict[int, list[KeyValue]] = {}
    # Per distinct key of this call: its bytes, its partition and that partition's list.append.
    routes: dict[Any, tuple[bytes | None, int, Callable[[KeyValue], None]]] = {}
    pids: list[int] = []
    add_pid = pids.append
    for key, value in records:
        route = routes.get(key)
        if route is None:
            route = routes[key] = _route(key, partitions, sticky, groups)
        route[2]((route[0], value))
        add_pid(route[1])
    batches = [
        (pid, encode_batch(pairs, compression=codec, timestamp_ms=timestamp_ms)) for pid, pairs in groups.items()
    ]
    return EncodedCall(batches, list(groups.values()), pids)


def _route(
    key: Any, partitions: int, sticky: StickyPartitioner, groups: dict[int, list[KeyValue]]
) -> tuple[bytes | None, int, Callable[[KeyValue], None]]:
    """A key's bytes and partition (keyless records share one sticky partition per call)."""
    converted = to_bytes(key, "key")
    pid = sticky.next(partitions) if converted is None else partition_for_key(converted, partitions)
    return converted, pid, groups.setdefault(pid, []).append
