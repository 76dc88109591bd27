"""Seed 002's compaction experiment (issue 24): a Zipfian-keyed log cleaned, and what the clean costs.

Keys are Zipfian (numpy's ``zipf``, s = 1.1) over ``--keys`` keys, values ``--value-bytes``
of seeded bytes, ``--records`` records in batches of 500.

``storage`` (embedded broker, one compacted partition, 1 MiB segments): the log is written,
sealed and cleaned by ``Broker.cleaner.run_once`` until nothing is due. Reported:

* the log before and after, and ``ideal_bytes``: the same final state (each key's latest
  value) written fresh in batches of 500, the smallest log that holds it. ``after / ideal``
  says how close the clean gets to the unique-key size;
* read amplification: bytes the passes read (the key map, then the rewrite) per byte of the
  log before; write amplification: bytes written per byte of the log before, and per byte of
  the log after (1.0 when each surviving byte is written once);
* cleaner throughput: log bytes and records per second of pass time (paced as in the daemon),
  and the key map's bytes.

``latency`` (a daemon, gRPC client): while one ``--bg-records`` compacted topic waits to be
cleaned, produce and fetch calls on another topic run paced (``--rate`` per second each, from
their scheduled times), first on a daemon with the cleaner off (``without``), then on a daemon
over the same directory with the cleaner on, for as long as its clean runs (``during``), then
once it is done (``after``). p50/p99 per phase, and during / without.

    python -m benchmarks.e2e.bench_compaction [--quick] [--runs N] [--records N] [--keys N]

The machine is shared: compare phases of one run (same load), and read the load average in
the JSON (``machine.loadavg_at_end``).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

import lkstream
from benchmarks._common import (
    base_parser,
    bench_dir,
    dir_bytes,
    emit,
    log,
    machine_facts,
    percentile,
    summary,
    wait_until,
)
from benchmarks.e2e.bench_daemon import DaemonProcess
from lkstream import Broker
from lkstream.broker.cleaning import Cleaner
from lkstream.storage.cleaner import CleanerPolicy
from lkstream.storage.clock import SystemClock

BATCH = 500
ZIPF_S = 1.1
SEGMENT_BYTES = 1 << 20


def zipf_keys(records: int, keys: int, seed: int) -> np.ndarray[Any, Any]:
    """``records`` key numbers in ``1..keys``, Zipfian with s = 1.1 (larger draws are redrawn)."""
    rng = np.random.default_rng(seed)
    out = np.empty(0, dtype=np.int64)
    while len(out) < records:
        draw = rng.zipf(ZIPF_S, size=records * 2)
        out = np.concatenate([out, draw[draw <= keys]])
    return out[:records]


def _batches(key_numbers: np.ndarray[Any, Any], value_bytes: int, seed: int) -> list[list[tuple[bytes, bytes]]]:
    rng = np.random.default_rng(seed + 1)
    values = rng.bytes(value_bytes * 64)
    out = []
    for start in range(0, len(key_numbers), BATCH):
        chunk = key_numbers[start : start + BATCH].tolist()
        out.append([(b"key-%d" % k, values[(k % 64) * value_bytes : (k % 64 + 1) * value_bytes]) for k in chunk])
    return out


def storage_run(root: Path, records: int, keys: int, value_bytes: int, seed: int) -> dict[str, float]:
    """One clean of a fresh log (see the module docstring, ``storage``)."""
    batches = _batches(zipf_keys(records, keys, seed), value_bytes, seed)
    final: dict[bytes, bytes] = {}
    with Broker(persist_dir=str(root / "data"), segment_max_bytes=SEGMENT_BYTES, log_cleaner_enabled=False) as b:
        b.create_topic("zipf", 1, configs={"cleanup.policy": "compact"})
        b.create_topic("ideal", 1)
        for batch in batches:
            b.produce_many_sync("zipf", batch, partition=0)
            final.update(batch)
        items = list(final.items())
        for start in range(0, len(items), BATCH):
            b.produce_many_sync("ideal", items[start : start + BATCH], partition=0)
        partition = b.partition("zipf", 0)
        b.alter_topic_configs("zipf", set={"segment.ms": "1"})
        time.sleep(0.005)
        assert partition.roll_if_due(), "the tail must be sealed to be cleaned"
        before = partition.stats().size_bytes
        # The broker's own cleaner, run here rather than on its thread: the pass is timed alone.
        cleaner = Cleaner(
            lambda: [("zipf", 0, partition.log)],
            lambda _topic: CleanerPolicy(),
            SystemClock(),
            budget_bytes=b.config.log_cleaner_dedupe_buffer_bytes,
            backoff_ms=b.config.log_cleaner_backoff_ms,
        )
        started = time.perf_counter()
        passes = []
        while (stats := cleaner.run_once()) is not None:
            passes.append(stats)
        seconds = time.perf_counter() - started
        after = partition.stats().size_bytes
        ideal = b.partition("ideal", 0).stats().size_bytes
        read = sum(p.bytes_read for p in passes)
        written = sum(p.bytes_written for p in passes)
        kept = {r.key: r.value for r in _read_all(b, "zipf")}
        assert kept == final, "the cleaned log must hold the latest value of every key"
    return {
        "records": float(records),
        "unique_keys": float(len(final)),
        "bytes_before": float(before),
        "bytes_after": float(after),
        "ideal_bytes": float(ideal),
        "after_over_ideal": after / ideal,
        "after_over_before": after / before,
        "read_amplification": read / before,
        "write_amplification_of_before": written / before,
        "write_amplification_of_after": written / after,
        "passes": float(len(passes)),
        "clean_seconds": seconds,
        "clean_mb_per_s": before / seconds / 1e6,
        "clean_records_per_s": records / seconds,
        "map_keys_first_pass": float(passes[0].map_keys),
    }


def _read_all(broker: Broker, topic: str) -> list[Any]:
    out, offset, end = [], 0, broker.partition(topic, 0).high_watermark
    while offset < end:
        records = broker.read_from(topic, 0, offset)
        out += records
        offset = records[-1].offset + 1
    return out


# -- latency beside a clean ---------------------------------------------------------------------------


async def _paced_calls(rb: Any, seconds: float, rate: int, stop: asyncio.Event | None) -> dict[str, list[float]]:
    """Produce and fetch on topic ``other`` at ``rate`` calls/s each, latency from the scheduled time."""
    period = 1.0 / rate
    produce: list[float] = []
    fetch: list[float] = []
    offset = rb.bounds("other", 0)[1]
    start = time.perf_counter() + 0.05
    tick = 0
    while (stop is None and tick * period < seconds) or (stop is not None and not stop.is_set()):
        scheduled = start + tick * period
        await wait_until(scheduled)
        await rb.produce_many("other", [(b"k", b"v" * 100)], partition=0)
        produce.append(time.perf_counter() - scheduled)
        got = await rb.fetch_async("other", 0, offset)
        fetch.append(time.perf_counter() - scheduled - produce[-1])
        offset += 1 if got.data else 0
        tick += 1
    return {"produce": produce, "fetch": fetch}


def _p(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples[len(samples) // 10 :])
    return {"p50_ms": 1000 * percentile(ordered, 50), "p99_ms": 1000 * percentile(ordered, 99), "n": len(ordered)}


async def _while_dirty(rb: Any, done: asyncio.Event) -> float:
    started = time.perf_counter()
    while rb.describe_topic("big").partitions[0].dirty_ratio != 0.0:
        await asyncio.sleep(0.1)
    done.set()
    return time.perf_counter() - started


def latency_run(root: Path, records: int, keys: int, value_bytes: int, *, rate: int, seed: int) -> dict[str, Any]:
    """Produce/fetch p99 on another topic without, during and after a clean (see the module docstring)."""
    batches = _batches(zipf_keys(records, keys, seed), value_bytes, seed)
    settings: dict[str, object] = {"segment_max_bytes": 1048576, "log_cleaner_backoff_ms": 100}
    daemon = DaemonProcess(root, broker={"log_cleaner_enabled": False, **settings})
    try:
        with lkstream.connect(daemon.wait_ready()) as rb:
            rb.create_topic("other", 1)
            big = {"cleanup.policy": "compact"}
            from confluent_kafka.admin import AdminClient, NewTopic  # the Kafka listener takes topic configs

            admin = AdminClient({"bootstrap.servers": _kafka_address(daemon)})
            admin.create_topics([NewTopic("big", 1, 1, config=big)])["big"].result(30)
            del admin  # before its daemon goes: librdkafka would retry the connection and log each try
            for batch in batches:
                rb.produce_many_sync("big", batch, partition=0)
            without = asyncio.run(_paced_calls(rb, 10.0, rate, None))
    finally:
        daemon.stop()
    daemon = DaemonProcess(root, broker=settings)  # the same directory, the cleaner on: it starts at once
    try:
        with lkstream.connect(daemon.wait_ready()) as rb:

            async def during_clean() -> tuple[dict[str, list[float]], float]:
                done = asyncio.Event()
                cleaning = asyncio.ensure_future(_while_dirty(rb, done))
                calls = await _paced_calls(rb, 0.0, rate, done)
                return calls, await cleaning

            during, clean_s = asyncio.run(during_clean())
            after = asyncio.run(_paced_calls(rb, 10.0, rate, None))
            size = dir_bytes(root / "data" / "topics" / "big")
    finally:
        daemon.stop()
    phases = {"without": without, "during": during, "after": after}
    out: dict[str, Any] = {"clean_seconds": clean_s, "big_topic_bytes_after": size}
    for name, calls in phases.items():
        for kind, samples in calls.items():
            for stat, value in _p(samples).items():
                out[f"{kind}_{name}_{stat}"] = value
    for kind in ("produce", "fetch"):
        out[f"{kind}_p99_during_over_without"] = out[f"{kind}_during_p99_ms"] / out[f"{kind}_without_p99_ms"]
    return out


def _kafka_address(daemon: DaemonProcess) -> str:
    for line in Path(daemon.stdout_path).read_text().splitlines():
        if "kafka=" in line:
            return line.split("kafka=", 1)[1].split()[0]
    raise SystemExit("the daemon did not report a Kafka listener")


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--bg-records", type=int, default=3_000_000, help="the topic cleaned during `latency`")
    parser.add_argument("--rate", type=int, default=200, help="produce and fetch calls per second, each")
    parser.add_argument("--skip-latency", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.records, args.keys, args.bg_records = 100_000, 10_000, 200_000
    facts = machine_facts(os.getcwd())  # now: its load average is the one at the start
    storage: dict[str, list[float]] = {}
    latency: dict[str, list[float]] = {}
    for run in range(args.runs):
        with bench_dir(args.tmp_root, "compaction") as root:
            for name, value in storage_run(root, args.records, args.keys, args.value_bytes, args.seed + run).items():
                storage.setdefault(name, []).append(value)
        ratio, seconds = storage["after_over_ideal"][-1], storage["clean_seconds"][-1]
        log(f"storage run {run + 1}: {ratio:.3f} of ideal, {seconds:.2f} s")
        if args.skip_latency:
            continue
        with bench_dir(args.tmp_root, "compaction-latency") as root:
            figures = latency_run(
                root, args.bg_records, args.keys, args.value_bytes, rate=args.rate, seed=args.seed + run
            )
            for name, value in figures.items():
                latency.setdefault(name, []).append(float(value))
        log(f"latency run {run + 1}: clean {latency['clean_seconds'][-1]:.1f} s")
    payload = {
        "settings": {
            "records": args.records,
            "keys": args.keys,
            "zipf_s": ZIPF_S,
            "value_bytes": args.value_bytes,
            "batch": BATCH,
            "segment_bytes": SEGMENT_BYTES,
            "bg_records": args.bg_records,
            "rate_per_s": args.rate,
        },
        "storage": {name: summary(values, 4) for name, values in storage.items()},
        "latency": {name: summary(values, 3) for name, values in latency.items()},
    }
    emit("bench_compaction", args, payload, facts)


if __name__ == "__main__":
    main()
