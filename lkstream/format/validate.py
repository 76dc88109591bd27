"""Full validation of record batches that come from outside (issue 12, findings 2 and 3).

:func:`~lkstream.format.batch.check_batch` checks a batch's frame: length, magic,
counts and CRC. That is enough for bytes LKSTREAM wrote itself, but a client can
send a batch with a correct CRC over wrong contents (a header that says 3 records
over 2, garbage records, compression code 7, ``records_count`` 2**31-1): it would
be appended, and every decoded read across it would then fail. So a batch from
outside (``Broker.produce_batch``: gRPC ``record_batch``, the Kafka listener) is
checked *completely* before it is appended, by :func:`validate_producer_batch`:

* attributes: compression 0-4, CreateTime, not transactional, not control, no unknown bits;
* counts: ``records_count >= 1`` and ``last_offset_delta == records_count - 1``;
* compression: the records section inflates, within ``max_decompressed_bytes`` and
  ``max_compression_ratio`` times its compressed size (:mod:`lkstream.format.compression`);
* every record (:func:`walk_records`): its length varint covers its body exactly,
  attributes 0, offsetDelta equal to its index, key/value/header lengths inside the
  record, header keys UTF-8, every varint in its shortest form within its width
  (5 bytes for int32 fields, 10 for the timestamp delta), no byte after the last record;
* timestamps: the largest ``base_timestamp + timestampDelta`` is ``max_timestamp``.

A batch that passes decodes with LKSTREAM's decoder (aiokafka's C codec) and with
Kafka's own, and its records carry the offsets and timestamps its header promises.
Batches the embedded producer encodes itself are trusted and skip the walk.

Readers use :func:`records_of` (bounded decompression, and the same walk) so a batch
already on disk that would not pass (written before this check existed) fails
cleanly as :class:`~lkstream.errors.CorruptRecordError`, without inflating past
``max_decompressed_bytes``.

Speed: the walk is a small C extension (``lkstream/format/_records.c``, about
10 ns per record); :func:`walk_records_py` is the same walk in Python, used when the
extension is not built and held to the same answers by a property test.
``benchmarks/micro/micro_validate.py`` measures both against the alternatives (aiokafka's
codec, numpy); docs/benchmarks-notes.md has the figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol

from lkstream.errors import CorruptRecordError, InvalidArgumentError, RecordTooLargeError
from lkstream.format.batch import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    HEADER_SIZE,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    check_batch,
)
from lkstream.format.compression import CompressionError, DecompressedTooLarge, decompress

MiB: Final = 1024 * 1024
#: Default bound of one batch's decompressed records section (``max_decompressed_bytes``).
DEFAULT_MAX_DECOMPRESSED_BYTES: Final = 64 * MiB
#: Default bound of decompressed / compressed size (``max_compression_ratio``).
DEFAULT_MAX_COMPRESSION_RATIO: Final = 256
#: Highest compression code (zstd); 5-7 are unassigned in Kafka.
MAX_CODEC: Final = 4
#: Attribute bits a producer batch may set: compression and the timestamp type.
_KNOWN_ATTRIBUTES: Final = COMPRESSION_MASK | TIMESTAMP_TYPE_MASK
#: ``last_offset_delta`` of a walk that requires offsetDelta N for record N (a producer's batch).
STRICT: Final = -1


@dataclass(frozen=True)
class Limits:
    """How far a batch may inflate: absolutely, and relative to its compressed size."""

    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
    max_compression_ratio: int = DEFAULT_MAX_COMPRESSION_RATIO


DEFAULT_LIMITS: Final = Limits()


# -- the record walk ---------------------------------------------------------------------------------


class _Cursor:
    """Reads one record's fields from ``data[pos:end]``; ``index`` names the record in errors."""

    __slots__ = ("data", "end", "index", "pos")

    def __init__(self, data: bytes, pos: int, end: int, index: int) -> None:
        self.data, self.pos, self.end, self.index = data, pos, end, index

    def fail(self, reason: str) -> ValueError:
        return ValueError(f"record {self.index}: {reason}")

    def varint(self, width: int, what: str) -> int:
        """A zigzag varint of at most ``width`` bytes, in its shortest form."""
        raw = shift = 0
        room = 0x0F if width == 5 else 0x01
        for i in range(width):
            if self.pos >= self.end:
                raise self.fail(f"{what} runs past the end of the record")
            byte = self.data[self.pos]
            self.pos += 1
            if i == width - 1 and byte > room:
                raise self.fail(f"{what} overflows its {width}-byte varint")
            raw |= (byte & 0x7F) << shift
            if byte < 0x80:
                if byte == 0 and i > 0:
                    raise self.fail(f"{what} is not in its shortest varint form")
                return (raw >> 1) ^ -(raw & 1)
            shift += 7
        raise self.fail(f"{what} is a varint longer than {width} bytes")

    def skip(self, minimum: int, what: str, utf8: bool = False) -> None:
        """A length-prefixed field: length >= ``minimum``, its bytes inside the record."""
        length = self.varint(5, what)
        if length < minimum:
            raise self.fail(f"{what} length {length} is negative")
        if length > self.end - self.pos:
            raise self.fail(f"{what} of {length} bytes runs past the end of the record")
        if utf8 and length > 0:
            try:
                self.data[self.pos : self.pos + length].decode("utf-8")
            except UnicodeDecodeError:
                raise self.fail(f"{what} is not UTF-8") from None
        self.pos += max(length, 0)


def _walk_record(
    data: bytes, pos: int, section_end: int, index: int, *, previous: int = -1, last_offset_delta: int = STRICT
) -> tuple[int, int, int]:
    """Check the record at ``pos``: ``(position after it, timestampDelta, offsetDelta)``.

    ``previous`` is the offsetDelta of the record before it (-1 for the first); see
    :func:`walk_records_py` for ``last_offset_delta``.
    """
    cursor = _Cursor(data, pos, section_end, index)
    length = cursor.varint(5, "length")
    if length < 6 or length > section_end - cursor.pos:
        raise cursor.fail(f"length {length} does not fit the {section_end - cursor.pos} bytes left")
    cursor.end = cursor.pos + length
    if data[cursor.pos] != 0:
        raise cursor.fail(f"attributes {data[cursor.pos]} are not 0")
    cursor.pos += 1
    delta = cursor.varint(10, "timestampDelta")
    offset_delta = cursor.varint(5, "offsetDelta")
    if last_offset_delta == STRICT:
        if offset_delta != index:
            raise cursor.fail(f"offsetDelta {offset_delta}, expected {index}")
    elif not previous < offset_delta <= last_offset_delta:
        raise cursor.fail(f"offsetDelta {offset_delta} is not in {previous + 1}..{last_offset_delta}")
    cursor.skip(-1, "key")
    cursor.skip(-1, "value")
    headers = cursor.varint(5, "headerCount")
    if headers < 0 or headers > (cursor.end - cursor.pos) // 2:
        raise cursor.fail(f"headerCount {headers} does not fit the record")
    for _ in range(headers):
        cursor.skip(0, "header key", utf8=True)
        cursor.skip(-1, "header value")
    if cursor.pos != cursor.end:
        raise cursor.fail(f"{cursor.end - cursor.pos} bytes left over inside the record")
    return cursor.pos, delta, offset_delta


_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


def walk_records_py(
    records: bytes | bytearray | memoryview, count: int, base_timestamp: int, last_offset_delta: int = STRICT
) -> int:
    """Check every record of an uncompressed records section; return the largest timestamp.

    With ``last_offset_delta`` :data:`STRICT` (a producer's batch) record N must have
    offsetDelta N. Otherwise (a batch read from a log, which the cleaner may have
    rewritten, docs/adr/0006) offsetDeltas must strictly increase within
    ``0..last_offset_delta``: the records of a cleaned batch keep their offsets.
    Raises ``ValueError("record N: reason")`` on the first problem. The reference
    for the C walk (``_records.walk``), which gives the same answers.
    """
    data = bytes(records)
    pos, newest, previous = 0, _INT64_MIN, -1
    for index in range(count):
        if pos >= len(data):
            raise ValueError(f"records_count is {count} but the batch holds {index} record(s)")
        pos, delta, previous = _walk_record(
            data, pos, len(data), index, previous=previous, last_offset_delta=last_offset_delta
        )
        timestamp = base_timestamp + delta
        if not _INT64_MIN <= timestamp <= _INT64_MAX:
            raise ValueError(f"record {index}: timestamp overflows")
        newest = max(newest, timestamp)
    if pos != len(data):
        raise ValueError(f"{len(data) - pos} bytes after the last of {count} record(s)")
    return newest


class Walk(Protocol):
    """The record walk's signature (:func:`walk_records_py` and ``_records.walk``)."""

    def __call__(
        self, records: bytes | bytearray | memoryview, count: int, base_timestamp: int, last_offset_delta: int = ..., /
    ) -> int: ...


def _native_walk() -> Walk | None:
    try:
        from lkstream.format import _records  # type: ignore[attr-defined]
    except ImportError:
        return None
    walk: Walk = _records.walk
    return walk


_NATIVE: Final = _native_walk()
#: Whether the C walk is built (``pip install`` compiles it; without a compiler the Python one runs).
NATIVE: Final = _NATIVE is not None
#: The record walk: C when built, else :func:`walk_records_py`.
walk_records: Final[Walk] = _NATIVE or walk_records_py


# -- batches -----------------------------------------------------------------------------------------


def _check_attributes(header: BatchHeader) -> str | None:
    """Why a producer may not send these attributes, or None."""
    attributes = header.attributes
    if attributes & (TRANSACTIONAL_MASK | CONTROL_MASK):
        return "control and transactional batches are not supported"
    if attributes & ~_KNOWN_ATTRIBUTES & 0xFFFF:
        return f"unknown attribute bits {attributes & ~_KNOWN_ATTRIBUTES & 0xFFFF:#06x}"
    if header.compression > MAX_CODEC:
        return f"unknown compression code {header.compression}"
    if attributes & TIMESTAMP_TYPE_MASK:
        return "the LogAppendTime timestamp type is set by brokers, not producers"
    return None


def records_of(batch: bytes | bytearray | memoryview, header: BatchHeader, limit: int) -> bytes | memoryview:
    """The uncompressed records section of a batch, inflated to at most ``limit`` bytes.

    Raises :class:`~lkstream.format.compression.CompressionError` or
    :class:`~lkstream.format.compression.DecompressedTooLarge` (plain ``ValueError``\\ s).
    """
    section = memoryview(batch)[HEADER_SIZE : header.size]
    if header.compression == 0:
        return section
    return decompress(header.compression, section, limit)


def check_records(batch: bytes | bytearray | memoryview, header: BatchHeader, limit: int) -> bytes | memoryview:
    """Inflate (within ``limit``) and walk the records of a CRC-checked batch; return the records section.

    For reads: a failure is :class:`~lkstream.errors.CorruptRecordError`. A batch read from a
    log may have been rewritten by the cleaner (docs/adr/0006): its records' offsetDeltas need
    only increase within ``last_offset_delta``, and an empty batch has no records section at all.
    """
    if header.records_count == 0:
        if header.size != HEADER_SIZE:
            raise CorruptRecordError(f"undecodable records: an empty batch holds {header.size - HEADER_SIZE} bytes")
        return b""
    try:
        records = records_of(batch, header, limit)
        newest = walk_records(records, header.records_count, header.base_timestamp, header.last_offset_delta)
    except (CompressionError, DecompressedTooLarge, ValueError) as exc:
        raise CorruptRecordError(f"undecodable records: {exc}") from None
    if not header.attributes & TIMESTAMP_TYPE_MASK and newest != header.max_timestamp:
        raise CorruptRecordError(
            f"undecodable records: the largest record timestamp is {newest}, the header says {header.max_timestamp}"
        )
    return records


def validate_producer_batch(
    batch: bytes | bytearray | memoryview, max_bytes: int, limits: Limits = DEFAULT_LIMITS
) -> BatchHeader:
    """Everything listed in the module docstring, for exactly one batch from a producer.

    Raises :class:`~lkstream.errors.RecordTooLargeError` above ``max_bytes`` and
    :class:`~lkstream.errors.InvalidArgumentError` naming the first problem otherwise;
    nothing else for any input bytes.
    """
    if len(batch) > max_bytes:
        raise RecordTooLargeError(len(batch), max_bytes, what="record batch")
    try:
        header = check_batch(batch)
    except CorruptRecordError as exc:
        raise _rejected(exc.reason) from None
    if header.size != len(batch):
        raise _rejected(f"{len(batch)} bytes given, header says {header.size}")
    if header.last_offset_delta != header.records_count - 1:
        # Gaps inside a batch exist only in compacted Kafka logs; accepting them from a
        # producer would let a batch claim offsets that no record holds.
        raise _rejected(
            f"last_offset_delta {header.last_offset_delta} does not match records_count {header.records_count}"
        )
    problem = _check_attributes(header)
    if problem is not None:
        raise _rejected(problem)
    compressed = header.size - HEADER_SIZE
    limit = min(limits.max_decompressed_bytes, limits.max_compression_ratio * compressed)
    try:
        records = records_of(batch, header, limit)
        newest = walk_records(records, header.records_count, header.base_timestamp)
    except DecompressedTooLarge:
        raise _rejected(
            f"the {compressed} compressed bytes inflate beyond {limit} bytes (max_decompressed_bytes="
            f"{limits.max_decompressed_bytes}, max_compression_ratio={limits.max_compression_ratio})"
        ) from None
    except ValueError as exc:  # CompressionError and the walk's reasons
        raise _rejected(str(exc)) from None
    if newest != header.max_timestamp:
        raise _rejected(f"max_timestamp is {header.max_timestamp} but the largest record timestamp is {newest}")
    return header


def _rejected(reason: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"rejected producer batch: {reason}")
