"""Read-only access to a data directory, for tools that run without a broker.

The CLI (``lkstream dump`` / ``lkstream verify``), :mod:`lkstream.storage.verify`
and the Spark batch source read data directories through this module: it is
the one sanctioned way to touch storage files without owning them (see
ARCHITECTURE.md, "integrations").

Invariants:

* **Never writes.** Segments and indexes are opened ``O_RDONLY``
  (``OsFile(read_only=True)``), metadata files with ``open(..., "rb")``. Nothing
  is created, truncated, renamed, fsynced or swept, and the ``LOCK`` is never
  taken, so a reader may run beside a live broker and a broker may start while
  a reader runs. Beside a live broker, the view of an active segment is a
  snapshot whose last batch may still be half written; that reads as a torn
  tail and is handled as one.
* **Sees exactly what recovery would keep.** :class:`PartitionReader` yields
  whole, CRC-valid batches with contiguous offsets, from the log start offset
  on (``marks.meta``: DeleteRecords may have moved it inside a segment). A
  compacted log's batches may hold fewer records than offsets, or none
  (docs/adr/0006): readers skip records by offset, never count them. In sealed segments, and in
  the active (last) segment before the recovery point that recovery trusts
  (checkpoint.meta's, or 0), an invalid batch is corruption and raises
  :class:`~lkstream.errors.CorruptRecordError` with path and position. From the
  recovery point on, the first invalid batch silently ends the log, because
  recovery (:meth:`lkstream.storage.segment.Segment.recover`) truncates there.
* **Batches, not records.** Readers hand out raw batch bytes and a
  :class:`~lkstream.format.batch.BatchHeader`; decoding records is the caller's
  job (:mod:`lkstream.format.codec`), as everywhere else in storage.

:func:`scan_segment` is the one batch walker: it yields each batch or a
:class:`ScanProblem` and, where the damage leaves the next batch findable, keeps
going. The reader, ``dump`` and :func:`lkstream.storage.verify.verify_data_dir`
all use it.

Objects here are not thread-safe; they are cheap, so make one per thread.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final, NamedTuple

from lkstream.errors import (
    CorruptRecordError,
    InvalidArgumentError,
    StorageError,
    UnknownTopicError,
    map_os_errors,
)
from lkstream.format.batch import HEADER_SIZE, MAGIC, BatchHeader, check_batch, parse_header
from lkstream.storage.checkpoint import Checkpoint, CheckpointDamaged, read_checkpoint
from lkstream.storage.files import OsFile, StorageFile
from lkstream.storage.index import ENTRY, ENTRY_SIZE
from lkstream.storage.lock import LOCK_NAME
from lkstream.storage.marks import Marks, MarksDamaged, read_marks
from lkstream.storage.names import (
    parse_partition_dir,
    partition_dir_name,
    validate_topic,
)
from lkstream.storage.segment import (
    INDEX_SUFFIX,
    SEGMENT_SUFFIX,
    format_segment_name,
    parse_segment_name,
)
from lkstream.storage.topics import TOPICS_DIR

# Segment bytes read per system call while walking batches: small batches must
# not cost a pread each.
_SCAN_CHUNK: Final = 1 << 20
_NO_LIMIT: Final = 2**63 - 1

# -- scanning one segment file ---------------------------------------------------------------------


class ScannedBatch(NamedTuple):
    """A whole, CRC-valid batch found by :func:`scan_segment`."""

    position: int
    header: BatchHeader
    data: bytes | None  # the batch bytes, when the scan was asked for them


@dataclass(frozen=True, slots=True)
class ScanProblem:
    """Bytes at ``position`` that do not hold a valid batch continuing the log.

    ``header`` is the parsed header when 61 bytes were there (a dump shows it).
    ``resumable`` means the batch's frame (its length) looked intact and the
    next batch starts where it says, so the scan went on past it.
    """

    path: str
    position: int
    reason: str
    header: BatchHeader | None = None
    resumable: bool = False


class _Window:
    """Serves byte ranges of a file from one large read at a time."""

    def __init__(self, file: StorageFile, size: int) -> None:
        self._file = file
        self._size = size
        self._buf = b""
        self._start = 0

    def get(self, position: int, length: int) -> memoryview:
        """Up to ``length`` bytes at ``position``; fewer at the end of the file."""
        length = max(0, min(length, self._size - position))
        rel = position - self._start
        if rel < 0 or rel + length > len(self._buf):
            want = max(length, min(_SCAN_CHUNK, self._size - position))
            self._buf, self._start, rel = self._file.pread(want, position), position, 0
        return memoryview(self._buf)[rel : rel + length]


def _check_at(window: _Window, position: int, remaining: int) -> tuple[BatchHeader | None, str | None, memoryview]:
    """Validate the batch at ``position``: ``(header, reason it is invalid or None, bytes)``."""
    if remaining < HEADER_SIZE:
        return None, f"truncated header: {remaining} of {HEADER_SIZE} bytes", memoryview(b"")
    head = window.get(position, HEADER_SIZE)
    if len(head) < HEADER_SIZE:  # the file shrank under us (a broker truncating its tail)
        return None, f"truncated header: {len(head)} of {HEADER_SIZE} bytes", head
    header = parse_header(head)
    # These two are decided from the header alone; never read a bogus length's worth of bytes.
    if header.size < HEADER_SIZE:
        return header, f"batch_length {header.batch_length} is smaller than a header", memoryview(b"")
    if header.size > remaining:
        return header, f"truncated batch: {remaining} of {header.size} bytes", memoryview(b"")
    data = window.get(position, header.size)
    try:
        check_batch(data)
    except CorruptRecordError as exc:
        return header, exc.reason, data
    return header, None, data


def _looks_like_batch_start(window: _Window, position: int, size: int) -> bool:
    """Whether a scan can trust ``position`` as the next batch after a damaged one."""
    if position == size:
        return True
    head = window.get(position, HEADER_SIZE)
    if len(head) < HEADER_SIZE:
        return False
    header = parse_header(head)
    return header.magic == MAGIC and HEADER_SIZE <= header.size <= size - position and header.base_offset >= 0


def scan_segment(
    file: StorageFile, *, start: int = 0, expected_offset: int | None = None, with_data: bool = False
) -> Iterator[ScannedBatch | ScanProblem]:
    """Walk the batches of a segment file from ``start``, in file order.

    Yields a :class:`ScannedBatch` for each batch that passes every check of
    :func:`~lkstream.format.batch.check_batch` and, when ``expected_offset`` is
    given, continues the offsets (its base offset is the previous batch's next
    offset). Anything else yields a :class:`ScanProblem`; the scan goes on past
    it only if the problem is ``resumable``, and ends after it otherwise. Never
    raises for any file content (I/O errors raise :class:`StorageError`).
    """
    size = file.size()
    window = _Window(file, size)
    position = start
    while position < size:
        header, reason, data = _check_at(window, position, size - position)
        if header is None or reason is not None:
            # A CRC or magic failure may sit in the length field too: go on only
            # if the batch it claims to end at is followed by a plausible one.
            resumable = (
                header is not None
                and HEADER_SIZE <= header.size <= size - position
                and _looks_like_batch_start(window, position + header.size, size)
            )
            yield ScanProblem(file.path, position, reason or "invalid batch", header, resumable)
            if header is None or not resumable:
                return
        elif expected_offset is not None and header.base_offset != expected_offset:
            # The CRC vouches for the frame, so the scan can always go on.
            reason = f"batch base offset {header.base_offset} does not continue at offset {expected_offset}"
            yield ScanProblem(file.path, position, reason, header, True)
        else:
            yield ScannedBatch(position, header, bytes(data) if with_data else None)
        expected_offset = header.next_offset
        position += header.size


def open_read_only(path: str) -> OsFile:
    """Open a segment or index file for reading only (``StorageError`` if that fails)."""
    return OsFile(path, read_only=True)


def read_index_entries(file: StorageFile) -> tuple[list[tuple[int, int]], int]:
    """The ``(offset, position)`` entries of an index file, and its trailing bytes beyond whole entries."""
    size = file.size()
    raw = file.pread(size - size % ENTRY_SIZE, 0)
    raw = raw[: len(raw) - len(raw) % ENTRY_SIZE]
    return [(o, p) for o, p in ENTRY.iter_unpack(raw)], size % ENTRY_SIZE


def index_damage(entries: list[tuple[int, int]], trailing: int) -> str | None:
    """Why :meth:`~lkstream.storage.index.OffsetIndex.load` would reject these entries, if it would."""
    if trailing:
        return f"size is not a multiple of {ENTRY_SIZE} ({trailing} trailing bytes)"
    for i, (offset, position) in enumerate(entries):
        if offset >= 2**63 or position >= 2**63:
            return f"entry {i} ({offset}, {position}) is negative as a signed 64-bit integer"
        if i and (offset <= entries[i - 1][0] or position <= entries[i - 1][1]):
            return f"entry {i} ({offset}, {position}) is not above entry {i - 1} {entries[i - 1]}"
    return None


# -- reading a partition ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SegmentFiles:
    """The files of one segment (the ``.idx`` may be missing)."""

    base_offset: int
    seg_path: str
    idx_path: str


class RawBatch(NamedTuple):
    """One batch as stored: where it is, its header, and its bytes."""

    segment: str
    position: int
    header: BatchHeader
    data: bytes


def list_segments(directory: str) -> list[SegmentFiles]:
    """The segments of a partition directory, oldest first."""
    with map_os_errors("list", directory):
        names = os.listdir(directory)
    bases = sorted(p[0] for name in names if (p := parse_segment_name(name)) and p[1] == SEGMENT_SUFFIX)
    return [
        SegmentFiles(
            base,
            os.path.join(directory, format_segment_name(base, SEGMENT_SUFFIX)),
            os.path.join(directory, format_segment_name(base, INDEX_SUFFIX)),
        )
        for base in bases
    ]


class PartitionReader:
    """A read-only view of one partition directory, as recovery would leave it.

    The segment list and checkpoint are read once, at construction; make a new
    reader to see segments that a live broker created or deleted since.
    """

    def __init__(self, directory: str, topic: str = "", partition: int = 0) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.segments = list_segments(directory)
        self.checkpoint: Checkpoint | None = None
        self.checkpoint_problem = ""
        try:
            self.checkpoint = read_checkpoint(directory)
        except CheckpointDamaged as exc:
            self.checkpoint_problem = str(exc)
        self.marks: Marks | None = None
        self.marks_problem = ""
        try:
            self.marks = read_marks(directory)
        except MarksDamaged as exc:
            self.marks_problem = str(exc)

    @property
    def log_start_offset(self) -> int:
        """Where reads start: the first segment's base, or the later offset DeleteRecords set."""
        first = self.segments[0].base_offset if self.segments else 0
        return first if self.marks is None else max(first, self.marks.log_start_offset)

    def trusted_prefix(self) -> tuple[int, int]:
        """``(position, next offset)`` in the last segment up to which recovery trusts the data.

        Mirrors :class:`~lkstream.storage.log.PartitionLog`: the checkpoint's
        recovery point if it names the last segment and lies within it and the
        segment's index loads, else the start of the segment.
        """
        if not self.segments:
            return 0, 0
        last = self.segments[-1]
        cp = self.checkpoint
        with map_os_errors("stat", last.seg_path):
            size = os.stat(last.seg_path).st_size
        if cp is None or cp.active_base != last.base_offset or cp.recovery_point > size:
            return 0, last.base_offset
        if _index_is_damaged(last.idx_path, size):
            return 0, last.base_offset
        return cp.recovery_point, cp.next_offset

    def batches(self, start_offset: int = 0) -> Iterator[RawBatch]:
        """Whole, valid batches from the one holding ``start_offset`` to the end of the log.

        An offset below the log start begins at the log start. The first batch
        may begin before ``start_offset``; skip its earlier records. Stops
        quietly at a torn tail; raises :class:`CorruptRecordError` for anything
        recovery would not repair.
        """
        start_offset = max(start_offset, self.log_start_offset)
        for path, item in self._walk(start_offset, with_data=True):
            if item.header.next_offset > start_offset and item.data is not None:
                yield RawBatch(path, item.position, item.header, item.data)

    def end_offset(self) -> int:
        """The offset after the last valid batch: the log end recovery would arrive at."""
        # Where recovery starts trusting is also the end when nothing valid follows it.
        end = self.trusted_prefix()[1]
        for _, item in self._walk(_NO_LIMIT, with_data=False, only_last=True):
            end = item.header.next_offset
        return end

    def _walk(
        self, start_offset: int, *, with_data: bool, only_last: bool = False
    ) -> Iterator[tuple[str, ScannedBatch]]:
        if not self.segments:
            return
        bases = [s.base_offset for s in self.segments]
        first = len(bases) - 1 if only_last else max(0, bisect_right(bases, start_offset) - 1)
        expected: int | None = None
        for i in range(first, len(self.segments)):
            seg = self.segments[i]
            if expected is not None and seg.base_offset != expected:
                reason = f"segment starts at offset {seg.base_offset}, but the previous one ends before {expected}"
                raise CorruptRecordError(reason, path=seg.seg_path, position=0)
            tail = self.trusted_prefix() if i == len(self.segments) - 1 else None
            file = open_read_only(seg.seg_path)
            try:
                position, next_offset = self._seek(seg, file, start_offset, tail)
                for item in scan_segment(file, start=position, expected_offset=next_offset, with_data=with_data):
                    if tail is not None and item.position >= tail[0]:
                        at_recovery_point = item.position == tail[0]
                        if isinstance(item, ScanProblem) or (at_recovery_point and item.header.base_offset != tail[1]):
                            return  # recovery truncates from here: the log ends
                    if isinstance(item, ScanProblem):
                        raise CorruptRecordError(item.reason, path=item.path, position=item.position)
                    expected = item.header.next_offset
                    yield seg.seg_path, item
            finally:
                file.close()

    def _seek(self, seg: SegmentFiles, file: StorageFile, offset: int, tail: tuple[int, int] | None) -> tuple[int, int]:
        """A batch boundary ``(position, base offset)`` at or before ``offset``'s batch.

        The index is a hint: its entry is used only if the batch it points at
        has the offset it claims. In the last segment, entries at or past the
        recovery point are ignored, since batches there must be validated in
        order from the recovery point, as recovery does.
        """
        best = (0, seg.base_offset)
        if offset <= seg.base_offset:
            return best
        entry = _index_lookup(seg.idx_path, offset)
        if entry is not None and (tail is None or entry[1] < tail[0]) and entry[1] + HEADER_SIZE <= file.size():
            header = parse_header(file.pread(HEADER_SIZE, entry[1]))
            if header.base_offset == entry[0] and header.magic == MAGIC:
                best = (entry[1], entry[0])
        if tail is not None and tail[1] <= offset and tail[0] > best[0]:
            best = tail
        return best


def _index_lookup(idx_path: str, offset: int) -> tuple[int, int] | None:
    """The last usable index entry at or below ``offset``; None without a usable index."""
    entries = _load_index(idx_path)
    if not entries:
        return None
    i = bisect_right(entries, (offset, _NO_LIMIT)) - 1
    return (entries[i][0], entries[i][1]) if i >= 0 else None


def _load_index(idx_path: str) -> list[tuple[int, int]] | None:
    """Entries of an index the broker would accept; None if it is missing or damaged."""
    try:
        file = open_read_only(idx_path)
    except StorageError:
        return None
    try:
        entries, trailing = read_index_entries(file)
    finally:
        file.close()
    return None if index_damage(entries, trailing) else entries


def _index_is_damaged(idx_path: str, segment_size: int) -> bool:
    """Whether :meth:`~lkstream.storage.segment.Segment.load_index` would reject the index.

    A missing index counts: the broker creates it empty, and an empty index of a
    non-empty segment is treated as lost and rebuilt.
    """
    entries = _load_index(idx_path)
    return entries is None or (not entries and segment_size > 0)


# -- reading a data directory -----------------------------------------------------------------------


class DataDirReader:
    """Topics and partitions of a data directory, without owning it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.topics_dir = os.path.join(path, TOPICS_DIR)
        if not os.path.isdir(self.topics_dir):
            raise InvalidArgumentError(f"{path} is not an LKSTREAM data directory (it has no {TOPICS_DIR}/)")

    def topic_dirs(self) -> list[str]:
        """Names of every directory under ``topics/``, valid topic names or not."""
        with map_os_errors("list", self.topics_dir):
            names = os.listdir(self.topics_dir)
        return sorted(n for n in names if os.path.isdir(os.path.join(self.topics_dir, n)))

    def topics(self) -> list[str]:
        return [n for n in self.topic_dirs() if is_valid_name(validate_topic, n)]

    def partitions(self, topic: str) -> list[int]:
        directory = os.path.join(self.topics_dir, validate_topic(topic))
        if not os.path.isdir(directory):
            raise UnknownTopicError(topic)
        with map_os_errors("list", directory):
            names = os.listdir(directory)
        return sorted(
            p for n in names if (p := parse_partition_dir(n)) is not None and os.path.isdir(os.path.join(directory, n))
        )

    def partition_dir(self, topic: str, partition: int) -> str:
        return os.path.join(self.topics_dir, validate_topic(topic), partition_dir_name(partition))

    def partition(self, topic: str, partition: int) -> PartitionReader:
        if partition not in self.partitions(topic):
            raise InvalidArgumentError(f"topic {topic!r} has no partition directory {partition_dir_name(partition)}")
        return PartitionReader(self.partition_dir(topic, partition), topic, partition)

    def lock_holder(self) -> int | None:
        """Pid of the process holding the ``LOCK`` (a running broker), or None.

        Looks the lock up in the kernel's table (``/proc/locks``, Linux) instead
        of trying it, so the reader never takes the lock even for a moment. A
        hint only: None also where ``/proc/locks`` is unavailable.
        """
        try:
            st = os.stat(os.path.join(self.path, LOCK_NAME))
            with open("/proc/locks", encoding="ascii", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            return None
        wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        for line in lines:
            # "1: FLOCK  ADVISORY  WRITE 7978 fe:00:2170897 0 EOF"; waiters carry a "->" field.
            fields = line.split()
            if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == wanted and fields[4].isdigit():
                return int(fields[4])
        return None


def is_valid_name(validate: Callable[[object], str], name: str) -> bool:
    """Whether ``validate`` (a validator from :mod:`lkstream.storage.names`) accepts ``name``."""
    try:
        validate(name)
    except InvalidArgumentError:
        return False
    return True
