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

import os
import re
from dataclasses import dataclass
from typing import Final

from lkstream.errors import CorruptRecordError, invariant
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

SEGMENT_SUFFIX: Final = ".seg"
INDEX_SUFFIX: Final = ".idx"
_NAME: Final = re.compile(r"^(\d{20})\.(seg|idx)$")
# How much to read at once while walking batch headers during recovery.
_SCAN_CHUNK: Final = 1 << 20


def format_segment_name(base_offset: int, suffix: str = SEGMENT_SUFFIX) -> str:
    invariant(0 <= base_offset < 10**20, f"base offset {base_offset} out of range")
    return f"{base_offset:020d}{suffix}"


def parse_segment_name(name: str) -> tuple[int, str] | None:
    """``("00000000000000000042.seg")`` -> ``(42, ".seg")``; ``None`` for anything else."""
    match = _NAME.match(name)
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

    @property
    def path(self) -> str:
        return self.file.path

    @property
    def size(self) -> int:
        return self.file.size()

    def append(self, batch: bytes | bytearray | memoryview, header: BatchHeader) -> int:
        """Append one stamped, validated batch; return its position."""
        invariant(header.base_offset == self.next_offset, "batch offset does not continue the segment")
        position = self.file.append(batch)
        self.index.maybe_add(header.base_offset, position)
        self.next_offset = header.next_offset
        self.max_timestamp = max(self.max_timestamp, header.max_timestamp)
        return position

    # -- reads ---------------------------------------------------------------------------------

    def header_at(self, position: int) -> BatchHeader:
        raw = self.file.pread(HEADER_SIZE, position)
        return parse_header(raw)

    def position_of(self, offset: int, end: int) -> int:
        """Position of the batch that holds ``offset`` (or the first batch after it), or ``end``.

        Starts at the index entry at or below ``offset`` and walks headers
        forward: at most ``index_interval_bytes`` plus one batch.
        """
        self.ensure_index()
        entry = self.index.lookup(offset)
        position = 0 if entry is None else entry[1]
        while position < end:
            header = self.header_at(position)
            if header.next_offset > offset:
                return position
            position += header.size
        return end

    def read(self, position: int, max_bytes: int, end: int) -> bytes:
        """Whole, CRC-checked batches from ``position``, up to ``max_bytes`` (at least one batch).

        ``end`` is the readable end of the segment (the high watermark's position).
        A batch that fails its checks raises :class:`CorruptRecordError` with its
        position; it is never returned.
        """
        if position >= end:
            return b""
        first_size = self.header_at(position).size
        data = self.file.pread(min(end - position, max(max_bytes, first_size)), position)
        pos = 0
        while len(data) - pos >= LOG_OVERHEAD:
            _, size = read_length_prefix(data, pos)
            if size > len(data) - pos and pos > 0:
                break  # cut by max_bytes; the next read starts here
            try:
                check_batch(data, pos, min(len(data), pos + size))
            except CorruptRecordError as exc:
                raise CorruptRecordError(exc.reason, path=self.path, position=position + pos) from None
            pos += size
        return data if pos == len(data) else data[:pos]

    # -- recovery ------------------------------------------------------------------------------

    def load_index(self) -> bool:
        """Load the index file; return False (and empty the index) if it is damaged."""
        self._index_ready = True
        try:
            self.index.load()
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
        if not self.load_index():
            self.index_rebuilt = True
            self._validate_from(0, self.base_offset)
            self.index.flush()

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
        position, expected_offset, reason = self._validate_from(trusted_position, trusted_next_offset)
        size = self.file.size()
        truncated = size - position
        if truncated:
            self.file.truncate(position)
            self.file.fsync()
        self.index.flush()
        self.next_offset = expected_offset
        return RecoveryReport(position, truncated, not index_ok, reason)

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
            expected_offset = header.next_offset
            position += header.size
        return position, expected_offset, ""

    def scan_last_batch(self) -> None:
        """Set ``next_offset`` and ``max_timestamp`` of a sealed segment from its last batch."""
        self.ensure_index()
        end = self.file.size()
        entry = self.index.lookup(2**63 - 1)
        position = 0 if entry is None else entry[1]
        header: BatchHeader | None = None
        while position < end:
            header = self.header_at(position)
            position += header.size
        if header is not None:
            self.next_offset = header.next_offset
            self.max_timestamp = header.max_timestamp

    def close(self) -> None:
        self.file.close()
        self.index.file.close()

    def delete_files(self) -> None:
        self.close()
        for path in (self.file.path, self.index.file.path):
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
