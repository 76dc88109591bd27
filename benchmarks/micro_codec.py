"""Codec micro-benchmarks: the evidence behind the suggestions in docs/benchmarks.md.

No broker, no disk: one process, batches in memory, fixed payloads.

``crc``          CRC-32C of a 4 MiB buffer: aiokafka's bundled ``crc32c_cython`` (what
                 ``DefaultRecordBatchBuilder.build()`` uses) versus the ``crc32c`` package
                 (what ``lkstream.format.batch.check_batch`` uses).
``encode``       ``encode_batch`` of 1,000 x 200 B and 1,000 x 4 KiB, split into the appends
                 and ``build()`` (header + CRC); and ``frame_batch`` (below), a prototype that
                 frames records in Python and uses the hardware CRC (byte-identical output).
``decode``       decoding 1,000 batches of 1,000 x 200 B, under Python's default GC thresholds
                 and under ``gc.set_threshold(100_000, 20, 100)``:
                 ``current``      ``lkstream.format.codec.decode_batches`` as it is;
                 ``empty_tuple``  the same, with a record's empty ``headers`` list replaced by
                                  ``()`` (the Record stays a NamedTuple);
                 ``plain_tuple``  exact ``tuple`` records with ``()`` headers (which the GC
                                  untracks: a NamedTuple, being a tuple *subclass*, never is);
                 ``first_only``   decode only up to the first record at or past the target
                                  offset (what ``read_from(offset, max_msgs=1)`` needs).
                 Records are kept alive batch by batch, as a consumer loop does.

    .venv/bin/python benchmarks/micro_codec.py [--quick] [--runs N]
"""

from __future__ import annotations

import gc
import os
import random
import struct
import time
from collections.abc import Callable
from typing import Any

import crc32c
from _common import MiB, base_parser, emit, log, machine_facts, summary
from aiokafka.record._crecords import cutil
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from lkstream.format.codec import Record, decode_batches, encode_batch, iter_batches

TUNED_GC = (100_000, 20, 100)
Decoder = Callable[[bytes, str, int, int], list[Any]]
_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC = struct.Struct(">I")


def _zigzag_varint(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if not n:
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)


_DELTAS = [_zigzag_varint(i) for i in range(4096)]
_NULL = _zigzag_varint(-1)
_VARINTS: dict[int, bytes] = {}


def _varint(n: int) -> bytes:
    v = _VARINTS.get(n)
    if v is None:
        v = _VARINTS[n] = _zigzag_varint(n)
    return v


def frame_batch(records: list[tuple[bytes | None, bytes]], timestamp_ms: int) -> bytearray:
    """A v2 batch like ``encode_batch`` (no headers, no compression, one timestamp), built with a
    Python loop over the records and a hardware CRC-32C (``crc32c``) instead of aiokafka's
    ``build()``. Byte-identical to ``encode_batch`` except the leader epoch (-1 here, 0 there),
    which the CRC does not cover. A prototype for the suggestion in docs/benchmarks.md."""
    parts: list[bytes] = [bytes(61)]
    add = parts.append
    for delta, (key, value) in enumerate(records):
        d = _DELTAS[delta] if delta < 4096 else _zigzag_varint(delta)
        k = _NULL if key is None else _varint(len(key)) + key
        v = _varint(len(value))
        add(_varint(3 + len(d) + len(k) + len(v) + len(value)))
        add(b"\0\0")  # attributes, timestamp delta 0
        add(d)
        add(k)
        add(v)
        add(value)
        add(b"\0")  # no headers
    buf = bytearray().join(parts)  # one allocation, no second copy
    n = len(records)
    _HEADER.pack_into(buf, 0, 0, len(buf) - 12, -1, 2, 0, 0, n - 1, timestamp_ms, timestamp_ms, -1, -1, -1, n)
    _CRC.pack_into(buf, 17, crc32c.crc32c(memoryview(buf)[21:]))
    return buf


def bench(fn: Callable[[], object], repeat: int) -> float:
    """Seconds per call (best-effort steady state: one warm-up call first)."""
    fn()
    started = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - started) / repeat


def crc_figures(repeat: int) -> dict[str, float]:
    data = random.Random(1).randbytes(4 * MiB)
    aiokafka_s = bench(lambda: cutil.crc32c_cython(data), repeat)
    package_s = bench(lambda: crc32c.crc32c(data), repeat)
    return {"aiokafka_GB_per_s": len(data) / aiokafka_s / 1e9, "crc32c_pkg_GB_per_s": len(data) / package_s / 1e9}


def encode_figures(repeat: int) -> dict[str, float]:
    out = {}
    rng = random.Random(2)
    for label, size in (("200B", 200), ("4KiB", 4096)):
        values = [rng.randbytes(size) for _ in range(1000)]

        def appends(values: list[bytes] = values) -> DefaultRecordBatchBuilder:
            builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 2**31 - 1)
            for i, v in enumerate(values):
                builder.append(i, 1_700_000_000_000, None, v, [])
            return builder

        pairs = [(None, v) for v in values]
        append_s = bench(appends, repeat)
        total_s = bench(lambda a=appends: a().build(), repeat)
        out[f"{label}_appends_ms"] = append_s * 1e3
        out[f"{label}_build_ms"] = (total_s - append_s) * 1e3
        out[f"{label}_encode_batch_ms"] = bench(lambda p=pairs: encode_batch(p, timestamp_ms=1), repeat) * 1e3
        out[f"{label}_frame_batch_ms"] = bench(lambda p=pairs: frame_batch(p, 1), repeat) * 1e3
        if bytes(frame_batch(pairs, 1))[16:] != bytes(encode_batch(pairs, timestamp_ms=1))[16:]:
            raise SystemExit("frame_batch is not byte-identical to encode_batch")
    return out


# -- decode variants -------------------------------------------------------------------------------


def _batches(data: bytes) -> list[bytes]:
    """The CRC-checked batches, exactly as ``decode_batches`` gets them."""
    return [batch for _, batch in iter_batches(data)]


def decode_empty_tuple(data: bytes, topic: str, partition: int, min_offset: int) -> list[Any]:
    new = tuple.__new__
    out: list[Any] = []
    for batch in _batches(data):
        decoded = DefaultRecordBatch(batch)
        ts_type = decoded.timestamp_type
        out.extend(
            new(Record, (topic, partition, r.offset, r.timestamp, r.key, r.value, r.headers or (), ts_type))
            for r in decoded
        )
    return out


def decode_plain_tuple(data: bytes, topic: str, partition: int, min_offset: int) -> list[Any]:
    out: list[Any] = []
    for batch in _batches(data):
        decoded = DefaultRecordBatch(batch)
        ts_type = decoded.timestamp_type
        out.extend((topic, partition, r.offset, r.timestamp, r.key, r.value, r.headers or (), ts_type) for r in decoded)
    return out


def decode_first_only(data: bytes, topic: str, partition: int, min_offset: int) -> list[Any]:
    decoded = DefaultRecordBatch(_batches(data)[0])
    for r in decoded:
        if r.offset >= min_offset:
            return [Record(topic, partition, r.offset, r.timestamp, r.key, r.value, r.headers, decoded.timestamp_type)]
    return []


DECODERS: dict[str, Decoder] = {
    "current": decode_batches,
    "empty_tuple": decode_empty_tuple,
    "plain_tuple": decode_plain_tuple,
}


def decode_figures(batches: list[bytes]) -> dict[str, float]:
    out = {}
    total = 1000 * len(batches)
    for tuned in (False, True):
        before = gc.get_threshold()
        if tuned:
            gc.set_threshold(*TUNED_GC)
        try:
            for name, decoder in DECODERS.items():
                started = time.perf_counter()
                for batch in batches:
                    records = decoder(batch, "t", 0, 0)
                    if len(records) != 1000:
                        raise SystemExit(f"{name}: {len(records)} records")
                seconds = time.perf_counter() - started
                out[f"{name}{'+gc_tuned' if tuned else ''}_msg_per_s"] = total / seconds
            # read_from(offset, max_msgs=1) on one batch: decode everything vs stop early
            offsets = [random.Random(3).randrange(1000) for _ in range(len(batches))]
            for name, decoder in (("one_record_current", decode_batches), ("one_record_first_only", decode_first_only)):
                lat = []
                for batch, off in zip(batches, offsets, strict=True):
                    started = time.perf_counter()
                    decoder(bytes(batch), "t", 0, off)[:1]
                    lat.append(time.perf_counter() - started)
                lat.sort()
                suffix = "+gc_tuned" if tuned else ""
                out[f"{name}{suffix}_p50_us"] = lat[len(lat) // 2] * 1e6
                out[f"{name}{suffix}_p99_us"] = lat[int(len(lat) * 0.99)] * 1e6
        finally:
            gc.set_threshold(*before)
    return out


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    args = parser.parse_args()
    n_batches = 100 if args.quick else 1000
    repeat = 5 if args.quick else 50
    rng = random.Random(args.seed)
    log(f"encoding {n_batches} batches")
    batches = [
        bytes(encode_batch([(None, rng.randbytes(200)) for _ in range(1000)], timestamp_ms=1)) for _ in range(n_batches)
    ]
    raw: dict[str, list[float]] = {}
    for run in range(args.runs):
        figures = {**crc_figures(repeat), **encode_figures(repeat), **decode_figures(batches)}
        for key, value in figures.items():
            raw.setdefault(key, []).append(value)
        log(f"run {run + 1}: " + ", ".join(f"{k}={v:,.2f}" for k, v in figures.items()))
    payload = {
        "settings": {"batches": n_batches, "records_per_batch": 1000, "value_bytes": 200, "tuned_gc": TUNED_GC},
        "results": {k: summary(v) for k, v in raw.items()},
    }
    emit("micro_codec", args, payload, machine_facts(os.getcwd()))


if __name__ == "__main__":
    main()
