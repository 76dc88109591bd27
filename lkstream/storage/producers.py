"""Idempotent-producer state of one partition: duplicate and sequence checks, rebuilt from the log.

Kafka's idempotent producer stamps each batch with ``producer_id``,
``producer_epoch`` and ``base_sequence`` (the sequence of its first record;
sequences count records per producer and partition, wrapping after 2**31-1).
The partition log keeps, per producer id, its epoch and the last
:data:`BATCHES_KEPT` batches it appended, and checks each new batch under the
log lock, before the offset is stamped:

* a batch equal (epoch, first and last sequence) to a kept one is a
  **duplicate**: it is not appended, and the producer is answered with the
  original offsets (:meth:`ProducerStateTable.check` returns them);
* an epoch below the known one is **fenced** (:class:`ProducerFencedError`);
* in the known epoch the first sequence must follow the last one
  (:class:`OutOfOrderSequenceError` otherwise); a new epoch, or a producer the
  table does not know (new, evicted, or its batches deleted by retention),
  starts wherever it starts, as Kafka's broker accepts it.

Batches with ``producer_id == -1`` (not idempotent) are not checked.

Nothing here is authoritative: the state is a function of the batch headers in
the log. On open it is rebuilt from ``producers.snapshot`` (written at segment
roll and close) plus a header-only walk of the batches after the snapshot's
offset, so start-up reads at most one segment's headers. The table holds at
most ``max_producers`` ids; the least recently appending one is forgotten first.

``producers.snapshot`` (big-endian, written with :func:`~lkstream.storage.files.atomic_write`)::

    offset  size  field
    0       4     magic b"LKPS"
    4       2     version (1)
    6       8     covers batches below this offset
    14      4     producer count N
    18      ...   N entries: producer_id int64, epoch int16, batch count uint8,
                  then per batch: first_seq int32, last_seq int32, base_offset int64, last_offset int64
    end-4   4     CRC-32C of everything before it

A damaged or unreadable snapshot is ignored (the walk then starts at the log start).

Thread-safety: none; the owning :class:`~lkstream.storage.log.PartitionLog` calls it under its lock.
"""

from __future__ import annotations

import logging
import os
import struct
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, Protocol

import crc32c

from lkstream.errors import CorruptRecordError, OutOfOrderSequenceError, ProducerFencedError, StorageError
from lkstream.format.batch import HEADER_SIZE, PRODUCER_ID_AT, parse_header
from lkstream.storage.files import atomic_write

log = logging.getLogger("lkstream.storage")

SNAPSHOT_NAME: Final = "producers.snapshot"
#: Batches remembered per producer: Kafka's max.in.flight.requests.per.connection limit for idempotence.
BATCHES_KEPT: Final = 5
#: Producer ids remembered per partition before the least recently appending one is forgotten.
DEFAULT_MAX_PRODUCERS: Final = 1024
NO_PRODUCER_ID: Final = -1
_MAX_SEQUENCE: Final = 2**31 - 1

_PRODUCER_FIELDS: Final = struct.Struct(">qhi")  # producer_id, producer_epoch, base_sequence
_SNAP_HEAD: Final = struct.Struct(">4sHqI")
_SNAP_ENTRY: Final = struct.Struct(">qhB")
_SNAP_BATCH: Final = struct.Struct(">iiqq")
_SNAP_MAGIC: Final = b"LKPS"
_SNAP_VERSION: Final = 1


@dataclass(frozen=True, slots=True)
class ProducerFields:
    """The idempotence fields of one batch header."""

    producer_id: int
    epoch: int
    first_sequence: int
    last_sequence: int


def producer_fields(batch: bytes | bytearray | memoryview, pos: int = 0) -> ProducerFields | None:
    """The producer fields of the batch at ``pos``, or None for a non-idempotent batch."""
    producer_id, epoch, first = _PRODUCER_FIELDS.unpack_from(batch, pos + PRODUCER_ID_AT)
    if producer_id == NO_PRODUCER_ID:
        return None
    delta = parse_header(batch, pos).last_offset_delta
    return ProducerFields(producer_id, epoch, first, next_sequence(first, delta))


def next_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment`` wrapping after 2**31-1 to 0, as Kafka's producers count."""
    if sequence > _MAX_SEQUENCE - increment:
        return increment - (_MAX_SEQUENCE - sequence) - 1
    return sequence + increment


@dataclass(frozen=True, slots=True)
class _Batch:
    first_sequence: int
    last_sequence: int
    base_offset: int
    last_offset: int


@dataclass(slots=True)
class _Producer:
    epoch: int
    batches: deque[_Batch] = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))


class HeaderSource(Protocol):
    """What the rebuild walk needs from a segment (see :class:`~lkstream.storage.segment.Segment`)."""

    base_offset: int
    next_offset: int

    @property
    def size(self) -> int: ...

    def position_of(self, offset: int, end: int) -> int: ...

    def read_header_bytes(self, position: int) -> bytes: ...


class ProducerStateTable:
    """Per-producer epochs and recent batches of one partition (see the module docstring)."""

    def __init__(self, max_producers: int = DEFAULT_MAX_PRODUCERS) -> None:
        if max_producers < 1:
            raise ValueError(f"max_producers must be >= 1, got {max_producers}")
        self.max_producers = max_producers
        self._producers: OrderedDict[int, _Producer] = OrderedDict()
        self.snapshot_offset = -1  # the offset the snapshot on disk covers (-1: none known)

    def __len__(self) -> int:
        return len(self._producers)

    def check(self, fields: ProducerFields) -> tuple[int, int] | None:
        """``(base, last)`` offsets if ``fields`` is a duplicate; None to append; raises if refused."""
        entry = self._producers.get(fields.producer_id)
        if entry is None:
            return None
        if fields.epoch < entry.epoch:
            raise ProducerFencedError(fields.producer_id, fields.epoch, entry.epoch)
        if fields.epoch > entry.epoch or not entry.batches:
            return None
        for kept in entry.batches:
            if kept.first_sequence == fields.first_sequence and kept.last_sequence == fields.last_sequence:
                return kept.base_offset, kept.last_offset
        last = entry.batches[-1].last_sequence
        if fields.first_sequence != next_sequence(last, 1):
            raise OutOfOrderSequenceError(fields.producer_id, fields.first_sequence, next_sequence(last, 1))
        return None

    def record(self, fields: ProducerFields, base_offset: int, last_offset: int) -> None:
        """Remember an appended batch (after :meth:`check` said to append it)."""
        entry = self._producers.get(fields.producer_id)
        if entry is None or fields.epoch > entry.epoch:
            entry = _Producer(fields.epoch)
            self._producers[fields.producer_id] = entry
        self._producers.move_to_end(fields.producer_id)
        entry.batches.append(_Batch(fields.first_sequence, fields.last_sequence, base_offset, last_offset))
        while len(self._producers) > self.max_producers:
            self._producers.popitem(last=False)

    def last_batch_offsets(self) -> dict[int, int]:
        """``{producer_id: last offset of its newest batch}``: the batches the cleaner keeps, empty if need be.

        Kafka's cleaner keeps each live producer's last batch so that its sequence survives a
        restart that rebuilds this table from batch headers (lkstream.storage.cleaner).
        """
        return {pid: entry.batches[-1].last_offset for pid, entry in self._producers.items() if entry.batches}

    # -- persistence -------------------------------------------------------------------------------

    def encode_snapshot(self, offset: int) -> bytes:
        parts = [_SNAP_HEAD.pack(_SNAP_MAGIC, _SNAP_VERSION, offset, len(self._producers))]
        for producer_id, entry in self._producers.items():
            parts.append(_SNAP_ENTRY.pack(producer_id, entry.epoch, len(entry.batches)))
            parts.extend(
                _SNAP_BATCH.pack(b.first_sequence, b.last_sequence, b.base_offset, b.last_offset) for b in entry.batches
            )
        body = b"".join(parts)
        return body + struct.pack(">I", crc32c.crc32c(body))

    def write_snapshot(self, directory: str, offset: int) -> None:
        """Persist the state covering batches below ``offset``; best effort.

        A failed write (a full disk) is logged and otherwise ignored: the previous
        snapshot stays valid, and start-up replays more headers after it.
        """
        try:
            atomic_write(os.path.join(directory, SNAPSHOT_NAME), self.encode_snapshot(offset))
        except StorageError as exc:
            log.warning("could not write the producer snapshot of %s: %s", directory, exc)
            return
        self.snapshot_offset = offset

    @classmethod
    def decode_snapshot(cls, data: bytes, max_producers: int = DEFAULT_MAX_PRODUCERS) -> tuple[ProducerStateTable, int]:
        """The table and the offset it covers; :class:`CorruptRecordError` if damaged."""
        if len(data) < _SNAP_HEAD.size + 4 or struct.unpack_from(">I", data, len(data) - 4)[0] != crc32c.crc32c(
            data[:-4]
        ):
            raise CorruptRecordError("producers.snapshot: bad length or CRC")
        magic, version, offset, count = _SNAP_HEAD.unpack_from(data, 0)
        if magic != _SNAP_MAGIC or version != _SNAP_VERSION:
            raise CorruptRecordError(f"producers.snapshot: unknown magic {magic!r} or version {version}")
        table = cls(max_producers)
        pos = _SNAP_HEAD.size
        try:
            for _ in range(count):
                producer_id, epoch, kept = _SNAP_ENTRY.unpack_from(data, pos)
                pos += _SNAP_ENTRY.size
                entry = _Producer(epoch)
                for _ in range(kept):
                    entry.batches.append(_Batch(*_SNAP_BATCH.unpack_from(data, pos)))
                    pos += _SNAP_BATCH.size
                table._producers[producer_id] = entry
        except struct.error as exc:
            raise CorruptRecordError(f"producers.snapshot: truncated entries ({exc})") from None
        return table, offset

    @classmethod
    def rebuild(
        cls, directory: str, segments: Iterable[HeaderSource], max_producers: int = DEFAULT_MAX_PRODUCERS
    ) -> ProducerStateTable:
        """Load the snapshot of ``directory`` and replay the batch headers of ``segments`` after it."""
        segment_list = list(segments)
        log_start = segment_list[0].base_offset if segment_list else 0
        log_end = segment_list[-1].next_offset if segment_list else 0
        table, start = cls(max_producers), log_start
        path = os.path.join(directory, SNAPSHOT_NAME)
        try:
            with open(path, "rb") as f:
                loaded, covered = cls.decode_snapshot(f.read(), max_producers)
            if covered <= log_end:  # a snapshot past the end describes batches recovery cut away
                table, start = loaded, max(covered, log_start)
                table.snapshot_offset = covered
        except FileNotFoundError:
            pass
        except (OSError, CorruptRecordError) as exc:
            log.warning("ignoring %s (%s): rebuilding producer state from the whole log", path, exc)
        for segment in segment_list:
            if segment.next_offset > start:
                table._replay(segment, start)
        return table

    def _replay(self, segment: HeaderSource, start: int) -> None:
        end = segment.size
        position = segment.position_of(start, end)
        while position < end:
            raw = segment.read_header_bytes(position)
            header = parse_header(raw)
            fields = producer_fields(raw) if len(raw) >= HEADER_SIZE else None
            if fields is not None and header.base_offset >= start:
                self.record(fields, header.base_offset, header.last_offset)
            position += header.size
