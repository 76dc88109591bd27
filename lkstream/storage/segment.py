"""One segment: ``{base_offset:020d}.seg`` (record batches) and its ``.idx``.

A ``.seg`` file is record batches (see :mod:`lkstream.format.batch`) laid end to
end, with no file header and no padding; ``base_offset`` in the file name is the
base offset of its first batch. Batches are appended only after their CRC was
checked, and offsets strictly increase through the file and across segments.

After a crash (:func:`recover_segment`): the tail beyond the last fully
fsynced position may hold a torn batch, zeros or garbage. Recovery walks batch
headers from a trusted position, validates length, magic, CRC and offset
continuity of each, and truncates the file at the first batch that fails; the
index is cut to the validated bytes and rebuilt for them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from dataclasses import dataclass
from typing import Final, cast

from lkstream.errors import CorruptRecordError, StorageError, invariant, map_os_errors
from lkstream.format.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    check_batch,
    parse_header,
    read_length_prefix,
)
from lkstream.storage.files import StorageFile
from lkstream.storage.index import IndexDamaged, OffsetIndex
from lkstream.storage.ranges import FileRange, PinnableFile, VerifiedSpans

log = logging.getLogger("lkstream.storage")

SEGMENT_SUFFIX: Final = ".seg"
INDEX_SUFFIX: Final = ".idx"
_NAME: Final = re.compile(r"(\d{20})\.(seg|idx)")
# How much to read at once while walking batch headers during recovery.
_SCAN_CHUNK: Final = 1 << 20


def format_segment_name(base_offset: int, suffix: str = SEGMENT_SUFFIX) -> str:
    invariant(0 <= base_offset < 10**20, f"base offset {base_offset} out of range")
    return f"{base_offset:020d}{suffix}"


def parse_segment_name(name: str) -> tuple[int, str] | None:
    """``("00000000000000000042.seg")`` -> ``(42, ".seg")``; ``None`` for anything else."""
    match = _NAME.fullmatch(name)
    if match is None:
        return None
    return int(match.group(1)), "." + match.group(2)


@dataclass
class RecoveryReport:
    """What recovery found in one segment."""

    valid_bytes: int
    truncated_bytes: int
    index_rebuilt: bool
    reason: str = ""
    trusted_point_rejected: bool = False  # the given recovery point did not match the file


class Segment:
    """A segment file with its sparse index. Not thread-safe: the caller holds the log lock."""

    def __init__(
        self, directory: str, base_offset: int, seg_file: StorageFile, idx_file: StorageFile, index_interval_bytes: int
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.file = seg_file
        self.index = OffsetIndex(idx_file, index_interval_bytes)
        # Offset after the last batch; equals base_offset while the segment is empty.
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.index_rebuilt = False
        self._index_ready = False
        #: Bytes whose batches passed their CRC check in this process (what read ranges may hand out).
        self.verified = VerifiedSpans()
        self._sealed_ms: int | None = None

    @property
    def path(self) -> str:
        return self.file.path

    @property
    def size(self) -> int:
        return self.file.size()

    @property
    def sealed_ms(self) -> int:
        """When the segment was sealed: its file's mtime, which rolling sets from the log's clock.

        A sealed segment is never written again, so this is an upper bound of when each of its
        batches was appended (tombstone horizons and compaction lags count from it).
        """
        if self._sealed_ms is None:
            with map_os_errors("stat", self.path):
                self._sealed_ms = os.stat(self.path).st_mtime_ns // 1_000_000
        return self._sealed_ms

    def mark_sealed(self, now_ms: int) -> None:
        """Record ``now_ms`` as the time the segment was sealed (in its file's mtime)."""
        self._sealed_ms = now_ms
        try:
            os.utime(self.path, ns=(now_ms * 1_000_000, now_ms * 1_000_000))
        except OSError as exc:
            # Only a later start reads it back, where the write time of the file is the fallback.
            log.warning("could not record the sealing time of %s: %s", self.path, exc)

    def append(self, batch: bytes | bytearray | memoryview, header: BatchHeader) -> int:
        """Append one stamped, validated batch; return its position."""
        invariant(header.base_offset == self.next_offset, "batch offset does not continue the segment")
        position = self.file.append(batch)
        self.verified.add(position, position + len(batch))  # checked before it was written
        self.index.maybe_add(header.base_offset, position)
        self.next_offset = header.next_offset
        self.max_timestamp = max(self.max_timestamp, header.max_timestamp)
        return position

    # -- reads ---------------------------------------------------------------------------------

    def header_at(self, position: int) -> BatchHeader:
        """The header at ``position``; :class:`CorruptRecordError` (with path and position) if cut short."""
        raw = self.file.pread(HEADER_SIZE, position)
        try:
            return parse_header(raw)
        except CorruptRecordError as exc:
            raise CorruptRecordError(exc.reason, path=self.path, position=position) from None

    def read_header_bytes(self, position: int) -> bytes:
        """The raw 61 header bytes at ``position`` (fewer at the end of the file)."""
        return self.file.pread(HEADER_SIZE, position)

    def position_of(self, offset: int, end: int) -> int:
        """Position of the batch that holds ``offset`` (or the first batch after it), or ``end``.

        Starts at the index entry at or below ``offset`` and walks headers
        forward: at most ``index_interval_bytes`` plus one batch.
        """
        self.ensure_index()
        entry = self.index.lookup(offset)
        position, expected = (0, self.base_offset) if entry is None else (entry[1], entry[0])
        while position < end:
            header = self.header_at(position)
            # base_offset and batch_length are outside the CRC: check them against the walk.
            if header.base_offset != expected or not HEADER_SIZE <= header.size <= end - position:
                raise CorruptRecordError(
                    f"batch base offset {header.base_offset} (size {header.size}) does not continue at {expected}",
                    path=self.path,
                    position=position,
                )
            if header.next_offset > offset:
                return position
            position += header.size
            expected = header.next_offset
        return end

    def read(self, position: int, max_bytes: int, end: int, *, min_one: bool = True) -> bytes:
        """Whole, CRC-checked batches from ``position``, up to ``max_bytes`` (at least one batch).

        ``end`` is the readable end of the segment (the high watermark's position).
        A batch that fails its checks is never returned: the valid batches before it
        are, and a read that starts at it raises :class:`CorruptRecordError` with its
        position, so damage never hides the good records in front of it. Without
        ``min_one``, a first batch larger than ``max_bytes`` is not returned either (empty
        data): Kafka's rule for every partition of a Fetch after the first that returned data.
        """
        if position >= end:
            return b""
        # One pread in the common case: the first batch's size comes from the bytes read, and only a
        # first batch larger than max_bytes costs a second read (of exactly that batch).
        data = self.file.pread(min(end - position, max(max_bytes, HEADER_SIZE)), position)
        if len(data) < LOG_OVERHEAD:
            raise CorruptRecordError(
                f"truncated header: {len(data)} of {HEADER_SIZE} bytes", path=self.path, position=position
            )
        _, first_size = read_length_prefix(data, 0)
        if first_size > max_bytes and not min_one:
            return b""
        if len(data) < first_size <= end - position:
            data = self.file.pread(first_size, position)
        pos = 0
        expected: int | None = None  # the first batch's base offset was checked by position_of
        while len(data) - pos >= LOG_OVERHEAD:
            base_offset, size = read_length_prefix(data, pos)
            if size > len(data) - pos and pos > 0:
                break  # cut by max_bytes; the next read starts here
            try:
                if expected is not None and base_offset != expected:
                    raise CorruptRecordError(f"batch base offset {base_offset} does not continue at {expected}")
                expected = check_batch(data, pos, min(len(data), pos + size)).next_offset
            except CorruptRecordError as exc:
                if pos > 0:
                    break  # serve the valid batches before it; the next read starts at the damage
                raise CorruptRecordError(exc.reason, path=self.path, position=position + pos) from None
            pos += size
        self.verified.add(position, position + pos)
        return data if pos == len(data) else data[:pos]

    def range_for_send(self, position: int, max_bytes: int, end: int, *, min_one: bool) -> FileRange | bytes | None:
        """Whole batches from ``position`` as a :class:`FileRange` (see :mod:`lkstream.storage.ranges`).

        Up to ``max_bytes`` (the first batch even if larger, with ``min_one``), never past ``end`` (the
        readable end) nor past the checked span ``position`` lies in. ``b""``: the first batch is
        larger than ``max_bytes`` and ``min_one`` is off. None: the bytes at ``position`` were not
        checked in this process, or the file cannot be pinned; read them with :meth:`read`.
        """
        pinned = getattr(self.file, "pinned", None)
        checked_end = min(end, self.verified.end_from(position))
        if pinned is None or checked_end <= position:
            return None
        stop = self._last_batch_end(position, min(checked_end, position + max_bytes))
        if stop == position:  # the first batch does not fit
            _, first_size = read_length_prefix(self.file.pread(LOG_OVERHEAD, position))
            if position + first_size > checked_end:
                return None
            if not min_one:
                return b""
            stop = position + first_size
        fd, unpin = cast(PinnableFile, self.file).pinned()
        return FileRange(fd, position, stop - position, self.path, unpin)

    def _last_batch_end(self, position: int, limit: int) -> int:
        """The last batch boundary in ``[position, limit]``, walking checked batches from ``position``.

        Index entries are batch starts: the walk begins at the last one at or below ``limit`` (if it
        names the batch it points at), so it reads at most ``index_interval_bytes`` plus one batch of
        headers.
        """
        at, known_size = position, 0
        entry = self.index.at_or_below_position(limit)
        if entry is not None and entry[1] > position:
            base_offset, size = read_length_prefix(self.file.pread(LOG_OVERHEAD, entry[1]))
            if base_offset == entry[0]:
                at, known_size = entry[1], size
        while limit - at >= LOG_OVERHEAD:
            size = known_size or read_length_prefix(self.file.pread(LOG_OVERHEAD, at))[1]
            known_size = 0
            if at + size > limit:
                break
            at += size
        return at

    # -- recovery ------------------------------------------------------------------------------

    def load_index(self) -> bool:
        """Load the index file; return False (and empty the index) if it is damaged."""
        self._index_ready = True
        try:
            self.index.load()
            if len(self.index) == 0 and self.file.size() > 0:
                # The first batch always gets an entry: an empty index of a non-empty
                # segment was deleted or lost, and must be rebuilt, not scanned around.
                raise IndexDamaged("empty index for a non-empty segment")
            if len(self.index) and self.index.lookup(self.base_offset) != (self.base_offset, 0):
                raise IndexDamaged("the first entry is not the segment's first batch")
        except IndexDamaged:
            self.index.reset()
            return False
        return True

    def ensure_index(self) -> None:
        """Load a sealed segment's index on first use; rebuild it by scanning if damaged.

        Sealed segments load lazily so that opening a large log costs nothing per segment.
        """
        if self._index_ready:
            return
        index_ok = self.load_index()
        last = self.index.last_entry
        if index_ok and last is not None and not self._entries_match_batches([last]):
            self.index.reset()
            index_ok = False
        if not index_ok:
            self.index_rebuilt = True
            self._validate_from(0, self.base_offset)
            self._write_rebuilt_index()

    def _write_rebuilt_index(self) -> None:
        try:
            self.index.flush()
        except StorageError as exc:
            # The rebuilt entries serve from memory: a full disk must fail neither the read
            # nor the open that needed them. They are written by a later flush or rebuilt again.
            log.warning("could not write the rebuilt index of %s: %s", self.path, exc)

    def _entries_match_batches(self, entries: list[tuple[int, int]]) -> bool:
        """Whether each ``(offset, position)`` entry points at a batch with that base offset."""
        for offset, position in entries:
            raw = self.file.pread(8, position)
            if len(raw) < 8 or int.from_bytes(raw, "big", signed=True) != offset:
                return False
        return True

    def recover(self, trusted_position: int, trusted_next_offset: int) -> RecoveryReport:
        """Validate from ``trusted_position`` to the end; truncate at the first bad byte.

        ``trusted_next_offset`` is the offset the batch at ``trusted_position``
        must start with. The index keeps entries inside the trusted prefix and
        gets entries for every validated batch after it.
        """
        index_ok = self.load_index()
        if not index_ok:
            trusted_position, trusted_next_offset = 0, self.base_offset
        self.index.truncate_to_position(trusted_position)
        if index_ok and not self._entries_match_batches(self.index.entries()):
            # The active index is written with every group commit but fsynced only on
            # rotation and close: after a power loss even entries below the recovery
            # point may be torn. Rebuild it rather than serve reads through it.
            self.index.reset()
            index_ok = False
            trusted_position, trusted_next_offset = 0, self.base_offset
        trust_rejected = not self._ends_batch_at(trusted_position, trusted_next_offset)
        if trust_rejected:
            # The trusted point is not a batch boundary with that next offset (a checkpoint
            # that describes another copy of this file): trusting it would cut valid
            # batches and leave offsets with no data. Validate everything instead.
            self.index.truncate_to_position(0)
            trusted_position, trusted_next_offset = 0, self.base_offset
        position, expected_offset, reason = self._validate_from(trusted_position, trusted_next_offset)
        size = self.file.size()
        truncated = size - position
        if truncated:
            self.file.truncate(position)
            self.file.fsync()
        self._write_rebuilt_index()
        self.next_offset = expected_offset
        return RecoveryReport(position, truncated, not index_ok, reason, trust_rejected)

    def _ends_batch_at(self, position: int, next_offset: int) -> bool:
        """Whether batches end exactly at ``position`` and ``next_offset`` follows them.

        Walks headers from the index entry below: at most ``index_interval_bytes`` plus one batch.
        """
        entry = self.index.lookup(next_offset - 1)
        at, expected = (0, self.base_offset) if entry is None else (entry[1], entry[0])
        while at < position:
            raw = self.file.pread(HEADER_SIZE, at)
            if len(raw) < HEADER_SIZE:
                return False
            header = parse_header(raw)
            if header.base_offset != expected or header.size < HEADER_SIZE:
                return False
            at, expected = at + header.size, header.next_offset
        return at == position and expected == next_offset

    def _validate_from(self, position: int, expected_offset: int) -> tuple[int, int, str]:
        """Walk batches from ``position``; return (end of valid data, next offset, why it stopped).

        Reads the file in large chunks so that small batches do not cost a
        system call each.
        """
        size = self.file.size()
        chunk, chunk_start = b"", position
        while position < size:
            rel = position - chunk_start
            if len(chunk) - rel < LOG_OVERHEAD or read_length_prefix(chunk, rel)[1] > len(chunk) - rel:
                chunk, chunk_start, rel = self.file.pread(min(_SCAN_CHUNK, size - position), position), position, 0
                if len(chunk) >= LOG_OVERHEAD:
                    need = read_length_prefix(chunk)[1]
                    if len(chunk) < need <= size - position:
                        chunk = self.file.pread(need, position)
            try:
                header = check_batch(chunk, rel)
            except CorruptRecordError as exc:
                return position, expected_offset, exc.reason
            if header.base_offset != expected_offset:
                reason = f"batch base offset {header.base_offset} does not continue at {expected_offset}"
                return position, expected_offset, reason
            self.index.maybe_add(header.base_offset, position)
            self.max_timestamp = max(self.max_timestamp, header.max_timestamp)
            self.verified.add(position, position + header.size)
            expected_offset = header.next_offset
            position += header.size
        return position, expected_offset, ""

    def first_batch_at_or_after(self, timestamp_ms: int, end: int) -> int | None:
        """Base offset of the first batch whose ``max_timestamp`` is at least ``timestamp_ms``.

        Walks batch headers only (records are the client's business); batch
        granularity, as Kafka's time index. None when no batch before ``end`` qualifies.
        """
        position = 0
        while end - position >= HEADER_SIZE:
            header = self.header_at(position)
            if not HEADER_SIZE <= header.size <= end - position:
                raise CorruptRecordError(
                    f"batch length {header.size} does not fit the segment", path=self.path, position=position
                )
            if header.max_timestamp >= timestamp_ms:
                return header.base_offset
            position += header.size
        return None

    def scan_max_timestamp(self) -> None:
        """Set ``max_timestamp`` of a sealed segment from its last batch (for time retention).

        Stops at a damaged header instead of walking on (a negative length would
        loop forever); the timestamp then comes from the last sane batch.
        """
        self.ensure_index()
        end = self.file.size()
        entry = self.index.lookup(2**63 - 1)
        position = 0 if entry is None else entry[1]
        header: BatchHeader | None = None
        while end - position >= HEADER_SIZE:
            candidate = self.header_at(position)
            if not HEADER_SIZE <= candidate.size <= end - position:
                break
            header = candidate
            position += candidate.size
        if header is not None:
            self.max_timestamp = header.max_timestamp

    def close(self) -> None:
        self.file.close()
        self.index.file.close()

    def delete_files(self) -> None:
        self.close()
        for path in (self.file.path, self.index.file.path):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
