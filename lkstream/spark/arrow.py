"""Decode v2 record batches straight into PyArrow columns of Spark's Kafka schema.

Three decoders produce identical columns:

* :func:`scan` and the fill at :meth:`ArrowBuilder.flush` use the C extension
  ``lkstream.format._arrow_decode`` for *uncompressed* batches: one walk per batch
  when it is added (rows and key/value bytes), one pass writing every column of a
  chunk into buffers allocated once, without the GIL. The default when it is built.
* :func:`decode_fast` walks an *uncompressed* batch with numpy: it finds the
  record starts (vectorised when records have a constant size, which is the
  common case of one producer writing fixed-layout values; a short Python loop
  otherwise), then decodes every varint field of all records at once and
  gathers keys and values into Arrow's contiguous binary buffers. No Python
  object is made per record. Used when the C extension is not built.
* :func:`decode_simple` uses the C codec (:func:`lkstream.format.codec.decode_batch`)
  and builds the columns from its records. It handles everything: compressed
  batches, and batches with headers when ``includeHeaders`` is on.

:class:`ArrowBuilder` collects the columns of many batches and emits one
``pyarrow.RecordBatch`` per chunk; :data:`SCHEMA` is the Spark schema and
:func:`arrow_schema` the Arrow schema Spark expects for it.

Record layout (inside the batch, after the 61-byte header), all varints zigzag::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
    | keyLength varint | key | valueLength varint | value | headerCount varint | headers
"""

from __future__ import annotations

import itertools
from typing import Any, Final, NamedTuple

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

from lkstream.errors import CorruptRecordError
from lkstream.format.batch import HEADER_SIZE, TIMESTAMP_TYPE_MASK, parse_header
from lkstream.format.codec import decode_batch
from lkstream.spark._native import native

# Spark's Kafka source schema, column by column (DDL, so this module needs no SparkSession).
SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
)
HEADERS_DDL = "headers array<struct<key: string, value: binary>>"

_HEADER_TYPE = pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())])))
_I64 = np.int64


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema PySpark derives from the Spark schema (it checks equality)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", _HEADER_TYPE))
    return pa.schema(fields)


def spark_ddl(include_headers: bool) -> str:
    return SCHEMA_DDL + (", " + HEADERS_DDL if include_headers else "")


class _Varints:
    """Vectorised zigzag varint decoding at many positions of one byte buffer."""

    def __init__(self, buf: np.ndarray[Any, Any]) -> None:
        self.buf = buf
        self.size = len(buf)

    def at(self, pos: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """``(values, encoded lengths)`` of the varints starting at ``pos``."""
        if len(pos) and (int(pos.max()) >= self.size or int(pos.min()) < 0):
            raise CorruptRecordError("record field runs past the end of the batch")
        byte = self.buf[pos].astype(_I64)
        raw = byte & 0x7F
        length = np.ones(len(pos), dtype=_I64)
        more = byte >= 0x80
        shift = 7
        while more.any():
            if shift > 63:
                raise CorruptRecordError("varint longer than 10 bytes")
            idx = np.nonzero(more)[0]
            at = pos[idx] + length[idx]
            if int(at.max()) >= self.size:
                raise CorruptRecordError("varint runs past the end of the batch")
            byte = self.buf[at].astype(_I64)
            raw[idx] |= (byte & 0x7F) << shift
            length[idx] += 1
            more[idx] = byte >= 0x80
            shift += 7
        value = (raw >> 1) ^ -(raw & 1)
        return value, length


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """One zigzag varint: ``(value, position after it)``."""
    raw = shift = 0
    while True:
        if pos >= len(data):
            raise CorruptRecordError("varint runs past the end of the batch")
        byte = data[pos]
        raw |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7


def _record_starts(data: bytes, buf: np.ndarray[Any, Any], count: int) -> np.ndarray[Any, Any]:
    """Positions of the ``count`` records of an uncompressed batch.

    Guesses that the next records have the size of the current one and checks
    the guess for all of them at once (their length prefixes must be the same
    bytes); a run ends where the size changes (e.g. at offsetDelta 64, where that
    varint grows by a byte). Many short runs mean variable sizes: the rest is
    walked one record at a time.
    """
    runs: list[np.ndarray[Any, Any]] = []
    pos, done, short_runs = HEADER_SIZE, 0, 0
    end = len(data)
    while done < count:
        length, body = _read_varint(data, pos)
        stride = body - pos + length
        if stride <= 0:
            raise CorruptRecordError(f"record length {length} at byte {pos}")
        if short_runs >= 4:
            return np.concatenate([*runs, _walk(data, pos, count - done)])
        todo = min(count - done, (end - pos) // stride)
        if todo <= 0:
            raise CorruptRecordError("record runs past the end of the batch")
        cand = pos + stride * np.arange(todo, dtype=_I64)
        same = np.ones(todo, dtype=bool)
        for j in range(body - pos):
            same &= buf[cand + j] == buf[pos + j]
        run = todo if same.all() else int(np.argmin(same))
        runs.append(cand[:run])
        short_runs = short_runs + 1 if run < 8 else 0
        done += run
        pos += run * stride
    return np.concatenate(runs) if len(runs) != 1 else runs[0]


def _walk(data: bytes, pos: int, count: int) -> np.ndarray[Any, Any]:
    starts = np.empty(count, dtype=_I64)
    for i in range(count):
        starts[i] = pos
        length, pos = _read_varint(data, pos)
        pos += length
    return starts


class Columns:
    """Per-batch column pieces, kept as numpy arrays until :meth:`ArrowBuilder.flush`."""

    __slots__ = ("headers", "key", "offset", "timestamp", "ts_type", "value")

    def __init__(
        self,
        *,
        key: pa.Array | RawBinary,
        value: pa.Array | RawBinary,
        offset: np.ndarray[Any, Any],
        timestamp: np.ndarray[Any, Any],
        ts_type: int,
        headers: pa.Array | None,
    ) -> None:
        self.key = key
        self.value = value
        self.offset = offset
        self.timestamp = timestamp
        self.ts_type = ts_type
        self.headers = headers


class RawBinary(NamedTuple):
    """A binary column not yet copied out of its batch: ``buf[start:start+length]`` per row (length < 0: null)."""

    buf: np.ndarray[Any, Any]
    starts: np.ndarray[Any, Any]
    lengths: np.ndarray[Any, Any]


def _binary(pieces: list[RawBinary]) -> pa.Array:
    """One Arrow binary array of the rows of ``pieces``, in order, with one copy of the bytes."""
    lengths = pieces[0].lengths if len(pieces) == 1 else np.concatenate([p.lengths for p in pieces])
    n = len(lengths)
    valid = lengths >= 0
    lens = np.where(valid, lengths, 0)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lens, out=offsets[1:])
    data = np.empty(int(offsets[-1]), dtype=np.uint8)
    row = 0
    for piece in pieces:
        rows = len(piece.starts)
        lo, hi = int(offsets[row]), int(offsets[row + rows])
        if hi > lo:
            _gather(piece.buf, piece.starts, lens[row : row + rows], data[lo:hi])
        row += rows
    nulls = n - int(valid.sum())
    validity = None if nulls == 0 else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(
        pa.binary(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls
    )


def _gather(
    buf: np.ndarray[Any, Any], starts: np.ndarray[Any, Any], lens: np.ndarray[Any, Any], out: np.ndarray[Any, Any]
) -> None:
    """Write ``buf[start:start+len]`` of every row one after another into ``out``.

    Rows whose fields have one size at one stride (fixed-layout records; the
    stride changes only where a varint before the field grows) are copied as 2-D
    strided blocks, one per run; anything irregular takes a fancy-index gather.
    """
    n = len(starts)
    if n > 1:
        step = np.diff(starts)
        breaks = np.nonzero((step[1:] != step[:-1]) | (lens[1:-1] != lens[:-2]))[0] + 1
        if len(breaks) * 16 < n and int(step.min()) > 0:
            bounds = [0, *breaks.tolist(), n - 1, n]
            first, at_out = 0, 0
            for edge in bounds[1:]:
                if edge <= first:
                    continue
                rows = edge - first
                width = int(lens[first])
                stride = int(step[first]) if first < n - 1 else 0
                if rows > 1 and int(lens[first:edge].max()) != width:
                    break  # not one width after all: fall back below
                block = np.lib.stride_tricks.as_strided(
                    buf[int(starts[first]) :], shape=(rows, width), strides=(max(stride, 0), 1)
                )
                out[at_out : at_out + rows * width].reshape(rows, width)[:] = block
                at_out += rows * width
                first = edge
            else:
                return
    begins = np.zeros(n, dtype=_I64)
    np.cumsum(lens[:-1], out=begins[1:])
    index = np.repeat(starts - begins, lens) + np.arange(len(out), dtype=_I64)
    np.take(buf, index, out=out)


def decode_fast(batch: bytes, start: int, end: int, include_headers: bool) -> Columns | None:
    """Columns of the records with ``start <= offset < end``; None when this batch needs :func:`decode_simple`.

    The batch must have passed :func:`~lkstream.format.batch.check_batch` (fetch
    and the storage reader both check it), so its size and count are trusted.
    """
    header = parse_header(batch)
    if header.compression or header.records_count == 0:  # an empty batch of a compacted log: decode_simple
        return None
    buf = np.frombuffer(batch, dtype=np.uint8)
    starts = _record_starts(batch, buf, header.records_count)
    v = _Varints(buf)
    _, n = v.at(starts)
    pos = starts + n + 1  # skip the attributes byte
    ts_delta, n = v.at(pos)
    pos += n
    off_delta, n = v.at(pos)
    pos += n
    key_len, n = v.at(pos)
    key_at = pos + n
    pos = key_at + np.maximum(key_len, 0)
    value_len, n = v.at(pos)
    value_at = pos + n
    if include_headers:
        header_count, _ = v.at(value_at + np.maximum(value_len, 0))
        if header_count.any():
            return None
    offsets = header.base_offset + off_delta
    keep: slice | np.ndarray[Any, Any] = slice(None)
    if int(offsets[0]) < start or int(offsets[-1]) >= end:
        keep = (offsets >= start) & (offsets < end)
    log_append = bool(header.attributes & TIMESTAMP_TYPE_MASK)
    if log_append:
        timestamps = np.full(len(offsets), header.max_timestamp, dtype=_I64)
    else:
        timestamps = header.base_timestamp + ts_delta
    return Columns(
        key=RawBinary(buf, key_at[keep], key_len[keep]),
        value=RawBinary(buf, value_at[keep], value_len[keep]),
        offset=offsets[keep],
        timestamp=timestamps[keep],
        ts_type=1 if log_append else 0,
        headers=None,
    )


def decode_simple(batch: bytes, topic: str, partition: int, start: int, end: int, *, include_headers: bool) -> Columns:
    """Columns of the records with ``start <= offset < end``, decoded by the C codec."""
    records = [r for r in decode_batch(batch, topic, partition, start) if r.offset < end]
    headers = None
    if include_headers:
        headers = pa.array(
            [[{"key": k, "value": hv} for k, hv in r.headers] if r.headers else None for r in records],
            type=_HEADER_TYPE,
        )
    return Columns(
        key=pa.array([r.key for r in records], type=pa.binary()),
        value=pa.array([r.value for r in records], type=pa.binary()),
        offset=np.fromiter((r.offset for r in records), dtype=_I64, count=len(records)),
        timestamp=np.fromiter((r.timestamp for r in records), dtype=_I64, count=len(records)),
        ts_type=records[0].timestamp_type if records else 0,
        headers=headers,
    )


class Scanned(NamedTuple):
    """An uncompressed batch the C decoder walked once (:func:`scan`), to be filled at flush."""

    batch: bytes
    start: int
    end: int
    rows: int
    key_bytes: int
    value_bytes: int
    ts_type: int


_NATIVE: Final = native("_arrow_decode")
#: Whether the C decoder (lkstream.format._arrow_decode) is in use.
NATIVE: Final = _NATIVE is not None


def scan(batch: bytes, start: int, end: int, include_headers: bool) -> Scanned | None:
    """The C decoder's first pass over ``batch``; None when it must be decoded otherwise
    (compressed, or records with headers while the headers column is wanted)."""
    header = parse_header(batch)
    if _NATIVE is None or header.compression:
        return None
    try:
        rows, key_bytes, value_bytes, with_headers = _NATIVE.scan(batch, start, end)
    except ValueError as exc:
        raise CorruptRecordError(str(exc)) from None
    if include_headers and with_headers:
        return None
    ts_type = 1 if header.attributes & TIMESTAMP_TYPE_MASK else 0
    return Scanned(batch, start, end, rows, key_bytes, value_bytes, ts_type)


def _binary_of(parts: tuple[Any, Any, Any, int], rows: int) -> pa.Array:
    offsets, data, validity, nulls = parts
    buffers = [None if validity is None else pa.py_buffer(validity), pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.binary(), rows, buffers, null_count=nulls)


def _filled(pieces: list[Scanned]) -> list[pa.Array]:
    """key, value, offset, timestamp (us) and timestampType of ``pieces``, written by the C decoder in one pass."""
    assert _NATIVE is not None
    rows = sum(p.rows for p in pieces)
    try:
        key, value, offsets, stamps = _NATIVE.fill(
            [(p.batch, p.start, p.end) for p in pieces],
            rows,
            sum(p.key_bytes for p in pieces),
            sum(p.value_bytes for p in pieces),
        )
    except ValueError as exc:
        raise CorruptRecordError(str(exc)) from None
    ts_type = np.concatenate([np.full(p.rows, p.ts_type, dtype=np.int32) for p in pieces])
    return [
        _binary_of(key, rows),
        _binary_of(value, rows),
        pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(offsets)]),
        pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), rows, [None, pa.py_buffer(stamps)]),
        pa.array(ts_type),
    ]


def _decoded(pieces: list[Columns]) -> list[pa.Array]:
    """key, value, offset, timestamp (us) and timestampType of pieces decoded in Python."""
    ts_type = np.concatenate([np.full(len(p.offset), p.ts_type, dtype=np.int32) for p in pieces])
    return [
        _concat([p.key for p in pieces]),
        _concat([p.value for p in pieces]),
        pa.array(np.concatenate([p.offset for p in pieces])),
        pa.array(np.concatenate([p.timestamp for p in pieces]) * 1000, type=pa.timestamp("us", tz="UTC")),
        pa.array(ts_type),
    ]


class ArrowBuilder:
    """Collects decoded batches of one topic-partition and emits ``pyarrow.RecordBatch`` chunks.

    Uncompressed batches go to the C decoder (:func:`scan` when added, one fill of all
    of them at :meth:`flush`); the rest, and every batch when ``fast`` is off or the
    extension is missing, to the numpy decoder or the record codec."""

    def __init__(self, topic: str, partition: int, include_headers: bool, *, fast: bool = True) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.fast = fast
        self.schema = arrow_schema(include_headers)
        self._pieces: list[Columns | Scanned] = []
        self.rows = 0

    def add(self, batch: bytes, start: int, end: int) -> None:
        scanned = scan(batch, start, end, self.include_headers) if self.fast else None
        if scanned is not None:
            if scanned.rows:
                self._pieces.append(scanned)
                self.rows += scanned.rows
            return
        cols = decode_fast(batch, start, end, self.include_headers) if self.fast else None
        if cols is None:
            cols = decode_simple(batch, self.topic, self.partition, start, end, include_headers=self.include_headers)
        if len(cols.offset):
            self._pieces.append(cols)
            self.rows += len(cols.offset)

    def flush(self) -> pa.RecordBatch | None:
        """The collected rows as one RecordBatch (None when empty); starts a new chunk."""
        pieces, self._pieces = self._pieces, []
        n, self.rows = self.rows, 0
        if not n:
            return None
        topic = self.topic.encode()
        topic_offsets = np.arange(0, (n + 1) * len(topic), len(topic) or 1, dtype=np.int32)[: n + 1]
        if not topic:
            topic_offsets = np.zeros(n + 1, dtype=np.int32)
        topic_col = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(topic_offsets), pa.py_buffer(topic * n)])
        # Consecutive pieces of one kind are decoded together; kinds mix only when batches differ.
        runs = [list(run) for _, run in itertools.groupby(pieces, key=type)]
        parts = [_filled(run) if isinstance(run[0], Scanned) else _decoded(run) for run in runs]  # type: ignore[arg-type]
        key, value, offset, timestamp, ts_type = (
            part[0] if len(parts) == 1 else pa.concat_arrays(list(part)) for part in zip(*parts, strict=True)
        )
        arrays = [
            key,
            value,
            topic_col,
            pa.array(np.full(n, self.partition, dtype=np.int32)),
            offset,
            timestamp,
            ts_type,
        ]
        if self.include_headers:
            arrays.append(
                _concat(
                    [
                        p.headers
                        if isinstance(p, Columns) and p.headers is not None
                        else pa.nulls(p.rows if isinstance(p, Scanned) else len(p.offset), type=_HEADER_TYPE)
                        for p in pieces
                    ]
                )
            )
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def _concat(arrays: list[pa.Array | RawBinary]) -> pa.Array:
    raw = [a for a in arrays if isinstance(a, RawBinary)]
    if len(raw) == len(arrays):
        return _binary(raw)  # one copy of all the bytes, straight into the output buffer
    done = [_binary([a]) if isinstance(a, RawBinary) else a for a in arrays]
    return done[0] if len(done) == 1 else pa.concat_arrays(done)
