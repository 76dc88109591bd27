"""Batch validation micro-benchmark (issue 12, finding 2): the cost of checking every record.

No broker, no disk: batches of about 1 MB in memory (5,000 records of about 200 B, the Kafka
listener's target shape), in two layouts: ``fixed`` (every value 200 B) and ``variable``
(values of 100-300 B, as JSON payloads are). Per layout, nanoseconds per record of:

``native``          ``lkstream.format.validate.validate_producer_batch`` with the C record walk
                    (lkstream/format/_records.c): what the broker runs;
``python_walk``     the same validation with :func:`walk_records_py` (the fallback when the
                    extension is not built);
``aiokafka_walk``   aiokafka's C codec iterating the records (``for r in DefaultRecordBatch``):
                    framing and bounds only, no offset, timestamp, attribute or varint-width checks;
``aiokafka_checks`` the same plus the offset and timestamp checks done in Python per record;
``numpy``           the vectorised decoder of ``lkstream.spark.arrow`` finding record starts and
                    decoding the varint fields (needs the ``spark`` extra): fast only while records
                    have one size, it falls back to a Python walk otherwise;
``gzip_native``     validating the same records gzip-compressed (bounded inflate plus walk).

The target: at most ~0.2 us per record amortised (1M msg/s of 200 B records on this machine).

    python -m benchmarks.micro.micro_validate [--quick] [--runs N]
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatch

from benchmarks._common import base_parser, emit, log, machine_facts, summary
from lkstream.format.batch import HEADER_SIZE, parse_header
from lkstream.format.codec import Compression, encode_batch
from lkstream.format.validate import NATIVE, Limits, validate_producer_batch, walk_records_py

RECORDS = 5_000
TARGET_NS = 200.0
LIMITS = Limits(max_decompressed_bytes=64 << 20, max_compression_ratio=256)


def _batch(rng: random.Random, variable: bool, compression: Compression = Compression.NONE) -> bytes:
    values = [rng.randbytes(rng.randrange(100, 301) if variable else 200) for _ in range(RECORDS)]
    return bytes(encode_batch([(None, v) for v in values], timestamp_ms=1_700_000_000_000, compression=compression))


def native(batch: bytes) -> None:
    validate_producer_batch(batch, len(batch), LIMITS)


def python_walk(batch: bytes) -> None:
    header = parse_header(batch)
    walk_records_py(memoryview(batch)[HEADER_SIZE:], header.records_count, header.base_timestamp)


def aiokafka_walk(batch: bytes) -> None:
    for _ in DefaultRecordBatch(batch):
        pass


def aiokafka_checks(batch: bytes) -> None:
    decoded = DefaultRecordBatch(batch)
    base, first_ts, newest = decoded.base_offset, decoded.first_timestamp, -1
    for expected, record in enumerate(decoded):
        if record.offset != base + expected:
            raise ValueError("offset")
        ts = record.timestamp
        if ts < first_ts - 2**40:
            raise ValueError("timestamp")
        newest = max(newest, ts)
    if newest != decoded.max_timestamp:
        raise ValueError("max timestamp")


def _numpy() -> Callable[[bytes], None] | None:
    try:
        import numpy as np

        from lkstream.spark.arrow import _record_starts, _Varints
    except ImportError:
        return None

    def walk(batch: bytes) -> None:
        header = parse_header(batch)
        buf = np.frombuffer(batch, dtype=np.uint8)
        starts = _record_starts(batch, buf, header.records_count)
        v = _Varints(buf)
        _, n = v.at(starts)
        pos = starts + n + 1
        for _field in range(2):  # timestampDelta, offsetDelta
            _, n = v.at(pos)
            pos = pos + n
        for _field in range(2):  # key, value
            length, n = v.at(pos)
            pos = pos + n + np.maximum(length, 0)

    return walk


def _ns_per_record(check: Callable[[bytes], None], batches: list[bytes]) -> float:
    started = time.perf_counter()
    for batch in batches:
        check(batch)
    return (time.perf_counter() - started) / (len(batches) * RECORDS) * 1e9


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    args = parser.parse_args()
    count = 4 if args.quick else 20
    rng = random.Random(args.seed)
    layouts = {name: [_batch(rng, name == "variable") for _ in range(count)] for name in ("fixed", "variable")}
    gzipped = [_batch(rng, True, Compression.GZIP) for _ in range(count)]
    checks: dict[str, Callable[[bytes], None] | None] = {
        "native": native if NATIVE else None,
        "python_walk": python_walk,
        "aiokafka_walk": aiokafka_walk,
        "aiokafka_checks": aiokafka_checks,
        "numpy": _numpy(),
    }
    raw: dict[str, list[float]] = {}
    for run in range(args.runs):
        figures: dict[str, float] = {}
        for layout, batches in layouts.items():
            for name, check in checks.items():
                if check is not None:
                    figures[f"{layout}_{name}_ns_per_record"] = _ns_per_record(check, batches)
        if NATIVE:
            figures["variable_gzip_native_ns_per_record"] = _ns_per_record(native, gzipped)
        for key, value in figures.items():
            raw.setdefault(key, []).append(value)
        log(f"run {run + 1}: " + ", ".join(f"{k}={v:,.0f}" for k, v in figures.items()))
    results: dict[str, Any] = {k: summary(v, 1) for k, v in raw.items()}
    payload = {
        "settings": {
            "records_per_batch": RECORDS,
            "batch_bytes": {k: len(v[0]) for k, v in layouts.items()},
            "batches": count,
            "native_built": NATIVE,
            "target_ns_per_record": TARGET_NS,
        },
        "results": results,
        "meets_target": {k: v["median"] <= TARGET_NS for k, v in results.items()},
    }
    emit("micro_validate", args, payload, machine_facts(os.getcwd()))


if __name__ == "__main__":
    main()
