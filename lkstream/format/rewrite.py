"""Rewriting stored batches: what the log cleaner needs from the batch format (issue 24).

A cleaned batch (docs/adr/0006-offset-gaps-after-compaction.md) is the batch it came
from with some records left out. Everything that names offsets or a producer stays:
``base_offset``, ``last_offset_delta`` (so the last offset), ``partition_leader_epoch``,
the attributes, ``base_timestamp``, ``producer_id``, ``producer_epoch`` and
``base_sequence``. The kept records are copied byte for byte: their ``offsetDelta`` and
``timestampDelta`` are relative to the base offset and base timestamp, which do not
change, so a record keeps its offset and timestamp without being re-encoded. What
changes is ``records_count``, ``max_timestamp`` (the largest kept timestamp),
``batch_length`` and the CRC, and the records section is compressed again with the
batch's own codec.

An **empty batch** (``records_count`` 0, no records section) covers offsets that hold
no record: the cleaner writes one over every run of removed batches, so offsets stay
contiguous from batch to batch, and keeps an idempotent producer's last batch as one
when all its records went (its producer fields let the producer's sequence survive).

:func:`record_spans` is the record walk the cleaner uses (in C when
``_records.c`` is built; :func:`record_spans_py` is the reference).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Final

from lkstream.format.batch import (
    ATTRIBUTES_AT,
    BATCH_LENGTH_AT,
    COMPRESSION_MASK,
    CRC_AT,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    MAX_TIMESTAMP_AT,
    RECORDS_COUNT_AT,
    compute_crc,
)
from lkstream.format.encode import _compressor

#: ``(start, end, offset_delta, timestamp_delta, key, value_is_null)`` of one record of a records section.
RecordSpan = tuple[int, int, int, int, bytes | None, bool]
_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")
_ATTRIBUTES: Final = struct.Struct(">h")
_CRC: Final = struct.Struct(">I")
#: The most offsets one empty batch covers (``last_offset_delta`` is an int32).
MAX_EMPTY_SPAN: Final = 2**31


def _varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """A zigzag varint at ``pos``: ``(value, position after it)``; ValueError past the end."""
    raw = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError(f"a varint at byte {pos} runs past the end of the records")
        byte = data[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7


def record_spans_py(records: bytes | memoryview, count: int) -> list[RecordSpan]:
    """Where each record of a (walked) uncompressed records section lies, with its key and tombstone flag."""
    out: list[RecordSpan] = []
    pos = 0
    for index in range(count):
        start = pos
        length, pos = _varint(records, pos)
        end = pos + length
        if length < 6 or end > len(records):
            raise ValueError(f"record {index}: length {length} does not fit")
        timestamp_delta, pos = _varint(records, pos + 1)
        offset_delta, pos = _varint(records, pos)
        key_length, pos = _varint(records, pos)
        if key_length < -1 or pos + key_length > end:
            raise ValueError(f"record {index}: key length {key_length} does not fit")
        key = None if key_length < 0 else bytes(records[pos : pos + key_length])
        value_length, _ = _varint(records, pos + max(key_length, 0))
        out.append((start, end, offset_delta, timestamp_delta, key, value_length < 0))
        pos = end
    return out


def _native_spans() -> Callable[[bytes | memoryview, int], list[RecordSpan]] | None:
    try:
        from lkstream.format import _records  # type: ignore[attr-defined]
    except ImportError:
        return None
    spans: Callable[[bytes | memoryview, int], list[RecordSpan]] = _records.spans
    return spans


#: The record walk of the cleaner: C when built, else :func:`record_spans_py`.
record_spans: Final[Callable[[bytes | memoryview, int], list[RecordSpan]]] = _native_spans() or record_spans_py


def rebuild_batch(original: bytes | memoryview, kept: Sequence[bytes | memoryview], max_timestamp: int) -> bytes:
    """``original`` (a whole, checked batch) with only the ``kept`` records (their raw bytes, in order).

    See the module docstring for what stays and what changes. ``kept`` must not be empty
    (an emptied batch is an :func:`empty_batch`).
    """
    header = bytearray(original[:HEADER_SIZE])
    section = b"".join(kept)
    codec = header[ATTRIBUTES_AT + 1] & COMPRESSION_MASK
    if codec:
        section = _compressor(codec)(section)
    _I32.pack_into(header, RECORDS_COUNT_AT, len(kept))
    _I64.pack_into(header, MAX_TIMESTAMP_AT, max_timestamp)
    return _finish(header, section)


def empty_batch(
    base_offset: int,
    last_offset_delta: int,
    max_timestamp: int,
    *,
    attributes: int = 0,
    producer: tuple[int, int, int] = (-1, -1, -1),
    leader_epoch: int = -1,
) -> bytes:
    """A batch with no records over ``base_offset .. base_offset + last_offset_delta``.

    ``producer`` is ``(producer_id, epoch, base_sequence)`` of the batch it stands for
    (an idempotent producer's last batch), or none (-1s) for a run of removed batches.
    It is never compressed (there is nothing to compress); both timestamps are
    ``max_timestamp``, so time-based retention sees the time of what it replaces.
    """
    if not 0 <= last_offset_delta < MAX_EMPTY_SPAN:
        raise ValueError(f"an empty batch covers 1..{MAX_EMPTY_SPAN} offsets, not {last_offset_delta + 1}")
    header = bytearray(HEADER_SIZE)
    producer_id, epoch, sequence = producer
    HEADER.pack_into(
        header,
        0,
        base_offset,
        0,
        leader_epoch,
        MAGIC,
        0,
        attributes & ~COMPRESSION_MASK,
        last_offset_delta,
        max_timestamp,
        max_timestamp,
        producer_id,
        epoch,
        sequence,
        0,
    )
    return _finish(header, b"")


def _finish(header: bytearray, section: bytes) -> bytes:
    header += section
    _I32.pack_into(header, BATCH_LENGTH_AT, len(header) - 12)
    _CRC.pack_into(header, CRC_AT, compute_crc(header))
    return bytes(header)


def first_keyless_record(records: bytes | memoryview, count: int) -> int | None:
    """The index of the first record without a key in a (walked, inflated) records section, or None."""
    for index, span in enumerate(record_spans(records, count)):
        if span[4] is None:
            return index
    return None


def attributes_of(batch: bytes | memoryview) -> int:
    """The attributes field of the batch at the start of ``batch``."""
    value: int = _ATTRIBUTES.unpack_from(batch, ATTRIBUTES_AT)[0]
    return value
