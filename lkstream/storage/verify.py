"""Verification of a whole data directory: ``lkstream verify`` and offline checks.

:func:`verify_data_dir` walks every topic directory, ``topic.json``, partition
directory, segment, index, ``checkpoint.meta`` and committed-offset file and the
offsets journal (``commits.log``, replayed over the files as the broker does), and
returns a :class:`VerifyReport`: a :class:`PartitionSummary` per partition and
the :class:`Problem` list, in discovery order.

Invariants:

* **Never writes, never locks.** Every file is read through
  :mod:`lkstream.storage.reader` (segments and indexes ``O_RDONLY``, metadata
  with ``open(..., "rb")``) and the ``LOCK`` is only looked up, never taken, so
  verification may run beside a live broker; there, the newest batch may read
  as a torn tail.
* **Severity follows what the broker would do.** An *error* is corruption:
  data that recovery would lose or that reads would refuse, or metadata the
  broker rejects. A *warning* is a state the broker repairs or tolerates on
  open: a torn tail after a crash, a missing or damaged index of the active
  segment, stray temporary files. Where recovery starts trusting the active
  segment is :meth:`~lkstream.storage.reader.PartitionReader.trusted_prefix`,
  and batches are walked with :func:`~lkstream.storage.reader.scan_segment`, so
  verification and :class:`~lkstream.storage.reader.PartitionReader` agree on
  where a log ends.
* **Damage is reported, not raised.** No file content makes it raise: damage
  of any kind is a :class:`Problem`, and so is a partition that cannot be
  read. It raises :class:`~lkstream.errors.InvalidArgumentError` for a path
  that is not a data directory, and :class:`~lkstream.errors.StorageError` if
  a directory outside the partitions cannot be listed.
* **Every problem counts, not every one is listed.** At most
  ``max_problems_per_file`` problems per file and severity are listed, then
  one "... and N more" line of that severity. A :class:`PartitionSummary`'s
  ``errors``/``warnings`` count every problem of its partition;
  :attr:`VerifyReport.errors` and ``.warnings`` count the listed ones.

Each call of :func:`verify_data_dir` has its own state, so calls may run
concurrently.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Literal

from lkstream.errors import CorruptRecordError, InvalidConfigError, StorageError, map_os_errors
from lkstream.format.batch import BatchHeader
from lkstream.format.validate import DEFAULT_MAX_DECOMPRESSED_BYTES, check_records
from lkstream.storage.checkpoint import CHECKPOINT_NAME
from lkstream.storage.files import StorageFile
from lkstream.storage.index import ENTRY_SIZE
from lkstream.storage.marks import MARKS_NAME
from lkstream.storage.names import partition_dir_name, validate_topic
from lkstream.storage.offset_files import is_topic_id, read_offset_file
from lkstream.storage.offset_journal import JOURNAL_MAGIC, JOURNAL_NAME, scan_records
from lkstream.storage.offsets import OFFSETS_DIR
from lkstream.storage.producers import SNAPSHOT_NAME
from lkstream.storage.reader import (
    DataDirReader,
    PartitionReader,
    ScannedBatch,
    ScanProblem,
    SegmentFiles,
    index_damage,
    is_valid_name,
    open_read_only,
    read_index_entries,
    scan_segment,
)
from lkstream.storage.segment import SEGMENT_SUFFIX, parse_segment_name
from lkstream.storage.swap import CLEANED, DELETED, SWAP
from lkstream.storage.topic_config import TopicConfig
from lkstream.storage.topics import TOPIC_META

Severity = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class Problem:
    """One finding of :func:`verify_data_dir`. Errors are corruption; warnings are
    states the broker repairs or tolerates (a torn tail, a missing index, strays)."""

    severity: Severity
    path: str
    message: str
    position: int | None = None


@dataclass
class PartitionSummary:
    topic: str
    partition: int
    segments: int = 0
    size_bytes: int = 0
    batches: int = 0
    records: int = 0
    log_start_offset: int = 0
    end_offset: int | None = None  # None when corruption stopped the scan before the end
    errors: int = 0
    warnings: int = 0


@dataclass
class VerifyReport:
    data_dir: str
    partitions: list[PartitionSummary] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    offset_files: int = 0
    lock_holder: int | None = None

    @property
    def errors(self) -> int:
        return sum(p.severity == "error" for p in self.problems)

    @property
    def warnings(self) -> int:
        return sum(p.severity == "warning" for p in self.problems)


def verify_data_dir(
    path: str, *, max_problems_per_file: int = 20, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
) -> VerifyReport:
    """Check every segment, index, checkpoint, ``topic.json`` and offset file under ``path``.

    What counts as an error (corruption) and what as a warning (a state the
    broker repairs or tolerates, such as a torn tail after a crash) is decided
    by what recovery and reads would do with it; see the messages in
    :class:`_Verifier`. Raises :class:`InvalidArgumentError` if ``path`` is not
    a data directory. Reads only, like everything in this module.
    """
    return _Verifier(DataDirReader(path), max_problems_per_file, max_decompressed_bytes).run()


@dataclass
class _SegmentScan:
    """What verification learned from walking one segment."""

    size: int
    end_offset: int | None  # next offset after the last valid batch; None if the walk could not finish
    checked_end: int  # the walk could not look at bytes from here on
    batches: int = 0
    records: int = 0
    tail_start: int | None = None  # last segment: where recovery would truncate
    starts: dict[int, int] = field(default_factory=dict)  # position -> base offset, for positions asked about


@dataclass(frozen=True)
class _Active:
    """Facts about the last segment that decide what its problems mean."""

    trusted: int  # recovery validates from here (PartitionReader.trusted_prefix)
    durable_end: int  # bytes the checkpoint says were fsynced and valid
    recovery_point: int | None  # the checkpoint's, when it names this segment

    def note(self) -> str:
        if self.trusted >= self.durable_end:
            return f" (before the recovery point {self.durable_end}: recovery trusts these bytes without checking)"
        return f" (before the recovery point {self.durable_end}: recovery would truncate data recorded as fsynced)"


class _Verifier:
    """One run of :func:`verify_data_dir`. Problems are collected in discovery order."""

    def __init__(self, reader: DataDirReader, max_problems_per_file: int, max_decompressed_bytes: int) -> None:
        self.reader = reader
        self._max_decompressed_bytes = max_decompressed_bytes
        self.report = VerifyReport(reader.path, lock_holder=reader.lock_holder())
        self._cap = max_problems_per_file
        self._per_file: dict[tuple[str, Severity], int] = {}
        self._summary: PartitionSummary | None = None
        self._ends: dict[tuple[str, int], int | None] = {}
        self._topics: set[str] = set()

    def run(self) -> VerifyReport:
        for name in self.reader.topic_dirs():
            directory = os.path.join(self.reader.topics_dir, name)
            if not is_valid_name(validate_topic, name):
                self._add("error", directory, "not a valid topic name: the broker refuses to open this data directory")
                continue
            self._topics.add(name)
            self._verify_topic(name)
        self._summary = None
        self._verify_offsets()
        for (path, severity), count in self._per_file.items():
            if count > self._cap:
                more = count - self._cap
                self.report.problems.append(Problem(severity, path, f"... and {more} more {severity}(s) in this file"))
        return self.report

    def _add(self, severity: Severity, path: str, message: str, position: int | None = None) -> None:
        key = (path, severity)
        self._per_file[key] = self._per_file.get(key, 0) + 1
        if self._summary is not None:
            if severity == "error":
                self._summary.errors += 1
            else:
                self._summary.warnings += 1
        if self._per_file[key] <= self._cap:
            self.report.problems.append(Problem(severity, path, message, position))

    # -- topics and partitions -------------------------------------------------------------------

    def _verify_topic(self, topic: str) -> None:
        self._summary = None  # topic-level problems belong to no partition
        pids = self.reader.partitions(topic)
        self._check_topic_meta(topic, pids)
        for pid in pids:
            try:
                self._verify_partition(PartitionReader(self.reader.partition_dir(topic, pid), topic, pid))
            except StorageError as exc:
                self._add("error", self.reader.partition_dir(topic, pid), f"cannot read: {exc}")

    def _check_topic_meta(self, topic: str, pids: list[int]) -> None:
        meta = os.path.join(self.reader.topics_dir, topic, TOPIC_META)
        try:
            raw = _load_json(meta)
        except FileNotFoundError:
            if not pids:
                self._add("error", meta, "missing, and no partition directories: the broker refuses to open the topic")
            else:
                self._add("warning", meta, "missing: the broker adopts the topic from its partition directories")
            return
        except (OSError, ValueError) as exc:
            self._add("error", meta, f"unreadable ({exc}): the broker adopts the topic from its partition directories")
            return
        count = raw.get("partitions") if isinstance(raw, dict) else None
        if isinstance(raw, dict) and not is_topic_id(raw.get("topic_id")):
            self._add("warning", meta, "has no topic_id (written before topic ids): the broker adds one at open")
        if isinstance(raw, dict) and "configs" in raw:
            try:
                TopicConfig.from_json(raw["configs"])
            except InvalidConfigError as exc:
                self._add("error", meta, f"its topic configs cannot be honoured ({exc}): the broker refuses to start")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            self._add("error", meta, f"partitions is {count!r}, not a positive integer")
            return
        missing = sorted(set(range(count)) - set(pids))
        extra = sorted(set(pids) - set(range(count)))
        if missing:
            names = ", ".join(partition_dir_name(p) for p in missing)
            self._add("error", meta, f"declares {count} partition(s), but {names} is missing")
        if extra:
            names = ", ".join(partition_dir_name(p) for p in extra)
            self._add("warning", meta, f"declares {count} partition(s): the broker ignores {names}")

    def _verify_partition(self, pr: PartitionReader) -> None:
        summary = PartitionSummary(pr.topic, pr.partition, len(pr.segments), log_start_offset=pr.log_start_offset)
        self._summary = summary
        self.report.partitions.append(summary)
        self._check_partition_files(pr)
        if not pr.segments:
            self._check_no_segments(pr)
            summary.end_offset = 0
            self._ends[(pr.topic, pr.partition)] = 0
            return
        active = self._active_facts(pr)
        prev_end: int | None = None
        scan: _SegmentScan | None = None
        for i, seg in enumerate(pr.segments):
            last = i == len(pr.segments) - 1
            scan = self._verify_segment(seg, active if last else None)
            if scan is None:
                prev_end = None
                continue
            summary.size_bytes += scan.size
            summary.batches += scan.batches
            summary.records += scan.records
            if not last and scan.size == 0:
                self._add("error", seg.seg_path, "sealed segment is empty")
            elif prev_end is not None and seg.base_offset != prev_end:
                message = (
                    f"base offset {seg.base_offset} does not continue the previous segment (next offset {prev_end})"
                )
                self._add("error", seg.seg_path, message, 0)
            prev_end = scan.end_offset if scan.size else None
        summary.end_offset = scan.end_offset if scan is not None else None
        self._ends[(pr.topic, pr.partition)] = summary.end_offset
        if scan is not None:
            self._check_checkpoint(pr, pr.segments[-1], scan)
        self._check_marks(pr, summary.end_offset)

    def _check_marks(self, pr: PartitionReader, end: int | None) -> None:
        """``marks.meta`` (DeleteRecords' log start, the cleaner's progress): what the broker does with it."""
        path = os.path.join(pr.directory, MARKS_NAME)
        if pr.marks_problem:
            self._add("warning", path, f"damaged ({pr.marks_problem}): the log starts at its first segment again")
        elif pr.marks is not None and end is not None and pr.marks.log_start_offset > end:
            self._add(
                "warning",
                path,
                f"log start {pr.marks.log_start_offset} lies beyond the end {end}: the broker starts the log there",
            )

    def _check_partition_files(self, pr: PartitionReader) -> None:
        with map_os_errors("list", pr.directory):
            names = sorted(os.listdir(pr.directory))
        # From this same listing, not pr.segments: a live broker may have rolled since.
        bases = {p[0] for n in names if (p := parse_segment_name(n)) and p[1] == SEGMENT_SUFFIX}
        for name in names:
            path = os.path.join(pr.directory, name)
            parsed = parse_segment_name(name)
            if name in (CHECKPOINT_NAME, SNAPSHOT_NAME, MARKS_NAME) or (
                parsed is not None and parsed[1] == SEGMENT_SUFFIX
            ):
                continue
            if name.endswith((CLEANED, SWAP, DELETED)):
                # The cleaner's steps (lkstream.storage.swap); beside a live broker, a clean in progress.
                self._add("warning", path, "an unfinished segment rewrite (the broker finishes or undoes it on open)")
            elif parsed is not None and parsed[0] not in bases:
                self._add("warning", path, "index without a segment (the broker deletes it on open)")
            elif name.endswith(".tmp"):
                self._add("warning", path, "stray temporary file (the broker deletes it on open)")
            elif parsed is None:
                self._add("warning", path, "unexpected file")

    def _check_no_segments(self, pr: PartitionReader) -> None:
        cp = pr.checkpoint
        if cp is not None and cp.next_offset > 0:
            self._add(
                "error",
                pr.directory,
                f"no segment files, but checkpoint.meta says the log reached offset {cp.next_offset}",
            )
        elif cp is not None:
            self._add("warning", pr.directory, "no segment files (the broker starts an empty log)")
        # No files and no checkpoint: a partition never written to. A new topic's partitions
        # create their first segment at their first write (issue 12, finding 9): nothing to report.

    # -- segments and indexes ----------------------------------------------------------------------

    @staticmethod
    def _active_facts(pr: PartitionReader) -> _Active:
        last = pr.segments[-1]
        cp = pr.checkpoint
        trusted = pr.trusted_prefix()
        if cp is None or cp.active_base != last.base_offset:
            return _Active(trusted[0], 0, None)
        # Up to the recovery point the checkpoint vouches that the bytes were fsynced and valid.
        return _Active(trusted[0], min(cp.recovery_point, _file_size(last.seg_path)), cp.recovery_point)

    def _verify_segment(self, seg: SegmentFiles, active: _Active | None) -> _SegmentScan | None:
        """Walk one segment and check its index against it. ``active`` is set for the last segment."""
        entries = self._read_index(seg, active is not None)
        wanted = {p for _, p in entries or ()}
        if active is not None and active.recovery_point is not None:
            wanted.add(active.recovery_point)
        try:
            file = open_read_only(seg.seg_path)
        except StorageError as exc:
            self._add("error", seg.seg_path, f"cannot read: {exc}")
            return None
        try:
            scan = self._scan(seg, file, active, wanted)
        except StorageError as exc:
            self._add("error", seg.seg_path, f"cannot read: {exc}")
            return None
        finally:
            file.close()
        if entries:
            self._check_index_entries(seg, entries, scan, None if active is None else active.trusted)
        return scan

    def _scan(self, seg: SegmentFiles, file: StorageFile, active: _Active | None, wanted: set[int]) -> _SegmentScan:
        """Walk the batches; in the last segment, split problems into damage and a torn tail.

        Bad bytes before the checkpoint's recovery point are damage to data known
        fsynced; after it, the first bad batch starts what recovery truncates.
        """
        size = file.size()
        scan = _SegmentScan(size, seg.base_offset, size)
        first_tail: ScanProblem | None = None
        after_tail: list[BatchHeader] = []
        for item in scan_segment(file, expected_offset=seg.base_offset, with_data=True):
            header = item.header
            if isinstance(item, ScannedBatch):
                self._check_records(seg, item)
            if first_tail is not None:  # inside what recovery truncates: only look for valid batches
                if isinstance(item, ScannedBatch):
                    after_tail.append(item.header)
                elif not item.resumable:
                    break
                continue
            if isinstance(item, ScanProblem) and active is not None and item.position >= active.durable_end:
                first_tail = item
                if not item.resumable:
                    break
                continue
            if header is not None and item.position in wanted:
                # A damaged batch still starts where an index entry may rightly point.
                scan.starts[item.position] = header.base_offset
            if isinstance(item, ScannedBatch):
                scan.batches += 1
                scan.records += item.header.records_count
                scan.end_offset = item.header.next_offset
                continue
            note = "" if active is None else active.note()
            self._add("error", seg.seg_path, item.reason + note, item.position)
            if header is None or not item.resumable:
                scan.end_offset, scan.checked_end = None, item.position
                break
            scan.end_offset = header.next_offset
        if first_tail is not None:
            self._report_tail(seg, scan, first_tail, after_tail)
        return scan

    def _check_records(self, seg: SegmentFiles, item: ScannedBatch) -> None:
        """The records inside a CRC-valid batch: what produce-time validation checks (issue 12).

        A batch whose frame and CRC are right but whose records are not is never a torn
        write, so it is an error wherever it lies; reads stop before it.
        """
        assert item.data is not None
        try:
            check_records(item.data, item.header, self._max_decompressed_bytes)
        except CorruptRecordError as exc:
            self._add(
                "error",
                seg.seg_path,
                f"{exc.reason} (offsets {item.header.base_offset}..{item.header.last_offset}; reads stop before "
                "this batch: skip it by moving consumers past it)",
                item.position,
            )

    def _report_tail(
        self, seg: SegmentFiles, scan: _SegmentScan, problem: ScanProblem, after: list[BatchHeader]
    ) -> None:
        scan.tail_start = problem.position
        nbytes = scan.size - problem.position
        if after:
            # A torn write leaves nothing valid behind it; valid batches after bad
            # bytes mean damage that recovery would turn into data loss.
            offsets = f"{after[0].base_offset}..{after[-1].last_offset}"
            message = (
                f"{problem.reason}; recovery would truncate the {nbytes} bytes from here, "
                f"discarding {len(after)} valid batch(es) with offsets {offsets}"
            )
            self._add("error", seg.seg_path, message, problem.position)
        else:
            message = f"torn tail: recovery would truncate the last {nbytes} bytes ({problem.reason})"
            self._add("warning", seg.seg_path, message, problem.position)

    def _read_index(self, seg: SegmentFiles, active: bool) -> list[tuple[int, int]] | None:
        """The index entries, or None when missing or damaged (both reported).

        The active segment's index is written without its own fsync and rebuilt
        by recovery, so its damage is a warning; a sealed index was fsynced
        whole at rotation, so its damage is corruption.
        """
        severity: Severity = "warning" if active else "error"
        seg_size = _file_size(seg.seg_path)
        if not os.path.exists(seg.idx_path):
            if seg_size:
                self._add(severity, seg.idx_path, "missing (the broker rebuilds it by scanning the segment)")
            return None
        try:
            file = open_read_only(seg.idx_path)
            try:
                entries, trailing = read_index_entries(file)
            finally:
                file.close()
        except StorageError as exc:
            self._add("error", seg.idx_path, f"cannot read: {exc}")
            return None
        damage = index_damage(entries, trailing)
        if damage is not None:
            position = len(entries) * ENTRY_SIZE if trailing else None
            self._add(severity, seg.idx_path, f"damaged: {damage} (the broker rebuilds it)", position)
            return None
        if not entries and seg_size:
            self._add(severity, seg.idx_path, "empty for a non-empty segment (the broker rebuilds it)")
        return entries

    def _check_index_entries(
        self, seg: SegmentFiles, entries: list[tuple[int, int]], scan: _SegmentScan, trusted: int | None
    ) -> None:
        """Every entry the broker would use must name a valid batch start and its base offset."""
        for i, (offset, position) in enumerate(entries):
            if trusted is not None and position >= trusted:
                continue  # recovery drops entries from the recovery point on and rebuilds them
            where = i * ENTRY_SIZE
            if position >= scan.size:
                self._add(
                    "error",
                    seg.idx_path,
                    f"entry {i} ({offset}, {position}) points past the end of the segment ({scan.size} bytes)",
                    where,
                )
            elif position >= scan.checked_end:
                continue  # the segment is unreadable from before here; that is reported
            elif position not in scan.starts:
                self._add(
                    "error",
                    seg.idx_path,
                    f"entry {i} ({offset}, {position}) does not point at the start of a batch",
                    where,
                )
            elif scan.starts[position] != offset:
                actual = scan.starts[position]
                self._add(
                    "error",
                    seg.idx_path,
                    f"entry {i} says offset {offset}, but the batch at byte {position} has base offset {actual}",
                    where,
                )

    def _check_checkpoint(self, pr: PartitionReader, last: SegmentFiles, scan: _SegmentScan) -> None:
        path = os.path.join(pr.directory, CHECKPOINT_NAME)
        cp = pr.checkpoint
        if pr.checkpoint_problem:
            self._add("error", path, f"damaged ({pr.checkpoint_problem}): recovery validates the whole active segment")
            return
        if cp is None:
            if scan.size == 0 and len(pr.segments) == 1:
                return  # a new partition nothing was appended to writes none: nothing to protect
            self._add("warning", path, "missing: recovery validates the whole active segment")
            return
        if cp.active_base != last.base_offset:
            message = (
                f"stale: names segment {cp.active_base}, the newest is {last.base_offset}; recovery checks it whole"
            )
            self._add("warning", path, message)
            return
        point, name = cp.recovery_point, os.path.basename(last.seg_path)
        if point > scan.size:
            self._add(
                "error",
                path,
                f"recovery point {point} lies beyond the end of {name} ({scan.size} bytes): fsynced bytes are gone",
            )
        elif point < scan.size and point != scan.tail_start and point < scan.checked_end:
            base = scan.starts.get(point)
            if base is None:
                self._add("error", path, f"recovery point {point} is not the start of a batch in {name}")
            elif base != cp.next_offset:
                message = (
                    f"says the batch at byte {point} of {name} starts at offset {cp.next_offset}, "
                    f"but it starts at {base}: recovery would truncate there"
                )
                self._add("error", path, message)
        elif point == scan.size and scan.end_offset is not None and scan.end_offset != cp.next_offset:
            self._add(
                "error",
                path,
                f"says the log ends before offset {cp.next_offset}, but {name} ends before {scan.end_offset}",
            )

    # -- committed offsets ------------------------------------------------------------------------

    def _verify_offsets(self) -> None:
        """The ``.offset`` snapshot files, then ``commits.log`` replayed over them (as the broker does)."""
        directory = os.path.join(self.reader.path, OFFSETS_DIR)
        if not os.path.isdir(directory):
            return
        with map_os_errors("list", directory):
            names = sorted(os.listdir(directory))
        committed: dict[tuple[str, str, int], tuple[str, int]] = {}
        for name in names:
            path = os.path.join(directory, name)
            if name == JOURNAL_NAME:
                continue
            found = read_offset_file(directory, name)
            if name.endswith(".tmp"):
                self._add("warning", path, "stray temporary file (the broker deletes it on open)")
            elif found is None:
                self._add("warning", path, "unexpected file")
            else:
                self.report.offset_files += 1
                offset = self._check_offset_file(path, *found)
                if offset is not None and found[0] is not None:
                    committed[found[0]] = (path, offset)
        if JOURNAL_NAME in names:
            self._merge_journal(os.path.join(directory, JOURNAL_NAME), committed)
        for (group, topic, pid), (path, offset) in committed.items():
            self._check_committed(path, group, topic, pid, offset)

    def _merge_journal(self, journal: str, committed: dict[tuple[str, str, int], tuple[str, int]]) -> None:
        for key, offset in self._replay_journal(journal).items():
            if offset is None:
                committed.pop(key, None)
            else:
                if key not in committed:
                    self.report.offset_files += 1  # a commit that lives only in the journal so far
                committed[key] = (journal, offset)

    def _replay_journal(self, path: str) -> dict[tuple[str, str, int], int | None]:
        """The last value (None: deleted) of every key the journal changes; damage is reported."""
        changes: dict[tuple[str, str, int], int | None] = {}
        try:
            data = _read_bytes(path)
        except OSError as exc:
            self._add("error", path, f"unreadable offsets journal ({exc!r})")
            return changes
        if data[: len(JOURNAL_MAGIC)] != JOURNAL_MAGIC:
            self._add("error", path, f"offsets journal does not start with {JOURNAL_MAGIC!r}", 0)
            return changes
        base = len(JOURNAL_MAGIC)
        try:
            records, end = scan_records(data[base:], path, base)
        except CorruptRecordError as exc:
            self._add("error", path, f"{exc.reason}: committed offsets after it would be lost", exc.position)
            return changes
        if base + end < len(data):
            self._add(
                "warning",
                path,
                f"torn tail of {len(data) - base - end} bytes (the broker truncates it on open;"
                " a live broker may be writing it)",
                base + end,
            )
        for _, entries in records:
            for group, topic, pid, offset, *_ in entries:
                changes[(group, topic, pid)] = offset
        return changes

    def _check_offset_file(self, path: str, key: tuple[str, str, int] | None, value: object) -> int | None:
        if isinstance(value, CorruptRecordError):
            whose = "its key is unknown" if key is None else f"group {key[0]!r} cannot resume {key[1]}[{key[2]}]"
            self._add("error", path, f"{value.reason}: {whose}")
            return None
        offset = getattr(value, "offset", None)
        return offset if isinstance(offset, int) else None

    def _check_committed(self, path: str, group: str, topic: str, pid: int, offset: int) -> None:
        if topic not in self._topics:
            self._add("warning", path, f"group {group!r} committed to topic {topic!r}, which does not exist")
        elif (topic, pid) not in self._ends:
            self._add("warning", path, f"group {group!r} committed to {topic}[{pid}], which does not exist")
        elif (end := self._ends[(topic, pid)]) is not None and offset > end:
            self._add("warning", path, f"committed offset {offset} is beyond the log end {end} of {topic}[{pid}]")


def _file_size(path: str) -> int:
    """Size of a file, 0 if it is gone (a live broker's retention may delete it meanwhile)."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _load_json(path: str) -> object:
    with open(path, "rb") as f:
        return json.loads(f.read())
