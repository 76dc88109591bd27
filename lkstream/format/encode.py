"""Encoding records into v2 record batches: one buffer sized once, the hardware CRC-32C.

The encoder is a small C extension (``lkstream/format/_encode.c``, built by setuptools
like ``_records.c``); :func:`encode_py`, :func:`encode_routed_py` and :func:`results_py`
are the same functions in Python, used when the extension is not built and held to the
same bytes by tests (and both to aiokafka's builder, whose output they reproduce byte for
byte: leader epoch -1, producer fields -1, timestamps relative to the first record,
the compressed records section kept whatever its size).

Why our own encoder (docs/benchmarks-notes.md, "The encoder"): aiokafka's builder appends record
by record into a buffer that grows by reallocation, makes a result object per record,
and computes the CRC-32C in software at 2.4 GB/s. Here the first pass sizes the batch
exactly, the second writes every record into it, no Python object is made per record,
and the CRC comes from the ``crc32c`` package (hardware, 33 GB/s).

* :func:`encode` -- one batch of ``(key, value[, headers])`` items (per-record
  ``headers`` and ``timestamps`` optional), CRC set, compressed when asked;
* :func:`encode_routed` -- one batch per partition for records routed by key
  (``routes[key] -> partition``, keys ``str``, ``bytes`` or ``None``), no headers;
* :func:`results` -- ``(partition, offset)`` per record, in call order, from the
  base offsets the broker stamped on each batch; :func:`offsets` the same for a call
  that went to one batch.

Keys and values may be ``None``, ``bytes``, ``str`` (UTF-8) or any bytes-like object;
header keys are ``str`` and header values ``None`` or bytes-like. Anything else raises
``TypeError`` naming the record.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Any, Final

from lkstream.format.batch import ATTRIBUTES_AT, BATCH_LENGTH_AT, CRC_AT, HEADER, HEADER_SIZE, MAGIC, compute_crc
from lkstream.format.varint import uvarint


def _compressor(compression: int) -> Callable[[Any], bytes]:
    """The codec of a compression code: the same functions, and levels, as aiokafka's builder.

    Imported on first use: importing aiokafka brings its whole client (about 17,000 objects the
    garbage collector walks in every full collection), which an uncompressed producer never needs.
    """
    from aiokafka import codec

    compressors: dict[int, Callable[[Any], bytes]] = {
        1: codec.gzip_encode,
        2: codec.snappy_encode,
        3: codec.lz4_encode,
        4: codec.zstd_encode,
    }
    return compressors[compression]


_INT32_MAX: Final = 2**31 - 1
_MAX_BATCH_BYTES: Final = _INT32_MAX + 12
_CRC: Final = struct.Struct(">I")
_LENGTH: Final = struct.Struct(">i")
_ATTRIBUTES: Final = struct.Struct(">h")
_SLOT: Final = struct.Struct("=I")
_COMPRESSION_BITS: Final = 0x07

Encoded = tuple[bytearray, int]  # a batch without its CRC, and its largest key + value in bytes
Routed = tuple[list[tuple[int, bytearray, int]], bytes]  # [(partition, batch, largest)], slots


# -- the Python reference ----------------------------------------------------------------------------


def _zigzag_varint(value: int) -> bytes:
    return uvarint((value << 1) ^ (value >> 63))


def _field(obj: object, what: str, index: int, *, bytes_only: bool = False) -> bytes | None:
    """A key or value (``bytes_only``: a header value) as bytes; the types ``_encode.c`` accepts."""
    if obj is None or isinstance(obj, bytes):
        return obj
    if not bytes_only:
        if isinstance(obj, str):
            return obj.encode()
        if isinstance(obj, bytearray):
            return bytes(obj)
        if isinstance(obj, memoryview):
            if not obj.c_contiguous:
                raise TypeError(f"record {index}: {what} is a memoryview that is not contiguous bytes")
            return obj.tobytes()
    kinds = "bytes or None" if bytes_only else "bytes, str or None"
    raise TypeError(f"record {index}: {what} must be {kinds}, not {type(obj).__name__}")


def _sized(data: bytes | None) -> bytes:
    if data is None:
        return _zigzag_varint(-1)
    return _zigzag_varint(len(data)) + data


def _parts(item: object, headers: Sequence[Any] | None, index: int) -> tuple[object, object, Sequence[Any]]:
    if type(item) not in (tuple, list) or len(item) not in (2, 3):  # type: ignore[arg-type]
        raise TypeError(f"record {index} must be a (key, value) or (key, value, headers) tuple")
    fields: Sequence[Any] = item  # type: ignore[assignment]
    own = headers[index] if headers is not None else (fields[2] if len(fields) == 3 else None)
    if own is None:
        own = ()
    if type(own) not in (tuple, list):
        raise TypeError(f"record {index}: headers must be a list of (str, bytes | None) pairs")
    return fields[0], fields[1], own


def _record(key: object, value: object, headers: Sequence[Any], deltas: tuple[int, int], index: int) -> bytes:
    """One record with its length prefix (``deltas``: timestamp and offset); checks sizes as the C encoder does."""
    ts_delta, offset_delta = deltas
    k, v = _field(key, "key", index), _field(value, "value", index)
    body = bytearray(b"\x00")
    body += _zigzag_varint(ts_delta) + _zigzag_varint(offset_delta) + _sized(k) + _sized(v)
    body += _zigzag_varint(len(headers))
    for h, pair in enumerate(headers):
        if not isinstance(pair, tuple) or len(pair) != 2 or not isinstance(pair[0], str):
            raise TypeError(f"record {index}: header {h} must be a (str, bytes | None) pair")
        body += _sized(pair[0].encode()) + _sized(_field(pair[1], "header value", index, bytes_only=True))
    if len(body) > _INT32_MAX:
        raise OverflowError(f"record {index} is 2 GiB or more")
    return _zigzag_varint(len(body)) + bytes(body)


def _largest(key: object, value: object) -> int:
    return sum(len(_field(x, "field", 0) or b"") for x in (key, value))


def _header(size: int, count: int, base_ts: int, max_ts: int) -> bytes:
    return HEADER.pack(0, size - 12, -1, MAGIC, 0, 0, count - 1, base_ts, max_ts, -1, -1, -1, count)


def encode_py(
    records: Sequence[Any], timestamp: int, timestamps: Sequence[int] | None, headers: Sequence[Any] | None
) -> Encoded:
    """The Python twin of ``_encode.encode``: ``(batch without CRC, largest key + value)``."""
    if type(records) not in (list, tuple):
        raise TypeError("records must be a list or tuple")
    count = len(records)
    if count == 0:
        raise ValueError("a batch needs at least one record")
    for what, given in (("timestamps", timestamps), ("headers", headers)):
        if given is not None and len(given) != count:
            raise ValueError(f"{what} must have one entry per record")
    if timestamps is not None and any(type(ts) is not int for ts in timestamps):
        raise TypeError("timestamps must be ints")
    base_ts = timestamp if timestamps is None else timestamps[0]
    max_ts = base_ts if timestamps is None else max(timestamps)
    body = bytearray()
    largest = 0
    for i, item in enumerate(records):
        key, value, own = _parts(item, headers, i)
        delta = 0 if timestamps is None else timestamps[i] - base_ts
        body += _record(key, value, own, (delta, i), i)
        largest = max(largest, _largest(key, value))
    if HEADER_SIZE + len(body) > _MAX_BATCH_BYTES:
        raise OverflowError("the records take 2 GiB or more: too large for one batch")
    return bytearray(_header(HEADER_SIZE + len(body), count, base_ts, max_ts)) + body, largest


def encode_routed_py(records: Sequence[Any], routes: dict[Any, int], partitions: int, timestamp: int) -> Routed:
    """The Python twin of ``_encode.encode_routed``."""
    if type(records) not in (list, tuple):
        raise TypeError("records must be a list or tuple")
    if not records:
        raise ValueError("a batch needs at least one record")
    bodies: dict[int, bytearray] = {}
    counts: dict[int, int] = {}
    largest: dict[int, int] = {}
    order: list[int] = []
    slots = bytearray()
    for i, item in enumerate(records):
        key, value, own = _parts(item, None, i)
        if own:
            raise TypeError(f"record {i} has headers: not routed here")
        if not (key is None or type(key) in (str, bytes)):
            raise TypeError(f"record {i}: key must be bytes, str or None, not {type(key).__name__}")
        pid = routes[key]
        if not 0 <= pid < partitions:
            raise ValueError(f"record {i}: route {pid} is not a partition below {partitions}")
        if pid not in bodies:
            bodies[pid], counts[pid], largest[pid] = bytearray(), 0, 0
            order.append(pid)
        bodies[pid] += _record(key, value, (), (0, counts[pid]), i)
        counts[pid] += 1
        largest[pid] = max(largest[pid], _largest(key, value))
        slots += _SLOT.pack(order.index(pid))
    batches = []
    for pid in order:
        size = HEADER_SIZE + len(bodies[pid])
        batches.append((pid, bytearray(_header(size, counts[pid], timestamp, timestamp)) + bodies[pid], largest[pid]))
    return batches, bytes(slots)


def results_py(slots: bytes, pids: list[int], bases: list[int]) -> list[tuple[int, int]]:
    """The Python twin of ``_encode.results``."""
    if len(bases) != len(pids):
        raise ValueError("one base offset per batch")
    nexts = list(bases)
    out = []
    for (slot,) in _SLOT.iter_unpack(slots):
        out.append((pids[slot], nexts[slot]))
        nexts[slot] += 1
    return out


def offsets_py(pid: int, base: int, count: int) -> list[tuple[int, int]]:
    """The Python twin of ``_encode.offsets``."""
    if count < 0:
        raise ValueError("count must not be negative")
    return list(zip(repeat(pid), range(base, base + count), strict=False))


# -- the native functions, when built -----------------------------------------------------------------


def _native() -> Any:
    try:
        from lkstream.format import _encode  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _encode


_NATIVE: Final = _native()
#: Whether the C encoder is built (``pip install`` compiles it; without a compiler the Python one runs).
NATIVE: Final = _NATIVE is not None
_encode_raw: Final[Callable[[Sequence[Any], int, Sequence[int] | None, Sequence[Any] | None], Encoded]] = (
    _NATIVE.encode if NATIVE else encode_py
)
_encode_routed_raw: Final[Callable[[Sequence[Any], dict[Any, int], int, int], Routed]] = (
    _NATIVE.encode_routed if NATIVE else encode_routed_py
)
#: ``[(pid, base), ..., (pid, base + count - 1)]``: the results of a call that went to one batch.
#: The C version's tuples are not tracked by the garbage collector (they hold two ints): their
#: allocation still counts towards a young collection, but no collection walks the thousands a
#: call returns.
offsets: Final[Callable[[int, int, int], list[tuple[int, int]]]] = _NATIVE.offsets if NATIVE else offsets_py
#: ``(partition, offset)`` per record from :func:`encode_routed`'s slots and each batch's base offset
#: (untracked tuples, as :data:`offsets`).
results: Final[Callable[[bytes, list[int], list[int]], list[tuple[int, int]]]] = (
    _NATIVE.results if NATIVE else results_py
)


# -- finishing: compression and the CRC ----------------------------------------------------------------


def finish(batch: bytearray, compression: int = 0) -> bytearray:
    """Compress the records section (with ``compression`` > 0) and set the CRC-32C; returns the batch.

    A compressed section is kept even when it came out larger, as aiokafka's C builder and
    Kafka's own producer do: the batch's codec is the one the caller asked for.
    """
    if compression:
        compressed = _compressor(compression)(bytes(batch[HEADER_SIZE:]))
        del batch[HEADER_SIZE:]
        batch += compressed
        _LENGTH.pack_into(batch, BATCH_LENGTH_AT, len(batch) - 12)
        _ATTRIBUTES.pack_into(batch, ATTRIBUTES_AT, compression)
    _CRC.pack_into(batch, CRC_AT, compute_crc(batch))
    return batch


#: Kafka's ``compression.gzip.level`` -1: zlib's own default level.
_ZLIB_DEFAULT_LEVEL: Final = 6


def recompress(
    batch: bytes | bytearray | memoryview, records: bytes | memoryview, compression: int, level: int | None = None
) -> bytearray:
    """``batch`` with its records section ``records`` (uncompressed) compressed by ``compression`` at ``level``.

    What Kafka's broker does when a topic's ``compression.type`` differs from the producer's codec:
    every header field (producer id, epoch, base sequence, timestamps, counts) is kept, the
    attributes get the new codec, and the length and CRC are set for the new bytes. ``level``
    None is the codec's default; gzip's -1 is zlib's default.
    """
    out = bytearray(memoryview(batch)[:HEADER_SIZE])
    if compression:
        codec = _compressor(compression)
        if level is None:
            out += codec(bytes(records))
        elif compression == 1:
            out += codec(bytes(records), _ZLIB_DEFAULT_LEVEL if level == -1 else level)  # type: ignore[call-arg]
        else:
            out += codec(bytes(records), level)  # type: ignore[call-arg]
    else:
        out += records
    (attributes,) = _ATTRIBUTES.unpack_from(out, ATTRIBUTES_AT)
    _ATTRIBUTES.pack_into(out, ATTRIBUTES_AT, (attributes & ~_COMPRESSION_BITS) | compression)
    _LENGTH.pack_into(out, BATCH_LENGTH_AT, len(out) - 12)
    _CRC.pack_into(out, CRC_AT, compute_crc(out))
    return out


def encode(
    records: Sequence[Any],
    timestamp: int,
    *,
    timestamps: Sequence[int] | None = None,
    headers: Sequence[Any] | None = None,
    compression: int = 0,
) -> Encoded:
    """One finished batch of ``records`` and its largest key + value in bytes (see the module docstring)."""
    batch, largest = _encode_raw(records, timestamp, timestamps, headers)
    return finish(batch, compression), largest


def encode_routed(
    records: Sequence[Any], routes: dict[Any, int], partitions: int, timestamp: int, compression: int = 0
) -> Routed:
    """One finished batch per partition ``routes[key]`` names, and each record's batch (see :func:`results`)."""
    batches, slots = _encode_routed_raw(records, routes, partitions, timestamp)
    return [(pid, finish(batch, compression), largest) for pid, batch, largest in batches], slots
