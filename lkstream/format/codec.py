"""Client-side encoding and decoding of record batches.

Only clients (producers, consumers, the Spark source, the CLI's dump) build or
read individual records; the broker and storage move whole batches. Encoding runs
in LKSTREAM's own C encoder (:mod:`lkstream.format.encode`), decoding in aiokafka's
C extension, so no Python loop runs per record on the way in.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterator, Sequence
from enum import IntEnum
from typing import Final, NamedTuple

from lkstream.errors import CorruptRecordError, InvalidArgumentError
from lkstream.format.batch import (
    ATTRIBUTES_AT,
    COMPRESSION_MASK,
    HEADER_SIZE,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    check_batch,
    parse_header,
    read_length_prefix,
)
from lkstream.format.encode import encode
from lkstream.format.validate import DEFAULT_MAX_DECOMPRESSED_BYTES, check_records

Headers = Sequence[tuple[str, bytes | None]]
KeyValue = tuple[bytes | None, bytes | None]

_BASE_AND_DELTA: Final = struct.Struct(">q15xi")  # base_offset, then last_offset_delta at byte 23
# Offset, timestamp, topic and partition references of one decoded Record, roughly.
_RECORD_FIXED_BYTES: Final = 64
#: How many bytes of records one :func:`decode_batches` call decodes at most (plus one batch).
DEFAULT_MAX_DECODED_BYTES: Final = 64 * 1024 * 1024


class Compression(IntEnum):
    """Batch compression codecs (attribute bits 0-2), as in Kafka."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def parse(cls, value: str | int | Compression | None) -> Compression:
        """Accept a codec name (``"zstd"``), number or member; ``None`` means no compression."""
        if value is None:
            return cls.NONE
        if isinstance(value, str):
            try:
                return cls[value.upper()]
            except KeyError:
                names = ", ".join(m.name.lower() for m in cls)
                raise InvalidArgumentError(f"unknown compression {value!r}; use one of {names}") from None
        try:
            return cls(value)
        except ValueError:
            raise InvalidArgumentError(f"unknown compression code {value!r}") from None


class Record(NamedTuple):
    """One consumed record. ``timestamp`` is milliseconds since the epoch."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]]
    timestamp_type: int = 0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def encode_batch(
    records: Sequence[KeyValue],
    *,
    headers: Sequence[Headers] | None = None,
    timestamps: Sequence[int] | None = None,
    compression: Compression = Compression.NONE,
    timestamp_ms: int | None = None,
) -> bytearray:
    """Build one v2 record batch from ``(key, value)`` pairs (:mod:`lkstream.format.encode`).

    Offsets inside the batch are deltas 0..n-1; the broker stamps the base.
    ``headers`` and ``timestamps``, when given, are per record and as long as
    ``records``; otherwise every record gets no headers and ``timestamp_ms``
    (default: now). Keys and values are ``bytes``, ``str`` (UTF-8) or ``None``.
    """
    if not records:
        raise InvalidArgumentError("a batch needs at least one record")
    if headers is not None and len(headers) != len(records):
        raise InvalidArgumentError("headers must have one entry per record")
    if timestamps is not None and len(timestamps) != len(records):
        raise InvalidArgumentError("timestamps must have one entry per record")
    ts = now_ms() if timestamp_ms is None else timestamp_ms
    try:
        batch, _ = encode(records, ts, timestamps=timestamps, headers=headers, compression=int(compression))
    except (TypeError, OverflowError) as exc:
        raise InvalidArgumentError(f"records cannot be encoded: {exc}") from exc
    return batch


def decode_batch(
    batch: bytes,
    topic: str,
    partition: int,
    min_offset: int = 0,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> list[Record]:
    """Decode one CRC-checked batch into records with offset >= ``min_offset``.

    The records are inflated (at most ``max_decompressed_bytes``) and walked by
    :func:`lkstream.format.validate.check_records` first, so a batch that does not hold
    what its header says (one written before produce-time validation existed, or a
    compression bomb) raises :class:`CorruptRecordError` instead of being handed out
    in part, or inflated without bound.
    """
    out: list[Record] = []
    _decode(batch, topic, partition, min_offset, out, max_decompressed_bytes=max_decompressed_bytes)
    return out


def _decode(
    batch: bytes | memoryview,
    topic: str,
    partition: int,
    min_offset: int,
    out: list[Record],
    *,
    max_decompressed_bytes: int,
    limit: int = -1,
) -> int:
    """:func:`decode_batch` into ``out`` (at most ``limit`` records, -1: all); returns about how
    many bytes the records take in memory."""
    header = parse_header(batch)
    section = check_records(batch, header, max_decompressed_bytes)
    size = len(section) + header.records_count * _RECORD_FIXED_BYTES
    if _decode_native is not None:
        ts_type = 1 if header.attributes & TIMESTAMP_TYPE_MASK else 0
        fixed = header.max_timestamp if ts_type else None
        try:
            _decode_native(
                section,
                header.records_count,
                header.base_offset,
                header.base_timestamp,
                fixed,
                ts_type,
                topic,
                partition,
                min_offset,
                limit,
                Record,
                out,
            )
        except ValueError as exc:
            raise CorruptRecordError(f"undecodable records: {exc}") from exc
        return size
    records = _decode_with_aiokafka(
        bytes(batch), header, section, topic=topic, partition=partition, min_offset=min_offset
    )
    out.extend(records if limit < 0 else records[:limit])
    return size


def _decode_with_aiokafka(
    batch: bytes, header: BatchHeader, section: bytes | memoryview, *, topic: str, partition: int, min_offset: int
) -> list[Record]:
    """The decoder used when ``_decode.c`` is not built (and the reference its tests compare with)."""
    from aiokafka.record.default_records import DefaultRecordBatch  # only without the C decoder: ~17,000 objects

    if header.compression:
        # The C codec inflates without a bound: hand it the records we inflated, as a plain batch.
        plain = bytearray(batch[:HEADER_SIZE])
        struct.pack_into(">h", plain, ATTRIBUTES_AT, header.attributes & ~COMPRESSION_MASK)
        plain += section
        batch = bytes(plain)
    decoded = DefaultRecordBatch(batch)
    ts_type = decoded.timestamp_type
    new = tuple.__new__  # skips NamedTuple's Python-level __new__: ~25% faster per record
    try:
        # Headers become tuples (``()`` when empty), as the C decoder makes them.
        records = [
            new(
                Record,
                (
                    topic,
                    partition,
                    r.offset,
                    r.timestamp,
                    r.key,
                    r.value,
                    tuple(r.headers) if r.headers else (),
                    ts_type,
                ),
            )
            for r in decoded
        ]
    except Exception as exc:  # the C codec raises assorted errors on malformed records
        raise CorruptRecordError(f"undecodable records: {exc}") from exc
    if records and records[0].offset < min_offset:
        records = [r for r in records if r.offset >= min_offset]
    return records


def _native_decoder() -> Callable[..., int] | None:
    try:
        from lkstream.format import _decode as native  # type: ignore[attr-defined]
    except ImportError:
        return None
    decode: Callable[..., int] = native.decode
    return decode


_decode_native: Final = _native_decoder()
#: Whether the C record decoder is built (without it, aiokafka's decoder runs; records then stay GC-tracked).
NATIVE_DECODE: Final = _decode_native is not None


def iter_batches(data: bytes | bytearray | memoryview) -> Iterator[tuple[int, bytes]]:
    """Yield ``(position, batch_bytes)`` for each whole, CRC-valid batch in ``data``.

    A trailing partial batch (a fetch cut at ``max_bytes``) is skipped, as Kafka
    consumers do; a complete batch that fails validation raises
    :class:`CorruptRecordError` when it is reached (the batches before it were yielded).
    """
    for pos, view in _whole_batches(data):
        yield pos, bytes(view)


def decode_batches(
    data: bytes | bytearray | memoryview,
    topic: str,
    partition: int,
    min_offset: int = 0,
    max_records: int | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_DECODED_BYTES,
    crc_checked: bool = False,
) -> list[Record]:
    """Decode the whole batches in ``data`` (concatenated, as stored), at most ``max_records`` records.

    Stops decoding once ``max_records`` are reached, so asking for one record
    costs one batch, not a whole fetch; and after the batch that brings the decoded
    records to ``max_bytes``, so the output stays bounded whatever ``data`` holds
    (compressed batches inflate: 16 MiB of them could otherwise decode to gigabytes).
    Callers continue from the offset after the last record returned.

    A damaged batch never hides the good records before it (issue 12, finding 2):
    decoding stops there and returns what came before; the next read, which starts
    at the damaged batch, raises :class:`CorruptRecordError` naming it.

    ``crc_checked`` says this process checked the batches' CRCs already (an embedded
    broker's reads: from disk, or from the hot tail it checked at append); every other
    check still runs.
    """
    return decode_batches_through(
        data, topic, partition, min_offset, max_records, max_bytes=max_bytes, crc_checked=crc_checked
    )[0]


def decode_batches_through(
    data: bytes | bytearray | memoryview,
    topic: str,
    partition: int,
    min_offset: int = 0,
    max_records: int | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_DECODED_BYTES,
    crc_checked: bool = False,
) -> tuple[list[Record], int]:
    """:func:`decode_batches`, and the offset a reader continues from.

    That offset is past the last record returned and, when a batch was decoded whole, past
    its last offset too: a batch of a compacted log may end with offsets that hold no record
    any more, or hold none at all (docs/adr/0006), and a reader that continued from its last
    record would read it again. ``min_offset`` when nothing was decoded.
    """
    out: list[Record] = []
    decoded, after = 0, min_offset
    try:
        for _, batch in _whole_batches(data, crc=not crc_checked):
            limit = -1 if max_records is None else max_records - len(out)
            before = len(out)
            decoded += _decode(
                batch,
                topic,
                partition,
                min_offset,
                out,
                max_decompressed_bytes=DEFAULT_MAX_DECOMPRESSED_BYTES,
                limit=limit,
            )
            if limit >= 0 and len(out) - before == limit and _next_offset(batch) - 1 > out[-1].offset:
                after = max(after, out[-1].offset + 1)  # cut inside the batch: more records may follow
                break
            after = max(after, _next_offset(batch))
            if (max_records is not None and len(out) >= max_records) or decoded >= max_bytes:
                break
    except CorruptRecordError:
        if not out:
            raise
    return out, after


def read_records(
    fetch: Callable[[int], tuple[bytes, int]],
    topic: str,
    partition: int,
    offset: int,
    max_records: int | None = None,
) -> tuple[list[Record], int]:
    """Records from ``offset`` on, read again past batches that hold none; and where to continue.

    ``fetch(offset) -> (whole batches, high watermark)`` is one read of the log. A compacted
    log (docs/adr/0006) may answer a read with batches that hold no record at or after
    ``offset``: this reads on from their end, so the records come back empty only at the
    high watermark. Every reader of the embedded broker, the remote client and the daemon's
    record APIs goes through it.
    """
    while True:
        data, high = fetch(offset)
        records, after = decode_batches_through(data, topic, partition, offset, max_records)
        if records or not data or after <= offset or after >= high:
            return records, max(after, offset)
        offset = after


def _next_offset(batch: bytes | memoryview) -> int:
    base, delta = _BASE_AND_DELTA.unpack_from(batch, 0)
    return int(base) + int(delta) + 1


def _whole_batches(data: bytes | bytearray | memoryview, *, crc: bool = True) -> Iterator[tuple[int, memoryview]]:
    """``(position, view)`` of each whole, checked batch in ``data``, without copying it."""
    view = memoryview(data)
    pos, end = 0, len(view)
    while end - pos >= 12:
        _, size = read_length_prefix(view, pos)
        if size > end - pos:
            return
        check_batch(view, pos, pos + size, crc=crc)
        yield pos, view[pos : pos + size]
        pos += size
