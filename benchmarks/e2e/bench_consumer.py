"""Read throughput and latency of the embedded broker (fsync_mode "group"), warm page cache.

Sequential log (200-byte values, batches of 1,000, one partition; built once with
``produce_many``, then the broker is closed and reopened so reads start cold in
Python and warm in the page cache):

``decoded_partition``   ``Partition.read_from(offset)`` loop from offset 0 to the end,
                        records decoded into ``Record`` tuples. Target: >= 2,000,000 msg/s.
``decoded_broker``      the same through ``Broker.read_from``.
``decoded_16MiB``       ``Partition.read_from(offset, max_bytes=16 MiB)`` (fewer, larger reads).
``consumer_consume``    ``Consumer.consume(topic, handler)`` with a no-op handler: the
                        per-record handler call included.
``raw_fetch``           ``Broker.fetch(topic, 0, offset)`` (1 MiB) loop, bytes only.
                        Target: >= 1 GB/s.
``raw_fetch_16MiB``     the same with ``max_bytes=16 MiB``.

Random reads on a large log (``--random-gb``, default 10 GB; built once with pre-encoded
batches of 1,000 x 200 B through ``produce_batch``; page cache warmed by reading every
segment and every index once; offsets uniform and seeded):

``random_read_from_1``  ``Partition.read_from(offset, max_msgs=1)`` (default max_bytes).
                        Target: p99 < 1 ms.
``random_read_batch``   ``Partition.read_from(offset, max_msgs=1, max_bytes=1)``: exactly the
                        batch holding ``offset``, decoded.
``random_fetch_batch``  ``Broker.fetch(topic, 0, offset, max_bytes=1)``: that batch, raw.

Every decoding scenario is run twice: with Python's default GC thresholds (the figure judged
against the target) and as ``<name>+gc_tuned`` with ``gc.set_threshold(100_000, 20, 100)``,
which isolates the cost of the cyclic garbage collector (``--no-gc-variants`` skips these).

    python -m benchmarks.e2e.bench_consumer              # full: 5M-record log + 10 GB log
    python -m benchmarks.e2e.bench_consumer --quick      # smoke run
    python -m benchmarks.e2e.bench_consumer --random-gb 0   # skip the large log
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks._common import (
    GB,
    MiB,
    base_parser,
    bench_dir,
    check_free_space,
    dir_bytes,
    emit,
    log,
    machine_facts,
    percentile,
    summary,
    verdict,
)
from lkstream import Broker, Consumer
from lkstream.format.batch import parse_header, read_length_prefix
from lkstream.format.codec import encode_batch

BATCH = 1000
VALUE = 200
TOPIC = "bench.consume"
SEQ_SCENARIOS = (
    "decoded_partition",
    "decoded_broker",
    "decoded_16MiB",
    "consumer_consume",
    "raw_fetch",
    "raw_fetch_16MiB",
)
RANDOM_SCENARIOS = ("random_read_from_1", "random_read_batch", "random_fetch_batch")
# Decoding allocates one GC-tracked Record per record; these scenarios are also run with
# gc.set_threshold(*TUNED_GC) to show how much of their cost is the cyclic garbage collector.
TUNED_GC = (100_000, 20, 100)
GC_SENSITIVE = {
    "decoded_partition",
    "decoded_broker",
    "decoded_16MiB",
    "consumer_consume",
    "random_read_from_1",
    "random_read_batch",
}


def make_batches(seed: int, count: int) -> list[bytearray]:
    rng = random.Random(seed)
    return [
        encode_batch([(None, rng.randbytes(VALUE)) for _ in range(BATCH)], timestamp_ms=1_700_000_000_000)
        for _ in range(count)
    ]


def make_calls(seed: int, count: int) -> list[list[tuple[None, bytes]]]:
    rng = random.Random(seed)
    return [[(None, rng.randbytes(VALUE)) for _ in range(BATCH)] for _ in range(count)]


class GcClock:
    """Time spent in the cyclic garbage collector (via ``gc.callbacks``), per generation."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.collections = [0, 0, 0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds[info["generation"]] += time.perf_counter() - self._started
            self.collections[info["generation"]] += 1

    def report(self, elapsed: float) -> dict[str, float]:
        return {
            "gc_seconds": sum(self.seconds),
            "gc_share": sum(self.seconds) / elapsed if elapsed else 0.0,
            "gc_full_collections": self.collections[2],
            "gc_full_seconds": self.seconds[2],
        }


@contextlib.contextmanager
def gc_mode(tuned: bool, clock: GcClock) -> Iterator[None]:
    """Python's default GC thresholds, or ``TUNED_GC`` (fewer young and full collections)."""
    before = gc.get_threshold()
    if tuned:
        gc.set_threshold(*TUNED_GC)
    gc.callbacks.append(clock)
    try:
        yield
    finally:
        gc.callbacks.remove(clock)
        gc.set_threshold(*before)


def variants(name: str, gc_variants: bool) -> list[tuple[str, bool]]:
    """(result name, tuned GC?) pairs to run for scenario ``name``."""
    out = [(name, False)]
    if gc_variants and name in GC_SENSITIVE:
        out.append((name + "+gc_tuned", True))
    return out


# -- building logs ---------------------------------------------------------------------------------


def build_seq_log(data: Path, msgs: int, seed: int) -> None:
    calls = make_calls(seed, 16)

    async def produce() -> None:
        with Broker(persist_dir=str(data), fsync_mode="group") as broker:
            for i in range(msgs // BATCH):
                await broker.produce_many(TOPIC, calls[i % len(calls)])

    asyncio.run(produce())


def build_big_log(data: Path, nbytes: int, seed: int) -> int:
    """Append pre-encoded batches until the log holds ``nbytes``; return the record count."""
    batches = make_batches(seed, 16)
    per_batch = len(batches[0])
    n = max(1, -(-nbytes // per_batch))  # at least nbytes of batches
    started = time.perf_counter()
    with Broker(persist_dir=str(data), fsync_mode="group") as broker:
        for i in range(n):
            broker.produce_batch_sync(TOPIC, 0, batches[i % len(batches)])
            if i and i % 10_000 == 0:
                log(f"  built {i * per_batch / GB:.1f} GB")
    log(f"built {n * per_batch / GB:.2f} GB in {time.perf_counter() - started:.1f}s")
    return n * BATCH


def warm_page_cache(data: Path) -> None:
    """Read every file of the data directory once (8 MiB preads)."""
    for root, _dirs, files in os.walk(data):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                pos = 0
                while chunk := os.pread(fd, 8 * MiB, pos):
                    pos += len(chunk)
            finally:
                os.close(fd)


# -- sequential reads ------------------------------------------------------------------------------


def next_offset_after(data: bytes) -> int:
    """Offset after the last whole batch in ``data`` (walks the length prefixes)."""
    pos, last = 0, 0
    while len(data) - pos >= 12:
        _, size = read_length_prefix(data, pos)
        if size > len(data) - pos:
            break
        last = pos
        pos += size
    return parse_header(data, last).next_offset


def seq_decoded(broker: Broker, how: str) -> int:
    """Read the whole partition decoded; return the record count."""
    partition = broker.partition(TOPIC, 0)
    end = partition.high_watermark
    offset = count = 0
    if how == "broker":
        while offset < end:
            records = broker.read_from(TOPIC, 0, offset)
            count += len(records)
            offset = records[-1].offset + 1
    else:
        max_bytes = 16 * MiB if how == "16MiB" else MiB
        while offset < end:
            records = partition.read_from(offset, max_bytes=max_bytes)
            count += len(records)
            offset = records[-1].offset + 1
    return count


def seq_consume(broker: Broker) -> int:
    consumer = Consumer(broker, auto_offset_reset="earliest")
    consumer.subscribe(TOPIC, from_committed=False)
    end = broker.partition(TOPIC, 0).high_watermark

    def handler(pid: int, offset: int, record: Any) -> None:
        return None

    return asyncio.run(consumer.consume(TOPIC, handler, max_records=end, idle_timeout=0.5))


def seq_raw(broker: Broker, max_bytes: int) -> tuple[int, int]:
    end = broker.partition(TOPIC, 0).high_watermark
    offset = nbytes = fetches = 0
    while offset < end:
        data = broker.fetch(TOPIC, 0, offset, max_bytes).data
        nbytes += len(data)
        fetches += 1
        offset = next_offset_after(data)
    return nbytes, fetches


def run_sequential(
    data: Path, msgs: int, runs: int, only: set[str], gc_variants: bool
) -> dict[str, list[dict[str, Any]]]:
    raw: dict[str, list[dict[str, Any]]] = {}
    with Broker(persist_dir=str(data), fsync_mode="group") as broker:
        seq_raw(broker, MiB)  # warm-up: loads indexes, touches every page
        for run in range(runs):
            for scenario in SEQ_SCENARIOS:
                if scenario not in only:
                    continue
                for name, tuned in variants(scenario, gc_variants):
                    clock = GcClock()
                    with gc_mode(tuned, clock):
                        result = sequential_once(broker, scenario, msgs)
                    result.update(clock.report(result["seconds"]))
                    raw.setdefault(name, []).append(result)
                    log(f"run {run + 1} {name}: " + ", ".join(f"{k}={v:,.3f}" for k, v in result.items()))
    return raw


def sequential_once(broker: Broker, scenario: str, msgs: int) -> dict[str, Any]:
    started = time.perf_counter()
    if scenario.startswith("decoded"):
        how = {"decoded_partition": "partition", "decoded_broker": "broker"}.get(scenario, "16MiB")
        count = seq_decoded(broker, how)
    elif scenario == "consumer_consume":
        count = seq_consume(broker)
    else:
        max_bytes = 16 * MiB if scenario.endswith("16MiB") else MiB
        nbytes, fetches = seq_raw(broker, max_bytes)
        seconds = time.perf_counter() - started
        return {
            "bytes": nbytes,
            "fetches": fetches,
            "seconds": seconds,
            "GB_per_s": nbytes / seconds / GB,
            "msg_per_s": msgs / seconds,
        }
    seconds = time.perf_counter() - started
    if count != msgs:
        raise SystemExit(f"{scenario}: read {count} records, expected {msgs}")
    return {"records": count, "seconds": seconds, "msg_per_s": count / seconds}


# -- random reads ----------------------------------------------------------------------------------


def run_random(
    data: Path, samples: int, runs: int, seed: int, *, only: set[str], gc_variants: bool
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    raw: dict[str, list[dict[str, Any]]] = {}
    started = time.perf_counter()
    warm_page_cache(data)
    warm_s = time.perf_counter() - started
    started = time.perf_counter()
    broker = Broker(persist_dir=str(data), fsync_mode="group")
    open_s = time.perf_counter() - started
    info: dict[str, Any] = {"page_cache_warm_seconds": warm_s, "broker_open_seconds": open_s}
    try:
        partition = broker.partition(TOPIC, 0)
        end = partition.high_watermark
        stats = partition.stats()
        info.update({"records": end, "log_bytes": stats.size_bytes, "segments": stats.segment_count})
        # load every sealed segment's index once (lazy on first read): "warm"
        step = max(1, end // (stats.segment_count * 4))
        for offset in range(0, end, step):
            partition.read_from(offset, max_msgs=1, max_bytes=1)
        calls: dict[str, Callable[[int], object]] = {
            "random_read_from_1": lambda off: partition.read_from(off, max_msgs=1),
            "random_read_batch": lambda off: partition.read_from(off, max_msgs=1, max_bytes=1),
            "random_fetch_batch": lambda off: broker.fetch(TOPIC, 0, off, max_bytes=1),
        }
        for run in range(runs):
            for scenario, call in calls.items():
                if scenario not in only:
                    continue
                rng = random.Random(seed * 1000 + run)
                offsets = [rng.randrange(end) for _ in range(samples)]
                for name, tuned in variants(scenario, gc_variants):
                    clock = GcClock()
                    started = time.perf_counter()
                    with gc_mode(tuned, clock):
                        result = latencies(call, offsets)
                    result.update(clock.report(time.perf_counter() - started))
                    raw.setdefault(name, []).append(result)
                    log(f"run {run + 1} {name}: " + ", ".join(f"{k}={v:.3f}" for k, v in result.items()))
    finally:
        broker.close()
    return raw, info


def latencies(call: Callable[[int], object], offsets: list[int]) -> dict[str, Any]:
    for off in offsets[:200]:  # a short warm-up of the code path
        call(off)
    lat: list[float] = []
    perf = time.perf_counter_ns
    for off in offsets:
        t0 = perf()
        got = call(off)
        lat.append((perf() - t0) / 1e6)
        if not got:
            raise SystemExit(f"nothing read at offset {off}")
    lat.sort()
    return {
        "samples": len(lat),
        "p50_ms": percentile(lat, 50),
        "p99_ms": percentile(lat, 99),
        "p999_ms": percentile(lat, 99.9),
        "max_ms": lat[-1],
        "mean_ms": sum(lat) / len(lat),
    }


# -- main ------------------------------------------------------------------------------------------


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--msgs", type=int, help="records in the sequential log (default 5M; quick 200k)")
    parser.add_argument(
        "--random-gb", type=float, help="size of the random-read log in GB (default 10; quick 0.5; 0 skips)"
    )
    parser.add_argument("--samples", type=int, help="random reads per run (default 20,000; quick 2,000)")
    parser.add_argument("--only", help="comma-separated scenarios: " + ",".join(SEQ_SCENARIOS + RANDOM_SCENARIOS))
    parser.add_argument(
        "--no-gc-variants", action="store_true", help=f"skip the reruns with gc.set_threshold{TUNED_GC}"
    )
    args = parser.parse_args()
    gc_variants = not args.no_gc_variants
    msgs = (args.msgs or (200_000 if args.quick else 5_000_000)) // BATCH * BATCH
    random_gb = args.random_gb if args.random_gb is not None else (0.5 if args.quick else 10.0)
    samples = args.samples or (2_000 if args.quick else 20_000)
    only = set(SEQ_SCENARIOS + RANDOM_SCENARIOS) if not args.only else set(args.only.split(","))
    unknown = only - set(SEQ_SCENARIOS + RANDOM_SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios {sorted(unknown)}")

    raw: dict[str, list[dict[str, Any]]] = {}
    info: dict[str, Any] = {}
    with bench_dir(args.tmp_root, "consumer") as root:
        check_free_space(root, int(msgs * (VALUE + 10) * 1.1 + random_gb * GB * 1.02))
        facts = machine_facts(root)
        if only & set(SEQ_SCENARIOS):
            seq = root / "seq"
            started = time.perf_counter()
            build_seq_log(seq, msgs, args.seed)
            info["sequential_log"] = {
                "records": msgs,
                "log_bytes": dir_bytes(seq / "topics"),
                "build_seconds": time.perf_counter() - started,
            }
            log(f"sequential log: {info['sequential_log']}")
            raw.update(run_sequential(seq, msgs, args.runs, only, gc_variants))
        if random_gb > 0 and only & set(RANDOM_SCENARIOS):
            big = root / "big"
            build_big_log(big, int(random_gb * GB), args.seed + 1)
            random_raw, info["random_log"] = run_random(
                big, samples, args.runs, args.seed, only=only, gc_variants=gc_variants
            )
            raw.update(random_raw)
            log(f"random log: {info['random_log']}")

    results = {name: {k: summary([r[k] for r in runs], 4) for k in runs[0]} for name, runs in raw.items()}
    targets = []
    if "decoded_partition" in results:
        m = results["decoded_partition"]["msg_per_s"]
        targets.append(
            {
                "target": "consume from the start, decoded: >= 2,000,000 msg/s",
                "measured": m,
                "unit": "msg/s (Partition.read_from loop)",
                "verdict": verdict(m["median"], 2_000_000),
            }
        )
    if "raw_fetch" in results:
        m = results["raw_fetch"]["GB_per_s"]
        targets.append(
            {
                "target": "raw batch reads from page cache: >= 1 GB/s",
                "measured": m,
                "unit": "GB/s (Broker.fetch, 1 MiB)",
                "verdict": verdict(m["median"], 1.0),
            }
        )
    random_log = info.get("random_log", {})
    big_enough = random_log.get("log_bytes", 0) >= 10 * GB
    for name in RANDOM_SCENARIOS:
        if name in results:
            m = results[name]["p99_ms"]
            targets.append(
                {
                    "target": f"random-offset reads on >= 10 GB, p99 < 1 ms warm ({name})",
                    "measured": m,
                    "unit": "ms",
                    "verdict": verdict(m["median"], 1.0, higher_is_better=False)
                    + ("" if big_enough else " (log smaller than 10 GB)"),
                }
            )
    payload = {
        "settings": {
            "fsync_mode": "group",
            "batch_records": BATCH,
            "value_bytes": VALUE,
            "sequential_records": msgs,
            "random_log_GB": random_gb,
            "random_samples_per_run": samples,
            "gc_default_threshold": list(gc.get_threshold()),
            "gc_tuned_threshold": list(TUNED_GC) if gc_variants else None,
        },
        "logs": info,
        "targets": targets,
        "results": results,
    }
    emit("bench_consumer", args, payload, facts)


if __name__ == "__main__":
    main()
