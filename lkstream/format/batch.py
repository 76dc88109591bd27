"""The record batch: LKSTREAM's one unit of storage and transfer.

LKSTREAM uses Kafka's v2 RecordBatch (magic 2) unchanged, so the bytes a producer
builds are the bytes on disk, on the wire and in a fetch response. All integers
are big-endian (network order), as in Kafka.

Batch header (61 bytes), then the records::

    offset size type    field                   meaning
    ------ ---- ------- ----------------------- ---------------------------------------------
         0    8 int64   base_offset             offset of the first record; stamped by the broker
         8    4 int32   batch_length            bytes that follow this field (total = 12 + batch_length)
        12    4 int32   partition_leader_epoch  unused by LKSTREAM (clients write -1; kept as sent)
        16    1 int8    magic                   always 2
        17    4 uint32  crc                     CRC-32C of bytes [21, end): attributes .. last record
        21    2 int16   attributes              bits 0-2 compression, 3 timestamp type,
                                                4 transactional, 5 control
        23    4 int32   last_offset_delta       offset of the last record minus base_offset
        27    8 int64   base_timestamp          create time (ms) of the first record
        35    8 int64   max_timestamp           largest record timestamp (ms)
        43    8 int64   producer_id             -1 when not idempotent
        51    2 int16   producer_epoch          -1 when not idempotent
        53    4 int32   base_sequence           -1 when not idempotent
        57    4 int32   records_count           number of records that follow
        61    -         records                 varint-framed records, compressed as a block if
                                                compression bits are set

The CRC deliberately excludes ``base_offset``, ``batch_length`` and the leader
epoch, which is why the broker can stamp offsets by overwriting eight bytes and
never re-encode or re-checksum a batch: the append path is O(1) per batch.

Records inside a batch are encoded and decoded only by clients, with LKSTREAM's
C codec (:mod:`lkstream.format.encode`, :mod:`lkstream.format.codec`); the broker and storage handle
:class:`BatchHeader` views and raw bytes, never records.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

import crc32c

from lkstream.errors import CorruptRecordError

# One line per field; the struct and the offsets below must agree (checked at import).
HEADER: Final = struct.Struct(
    ">"
    "q"  # base_offset
    "i"  # batch_length
    "i"  # partition_leader_epoch
    "b"  # magic
    "I"  # crc
    "h"  # attributes
    "i"  # last_offset_delta
    "q"  # base_timestamp
    "q"  # max_timestamp
    "q"  # producer_id
    "h"  # producer_epoch
    "i"  # base_sequence
    "i"  # records_count
)
BASE_OFFSET_AT: Final = 0
BATCH_LENGTH_AT: Final = BASE_OFFSET_AT + 8
LEADER_EPOCH_AT: Final = BATCH_LENGTH_AT + 4
MAGIC_AT: Final = LEADER_EPOCH_AT + 4
CRC_AT: Final = MAGIC_AT + 1
ATTRIBUTES_AT: Final = CRC_AT + 4
LAST_OFFSET_DELTA_AT: Final = ATTRIBUTES_AT + 2
BASE_TIMESTAMP_AT: Final = LAST_OFFSET_DELTA_AT + 4
MAX_TIMESTAMP_AT: Final = BASE_TIMESTAMP_AT + 8
PRODUCER_ID_AT: Final = MAX_TIMESTAMP_AT + 8
PRODUCER_EPOCH_AT: Final = PRODUCER_ID_AT + 8
BASE_SEQUENCE_AT: Final = PRODUCER_EPOCH_AT + 2
RECORDS_COUNT_AT: Final = BASE_SEQUENCE_AT + 4
HEADER_SIZE: Final = RECORDS_COUNT_AT + 4
# Bytes before batch_length's count starts: a batch occupies LOG_OVERHEAD + batch_length bytes.
LOG_OVERHEAD: Final = BATCH_LENGTH_AT + 4
MAGIC: Final = 2

assert HEADER.size == HEADER_SIZE == 61, "batch header layout drifted"

_BASE_OFFSET: Final = struct.Struct(">q")
_LENGTH_PREFIX: Final = struct.Struct(">qi")

COMPRESSION_MASK: Final = 0x07
TIMESTAMP_TYPE_MASK: Final = 0x08
TRANSACTIONAL_MASK: Final = 0x10
CONTROL_MASK: Final = 0x20


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """A parsed batch header: what storage and the broker may look at."""

    base_offset: int
    batch_length: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    records_count: int

    @property
    def size(self) -> int:
        """Total bytes the batch occupies, header included."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK


def read_length_prefix(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Return ``(base_offset, total_size)`` of the batch at ``pos`` without validating it."""
    base_offset, batch_length = _LENGTH_PREFIX.unpack_from(buf, pos)
    return base_offset, LOG_OVERHEAD + batch_length


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the header at ``pos``; checks only that 61 bytes are present."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(f"truncated header: {len(buf) - pos} of {HEADER_SIZE} bytes")
    (base, length, _epoch, magic, crc, attrs, lod, base_ts, max_ts, _pid, _pe, _seq, count) = HEADER.unpack_from(
        buf, pos
    )
    return BatchHeader(base, length, magic, crc, attrs, lod, base_ts, max_ts, count)


def span_of_whole_batches(buf: bytes | bytearray | memoryview, min_offset: int = 0) -> tuple[int, int]:
    """``(records, next_offset)`` of the whole batches in ``buf``, reading headers only.

    ``records`` counts the records at or after ``min_offset``; ``next_offset`` is
    the offset after the last whole batch (``min_offset`` if there is none). A
    trailing partial batch (a fetch cut at ``max_bytes``) is not counted. Nothing
    is validated: this is for sizing and pipelining reads whose batches are
    checked when they are decoded.
    """
    records, next_offset, pos = 0, min_offset, 0
    while len(buf) - pos >= HEADER_SIZE:
        header = parse_header(buf, pos)
        if header.size < HEADER_SIZE or pos + header.size > len(buf):
            break
        records += max(0, header.next_offset - max(header.base_offset, min_offset))
        next_offset = max(next_offset, header.next_offset)
        pos += header.size
    return records, next_offset


def holds_records(buf: bytes | bytearray | memoryview) -> bool:
    """Whether a whole batch in ``buf`` holds a record (only a compacted log has empty batches).

    Reads the first header in the usual case: only a run of empty batches costs one header each.
    """
    pos = 0
    while len(buf) - pos >= HEADER_SIZE:
        header = parse_header(buf, pos)
        if header.records_count > 0:
            return True
        if header.size < HEADER_SIZE:
            return False
        pos += header.size
    return False


#: Batches below this are checksummed without releasing the GIL: releasing it costs more than the
#: CRC of a batch of a few hundred KiB (about 8 us), and lets the group-commit thread take the GIL
#: from the producer in the middle of its call (docs/benchmarks-notes.md, "The embedded ack tail").
GIL_RELEASE_BYTES: Final = 1 << 20


def compute_crc(batch: bytes | bytearray | memoryview) -> int:
    """CRC-32C over the bytes the batch CRC covers (hardware CRC of the ``crc32c`` package)."""
    size = len(batch)
    crc: int = crc32c.crc32c(memoryview(batch)[ATTRIBUTES_AT:], gil_release_mode=int(size >= GIL_RELEASE_BYTES))
    return crc


def check_batch(
    buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None, *, crc: bool = True
) -> BatchHeader:
    """Validate the batch that starts at ``pos`` and return its header.

    Checks, in order: the header is complete, ``batch_length`` is sane and the
    whole batch lies within ``[pos, end)``, magic is 2, counts are consistent,
    and the CRC-32C matches (``crc=False`` skips only that: for bytes this process
    checked already). Raises :class:`CorruptRecordError` naming the first failed
    check; never any other exception for any input bytes.
    """
    end = len(buf) if end is None else end
    available = end - pos
    if available < HEADER_SIZE:
        raise CorruptRecordError(f"truncated header: {available} of {HEADER_SIZE} bytes")
    header = parse_header(buf, pos)
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(f"batch_length {header.batch_length} is smaller than a header")
    if header.size > available:
        raise CorruptRecordError(f"truncated batch: {available} of {header.size} bytes")
    if header.magic != MAGIC:
        raise CorruptRecordError(f"unsupported magic {header.magic} (expected {MAGIC})")
    # An empty batch (no records) exists only in compacted logs: the cleaner writes one over a removed
    # range, or keeps an idempotent producer's last batch without its records (docs/adr/0006).
    if header.records_count < 0 or header.last_offset_delta < max(header.records_count - 1, 0):
        raise CorruptRecordError(
            f"inconsistent counts: records_count={header.records_count}, last_offset_delta={header.last_offset_delta}"
        )
    if not crc:
        return header
    actual = compute_crc(memoryview(buf)[pos : pos + header.size])
    if actual != header.crc:
        raise CorruptRecordError(f"CRC-32C mismatch: stored {header.crc:#010x}, computed {actual:#010x}")
    return header


_ATTRIBUTES: Final = struct.Struct(">h")
_TIMESTAMP: Final = struct.Struct(">q")
_CRC: Final = struct.Struct(">I")


def stamp_log_append_time(batch: bytearray | memoryview, now_ms: int) -> None:
    """Mark ``batch`` LogAppendTime, its max timestamp ``now_ms``, and recompute its CRC, in place.

    What Kafka's broker does for a topic with ``message.timestamp.type=LogAppendTime``: readers
    take ``max_timestamp`` as every record's timestamp. The records are not touched; the CRC
    pass is the only work that grows with the batch.
    """
    (attributes,) = _ATTRIBUTES.unpack_from(batch, ATTRIBUTES_AT)
    _ATTRIBUTES.pack_into(batch, ATTRIBUTES_AT, attributes | TIMESTAMP_TYPE_MASK)
    _TIMESTAMP.pack_into(batch, MAX_TIMESTAMP_AT, now_ms)
    _CRC.pack_into(batch, CRC_AT, compute_crc(batch))


def stamp_base_offset(batch: bytearray | memoryview, base_offset: int) -> None:
    """Write ``base_offset`` into a batch in place (the CRC does not cover it)."""
    _BASE_OFFSET.pack_into(batch, BASE_OFFSET_AT, base_offset)
