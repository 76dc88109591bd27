"""What a partition log does besides appending and reading: time-based rolls, DeleteRecords, cleaning.

:class:`LogMaintenance` is a part of :class:`~lkstream.storage.log.PartitionLog`
(its base class), kept in its own module so that each stays about one role:

* **Rolling by time** (``segment.ms``): the active segment is sealed once it has held
  data for ``segment_ms``, on the next append (as Kafka does) or, for a partition
  nobody writes to, by :meth:`~LogMaintenance.roll_if_due` from the broker's
  maintenance thread, so that a quiet partition's tail becomes cleanable.
* **The log start offset** (Kafka's DeleteRecords): :meth:`~LogMaintenance.delete_records`
  moves it forward, durably (:mod:`lkstream.storage.marks`) before it takes effect, and
  deletes the whole segments below it. It need not be a segment boundary: reads below
  it are out of range, and a read from it may return a batch that starts before it.
* **Cleaning** (:mod:`lkstream.storage.cleaner`): :meth:`~LogMaintenance.cleaning_snapshot`
  hands the cleaner the sealed segments (which never change while sealed),
  :meth:`~LogMaintenance.replace_segments` swaps a rewritten segment in under the log's
  lock, following :mod:`lkstream.storage.swap`'s crash-safe steps.

Thread-safety: as :class:`~lkstream.storage.log.PartitionLog`: every public method is
thread-safe and takes the log's lock; ``_marks_lock`` (a leaf, taken without the log's
lock) orders the writes of ``marks.meta``.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lkstream.errors import InvalidArgumentError, OffsetOutOfRangeError, StorageError
from lkstream.format.batch import HEADER_SIZE, parse_header
from lkstream.storage import swap
from lkstream.storage.files import fsync_dir
from lkstream.storage.marks import Marks, MarksDamaged, read_marks, write_marks
from lkstream.storage.segment import Segment

if TYPE_CHECKING:
    from lkstream.storage.clock import Clock
    from lkstream.storage.log import LogConfig
    from lkstream.storage.producers import ProducerStateTable

log = logging.getLogger("lkstream.storage")


@dataclass(frozen=True)
class SealedSegment:
    """A sealed segment as the cleaner sees it (``segment`` is what :meth:`replace_segments` checks, by identity)."""

    segment: Segment
    base_offset: int
    next_offset: int
    size: int
    sealed_ms: int


@dataclass(frozen=True)
class CleaningSnapshot:
    """A partition's sealed segments and marks at one moment (see :meth:`LogMaintenance.cleaning_snapshot`)."""

    directory: str
    topic: str
    partition: int
    sealed: tuple[SealedSegment, ...]
    active_base: int
    log_start_offset: int
    clean_end: int
    tombstones_due_ms: int
    producers_last: dict[int, int]
    segment_max_bytes: int
    index_interval_bytes: int


class LogMaintenance:
    """Rolling by time, DeleteRecords and the cleaner's hooks of a :class:`~lkstream.storage.log.PartitionLog`."""

    directory: str
    topic: str
    partition: int
    config: LogConfig
    producers: ProducerStateTable
    _clock: Clock
    _lock: threading.Lock
    _segments: list[Segment]
    _bases: list[int]
    _closed: bool
    _failed: StorageError | None
    _log_start: int
    _clean_end: int
    _tombstones_due_ms: int
    _marks_lock: threading.Lock
    _active_since_ms: int
    _roll_jitter_ms: int
    _durable_position: int
    _durable_next_offset: int

    if TYPE_CHECKING:  # PartitionLog's

        def _check_open(self) -> None: ...
        def _roll(self) -> Segment: ...
        def _new_segment(self, base_offset: int) -> Segment: ...
        def _write_checkpoint(self) -> None: ...

        @property
        def high_watermark(self) -> int: ...

    # -- opening ---------------------------------------------------------------------------------

    def _no_marks(self) -> None:
        """The state of a log without ``marks.meta`` (a new partition; the constructor)."""
        self._marks_lock = threading.Lock()
        self._log_start, self._clean_end, self._tombstones_due_ms = 0, 0, -1
        self._start_roll_clock()

    def _open_marks(self) -> None:
        """Read ``marks.meta`` and apply it (constructor, after recovery): the log start, the clean end."""
        self._no_marks()
        try:
            marks = read_marks(self.directory) or Marks()
        except MarksDamaged as exc:
            log.warning(
                "%s[%d]: marks.meta damaged (%s); the log starts at its first segment", self.topic, self.partition, exc
            )
            marks = Marks()
        self._log_start, self._clean_end = marks.log_start_offset, marks.clean_end
        self._tombstones_due_ms = marks.tombstones_due_ms
        active = self._segments[-1]
        if self._log_start > active.next_offset:
            # DeleteRecords moved the start past what a power loss left of the log (group and none
            # modes): the log starts over there, as Kafka truncates fully and starts at the log start.
            log.warning(
                "%s[%d]: the log start %d lies beyond the recovered end %d; the log starts again at %d",
                self.topic,
                self.partition,
                self._log_start,
                active.next_offset,
                self._log_start,
            )
            self._start_over_at(self._log_start)
        self._delete_below_start()
        self._start_roll_clock(self._active_first_time(self._segments[-1]))

    def _active_first_time(self, active: Segment) -> int:
        """When the active segment got its first batch: its header's time, never later than now."""
        now = self._clock.now_ms()
        if active.size < HEADER_SIZE:
            return now
        return min(now, parse_header(active.file.pread(HEADER_SIZE, 0)).max_timestamp)

    def _start_over_at(self, offset: int) -> None:
        """Drop every segment and start an empty one at ``offset`` (the constructor, after recovery)."""
        old = self._segments
        fresh = self._new_segment(offset)
        self._segments, self._bases = [fresh], [offset]
        for segment in old:
            segment.delete_files()
        fsync_dir(self.directory)
        self._durable_position, self._durable_next_offset = 0, offset
        self._write_checkpoint()

    # -- rolling by time -----------------------------------------------------------------------------

    def _start_roll_clock(self, since_ms: int | None = None) -> None:
        """The active segment got its first batch at ``since_ms`` (default: now); draw its jitter."""
        self._active_since_ms = self._clock.now_ms() if since_ms is None else since_ms
        jitter, segment_ms = self.config.segment_jitter_ms, self.config.segment_ms
        self._roll_jitter_ms = random.randrange(min(jitter, segment_ms)) if jitter > 0 and segment_ms > 0 else 0

    def _roll_due(self, active: Segment, now_ms: int) -> bool:
        """Whether ``segment_ms`` says to seal the non-empty active segment. Caller holds the lock."""
        segment_ms = self.config.segment_ms
        return (
            segment_ms >= 0 and active.size > 0 and now_ms - self._active_since_ms >= segment_ms - self._roll_jitter_ms
        )

    def roll_if_due(self) -> bool:
        """Seal the active segment if it has held data for ``segment_ms`` (a quiet partition's tail)."""
        with self._lock:
            if self._closed or self._failed is not None:
                return False
            if not self._roll_due(self._segments[-1], self._clock.now_ms()):
                return False
            self._roll()
            return True

    # -- DeleteRecords -------------------------------------------------------------------------------

    def delete_records(self, before: int) -> int:
        """Make ``before`` the log start offset (Kafka's DeleteRecords); return the log start after it.

        ``before`` may be anything from the log start to the high watermark (else
        :class:`~lkstream.errors.OffsetOutOfRangeError`, as Kafka answers); a value at or below
        the current start changes nothing. The new start is written to ``marks.meta`` before it
        takes effect, so a restart keeps it. Whole segments below it are deleted now.
        """
        if not isinstance(before, int) or isinstance(before, bool):
            raise InvalidArgumentError(f"offset must be an integer, got {before!r}")
        with self._marks_lock:
            with self._lock:
                self._check_open()
                start, high = self.log_start_offset, self.high_watermark
                if not 0 <= before <= high:
                    raise OffsetOutOfRangeError(self.topic, self.partition, before, start, high)
                if before <= start:
                    return start
                marks = Marks(before, self._clean_end, self._tombstones_due_ms)
            write_marks(self.directory, marks)  # three fsyncs: outside the log's lock
            with self._lock:
                self._check_open()
                self._log_start = max(self._log_start, before)
                doomed = self._take_below_start()
        self._remove(doomed, "DeleteRecords")
        return self.log_start_offset

    @property
    def log_start_offset(self) -> int:
        return max(self._segments[0].base_offset, self._log_start)

    def _take_below_start(self) -> list[Segment]:
        """Unlink from the list the sealed segments wholly below the log start. Caller holds the lock."""
        count = 0
        for segment in self._segments[:-1]:
            if segment.next_offset > self._log_start:
                break
            count += 1
        doomed = self._segments[:count]
        del self._segments[:count]
        del self._bases[:count]
        return doomed

    def _delete_below_start(self) -> None:
        self._remove(self._take_below_start(), "the log start")

    def _remove(self, doomed: Sequence[Segment], why: str) -> None:
        if not doomed:
            return
        for segment in doomed:
            segment.delete_files()
        fsync_dir(self.directory)
        log.info(
            "%s deleted %d segment(s) of %s[%d]; the log starts at %d",
            why,
            len(doomed),
            self.topic,
            self.partition,
            self.log_start_offset,
        )

    # -- cleaning ------------------------------------------------------------------------------------

    def cleaning_snapshot(self) -> CleaningSnapshot:
        """The sealed segments and marks now: what the cleaner plans a pass from."""
        with self._lock:
            self._check_open()
            sealed = tuple(
                SealedSegment(s, s.base_offset, s.next_offset, s.size, s.sealed_ms) for s in self._segments[:-1]
            )
            return CleaningSnapshot(
                self.directory,
                self.topic,
                self.partition,
                sealed,
                self._segments[-1].base_offset,
                self.log_start_offset,
                self._clean_end,
                self._tombstones_due_ms,
                self.producers.last_batch_offsets(),
                self.config.segment_max_bytes,
                self.config.index_interval_bytes,
            )

    def replace_segments(self, old: Sequence[Segment], cleaned: swap.CleanedWriter) -> bool:
        """Swap the finished ``cleaned`` segment in for ``old`` (adjacent, sealed); False if they changed meanwhile.

        Runs :mod:`lkstream.storage.swap`'s steps 2 to 5; steps 2-4 under the lock. If a step after
        the commit point fails, the log refuses appends until a restart, whose recovery finishes the
        swap (the files on disk are then the only truth).
        """
        bases = [s.base_offset for s in old]
        with self._lock:
            if self._closed or not self._still_sealed(old):
                return False
            end = old[-1].next_offset
            swap.commit(self.directory, cleaned.base)
            try:
                for segment in old:
                    segment.close()
                swap.retire(self.directory, bases)
                swap.install(self.directory, cleaned.base)
                new = self._new_segment(cleaned.base)
            except StorageError as exc:
                self._failed = exc
                raise
            new.next_offset = end
            at = self._segments.index(old[0])
            self._segments[at : at + len(old)] = [new]
            self._bases[at : at + len(old)] = [cleaned.base]
        swap.remove_retired(self.directory, bases)
        return True

    def _still_sealed(self, old: Sequence[Segment]) -> bool:
        """Whether ``old`` are still adjacent sealed segments of this log (identity, not equality)."""
        for at, segment in enumerate(self._segments[:-1]):
            if segment is old[0]:
                run = self._segments[at : at + len(old)]
                return (
                    len(run) == len(old)
                    and at + len(old) < len(self._segments)
                    and all(a is b for a, b in zip(run, old, strict=True))
                )
        return False

    def dirty_ratio(self) -> float:
        """The share of the sealed bytes the cleaner has not cleaned yet (0 when nothing is sealed)."""
        with self._lock:
            sealed = self._segments[:-1]
            total = sum(s.size for s in sealed)
            dirty = sum(s.size for s in sealed if s.next_offset > self._clean_end)
        return dirty / total if total else 0.0

    def set_clean_end(self, offset: int, tombstones_due_ms: int = -1) -> None:
        """Record a pass: every offset below ``offset`` is cleaned, and when its oldest kept tombstone may go.

        Durable, best effort: a failed write means the next pass starts earlier.
        """
        with self._marks_lock:
            with self._lock:
                if self._closed:
                    return
                marks = Marks(self._log_start, offset, tombstones_due_ms)
            try:
                write_marks(self.directory, marks)
            except StorageError as exc:  # the next pass starts earlier: more work, nothing lost
                log.warning("could not record the cleaner's progress in %s: %s", self.directory, exc)
            with self._lock:
                self._clean_end = max(self._clean_end, offset)
                self._tombstones_due_ms = tombstones_due_ms
