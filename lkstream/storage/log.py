"""PartitionLog: the ordered, segmented, append-only log of one topic partition.

Directory ``topics/{topic}/part{pid}/`` holds ``{base:020d}.seg`` / ``.idx``
pairs and ``checkpoint.meta``. Offsets are contiguous and strictly increasing
across segments; only the last (active) segment is ever appended to.

Invariants this module enforces:

* **Append**: a batch is CRC-checked, stamped with the next offset and written
  whole, or not at all (see :class:`~lkstream.storage.files.OsFile`).
* **Rotation**: before a new segment is created the old one (data and index) is
  fsynced, in every fsync mode, so every segment but the last is whole and
  durable; recovery validates only the last one.
* **What a reader may see**: reads stop at the *high watermark*. With
  ``visible_after_fsync`` (the broker sets it in ``sync`` mode) that is the
  durable end, so nothing a consumer saw can vanish in a crash; otherwise it is
  the written end (lower latency; a crash may take back the unsynced tail and
  its offsets are then reused).
* **Retention** deletes whole sealed segments, oldest first, never the active
  one; ``log_start_offset`` is the base of the first remaining segment, or the later
  offset DeleteRecords set (:mod:`lkstream.storage.log_maintenance`, which also rolls
  by time and swaps in the cleaner's rewritten segments).
* **Recovery** (on construction): validate the active segment from the
  checkpoint's recovery point (or from 0), truncate at the first invalid byte,
  rebuild index entries for what remains; see :class:`RecoveryReport`.

Thread-safety: every public method is thread-safe; they serialise on
``PartitionLog._lock`` except the index write and the fsync in :meth:`flush`, which
run outside it so appends continue while the disk syncs (or the kernel stalls a write).
Lock order: Broker, then PartitionLog.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import cast

from lkstream.errors import BrokerClosedError, OffsetOutOfRangeError, StorageError, invariant, map_os_errors
from lkstream.format.batch import MAGIC, BatchHeader, check_batch, parse_header, stamp_base_offset
from lkstream.storage.checkpoint import Checkpoint, CheckpointDamaged, read_checkpoint, write_checkpoint
from lkstream.storage.clock import Clock, SystemClock
from lkstream.storage.files import OsFile, StorageFile, fsync_dir
from lkstream.storage.log_maintenance import LogMaintenance
from lkstream.storage.producers import (
    DEFAULT_EXPIRATION_MS,
    ProducerStateBudget,
    ProducerStateTable,
    producer_fields,
)
from lkstream.storage.ranges import FileRange, SendableRead
from lkstream.storage.segment import (
    INDEX_SUFFIX,
    SEGMENT_SUFFIX,
    RecoveryReport,
    Segment,
    format_segment_name,
    parse_segment_name,
)
from lkstream.storage.swap import recover_swaps

log = logging.getLogger("lkstream.storage")

FileFactory = Callable[[str], StorageFile]

#: The group-commit thread's tries for the log lock before it queues on it, and its nap between
#: tries (an append holds the lock for a few microseconds): see PartitionLog._lock_between_appends.
_POLITE_TRIES = 20
_POLITE_NAP_S = 0.00005


@dataclass(frozen=True)
class LogConfig:
    """Per-partition storage limits. ``-1`` disables a retention limit."""

    segment_max_bytes: int = 64 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = -1
    retention_bytes: int = -1
    visible_after_fsync: bool = False
    checkpoint_interval_ms: int = 1000
    producer_id_expiration_ms: int = DEFAULT_EXPIRATION_MS
    #: Seal the active segment once it has held data this long (Kafka's ``segment.ms``); -1: never.
    segment_ms: int = -1
    #: Up to this much, drawn per segment, comes off ``segment_ms`` (Kafka's ``segment.jitter.ms``).
    segment_jitter_ms: int = 0


@dataclass(frozen=True)
class AppendResult:
    base_offset: int
    last_offset: int
    size: int
    duplicate: bool = False  # an idempotent producer's retry: nothing was written, offsets are the original's
    rolled: bool = False  # the batch starts a new segment: everything before it is sealed now


@dataclass(frozen=True)
class ReadResult:
    """Raw batches read from a log, with the bounds a consumer needs."""

    data: bytes
    log_start_offset: int
    high_watermark: int


@dataclass(frozen=True)
class PartitionStats:
    log_start_offset: int
    next_offset: int
    high_watermark: int
    segment_count: int
    size_bytes: int
    active_segment_bytes: int
    #: Compacted topics: the share of the sealed bytes not cleaned yet (None elsewhere; see Broker.describe_topic).
    dirty_ratio: float | None = None


@dataclass
class LogRecovery:
    """What opening the log found: the active segment's report plus checkpoint trouble."""

    topic: str
    partition: int
    segment: str
    report: RecoveryReport
    checkpoint_problem: str = ""
    swept_files: list[str] = field(default_factory=list)

    @property
    def truncated_bytes(self) -> int:
        return self.report.truncated_bytes


class PartitionLog(LogMaintenance):
    """The log of one partition. Thread-safe."""

    def __init__(
        self,
        directory: str,
        topic: str,
        partition: int,
        config: LogConfig | None = None,
        *,
        clock: Clock | None = None,
        file_factory: FileFactory = OsFile,
        new_files: FileFactory | None = None,
        producer_budget: ProducerStateBudget | None = None,
    ) -> None:
        """Open (and recover) the log in ``directory``, creating the directory if missing.

        ``producer_budget`` bounds the idempotent-producer states of every log sharing it
        (the broker's ``max_producer_states``; one of its own when None).

        ``new_files`` says the caller has just created ``directory`` empty (a new topic): the
        log starts empty without scanning the directory or reading a checkpoint, and its
        first segment's files come from ``new_files`` (a factory that creates them at the
        first write, such as :meth:`~lkstream.storage.handles.FileBudget.deferred_file`).
        """
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config or LogConfig()
        self._clock = clock or SystemClock()
        self._open_file = file_factory
        self._lock = threading.Lock()
        self._closed = False
        self._failed: StorageError | None = None
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        self._durable_position = 0  # bytes of the active segment known fsynced
        self._durable_next_offset = 0
        self._last_checkpoint_ms = self._clock.monotonic_ms()
        self._checkpoint_lock = threading.Lock()
        self._checkpoint_written: Checkpoint | None = None
        self.unflushed_bytes = 0
        # Whether anything was appended since open: a log that only served reads closes without
        # an fsync or a checkpoint (its files are as recovery left them), so idle partitions stop fast.
        self._appended = False
        expiration = self.config.producer_id_expiration_ms
        if new_files is not None:
            self.recovery = self._open_new(new_files)
            self.producers = ProducerStateTable(producer_budget, expiration_ms=expiration, clock=self._clock.now_ms)
            self._no_marks()
            return
        with map_os_errors("create partition directory", directory):
            os.makedirs(directory, exist_ok=True)
        self.recovery = self._open()
        self._open_marks()
        # Idempotent producers: rebuilt from the snapshot plus the batch headers after it.
        self.producers = ProducerStateTable.rebuild(
            directory, self._segments, producer_budget, expiration_ms=expiration, clock=self._clock.now_ms
        )

    # -- opening and recovery ------------------------------------------------------------------

    def _open_new(self, new_files: FileFactory) -> LogRecovery:
        """Start the empty log of a directory just created: nothing on disk to scan or recover."""
        active = self._new_segment(0, new_files)
        self._segments, self._bases = [active], [0]
        report = active.recover(0, 0)
        return LogRecovery(self.topic, self.partition, active.path, report)

    def _open(self) -> LogRecovery:
        swaps = recover_swaps(self.directory)  # first: it decides which segment files exist
        swept = swaps.dropped + self._sweep_strays()
        bases = sorted(
            parsed[0]
            for name in os.listdir(self.directory)
            if (parsed := parse_segment_name(name)) and parsed[1] == SEGMENT_SUFFIX
        )
        if not bases:
            bases = [0]
        for base in bases:
            self._segments.append(self._new_segment(base))
        self._bases = bases
        for older, newer in zip(self._segments, self._segments[1:], strict=False):
            older.next_offset = newer.base_offset
        active = self._segments[-1]
        trusted_position, trusted_offset, problem = 0, active.base_offset, ""
        try:
            checkpoint = read_checkpoint(self.directory)
        except CheckpointDamaged as exc:
            checkpoint, problem = None, f"checkpoint.meta damaged ({exc}); validating the whole active segment"
        if checkpoint is not None:
            if checkpoint.active_base == active.base_offset and checkpoint.recovery_point <= active.size:
                trusted_position, trusted_offset = checkpoint.recovery_point, checkpoint.next_offset
            else:
                problem = "checkpoint.meta is stale; validating the whole active segment"
        report = active.recover(trusted_position, trusted_offset)
        if report.trusted_point_rejected:
            problem = "checkpoint.meta does not match the active segment; validating the whole active segment"
        if report.truncated_bytes:
            log.warning(
                "recovery truncated %s[%d] %s bytes %d..%d: %s",
                self.topic,
                self.partition,
                active.path,
                report.valid_bytes,
                report.valid_bytes + report.truncated_bytes,
                report.reason,
            )
        if problem:
            log.warning("%s[%d]: %s", self.topic, self.partition, problem)
        # A new, empty log has nothing to protect: no fsync, no checkpoint (creating a topic of
        # thousands of partitions would otherwise cost four fsyncs each).
        empty = checkpoint is None and not problem and len(self._segments) == 1 and active.size == 0
        up_to_date = empty or (
            checkpoint is not None
            and not problem
            and (checkpoint.recovery_point == active.size and checkpoint.next_offset == active.next_offset)
        )
        if not up_to_date:
            # Bytes past the recovery point survived a process crash in the page cache but
            # may never have reached the disk: fsync them before calling them durable, or
            # a later power loss could take back records readers were shown (sync mode).
            active.file.fsync()
        self._durable_position = active.size
        self._durable_next_offset = active.next_offset
        if not up_to_date:  # a clean reopen writes nothing: opening many partitions stays cheap
            self._write_checkpoint()
        return LogRecovery(self.topic, self.partition, active.path, report, problem, swept)

    def _sweep_strays(self) -> list[str]:
        """Remove tmp files and indexes whose segment is gone (a crash mid-delete)."""
        names = os.listdir(self.directory)
        segments = {parsed[0] for n in names if (parsed := parse_segment_name(n)) and parsed[1] == SEGMENT_SUFFIX}
        swept = []
        for name in names:
            parsed = parse_segment_name(name)
            orphan_index = parsed is not None and parsed[1] == INDEX_SUFFIX and parsed[0] not in segments
            if name.endswith(".tmp") or orphan_index:
                os.remove(os.path.join(self.directory, name))
                swept.append(name)
        return swept

    def _new_segment(self, base_offset: int, open_file: FileFactory | None = None) -> Segment:
        open_file = open_file or self._open_file
        seg_path = os.path.join(self.directory, format_segment_name(base_offset, SEGMENT_SUFFIX))
        idx_path = os.path.join(self.directory, format_segment_name(base_offset, INDEX_SUFFIX))
        seg_file = open_file(seg_path)
        try:
            idx_file = open_file(idx_path)
        except StorageError:
            seg_file.close()
            raise
        return Segment(self.directory, base_offset, seg_file, idx_file, self.config.index_interval_bytes)

    def reconfigure(self, config: LogConfig) -> None:
        """Apply new limits (a topic config alter): rolling and retention use them from now on.

        ``index_interval_bytes`` applies to segments created from now on.
        """
        with self._lock:
            self.config = config

    # -- properties ------------------------------------------------------------------------------

    @property
    def next_offset(self) -> int:
        """The offset the next appended record gets (the log end offset)."""
        return self._segments[-1].next_offset

    @property
    def durable_next_offset(self) -> int:
        """Every offset below this is fsynced."""
        return self._durable_next_offset

    @property
    def high_watermark(self) -> int:
        """Readers see offsets below this."""
        return self._durable_next_offset if self.config.visible_after_fsync else self.next_offset

    # -- append ---------------------------------------------------------------------------------

    def append(self, batch: bytearray, *, checksummed: bool = False) -> AppendResult:
        """Validate ``batch`` (length, magic, CRC), stamp its base offset, append it.

        ``batch`` is modified in place (its first 8 bytes). Raises
        :class:`~lkstream.errors.CorruptRecordError` for an invalid batch and
        :class:`~lkstream.errors.StorageError` (``DiskFullError``) if the write
        failed, in which case nothing was appended. ``checksummed`` says the caller
        computed the CRC over these very bytes a moment ago (the broker's own encoder):
        the frame is still checked, the CRC pass is skipped.
        """
        header = parse_header(batch) if checksummed else check_batch(batch)
        invariant(header.magic == MAGIC and header.records_count >= 1, "a batch the broker built is malformed")
        invariant(header.size == len(batch), "append takes exactly one batch")
        with self._lock:
            self._check_open()
            if self._failed is not None:
                raise StorageError(
                    f"{self.topic}[{self.partition}] refuses appends after a failed fsync ({self._failed}); "
                    "restart the broker to recover the log",
                    path=self._segments[-1].path,
                )
            fields = producer_fields(batch)
            if fields is not None:
                duplicate = self.producers.check(fields)
                if duplicate is not None:
                    return AppendResult(duplicate[0], duplicate[1], 0, duplicate=True)
            active = self._segments[-1]
            rolled = active.size > 0 and (
                active.size + len(batch) > self.config.segment_max_bytes
                or (self.config.segment_ms >= 0 and self._roll_due(active, self._clock.now_ms()))
            )
            if rolled:
                active = self._roll()
            if active.size == 0 and self.config.segment_ms >= 0:
                self._start_roll_clock()
            base = active.next_offset
            stamp_base_offset(batch, base)
            stamped = BatchHeader(
                base,
                header.batch_length,
                header.magic,
                header.crc,
                header.attributes,
                header.last_offset_delta,
                header.base_timestamp,
                header.max_timestamp,
                header.records_count,
            )
            active.append(batch, stamped)
            if fields is not None:
                self.producers.record(fields, base, stamped.last_offset)
            self.unflushed_bytes += len(batch)
            self._appended = True
        return AppendResult(base, stamped.last_offset, len(batch), rolled=rolled)

    def _roll(self) -> Segment:
        """Seal the active segment (fsynced) and start a new one. Caller holds the lock."""
        old = self._segments[-1]
        old.index.flush()
        # A failed append whose rollback failed too leaves torn bytes past the logical end;
        # sealed segments are never validated again, so cut them before sealing.
        old.file.truncate(old.size)
        old.file.fsync()
        old.index.file.fsync()
        old.mark_sealed(self._clock.now_ms())
        new = self._new_segment(old.next_offset)
        fsync_dir(self.directory)
        self._segments.append(new)
        self._bases.append(new.base_offset)
        self._durable_position = 0
        self._durable_next_offset = new.base_offset
        self.unflushed_bytes = 0
        self._write_checkpoint()
        # Start-up replays batch headers only from here on (the older segments are sealed and durable).
        self.producers.write_snapshot(self.directory, new.base_offset)
        return new

    # -- durability -----------------------------------------------------------------------------

    def flush(self) -> int:
        """fsync what was written so far; return the durable next offset.

        The fsync runs outside the lock, so appends continue meanwhile; the
        durable mark only ever moves forward.
        """
        with self._lock_between_appends():
            if self._closed:
                return self._durable_next_offset
            active = self._segments[-1]
            end, next_offset = active.size, active.next_offset
            if end == self._durable_position:
                return self._durable_next_offset
            self.unflushed_bytes = 0
        # Outside the lock, like the fsync: a write the kernel stalls must not hold up appends.
        self._flush_index(active, unlocked=True)
        try:
            active.file.fsync()
        except StorageError as exc:
            with self._lock:
                if active is not self._segments[-1] or self._closed:
                    # Rolled (or closed) meanwhile: rolling and closing fsync the whole segment.
                    return self._durable_next_offset
                # After a failed fsync the kernel may have dropped the dirty pages, so a later
                # successful fsync proves nothing: refuse further appends until a restart
                # re-validates the log (the "fsyncgate" rule).
                self._failed = exc
            raise
        with self._lock_between_appends():
            due: Checkpoint | None = None
            if active is self._segments[-1] and end > self._durable_position:
                self._durable_position, self._durable_next_offset = end, next_offset
                now = self._clock.monotonic_ms()
                if now - self._last_checkpoint_ms >= self.config.checkpoint_interval_ms:
                    due = self._checkpoint_now()
            durable = self._durable_next_offset
        if due is not None:
            # Two fsyncs (file and directory): outside the log lock, so producers do not wait on them.
            self._store_checkpoint(due)
        return durable

    @contextlib.contextmanager
    def _lock_between_appends(self) -> Iterator[None]:
        """Take the lock for the group-commit thread without queueing on it behind an append.

        An append holds the lock across its ``pwrite``, which lets go of the GIL: that is when the
        committer thread gets to run, and if it then blocked on the lock it would wake up holding
        the lock but not the GIL, and the producer's next append would wait for the lock while
        the committer waits for the GIL (a convoy: 114 waits of the event loop's thread, 55 ms in
        5 s at 10,000 appends/s, issue 14 row 3). Trying and napping instead means this thread
        holds the lock only while it runs. After :data:`_POLITE_TRIES` tries it queues like anyone.
        """
        tries = 0
        while not self._lock.acquire(blocking=False):
            tries += 1
            if tries == _POLITE_TRIES:
                self._lock.acquire()
                break
            time.sleep(_POLITE_NAP_S)
        try:
            yield
        finally:
            self._lock.release()

    def _flush_index(self, segment: Segment, *, fsync: bool = False, unlocked: bool = False) -> None:
        """Write (and maybe fsync) pending index entries; failing costs lookup speed, not data.

        The index is a cache of the segment, so a full disk must stop neither the
        data's fsync nor a close. Unwritten entries stay in memory for the next flush.
        ``unlocked``: the caller does not hold the lock, so a close may have closed the file
        meanwhile (the close writes the index itself: nothing to report).
        """
        try:
            segment.index.flush()
            if fsync:
                segment.index.file.fsync()
        except StorageError as exc:
            if unlocked and self._closed:
                return
            log.warning("could not write the index of %s: %s", segment.path, exc)

    def _write_checkpoint(self) -> None:
        """Record the recovery point now. Caller holds the lock (or is the constructor)."""
        self._store_checkpoint(self._checkpoint_now())

    def _checkpoint_now(self) -> Checkpoint:
        """The current recovery point. Caller holds the lock."""
        sealed = self._segments[-2].base_offset if len(self._segments) > 1 else -1
        active = self._segments[-1]
        self._last_checkpoint_ms = self._clock.monotonic_ms()
        return Checkpoint(sealed, active.base_offset, self._durable_position, self._durable_next_offset)

    def _store_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Write ``checkpoint`` unless a newer one is already on disk.

        Callable with or without the log lock (lock order: log lock, then
        checkpoint lock), so a checkpoint taken before a roll can never
        overwrite the roll's newer one.
        """
        with self._checkpoint_lock:
            last = self._checkpoint_written
            if last is not None and (last.active_base, last.recovery_point) > (
                checkpoint.active_base,
                checkpoint.recovery_point,
            ):
                return
            try:
                write_checkpoint(self.directory, checkpoint)
            except StorageError as exc:
                # Only an optimisation for recovery: losing it means validating more on open.
                log.warning("could not write checkpoint for %s[%d]: %s", self.topic, self.partition, exc)
                return
            self._checkpoint_written = checkpoint

    # -- reads ----------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int) -> ReadResult:
        """Whole batches starting with the one that holds ``offset``, about ``max_bytes`` of them.

        Returns at least one batch when ``offset`` is below the high watermark
        (even if larger than ``max_bytes``) and empty data at the high watermark.
        Batches may begin before ``offset``; consumers skip the earlier records.
        Reads stop at a segment boundary; call again from the next offset. A read
        never holds only empty batches (a compacted log's, docs/adr/0006) while a
        record follows below the high watermark: it goes on, across segments, to
        the first batch with records. Some clients (KafkaJS) fetch the same offset
        again forever when an answer holds batches but no record.
        """
        found = self.read_for_send(offset, max_bytes, zero_copy=False)
        return ReadResult(cast(bytes, found.data), found.log_start_offset, found.high_watermark)

    def read_for_send(
        self, offset: int, max_bytes: int, *, min_one: bool = True, zero_copy: bool = True
    ) -> SendableRead:
        """:meth:`read`, as a :class:`~lkstream.storage.ranges.FileRange` where it can be (``zero_copy``).

        A range covers what :meth:`read` would return, within the bytes checked in this process
        (:mod:`lkstream.storage.ranges` says what it promises; release it once sent). Without
        ``min_one`` a first batch larger than ``max_bytes`` is not returned (empty data).
        """
        with self._lock:
            self._check_open()
            start, high = self.log_start_offset, self.high_watermark
            if offset < start or offset > high:
                raise OffsetOutOfRangeError(self.topic, self.partition, offset, start, high)
            if offset == high:
                return SendableRead(b"", start, high)
            chunks: list[bytes] = []
            while offset < high:
                i = bisect_right(self._bases, offset) - 1
                segment = self._segments[i]
                is_active = i == len(self._segments) - 1
                end = self._readable_end(segment, is_active)
                position = segment.position_of(offset, end)
                if position >= end and not is_active:
                    # Nothing at or after `offset` in this segment: the offsets up to the next
                    # segment's base are missing (a gap). Serve the next data, as Kafka does,
                    # rather than an empty read that a consumer would repeat forever.
                    offset = self._bases[i + 1]
                    continue
                if zero_copy and not chunks:
                    ranged = segment.range_for_send(position, max_bytes, end, min_one=min_one)
                    if not isinstance(ranged, FileRange) or segment.header_at(position).records_count:
                        if ranged is not None:
                            return SendableRead(ranged, start, high)
                    else:
                        # A range that may hold only empty batches (a compacted log's): the
                        # copying walk below goes on to the first record instead.
                        ranged.release()
                data = segment.read(position, max_bytes, end, min_one=min_one)
                if not data:
                    break
                chunks.append(data)
                after = _after_empty_batches(data)
                if after is None:
                    break
                offset = after
            return SendableRead(chunks[0] if len(chunks) == 1 else b"".join(chunks), start, high)

    def _readable_end(self, segment: Segment, is_active: bool) -> int:
        if is_active and self.config.visible_after_fsync:
            return self._durable_position
        return segment.size

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """The base offset of the first readable batch holding a record at or after ``timestamp_ms``.

        Like Kafka's ListOffsets by timestamp but at batch granularity: the
        batch may start with earlier records, which a reader skips by their
        timestamps. None when every readable record is older.
        """
        with self._lock:
            self._check_open()
            last = len(self._segments) - 1
            for i, segment in enumerate(self._segments):
                if i < last:
                    # Sealed: skip by the segment's largest timestamp. The active segment's
                    # is only known from the batches appended or validated since open, so walk it.
                    if segment.max_timestamp < 0:
                        segment.scan_max_timestamp()
                    if segment.max_timestamp < timestamp_ms:
                        continue
                found = segment.first_batch_at_or_after(timestamp_ms, self._readable_end(segment, i == last))
                if found is not None:
                    return found
            return None

    # -- retention ------------------------------------------------------------------------------

    def expire_producers(self) -> int:
        """Forget idempotent producers silent for ``producer_id_expiration_ms``; return how many."""
        with self._lock:
            return 0 if self._closed else self.producers.expire()

    def enforce_retention(self) -> list[int]:
        """Delete sealed segments past ``retention_ms`` / ``retention_bytes``; return their bases."""
        retention_ms, retention_bytes = self.config.retention_ms, self.config.retention_bytes
        if retention_ms < 0 and retention_bytes < 0:
            return []
        with self._lock:
            self._check_open()
            total = sum(s.size for s in self._segments)
            cutoff_ms = self._clock.now_ms() - retention_ms
            doomed: list[Segment] = []
            for segment in self._segments[:-1]:
                too_big = retention_bytes >= 0 and total - segment.size >= retention_bytes
                if segment.max_timestamp < 0:
                    segment.scan_max_timestamp()
                too_old = retention_ms >= 0 and 0 <= segment.max_timestamp < cutoff_ms
                if not (too_big or too_old):
                    break
                doomed.append(segment)
                total -= segment.size
            if not doomed:
                return []
            del self._segments[: len(doomed)]
            del self._bases[: len(doomed)]
        for segment in doomed:
            segment.delete_files()
        fsync_dir(self.directory)
        log.info(
            "retention deleted %d segment(s) of %s[%d]; log start offset is now %d",
            len(doomed),
            self.topic,
            self.partition,
            self.log_start_offset,
        )
        return [s.base_offset for s in doomed]

    # -- information and shutdown --------------------------------------------------------------

    def stats(self) -> PartitionStats:
        with self._lock:
            return PartitionStats(
                self.log_start_offset,
                self.next_offset,
                self.high_watermark,
                len(self._segments),
                sum(s.size for s in self._segments),
                self._segments[-1].size,
            )

    def segment_paths(self) -> list[str]:
        with self._lock:
            return [s.path for s in self._segments]

    def _check_open(self) -> None:
        if self._closed:
            raise BrokerClosedError(f"log {self.topic}[{self.partition}] is closed")

    def close(self) -> None:
        """Flush, fsync, checkpoint and close. Idempotent; files are closed even if the fsync fails."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            with self._lock:
                if not self._closed:
                    self._closed = True  # no append can slip in between the last fsync and the checkpoint
                    try:
                        self._seal_on_close()
                    finally:
                        for segment in self._segments:
                            segment.close()
                        self.producers.release()  # a reopen rebuilds them from the snapshot

    def _seal_on_close(self) -> None:
        """Final fsync and checkpoint. Caller holds the lock and has marked the log closed."""
        if self._failed is not None:
            return  # nothing written after a failed fsync may be called durable
        if not self._appended:
            return  # unchanged since open, where recovery fsynced and checkpointed what it found
        active = self._segments[-1]
        self._flush_index(active, fsync=True)
        if active.size != self._durable_position:
            # Appends that landed after flush() returned and before we took the lock.
            active.file.fsync()
        self._durable_position, self._durable_next_offset = active.size, active.next_offset
        self._write_checkpoint()
        if self.producers.snapshot_offset != active.next_offset:  # a clean reopen and close writes nothing
            self.producers.write_snapshot(self.directory, active.next_offset)


def _after_empty_batches(data: bytes) -> int | None:
    """The offset after ``data`` when every batch in it is empty (no record); None when one holds records.

    Looks at the first batch's header only, in a log that was never compacted.
    """
    pos, after = 0, None
    while pos < len(data):
        header = parse_header(data, pos)
        if header.records_count:
            return None
        after, pos = header.next_offset, pos + header.size
    return after
