"""Idempotent-producer state micro-benchmark: what a partition's producer table costs per batch.

No daemon, no network: one process. What is timed is what the log does for every batch that
carries a producer id, under its lock (issue 28, finding 7 made it time-based):

``table_1``         ``check`` + ``record`` for one producer appending in sequence
``table_1000``      the same for 1,000 producers taking turns (each one known, none expired)
``append_1000``     ``PartitionLog.append`` of a one-record idempotent batch, 1,000 producers in
                    turn: the whole append (CRC, stamp, write into the page cache), the table included

It runs against whatever ``lkstream`` is on the path, so the same file measures two trees side by
side: ``PYTHONPATH=<tree> python -m benchmarks.micro.micro_producer_state``. Memory per producer state
is measured with ``tracemalloc`` (``--states`` producers, one and five batches each).

    .venv/bin/python -m benchmarks.micro.micro_producer_state [--quick] [--runs N] [--states N]
"""

from __future__ import annotations

import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatchBuilder

from benchmarks._common import base_parser, emit, log, machine_facts, summary
from lkstream.storage.log import PartitionLog
from lkstream.storage.producers import ProducerFields, ProducerStateTable

PRODUCERS = 1_000


def batch(producer_id: int, sequence: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=sequence,
        batch_size=1 << 16,
    )
    builder.append(0, timestamp=1_700_000_000_000, key=b"k", value=b"v" * 100, headers=[])
    return bytes(builder.build())


def table_us(producers: int, calls: int) -> float:
    table = ProducerStateTable()
    fields = [ProducerFields(pid, 0, seq, seq) for seq in range(calls // producers + 1) for pid in range(producers)]
    started = time.perf_counter()
    for offset, item in enumerate(fields[:calls]):
        if table.check(item) is None:
            table.record(item, offset, offset)
    return (time.perf_counter() - started) / calls * 1e6


def append_us(directory: str, calls: int) -> float:
    batches = [bytearray(batch(pid, seq)) for seq in range(calls // PRODUCERS + 1) for pid in range(PRODUCERS)]
    log_ = PartitionLog(directory, "bench", 0)
    try:
        started = time.perf_counter()
        for item in batches[:calls]:
            log_.append(item)
        return (time.perf_counter() - started) / calls * 1e6
    finally:
        log_.close()


def bytes_per_state(states: int, batches: int) -> float:
    tracemalloc.start()
    table = ProducerStateTable()
    for pid in range(states):
        for seq in range(batches):
            table.record(ProducerFields(10**6 + pid, 0, seq, seq), 10**9 + pid * 10 + seq, 10**9 + pid * 10 + seq)
    used, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return used / states


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--states", type=int, default=100_000, help="producer states for the memory figure")
    args = parser.parse_args()
    calls = 20_000 if args.quick else 200_000
    raw: dict[str, list[float]] = {"table_1": [], "table_1000": [], "append_1000": []}
    with tempfile.TemporaryDirectory(dir=args.tmp_root if Path(args.tmp_root).is_dir() else None) as tmp:
        for run in range(args.runs):
            raw["table_1"].append(table_us(1, calls))
            raw["table_1000"].append(table_us(PRODUCERS, calls))
            raw["append_1000"].append(append_us(str(Path(tmp) / f"run{run}"), calls // 4))
            log(f"run {run + 1}: " + ", ".join(f"{k} {v[-1]:.2f} us" for k, v in raw.items()))
        facts = machine_facts(tmp)
    memory = {f"{n}_batches": round(bytes_per_state(args.states // (10 if args.quick else 1), n)) for n in (1, 5)}
    payload: dict[str, Any] = {
        "calls_per_run": calls,
        "per_batch_us": {name: summary(values, 2) for name, values in raw.items()},
        "bytes_per_state": memory,
    }
    emit("micro_producer_state", args, payload, facts)


if __name__ == "__main__":
    main()
