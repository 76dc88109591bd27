"""Hand-written codecs for the hot paths: Produce requests, Produce and Fetch responses.

``kio`` copies a Produce request's records into new ``bytes`` and encodes
responses in pure Python (hundreds of microseconds for a 1 MB Fetch); these
functions slice records as ``bytearray`` straight out of the frame (the broker
stamps offsets into them in place) and build responses with ``struct`` and one
``join``. They cover the versions the listener offers (Produce 3-12, Fetch
4-12), classic and flexible; tests check them byte for byte against ``kio``.

Layouts (Kafka's ``ProduceRequest.json``, ``ProduceResponse.json``, ``FetchResponse.json``)::

    ProduceRequest v3-8:  transactional_id string?, acks int16, timeout_ms int32,
                          [topic string, [partition int32, records bytes?]]
    ProduceResponse v3-8: [topic string, [partition int32, error_code int16, base_offset int64,
                          log_append_time_ms int64, log_start_offset int64 (v5+),
                          record_errors [] + error_message string? (v8+)]], throttle_time_ms int32
    FetchResponse v4-11:  throttle_time_ms int32, error_code int16 (v7+), session_id int32 (v7+),
                          [topic string, [partition int32, error_code int16, high_watermark int64,
                          last_stable_offset int64, log_start_offset int64 (v5+), aborted_transactions []?,
                          preferred_read_replica int32 (v11+), records bytes?]]

Flexible versions (Produce v9+, Fetch v12+) have the same fields; strings, arrays and bytes carry
an unsigned-varint length + 1 (0: null) and every struct ends with a tagged-field section (always
empty here). Request headers are handled in :mod:`lkstream.kafka.protocol`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from lkstream.format.varint import uvarint
from lkstream.kafka.protocol import FrameError, read_uvarint, skip_tagged_fields

_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_ACKS_TIMEOUT: Final = struct.Struct(">hi")
_PRODUCE_PART_V3: Final = struct.Struct(">ihqq")  # partition, error, base_offset, log_append_time
_PRODUCE_PART_V5: Final = struct.Struct(">ihqqq")  # ... + log_start_offset
_FETCH_PART_V4: Final = struct.Struct(">ihqq")  # partition, error, hwm, lso
_FETCH_PART_V5: Final = struct.Struct(">ihqqq")  # ... + log_start
_NULL_COMPACT: Final = b"\x00"  # a null compact string, array or bytes (length + 1 = 0)
_NO_TAGS: Final = b"\x00"  # an empty tagged-field section
#: The first flexible versions (compact encodings, tagged fields): Kafka's schema facts.
FIRST_FLEXIBLE_PRODUCE: Final = 9
FIRST_FLEXIBLE_FETCH: Final = 12
_NO_RECORDS: Final = _I32.pack(-1)
#: Records below this size are copied in with the fields around them; larger ones are sent as they are.
_INLINE_RECORDS_BYTES: Final = 64 * 1024

#: A response body as pieces to write one after the other (their concatenation is the body).
ResponseChunks = list[bytes | bytearray | memoryview]
#: What a handler answers: the body, in one piece or in chunks; None for no answer (Produce acks=0).
ResponseBody = bytes | ResponseChunks | None


@dataclass(slots=True)
class ProducePartition:
    partition: int
    records: bytearray | None


@dataclass(slots=True)
class ProduceRequestData:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: list[tuple[str, list[ProducePartition]]]


class _Cursor:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int) -> None:
        self.buf = memoryview(buf)
        self.pos = pos

    def take(self, size: int) -> memoryview:
        end = self.pos + size
        if size < 0 or end > len(self.buf):
            raise FrameError(f"produce request cut short at byte {self.pos} (needs {size} more)")
        chunk = self.buf[self.pos : end]
        self.pos = end
        return chunk

    def int16(self) -> int:
        value: int = _I16.unpack(self.take(2))[0]
        return value

    def int32(self) -> int:
        value: int = _I32.unpack(self.take(4))[0]
        return value

    def string(self, *, nullable: bool = False) -> str | None:
        size = self.int16()
        if size == -1 and nullable:
            return None
        return bytes(self.take(size)).decode("utf-8", "replace")

    def array_length(self) -> int:
        return self._checked_count(self.int32())

    def uvarint(self) -> int:
        pos = self.pos
        if pos < len(self.buf) and self.buf[pos] < 0x80:  # one byte: every length below 127
            self.pos = pos + 1
            return int(self.buf[pos])
        value, self.pos = read_uvarint(self.buf, pos)
        return value

    def compact_string(self, *, nullable: bool = False) -> str | None:
        size = self.uvarint() - 1
        if size == -1 and nullable:
            return None
        return bytes(self.take(size)).decode("utf-8", "replace")

    def compact_array_length(self) -> int:
        return self._checked_count(self.uvarint() - 1)

    def skip_tagged_fields(self) -> None:
        self.pos = skip_tagged_fields(self.buf, self.pos)

    def _checked_count(self, count: int) -> int:
        if count < 0 or count > len(self.buf) - self.pos:  # every element takes at least a byte
            raise FrameError(f"produce request: bad array length {count}")
        return count


def parse_produce_request(
    frame: bytes | bytearray | memoryview, offset: int, *, flexible: bool = False
) -> ProduceRequestData:
    """Parse a Produce body (v3-8, or v9+ with ``flexible``) at ``offset``; records are copied once,
    into a ``bytearray``."""
    cursor = _Cursor(frame, offset)
    if not flexible:
        return _parse_produce(cursor)
    transactional_id = cursor.compact_string(nullable=True)
    acks, timeout_ms = _ACKS_TIMEOUT.unpack(cursor.take(_ACKS_TIMEOUT.size))
    topics = []
    for _ in range(cursor.compact_array_length()):
        name = cursor.compact_string() or ""
        partitions = []
        for _ in range(cursor.compact_array_length()):
            partition = cursor.int32()
            size = cursor.uvarint() - 1
            records = None if size == -1 else bytearray(cursor.take(size))
            cursor.skip_tagged_fields()
            partitions.append(ProducePartition(partition, records))
        cursor.skip_tagged_fields()
        topics.append((name, partitions))
    cursor.skip_tagged_fields()
    return ProduceRequestData(transactional_id, acks, timeout_ms, topics)


def _parse_produce(cursor: _Cursor) -> ProduceRequestData:
    transactional_id = cursor.string(nullable=True)
    acks, timeout_ms = _ACKS_TIMEOUT.unpack(cursor.take(_ACKS_TIMEOUT.size))
    topics = []
    for _ in range(cursor.array_length()):
        name = cursor.string() or ""
        partitions = []
        for _ in range(cursor.array_length()):
            partition = cursor.int32()
            size = cursor.int32()
            records = None if size == -1 else bytearray(cursor.take(size))
            partitions.append(ProducePartition(partition, records))
        topics.append((name, partitions))
    return ProduceRequestData(transactional_id, acks, timeout_ms, topics)


@dataclass(slots=True)
class ProducePartitionResult:
    partition: int
    error_code: int
    base_offset: int
    log_start_offset: int
    error_message: str | None = None
    log_append_time_ms: int = -1  # the broker's stamp on a LogAppendTime topic's batch


def _string(value: str) -> bytes:
    raw = value.encode()
    return _I16.pack(len(raw)) + raw


def _nullable_string(value: str | None) -> bytes:
    return _I16.pack(-1) if value is None else _string(value)


class _Layout:
    """Kafka's two encodings of lengths: int16/int32 (classic) or unsigned varint of length + 1
    (flexible versions, which also end every struct with a tagged-field section, empty here)."""

    __slots__ = ("flexible",)

    def __init__(self, flexible: bool) -> None:
        self.flexible = flexible

    def string(self, value: str) -> bytes:
        if not self.flexible:
            return _string(value)
        raw = value.encode()
        return uvarint(len(raw) + 1) + raw

    def nullable_string(self, value: str | None) -> bytes:
        if value is None:
            return _NULL_COMPACT if self.flexible else _I16.pack(-1)
        return self.string(value)

    def array(self, count: int) -> bytes:
        return uvarint(count + 1) if self.flexible else _I32.pack(count)

    def null_array(self) -> bytes:
        return _NULL_COMPACT if self.flexible else _I32.pack(-1)

    def bytes_length(self, size: int) -> bytes:
        return uvarint(size + 1) if self.flexible else _I32.pack(size)

    def null_bytes(self) -> bytes:
        return _NULL_COMPACT if self.flexible else _NO_RECORDS

    def tags(self) -> bytes:
        return _NO_TAGS if self.flexible else b""


def encode_produce_response(version: int, topics: list[tuple[str, list[ProducePartitionResult]]]) -> bytes:
    """A Produce v3-12 response body (throttle time 0; log append time -1 but for LogAppendTime topics)."""
    layout = _Layout(version >= FIRST_FLEXIBLE_PRODUCE)
    parts = [layout.array(len(topics))]
    for name, partitions in topics:
        parts.append(layout.string(name))
        parts.append(layout.array(len(partitions)))
        for p in partitions:
            if version >= 5:
                parts.append(
                    _PRODUCE_PART_V5.pack(
                        p.partition, p.error_code, p.base_offset, p.log_append_time_ms, p.log_start_offset
                    )
                )
            else:
                parts.append(_PRODUCE_PART_V3.pack(p.partition, p.error_code, p.base_offset, p.log_append_time_ms))
            if version >= 8:
                parts.append(layout.array(0))  # record_errors: none (a batch is accepted or refused whole)
                parts.append(layout.nullable_string(p.error_message))
            parts.append(layout.tags())
        parts.append(layout.tags())
    parts.append(_I32.pack(0))
    parts.append(layout.tags())
    return b"".join(parts)


@dataclass(slots=True)
class FetchPartitionResult:
    partition: int
    error_code: int
    high_watermark: int
    log_start_offset: int
    records: bytes | None


def encode_fetch_response(
    version: int, topics: list[tuple[str, list[FetchPartitionResult]]], *, error_code: int = 0, session_id: int = 0
) -> bytes:
    """A Fetch v4-12 response body. Last stable offset = high watermark (no transactions)."""
    return b"".join(fetch_response_chunks(version, topics, error_code=error_code, session_id=session_id))


def fetch_response_chunks(
    version: int, topics: list[tuple[str, list[FetchPartitionResult]]], *, error_code: int = 0, session_id: int = 0
) -> ResponseChunks:
    """:func:`encode_fetch_response` as chunks whose concatenation is the body: the records of each
    partition stay the objects read from the log (megabytes), never copied into one buffer; the
    small fields between them are joined."""
    layout = _Layout(version >= FIRST_FLEXIBLE_FETCH)
    chunks: ResponseChunks = []
    parts = [_I32.pack(0)]
    if version >= 7:
        parts.append(struct.pack(">hi", error_code, session_id))
    parts.append(layout.array(len(topics)))
    for name, partitions in topics:
        parts.append(layout.string(name))
        parts.append(layout.array(len(partitions)))
        for p in partitions:
            hwm = p.high_watermark
            if version >= 5:
                parts.append(_FETCH_PART_V5.pack(p.partition, p.error_code, hwm, hwm, p.log_start_offset))
            else:
                parts.append(_FETCH_PART_V4.pack(p.partition, p.error_code, hwm, hwm))
            parts.append(layout.null_array())  # aborted transactions: none (no transactions)
            if version >= 11:
                parts.append(_I32.pack(-1))  # preferred read replica: none (one node)
            if p.records is None:
                parts.append(layout.null_bytes())
            else:
                parts.append(layout.bytes_length(len(p.records)))
                if len(p.records) < _INLINE_RECORDS_BYTES:
                    parts.append(p.records)
                else:
                    chunks.append(b"".join(parts))
                    chunks.append(p.records)
                    parts = []
            parts.append(layout.tags())
        parts.append(layout.tags())
    parts.append(layout.tags())
    chunks.append(b"".join(parts))
    return chunks
