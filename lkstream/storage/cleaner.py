"""The log cleaner: keep, for every key, at least its latest record (Kafka's log compaction).

This is the one place in storage that looks at records rather than batches: which
record of a key is the latest is written inside the records, and nowhere else. It
runs on the broker's cleaner thread, over sealed segments only, never on the produce
or fetch path; everything else in storage moves whole batches.

One **pass** over a partition (:func:`clean_pass`), after Kafka's ``Cleaner``:

1. **Plan** from a :class:`~lkstream.storage.log_maintenance.CleaningSnapshot`: the
   *cleanable* sealed segments end at the active segment, or earlier at the first one
   sealed less than ``min_compaction_lag_ms`` ago. The *dirty* part starts at
   ``clean_end`` (what earlier passes cleaned, ``marks.meta``).
2. **Map**: walk the dirty records, ``key -> offset of its latest record``, into a
   bounded :mod:`~lkstream.storage.keymap`. When the map is full the pass ends its
   dirty range there (``map_end``); the next pass goes on from it (Kafka's way with a
   log that has more keys than ``log.cleaner.dedupe.buffer.size`` holds).
3. **Rewrite** every cleanable segment below ``map_end``, in groups of adjacent
   segments of at most ``segment_max_bytes`` (so segments that shrank are merged),
   each group into one segment: a record is kept if its offset is ``map_end`` or more,
   or the map does not know its key (its key's latest record is not in this pass's
   dirty range), or it is its key's latest; a tombstone (null value) is dropped as
   well once ``delete_retention_ms`` passed since its segment was sealed. A record
   without a key is dropped (a compacted topic refuses them; older ones cannot be
   latest of anything), as Kafka's cleaner drops them.
4. **Swap** each group in (:mod:`lkstream.storage.swap`, crash-safe), then record
   ``map_end`` as the new ``clean_end``.

What a rewrite keeps (:mod:`lkstream.format.rewrite`): batches keep their base offset,
last offset, producer id, epoch and base sequence, their records keep their offsets,
and a compressed batch is decompressed (within ``max_decompressed_bytes``), filtered
and compressed again with its codec. A batch that loses every record is dropped,
unless it is an idempotent producer's last batch, kept empty so that the producer's
sequence survives a restart; every run of dropped batches becomes one empty batch
over its offsets, so offsets stay contiguous (docs/adr/0006-offset-gaps-after-compaction.md)
and the rewritten range ends at the same offset as before.

Guarantees (Kafka's): a consumer that keeps up with the head sees every record (only
sealed segments at least ``min_compaction_lag_ms`` old are touched); order and offsets
never change; a reader from the start sees at least the latest record of every key, and
every tombstone written less than ``delete_retention_ms`` before it reaches it.

The log's end: the record just before the active segment is never removed, tombstone past
its horizon or not. Kafka never cleans its active segment, which always holds the log's
last record (it rolls only on an append); LKSTREAM also rolls a quiet active segment, which
would otherwise let a pass remove the log's last records (trailing tombstones) and leave
only empty batches below the high watermark. A Kafka client's position advances by the
records it is given, so it would then never reach the high watermark, and whatever waits
for that (quixstreams' and Kafka Streams' state restores) would wait forever. Once later
records arrive and the segment holding it rolls, a later pass removes it as any other.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from lkstream.errors import CorruptRecordError, StorageError
from lkstream.format.batch import HEADER_SIZE, PRODUCER_ID_AT, BatchHeader, parse_header
from lkstream.format.rewrite import (
    MAX_EMPTY_SPAN,
    RecordSpan,
    attributes_of,
    empty_batch,
    rebuild_batch,
    record_spans,
)
from lkstream.format.validate import DEFAULT_MAX_DECOMPRESSED_BYTES, check_records
from lkstream.storage import swap
from lkstream.storage.keymap import KeyMapLike
from lkstream.storage.log_maintenance import CleaningSnapshot, SealedSegment
from lkstream.storage.reader import ScanProblem, scan_segment
from lkstream.storage.segment import Segment

log = logging.getLogger("lkstream.storage")

#: :meth:`~lkstream.storage.log_maintenance.LogMaintenance.replace_segments`: swap a finished group in.
Replace = Callable[[Sequence[Segment], swap.CleanedWriter], bool]


@dataclass(frozen=True)
class CleanerPolicy:
    """How a partition is cleaned (Kafka's topic configs of the same names); storage's own parameter object."""

    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = 2**63 - 1
    min_cleanable_dirty_ratio: float = 0.5
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES


@dataclass(frozen=True)
class Dirtiness:
    """How much of a partition a pass would clean (what the broker ranks partitions by)."""

    clean_bytes: int
    dirty_bytes: int
    cleanable_end: int  # offsets below it are in segments old enough to clean
    overdue: bool  # the dirty part holds a record older than max_compaction_lag_ms
    tombstones_due: bool = False  # a tombstone kept by an earlier pass may be removed now

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0

    def due(self, policy: CleanerPolicy) -> bool:
        """Whether a pass is due: dirty enough, a dirty record waited too long, or tombstones may go."""
        dirty = self.dirty_bytes > 0 and (self.ratio >= policy.min_cleanable_dirty_ratio or self.overdue)
        return dirty or self.tombstones_due


@dataclass
class PassStats:
    """What one pass did (the broker's metrics: bytes cleaned, duration; the benchmark's amplification)."""

    bytes_read: int = 0  # map building and rewriting together
    bytes_written: int = 0
    bytes_before: int = 0  # of the segments rewritten
    records_read: int = 0
    records_kept: int = 0
    tombstones_removed: int = 0
    keyless_removed: int = 0
    tombstones_due_ms: int = -1  # when the oldest tombstone kept may go (-1: none kept)
    groups: int = 0
    groups_skipped: int = 0  # unchanged, or changed under the pass
    map_keys: int = 0
    map_end: int = 0
    seconds: float = 0.0
    segments: list[int] = field(default_factory=list)


# -- planning -------------------------------------------------------------------------------------------


def assess(snapshot: CleaningSnapshot, policy: CleanerPolicy, now_ms: int) -> Dirtiness:
    """The partition's clean and dirty bytes, and whether it is overdue (see :class:`Dirtiness`)."""
    cleanable = _cleanable(snapshot.sealed, now_ms, policy)
    if cleanable:
        end = cleanable[-1].next_offset
    else:
        end = snapshot.sealed[0].base_offset if snapshot.sealed else snapshot.active_base
    clean = sum(s.size for s in cleanable if s.next_offset <= snapshot.clean_end)
    dirty_segments = [s for s in cleanable if s.next_offset > snapshot.clean_end]
    overdue = False
    if dirty_segments and policy.max_compaction_lag_ms < 2**63 - 1:
        first = _first_batch_time(dirty_segments[0].segment)
        overdue = first is not None and now_ms - first >= policy.max_compaction_lag_ms
    due_ms = snapshot.tombstones_due_ms
    return Dirtiness(clean, sum(s.size for s in dirty_segments), end, overdue, 0 <= due_ms <= now_ms)


def _cleanable(sealed: Sequence[SealedSegment], now_ms: int, policy: CleanerPolicy) -> list[SealedSegment]:
    """The sealed segments a pass may touch: up to the first one younger than min_compaction_lag_ms."""
    out = []
    for segment in sealed:
        if now_ms - segment.sealed_ms < policy.min_compaction_lag_ms:
            break
        out.append(segment)
    return out


def _first_batch_time(segment: Segment) -> int | None:
    try:
        raw = segment.file.pread(HEADER_SIZE, 0)
    except StorageError:
        return None
    return parse_header(raw).max_timestamp if len(raw) == HEADER_SIZE else None


# -- one pass ---------------------------------------------------------------------------------------------


@dataclass
class _Pass:
    """What every step of one pass shares."""

    snapshot: CleaningSnapshot
    policy: CleanerPolicy
    key_map: KeyMapLike
    now_ms: int
    replace: Replace
    stats: PassStats
    pace: Callable[[], None]


def clean_pass(
    snapshot: CleaningSnapshot,
    policy: CleanerPolicy,
    key_map: KeyMapLike,
    now_ms: int,
    replace: Replace,
    *,
    pace: Callable[[], None] = lambda: None,
) -> PassStats:
    """Clean what ``snapshot`` allows (module docstring, steps 2-4); ``replace`` swaps each group in.

    ``replace(old_segments, writer) -> bool`` is the log's
    :meth:`~lkstream.storage.log_maintenance.LogMaintenance.replace_segments`. Raises
    :class:`~lkstream.errors.CorruptRecordError` for a damaged batch (nothing of the group it
    lies in is replaced) and :class:`~lkstream.errors.StorageError` for I/O trouble, such as a
    segment deleted by retention under the pass (the pass is then simply given up). The caller
    records ``stats.map_end`` as the log's clean end. ``pace`` runs after every batch (the
    broker's :class:`~lkstream.storage.pacing.Pacer`: a pass shares the GIL with the event loop).
    """
    started = time.perf_counter()
    run = _Pass(snapshot, policy, key_map, now_ms, replace, PassStats(), pace)
    cleanable = _cleanable(snapshot.sealed, now_ms, policy)
    dirty = [s for s in cleanable if s.next_offset > snapshot.clean_end]
    if dirty:
        run.stats.map_end = _build_map(run, dirty)
    elif 0 <= snapshot.tombstones_due_ms <= now_ms:
        # Nothing new, but tombstones may go: their older values went when they were mapped, so
        # an empty map removes exactly the tombstones past their horizon.
        run.stats.map_end = snapshot.clean_end
    else:
        run.stats.map_end = snapshot.clean_end
        run.stats.tombstones_due_ms = snapshot.tombstones_due_ms
        return run.stats
    run.stats.map_keys = len(key_map)
    for group in _groups([s for s in cleanable if s.base_offset < run.stats.map_end], snapshot.segment_max_bytes):
        _clean_group(run, group)
    run.stats.seconds = time.perf_counter() - started
    return run.stats


def _batches(run: _Pass, segment: SealedSegment) -> Iterator[tuple[BatchHeader, bytes]]:
    """Every batch of a sealed segment, checked (length, CRC, contiguous offsets), with its bytes."""
    for item in scan_segment(segment.segment.file, expected_offset=segment.base_offset, with_data=True):
        if isinstance(item, ScanProblem):
            raise CorruptRecordError(item.reason, path=item.path, position=item.position)
        assert item.data is not None
        run.stats.bytes_read += len(item.data)
        yield item.header, item.data
        run.pace()


def _records(run: _Pass, header: BatchHeader, data: bytes) -> tuple[bytes | memoryview, list[RecordSpan]]:
    """The (inflated) records section of a batch and where each record lies in it."""
    if header.records_count == 0:
        return b"", []
    section = check_records(data, header, run.policy.max_decompressed_bytes)
    return section, record_spans(section, header.records_count)


def _build_map(run: _Pass, dirty: Sequence[SealedSegment]) -> int:
    """Map every keyed record from the clean end on; return the offset the map covers up to (exclusive)."""
    clean_end = run.snapshot.clean_end
    for segment in dirty:
        for header, data in _batches(run, segment):
            if header.next_offset <= clean_end:
                continue
            for _, _, delta, _, key, _ in _records(run, header, data)[1]:
                offset = header.base_offset + delta
                if offset < clean_end or key is None:
                    continue
                if not run.key_map.put(key, offset):
                    if offset == clean_end:
                        raise StorageError(
                            f"the cleaner's key map holds no key at all ({run.key_map.max_entries} entries): "
                            "raise log_cleaner_dedupe_buffer_bytes",
                            path=segment.segment.path,
                        )
                    return offset
    return dirty[-1].next_offset


def _groups(segments: Sequence[SealedSegment], max_bytes: int) -> Iterator[list[SealedSegment]]:
    """Adjacent segments whose sizes add up to at most ``max_bytes`` (a segment alone may be larger)."""
    group: list[SealedSegment] = []
    size = 0
    for segment in segments:
        if group and size + segment.size > max_bytes:
            yield group
            group, size = [], 0
        group.append(segment)
        size += segment.size
    if group:
        yield group


class _GroupWriter:
    """The output of one group: kept batches, and one empty batch over every run of dropped ones."""

    def __init__(self, writer: swap.CleanedWriter) -> None:
        self.writer = writer
        self.changed = False
        self._gap_start = -1
        self._gap_end = -1
        self._gap_time = -1

    def keep(self, batch: bytes, base: int, next_offset: int) -> None:
        self._flush_gap()
        self.writer.append(batch, base, next_offset)

    def drop(self, header: BatchHeader) -> None:
        self.changed = True
        if self._gap_start < 0:
            self._gap_start = header.base_offset
        self._gap_end = header.next_offset
        self._gap_time = max(self._gap_time, header.max_timestamp)

    def _flush_gap(self) -> None:
        start = self._gap_start
        while 0 <= start < self._gap_end:
            span = min(self._gap_end - start, MAX_EMPTY_SPAN)
            self.writer.append(empty_batch(start, span - 1, self._gap_time), start, start + span)
            start += span
        self._gap_start = self._gap_end = -1
        self._gap_time = -1

    def finish(self) -> None:
        self._flush_gap()


def _clean_group(run: _Pass, group: list[SealedSegment]) -> None:
    """Rewrite ``group`` into one segment and swap it in (or leave it, if nothing changes)."""
    snapshot, stats = run.snapshot, run.stats
    writer = swap.CleanedWriter(snapshot.directory, group[0].base_offset, snapshot.index_interval_bytes)
    out = _GroupWriter(writer)
    try:
        for segment in group:
            horizon = segment.sealed_ms + run.policy.delete_retention_ms
            for header, data in _batches(run, segment):
                _clean_batch(run, header, data, out, horizon=horizon)
        out.finish()
        if not out.changed and len(group) == 1:
            writer.abandon()  # nothing to remove and nothing to merge: leave the segment alone
            stats.groups_skipped += 1
            return
        writer.finish(max(s.sealed_ms for s in group))
    except BaseException:
        writer.abandon()
        raise
    if not run.replace([s.segment for s in group], writer):
        writer.abandon()
        stats.groups_skipped += 1
        return
    stats.groups += 1
    stats.bytes_before += sum(s.size for s in group)
    stats.bytes_written += writer.size
    stats.segments.append(group[0].base_offset)


def _clean_batch(run: _Pass, header: BatchHeader, data: bytes, out: _GroupWriter, *, horizon: int) -> None:
    """Keep, rebuild, empty or drop one batch (see the module docstring, step 3)."""
    producers_last = run.snapshot.producers_last
    if header.records_count == 0:
        # An empty batch an earlier pass wrote: part of the next gap, unless a producer still needs it.
        if _is_producers_last(data, header, producers_last):
            out.keep(data, header.base_offset, header.next_offset)
        else:
            out.drop(header)
        return
    if header.base_offset >= run.stats.map_end:
        out.keep(data, header.base_offset, header.next_offset)  # beyond what this pass mapped
        return
    section, spans = _records(run, header, data)
    kept, newest = _kept_records(run, header, section, spans, horizon=horizon)
    if len(kept) == len(spans):
        out.keep(data, header.base_offset, header.next_offset)
        return
    out.changed = True
    if kept:
        out.keep(rebuild_batch(data, kept, newest), header.base_offset, header.next_offset)
    elif _is_producers_last(data, header, producers_last):
        batch = empty_batch(
            header.base_offset,
            header.last_offset_delta,
            header.max_timestamp,
            attributes=attributes_of(data),
            producer=_producer_of(data),
        )
        out.keep(batch, header.base_offset, header.next_offset)
    else:
        out.drop(header)


def _kept_records(
    run: _Pass, header: BatchHeader, section: bytes | memoryview, spans: list[RecordSpan], *, horizon: int
) -> tuple[list[bytes], int]:
    """The raw bytes of the records of a batch that stay, and the largest timestamp among them.

    ``horizon`` is when the tombstones of this batch's segment may be removed. The record just
    before the active segment stays whatever it is (see the module docstring, "The log's end").
    """
    stats, map_end = run.stats, run.stats.map_end
    horizon_passed = run.now_ms >= horizon
    log_end_record = run.snapshot.active_base - 1
    kept: list[bytes] = []
    newest = -(2**63)
    stats.records_read += len(spans)
    for start, end, delta, ts_delta, key, tombstone in spans:
        offset = header.base_offset + delta
        if offset < map_end and offset != log_end_record:
            if key is None:
                stats.keyless_removed += 1
                continue
            if run.key_map.get(key) > offset:
                continue
            if tombstone:
                if horizon_passed:
                    stats.tombstones_removed += 1
                    continue
                due = stats.tombstones_due_ms
                stats.tombstones_due_ms = horizon if due < 0 else min(due, horizon)
        kept.append(bytes(section[start:end]))
        newest = max(newest, header.base_timestamp + ts_delta)
    stats.records_kept += len(kept)
    return kept, newest


def _producer_of(data: bytes) -> tuple[int, int, int]:
    """``(producer_id, producer_epoch, base_sequence)`` of the batch at the start of ``data``."""
    return (
        int.from_bytes(data[PRODUCER_ID_AT : PRODUCER_ID_AT + 8], "big", signed=True),
        int.from_bytes(data[PRODUCER_ID_AT + 8 : PRODUCER_ID_AT + 10], "big", signed=True),
        int.from_bytes(data[PRODUCER_ID_AT + 10 : PRODUCER_ID_AT + 14], "big", signed=True),
    )


def _is_producers_last(data: bytes, header: BatchHeader, producers_last: dict[int, int]) -> bool:
    producer_id = _producer_of(data)[0]
    return producer_id >= 0 and producers_last.get(producer_id) == header.last_offset
