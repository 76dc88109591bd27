"""Idempotent-producer state of one partition: duplicate and sequence checks, rebuilt from the log.

Kafka's idempotent producer stamps each batch with ``producer_id``,
``producer_epoch`` and ``base_sequence`` (the sequence of its first record;
sequences count records per producer and partition, wrapping after 2**31-1).
The partition log keeps, per producer id, its epoch, when it last appended, and
the last :data:`BATCHES_KEPT` batches it appended, and checks each new batch
under the log lock, before the offset is stamped:

* a batch equal (epoch, first and last sequence) to a kept one is a
  **duplicate**: it is not appended, and the producer is answered with the
  original offsets (:meth:`ProducerStateTable.check` returns them);
* an epoch below the known one is **fenced** (:class:`ProducerFencedError`);
* in the known epoch the first sequence must follow the last one
  (:class:`OutOfOrderSequenceError` otherwise); a new epoch, or a producer the
  table does not know (new, or expired), starts wherever it starts, as Kafka's
  broker accepts it.

Batches with ``producer_id == -1`` (not idempotent) are not checked.

**How long a producer is remembered (issue 28, finding 7).** As in Kafka
(``producer.id.expiration.ms``), by time, never by count: a producer's state
stays until ``expiration_ms`` (``producer_id_expiration_ms``, one day by
default) after its last append, whatever other producers do. The memory this
takes is bounded by one :class:`ProducerStateBudget` shared by every partition
of a broker (``max_producer_states``, one entry per producer and partition).
The rule when it is full: expired states of the partition are forgotten first;
if none is left, a batch from a producer the partition does not know is
**refused** (:class:`~lkstream.errors.ProducerStateLimitError`, retriable,
nothing written) until states expire. A known producer is never refused and
never forgotten before it expires, so a retry within the window is always
answered with its original offsets. Expired states are dropped as the
partition appends and by the broker's maintenance thread
(:meth:`ProducerStateTable.expire`). The budget may be passed by the states
rebuilt at open (they are all kept) and by the few appends racing on other
partitions at one instant.

Nothing here is authoritative: the state is a function of the batch headers in
the log and of append times. On open it is rebuilt from ``producers.snapshot``
(written at segment roll and close, with each producer's last append time)
plus a header-only walk of the batches after the snapshot's offset, so start-up
reads at most one segment's headers. A batch replayed by that walk is dated by
its segment file's modification time (no earlier than the batch was written, so
never forgotten early), not by its own timestamp: a producer may write records
with old timestamps (a backfill), and Kafka's rule (the batch's ``max_timestamp``)
would forget it at the first restart.

``producers.snapshot`` (big-endian, written with :func:`~lkstream.storage.files.atomic_write`)::

    offset  size  field
    0       4     magic b"LKPS"
    4       2     version (2; version 1, without times, is read too)
    6       8     covers batches below this offset
    14      4     producer count N
    18      ...   N entries, least recently appending first: producer_id int64, epoch int16,
                  last append int64 (ms since the epoch; version 2 only), batch count uint8,
                  then per batch: first_seq int32, last_seq int32, base_offset int64, last_offset int64
    end-4   4     CRC-32C of everything before it

A damaged or unreadable snapshot is ignored (the walk then starts at the log
start). A version-1 snapshot's producers are dated by the time it is read.

Thread-safety: a table is not thread-safe (the owning
:class:`~lkstream.storage.log.PartitionLog` calls it under its lock); the
budget is (a leaf lock).
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, Protocol

import crc32c

from lkstream.errors import (
    CorruptRecordError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    ProducerStateLimitError,
    StorageError,
)
from lkstream.format.batch import HEADER_SIZE, PRODUCER_ID_AT, parse_header
from lkstream.storage.files import atomic_write

log = logging.getLogger("lkstream.storage")

SNAPSHOT_NAME: Final = "producers.snapshot"
#: Batches remembered per producer: Kafka's max.in.flight.requests.per.connection limit for idempotence.
BATCHES_KEPT: Final = 5
#: Kafka's producer.id.expiration.ms default: a producer is remembered a day after its last append.
DEFAULT_EXPIRATION_MS: Final = 24 * 3600 * 1000
#: Producer states (one per producer and partition) a broker keeps at most by default (max_producer_states).
DEFAULT_MAX_PRODUCER_STATES: Final = 200_000
NO_PRODUCER_ID: Final = -1
_MAX_SEQUENCE: Final = 2**31 - 1

_PRODUCER_FIELDS: Final = struct.Struct(">qhi")  # producer_id, producer_epoch, base_sequence
_SNAP_HEAD: Final = struct.Struct(">4sHqI")  # magic, version, covered offset, count
_SNAP_ENTRY_V1: Final = struct.Struct(">qhB")
_SNAP_ENTRY: Final = struct.Struct(">qhqB")  # producer_id, epoch, last append, batch count
_SNAP_BATCH: Final = struct.Struct(">iiqq")
_LAST_SEQUENCE: Final = struct.Struct(">i")
_SNAP_MAGIC: Final = b"LKPS"
_SNAP_VERSION: Final = 2


def wall_clock_ms() -> int:
    """Milliseconds since the epoch: when a producer appended (times persist across restarts)."""
    return time.time_ns() // 1_000_000


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


class _Producer:
    """One producer's state in one partition; its batches packed (24 bytes each, oldest first) to stay small."""

    __slots__ = ("batches", "epoch", "last_append_ms")

    def __init__(self, epoch: int, last_append_ms: int, batches: bytes = b"") -> None:
        self.epoch = epoch
        self.last_append_ms = last_append_ms
        self.batches = batches

    def last_sequence(self) -> int:
        """The last sequence of the newest kept batch (there is one)."""
        value: int = _LAST_SEQUENCE.unpack_from(self.batches, len(self.batches) - _SNAP_BATCH.size + 4)[0]
        return value

    def add(self, first_sequence: int, last_sequence: int, base_offset: int, last_offset: int) -> None:
        packed = _SNAP_BATCH.pack(first_sequence, last_sequence, base_offset, last_offset)
        self.batches = (self.batches + packed)[-BATCHES_KEPT * _SNAP_BATCH.size :]


class ProducerStateBudget:
    """How many producer states (one per producer and partition) all partitions of a broker keep together.

    Thread-safe (a leaf lock: counters only). ``used`` may pass ``capacity`` (states
    rebuilt at open are all kept; concurrent first appends on different partitions).
    """

    def __init__(self, capacity: int = DEFAULT_MAX_PRODUCER_STATES) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._used = 0
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        return self._used

    def has_room(self) -> bool:
        return self._used < self.capacity

    def take(self, count: int = 1) -> None:
        with self._lock:
            self._used += count

    def give_back(self, count: int) -> None:
        with self._lock:
            self._used = max(0, self._used - count)


class HeaderSource(Protocol):
    """What the rebuild walk needs from a segment (see :class:`~lkstream.storage.segment.Segment`)."""

    base_offset: int
    next_offset: int

    @property
    def path(self) -> str: ...

    @property
    def size(self) -> int: ...

    def position_of(self, offset: int, end: int) -> int: ...

    def read_header_bytes(self, position: int) -> bytes: ...


class ProducerStateTable:
    """Per-producer epochs, last append times and recent batches of one partition (see the module docstring)."""

    def __init__(
        self,
        budget: ProducerStateBudget | None = None,
        *,
        expiration_ms: int = DEFAULT_EXPIRATION_MS,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        if expiration_ms < 1:
            raise ValueError(f"expiration_ms must be >= 1, got {expiration_ms}")
        self.budget = budget if budget is not None else ProducerStateBudget()
        self.expiration_ms = expiration_ms
        self._clock = clock
        # Least recently appending first: expiry pops from the front.
        self._producers: OrderedDict[int, _Producer] = OrderedDict()
        self.snapshot_offset = -1  # the offset the snapshot on disk covers (-1: none known)

    def __len__(self) -> int:
        return len(self._producers)

    def __contains__(self, producer_id: object) -> bool:
        return producer_id in self._producers

    def check(self, fields: ProducerFields) -> tuple[int, int] | None:
        """``(base, last)`` offsets if ``fields`` is a duplicate; None to append; raises if refused.

        Refusals: :class:`ProducerFencedError`, :class:`OutOfOrderSequenceError`, and
        :class:`ProducerStateLimitError` for a producer this partition does not know while
        the budget is full of states that have not expired.
        """
        now = self._clock()
        entry = self._producers.get(fields.producer_id)
        if entry is not None and self._expired(entry, now):
            self._forget(fields.producer_id)
            entry = None
        if entry is None:
            self._make_room(now)
            return None
        if fields.epoch < entry.epoch:
            raise ProducerFencedError(fields.producer_id, fields.epoch, entry.epoch)
        if fields.epoch > entry.epoch or not entry.batches:
            return None
        expected = next_sequence(entry.last_sequence(), 1)
        if fields.first_sequence == expected:
            return None  # the next batch, the common case (a kept one cannot start there: see BATCHES_KEPT)
        for first, last, base_offset, last_offset in _SNAP_BATCH.iter_unpack(entry.batches):
            if first == fields.first_sequence and last == fields.last_sequence:
                return base_offset, last_offset
        raise OutOfOrderSequenceError(fields.producer_id, fields.first_sequence, expected)

    def record(self, fields: ProducerFields, base_offset: int, last_offset: int) -> None:
        """Remember an appended batch (after :meth:`check` said to append it), appended now."""
        now = self._clock()
        if self._remember(fields, base_offset, last_offset, now):
            self._expire_oldest(now)  # a new producer: forget expired ones as the table grows

    def expire(self, now_ms: int | None = None) -> int:
        """Forget every producer whose last append is ``expiration_ms`` old; return how many."""
        return self._expire_oldest(self._clock() if now_ms is None else now_ms, limit=None)

    def release(self) -> None:
        """Give every state back to the budget (the partition closes; a reopen rebuilds them)."""
        self.budget.give_back(len(self._producers))
        self._producers.clear()

    def last_batch_offsets(self) -> dict[int, int]:
        """``{producer_id: last offset of its newest batch}``: the batches the cleaner keeps, empty if need be.

        Kafka's cleaner keeps each live producer's last batch so that its sequence survives a
        restart that rebuilds this table from batch headers (lkstream.storage.cleaner).
        """
        found: dict[int, int] = {}
        for producer_id, entry in self._producers.items():
            if entry.batches:
                found[producer_id] = _SNAP_BATCH.unpack_from(entry.batches, len(entry.batches) - _SNAP_BATCH.size)[3]
        return found

    # -- bookkeeping -------------------------------------------------------------------------------

    def _expired(self, entry: _Producer, now_ms: int) -> bool:
        return now_ms - entry.last_append_ms >= self.expiration_ms

    def _forget(self, producer_id: int) -> None:
        del self._producers[producer_id]
        self.budget.give_back(1)

    def _make_room(self, now_ms: int) -> None:
        """Room for one more producer in the budget, or ProducerStateLimitError."""
        if self.budget.has_room():
            return
        self._expire_oldest(now_ms, limit=None)
        if not self.budget.has_room():
            raise ProducerStateLimitError(self.budget.capacity, self.expiration_ms)

    def _expire_oldest(self, now_ms: int, limit: int | None = 2) -> int:
        """Forget expired producers from the least recent on (at most ``limit``: amortised per append)."""
        forgotten = 0
        while self._producers and (limit is None or forgotten < limit):
            producer_id, entry = next(iter(self._producers.items()))
            if not self._expired(entry, now_ms):
                break
            self._forget(producer_id)
            forgotten += 1
        return forgotten

    def _remember(self, fields: ProducerFields, base_offset: int, last_offset: int, when_ms: int) -> bool:
        """Remember a batch appended at ``when_ms``; True if its producer is new to the table."""
        entry = self._producers.get(fields.producer_id)
        new = entry is None
        if entry is None:
            entry = _Producer(fields.epoch, when_ms)
            self._producers[fields.producer_id] = entry
            self.budget.take()
        else:
            if fields.epoch > entry.epoch:
                entry.epoch, entry.batches = fields.epoch, b""
            entry.last_append_ms = max(entry.last_append_ms, when_ms)
            self._producers.move_to_end(fields.producer_id)
        entry.add(fields.first_sequence, fields.last_sequence, base_offset, last_offset)
        return new

    # -- persistence -------------------------------------------------------------------------------

    def encode_snapshot(self, offset: int) -> bytes:
        parts = [_SNAP_HEAD.pack(_SNAP_MAGIC, _SNAP_VERSION, offset, len(self._producers))]
        for producer_id, entry in self._producers.items():
            parts.append(
                _SNAP_ENTRY.pack(producer_id, entry.epoch, entry.last_append_ms, len(entry.batches) // _SNAP_BATCH.size)
            )
            parts.append(entry.batches)
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

    def load_snapshot(self, data: bytes) -> int:
        """Fill this (empty) table from a snapshot; return the offset it covers.

        :class:`CorruptRecordError` if damaged (the table is then left empty).
        """
        if len(data) < _SNAP_HEAD.size + 4 or struct.unpack_from(">I", data, len(data) - 4)[0] != crc32c.crc32c(
            data[:-4]
        ):
            raise CorruptRecordError("producers.snapshot: bad length or CRC")
        magic, version, offset, count = _SNAP_HEAD.unpack_from(data, 0)
        if magic != _SNAP_MAGIC or version not in (1, _SNAP_VERSION):
            raise CorruptRecordError(f"producers.snapshot: unknown magic {magic!r} or version {version}")
        entry_format = _SNAP_ENTRY if version == _SNAP_VERSION else _SNAP_ENTRY_V1
        read_at = self._clock()  # version 1 kept no times: its producers are dated now (never too early)
        loaded: OrderedDict[int, _Producer] = OrderedDict()
        pos = _SNAP_HEAD.size
        try:
            for _ in range(count):
                if version == _SNAP_VERSION:
                    producer_id, epoch, last_ms, kept = entry_format.unpack_from(data, pos)
                else:
                    (producer_id, epoch, kept), last_ms = entry_format.unpack_from(data, pos), read_at
                pos += entry_format.size
                size = kept * _SNAP_BATCH.size
                if kept > BATCHES_KEPT or pos + size > len(data) - 4:
                    raise struct.error(f"an entry of {kept} batches")
                loaded[producer_id] = _Producer(epoch, last_ms, bytes(data[pos : pos + size]))
                pos += size
        except struct.error as exc:
            raise CorruptRecordError(f"producers.snapshot: truncated entries ({exc})") from None
        self._producers = loaded
        self.budget.take(len(loaded))
        return int(offset)

    @classmethod
    def decode_snapshot(cls, data: bytes, budget: ProducerStateBudget | None = None) -> tuple[ProducerStateTable, int]:
        """A table and the offset it covers; :class:`CorruptRecordError` if damaged."""
        table = cls(budget)
        return table, table.load_snapshot(data)

    @classmethod
    def rebuild(
        cls,
        directory: str,
        segments: Iterable[HeaderSource],
        budget: ProducerStateBudget | None = None,
        *,
        expiration_ms: int = DEFAULT_EXPIRATION_MS,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> ProducerStateTable:
        """Load the snapshot of ``directory`` and replay the batch headers of ``segments`` after it."""
        segment_list = list(segments)
        log_start = segment_list[0].base_offset if segment_list else 0
        log_end = segment_list[-1].next_offset if segment_list else 0
        table = cls(budget, expiration_ms=expiration_ms, clock=clock)
        start = log_start
        path = os.path.join(directory, SNAPSHOT_NAME)
        try:
            with open(path, "rb") as f:
                covered = table.load_snapshot(f.read())
            if covered <= log_end:  # a snapshot past the end describes batches recovery cut away
                start = max(covered, log_start)
                table.snapshot_offset = covered
            else:
                table.release()
        except FileNotFoundError:
            pass
        except (OSError, CorruptRecordError) as exc:
            log.warning("ignoring %s (%s): rebuilding producer state from the whole log", path, exc)
        now = clock()
        for segment in segment_list:
            if segment.next_offset > start:
                table._replay(segment, start, min(_modified_ms(segment.path, now), now))
        table.expire(now)
        return table

    def _replay(self, segment: HeaderSource, start: int, written_by_ms: int) -> None:
        """Remember the producer batches of ``segment`` from ``start``, dated ``written_by_ms``."""
        end = segment.size
        position = segment.position_of(start, end)
        while position < end:
            raw = segment.read_header_bytes(position)
            header = parse_header(raw)
            fields = producer_fields(raw) if len(raw) >= HEADER_SIZE else None
            if fields is not None and header.base_offset >= start:
                self._remember(fields, header.base_offset, header.last_offset, written_by_ms)
            position += header.size


def _modified_ms(path: str, default: int) -> int:
    """When ``path`` was last written (ms since the epoch); ``default`` when it cannot be told."""
    try:
        return os.stat(path).st_mtime_ns // 1_000_000
    except OSError:
        return default
