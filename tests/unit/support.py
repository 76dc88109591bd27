"""Helpers shared by the unit tests (plain functions, no fixtures)."""

from __future__ import annotations

from collections.abc import Sequence

from lkstream.format.batch import BatchHeader, check_batch, stamp_base_offset
from lkstream.format.codec import Compression, KeyValue, encode_batch

FIXED_TS = 1_700_000_000_000
DEADLINE_S = 10.0


def make_batch(
    records: Sequence[KeyValue] | int = 1,
    *,
    base_offset: int = 0,
    timestamp_ms: int = FIXED_TS,
    value_size: int = 10,
    compression: Compression = Compression.NONE,
) -> bytearray:
    """A valid v2 batch; ``records`` may be a count (values ``b"v{i}"`` padded to ``value_size``)."""
    if isinstance(records, int):
        records = [(f"k{i}".encode(), f"v{i}".encode().ljust(value_size, b".")) for i in range(records)]
    batch = encode_batch(records, timestamp_ms=timestamp_ms, compression=compression)
    stamp_base_offset(batch, base_offset)
    return batch


def stamped(records: Sequence[KeyValue] | int, base_offset: int, **kw: object) -> tuple[bytearray, BatchHeader]:
    """A batch stamped at ``base_offset`` with its validated header (what a Segment appends)."""
    batch = make_batch(records, base_offset=base_offset, **kw)  # type: ignore[arg-type]
    return batch, check_batch(batch)


def zigzag_varint(n: int) -> bytes:
    """Kafka's zigzag varint of ``n`` (shortest form)."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        byte = z & 0x7F
        z >>= 7
        if not z:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def spec_record(
    offset_delta: int,
    value: bytes | None = b"v",
    *,
    key: bytes | None = None,
    timestamp_delta: int = 0,
    headers: Sequence[tuple[bytes, bytes | None]] = (),
    attributes: int = 0,
) -> bytes:
    """One v2 record built field by field from the Kafka protocol guide."""
    body = bytearray([attributes])
    body += zigzag_varint(timestamp_delta) + zigzag_varint(offset_delta)
    body += zigzag_varint(-1) if key is None else zigzag_varint(len(key)) + key
    body += zigzag_varint(-1) if value is None else zigzag_varint(len(value)) + value
    body += zigzag_varint(len(headers))
    for hk, hv in headers:
        body += zigzag_varint(len(hk)) + hk
        body += zigzag_varint(-1) if hv is None else zigzag_varint(len(hv)) + hv
    return zigzag_varint(len(body)) + bytes(body)


def rewrite(
    batch: bytes | bytearray,
    *,
    records: bytes | None = None,
    records_count: int | None = None,
    last_offset_delta: int | None = None,
    attributes: int | None = None,
    base_timestamp: int | None = None,
    max_timestamp: int | None = None,
) -> bytearray:
    """``batch`` with header fields or the records section replaced; length and CRC recomputed.

    What a client that knows the format can send: every frame check passes.
    """
    import struct

    from lkstream.format import batch as B

    out = bytearray(batch[: B.HEADER_SIZE]) + (batch[B.HEADER_SIZE :] if records is None else records)
    for value, at, fmt in (
        (records_count, B.RECORDS_COUNT_AT, ">i"),
        (last_offset_delta, B.LAST_OFFSET_DELTA_AT, ">i"),
        (attributes, B.ATTRIBUTES_AT, ">h"),
        (base_timestamp, B.BASE_TIMESTAMP_AT, ">q"),
        (max_timestamp, B.MAX_TIMESTAMP_AT, ">q"),
    ):
        if value is not None:
            struct.pack_into(fmt, out, at, value)
    struct.pack_into(">i", out, B.BATCH_LENGTH_AT, len(out) - B.LOG_OVERHEAD)
    struct.pack_into(">I", out, B.CRC_AT, B.compute_crc(out))
    return out
