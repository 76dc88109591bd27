"""Many partitions (issue 12, finding 1): what ``max_partitions`` of them cost to create, fill and reopen.

One broker process over a fresh data directory, ``--partitions`` partitions in topics of 1,000
(the last one smaller), the file budget derived from ``RLIMIT_NOFILE`` (``--nofile`` lowers the
soft limit first, as ``ulimit -n`` would):

``create_s``   creating every topic (directories, ``topic.json``, one rename per topic);
``produce_s``  one 200 B record into every partition (each opens its segment through the budget);
``close_s``    closing the broker (a final fsync and checkpoint per partition);
``open_s``     opening the directory again (recovery of every active segment);
``read_s``     reading the record back from every partition;
and the peak RSS, the descriptors open after the reopen, and the budget's capacity.

    python -m benchmarks.e2e.bench_partitions [--quick] [--runs N] [--partitions N] [--nofile N]
"""

from __future__ import annotations

import os
import resource
import shutil
import time
from pathlib import Path
from typing import Any

from benchmarks._common import base_parser, emit, log, machine_facts, summary
from lkstream import Broker

TOPIC_SIZE = 1_000


def _topics(total: int) -> list[tuple[str, int]]:
    sizes = [TOPIC_SIZE] * (total // TOPIC_SIZE) + ([total % TOPIC_SIZE] if total % TOPIC_SIZE else [])
    return [(f"t{n}", size) for n, size in enumerate(sizes)]


def _one_run(root: Path, total: int) -> dict[str, float]:
    data = root / "data"
    shutil.rmtree(data, ignore_errors=True)
    topics = _topics(total)
    figures: dict[str, float] = {}
    settings: dict[str, Any] = {"persist_dir": str(data), "max_partitions": total, "fsync_mode": "group"}
    started = time.perf_counter()
    broker = Broker(**settings)
    for name, size in topics:
        broker.create_topic(name, size)
    figures["create_s"] = time.perf_counter() - started
    value = b"v" * 200
    started = time.perf_counter()
    for name, size in topics:
        for pid in range(size):
            broker.produce_many_sync(name, [(None, value)], partition=pid)
    figures["produce_s"] = time.perf_counter() - started
    figures["open_files_budget"] = broker.files.capacity
    started = time.perf_counter()
    broker.close()
    figures["close_s"] = time.perf_counter() - started
    started = time.perf_counter()
    broker = Broker(**settings)
    figures["open_s"] = time.perf_counter() - started
    figures["descriptors_after_open"] = len(os.listdir("/proc/self/fd"))
    started = time.perf_counter()
    for name, size in topics:
        for pid in range(size):
            if len(broker.read_from(name, pid, 0)) != 1:
                raise SystemExit(f"{name}[{pid}] lost its record")
    figures["read_s"] = time.perf_counter() - started
    broker.close()
    figures["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return figures


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=4096, help="partitions in all (default 4096)")
    parser.add_argument("--nofile", type=int, default=0, help="lower the soft RLIMIT_NOFILE to this first")
    args = parser.parse_args()
    if args.nofile:
        resource.setrlimit(resource.RLIMIT_NOFILE, (args.nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    total = 500 if args.quick else args.partitions
    root = Path(args.tmp_root) / "bench_partitions"
    root.mkdir(parents=True, exist_ok=True)
    raw: dict[str, list[float]] = {}
    try:
        for run in range(args.runs):
            figures = _one_run(root, total)
            for key, value in figures.items():
                raw.setdefault(key, []).append(value)
            log(f"run {run + 1}: " + ", ".join(f"{k}={v:,.2f}" for k, v in figures.items()))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    payload = {
        "settings": {
            "partitions": total,
            "topic_size": TOPIC_SIZE,
            "rlimit_nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        },
        "results": {k: summary(v, 2) for k, v in raw.items()},
    }
    emit("bench_partitions", args, payload, machine_facts(str(root.parent)))


if __name__ == "__main__":
    main()
