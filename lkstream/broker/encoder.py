"""The produce fast path: a whole produce call encoded as one batch per target partition.

Most produce calls hold ``(key, value[, headers])`` items whose keys are ``bytes``,
``str`` or ``None``, and keys repeat (ticker symbols, account ids). :func:`encode_call`
hands them to the C encoder of :mod:`lkstream.format.encode` with no Python work per
record: a call bound for one partition (an explicit partition, a one-partition topic, or
no keys) becomes one batch; a keyed call is routed by its *distinct* keys (each
converted and hashed once per call) and the encoder writes each record straight into its
partition's batch. Anything the encoder refuses (other types, a batch above
``max_batch_bytes``, headers on a keyed multi-partition call, an unhashable key) makes it
return ``None``, and the broker's general path validates, routes and splits the call,
reporting any error precisely. Nothing is appended here: the caller appends the batches
only once every one of them is encoded, so a fallback never follows a partial append.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, overload

from lkstream.broker.partitioner import StickyPartitioner, partition_for_key
from lkstream.format.codec import Compression
from lkstream.format.encode import encode, encode_routed, offsets, results
from lkstream.format.produce import to_bytes

# The encoder refuses malformed items with these; InvalidArgumentError is a ValueError.
_FALLBACK_ERRORS = (TypeError, ValueError, IndexError, KeyError, OverflowError)
_first = itemgetter(0)


class OffsetRange(Sequence[tuple[int, int]]):
    """``(partition, base + i)`` for ``i`` in ``range(records)``, computed when read (no tuple per record)."""

    __slots__ = ("base", "partition", "records")

    def __init__(self, partition: int, base: int, records: int) -> None:
        self.partition, self.base, self.records = partition, base, records

    def __len__(self) -> int:
        return self.records

    @overload
    def __getitem__(self, index: int) -> tuple[int, int]: ...

    @overload
    def __getitem__(self, index: slice) -> list[tuple[int, int]]: ...

    def __getitem__(self, index: int | slice) -> tuple[int, int] | list[tuple[int, int]]:
        if isinstance(index, slice):
            return [(self.partition, self.base + i) for i in range(*index.indices(self.records))]
        if index < 0:
            index += self.records
        if not 0 <= index < self.records:
            raise IndexError("offset index out of range")
        return self.partition, self.base + index

    def __repr__(self) -> str:
        return f"OffsetRange(partition={self.partition}, offsets={self.base}..{self.base + self.records - 1})"


@dataclass(frozen=True, slots=True)
class EncodedCall:
    """One produce call as batches, and which batch each record (in call order) went to.

    ``largest`` is each batch's biggest key + value in bytes (for ``max_message_bytes``);
    ``slots`` is None when every record went to the one batch, else each record's batch
    index (native uint32, see :func:`lkstream.format.encode.results`).
    """

    batches: list[tuple[int, bytearray]]
    largest: list[int]
    count: int
    slots: bytes | None

    @overload
    def results(self, bases: list[int]) -> list[tuple[int, int]]: ...
    @overload
    def results(self, bases: list[int], *, view: bool) -> Sequence[tuple[int, int]]: ...

    def results(self, bases: list[int], *, view: bool = False) -> Sequence[tuple[int, int]]:
        """``(partition, offset)`` per record in call order, given each batch's base offset.

        A list; with ``view``, a one-batch call gives an :class:`OffsetRange` instead.
        """
        if self.slots is None:
            if view:
                return OffsetRange(self.batches[0][0], bases[0], self.count)
            return offsets(self.batches[0][0], bases[0], self.count)
        return results(self.slots, [pid for pid, _ in self.batches], bases)


#: Keys a topic's route cache remembers before it starts over (a bound on what callers can grow).
ROUTE_CACHE_KEYS = 65_536


def encode_call(
    records: Sequence[Any],
    *,
    partitions: int,
    explicit: int | None,
    sticky: StickyPartitioner,
    codec: Compression,
    timestamp_ms: int,
    route_cache: dict[Any, int] | None = None,
) -> EncodedCall | None:
    """Encode ``records`` into one batch per target partition, or None to use the general path.

    ``route_cache`` (the topic's, for this partition count) maps ``str``/``bytes`` keys to their
    partitions across calls: a call whose keys were all seen before is routed by the C encoder
    alone, with no Python work at all per key or record. Keyless records never enter it (their
    partition is sticky per call).
    """
    if type(records) not in (list, tuple) or not records:
        return None
    try:
        if explicit is not None or partitions == 1:
            return _one_target(records, 0 if explicit is None else explicit, codec, timestamp_ms)
        if route_cache:
            try:
                return _routed(records, route_cache, partitions, codec, timestamp_ms)
            except KeyError:
                pass  # a key not seen before (or a keyless record): route this call's keys below
        keys = set(map(_first, records))
        if keys == {None}:
            return _one_target(records, sticky.next(partitions), codec, timestamp_ms)
        routes = {key: _route(key, partitions, sticky) for key in keys}
        if route_cache is not None:
            if len(route_cache) >= ROUTE_CACHE_KEYS:
                route_cache.clear()
            route_cache.update((k, pid) for k, pid in routes.items() if type(k) in (str, bytes))
        return _routed(records, routes, partitions, codec, timestamp_ms)
    except _FALLBACK_ERRORS:
        return None


def _routed(
    records: Sequence[Any], routes: dict[Any, int], partitions: int, codec: Compression, timestamp_ms: int
) -> EncodedCall:
    batches, slots = encode_routed(records, routes, partitions, timestamp_ms, int(codec))
    return EncodedCall(
        [(pid, batch) for pid, batch, _ in batches], [largest for _, _, largest in batches], len(records), slots
    )


def _one_target(records: Sequence[Any], pid: int, codec: Compression, timestamp_ms: int) -> EncodedCall:
    batch, largest = encode(records, timestamp_ms, compression=int(codec))
    return EncodedCall([(pid, batch)], [largest], len(records), None)


def _route(key: Any, partitions: int, sticky: StickyPartitioner) -> int:
    """A key's partition (keyless records of a call share one sticky partition)."""
    if key is None:
        return sticky.next(partitions)
    return partition_for_key(key if type(key) in (str, bytes) else to_bytes(key, "key"), partitions)  # type: ignore[arg-type]
