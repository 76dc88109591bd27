"""Soak: daemon RSS over a long run at a fixed fraction of its produce ceiling (issue 3).

Starts the daemon (fsync ``group``, retention on so the disk stays bounded),
measures the produce ceiling of one client for a few seconds, then offers
``--load`` (default 80%) of it with an open-model producer (1,000 x 200 B per
call, scheduled on a fixed clock) while a Subscribe stream reads everything
back, for ``--minutes`` (default 30). The daemon's RSS is sampled every
``--sample-s`` seconds.

"Flat" means: over the last two thirds of the run (after warm-up: the hot tail,
page-cache-backed buffers and gRPC pools fill during the first third) RSS grows
less than 10% and the least-squares slope is under 1 MB/min. Both figures are in
the JSON, with the samples, so a reader can judge for themselves.

    python -m benchmarks.soak.soak_daemon                # 30 minutes
    python -m benchmarks.soak.soak_daemon --quick        # 1 minute smoke run
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import lkstream
from benchmarks._common import MB, base_parser, bench_dir, emit, log, machine_facts, rss_bytes
from benchmarks.e2e.bench_daemon import BATCH, SMALL, DaemonProcess

TOPIC = "soak"
SEGMENT_BYTES = 64 * 1024 * 1024  # the daemon default (segment_max_bytes)
RETENTION_BYTES = 1024 * 1024 * 1024  # per partition: the disk holds ~1 GiB of log, whatever the length
# Open model with a bound: a call that finds this many still in flight waits for one
# (and counts as late) rather than queueing without limit in the client.
MAX_IN_FLIGHT = 8


def slope_mb_per_min(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MB) samples, in MB per minute."""
    n = len(samples)
    if n < 2:
        return 0.0
    mean_t = sum(t for t, _ in samples) / n
    mean_m = sum(m for _, m in samples) / n
    var = sum((t - mean_t) ** 2 for t, _ in samples)
    if var == 0:
        return 0.0
    cov = sum((t - mean_t) * (m - mean_m) for t, m in samples)
    return 60.0 * cov / var


async def measure_ceiling(rb: Any, calls: list[list[tuple[None, bytes]]], seconds: float) -> float:
    sent = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        await rb.produce_many(TOPIC, calls[sent % len(calls)])
        sent += 1
    return sent * BATCH / (time.perf_counter() - started)


async def soak(
    rb: Any, daemon_pid: int, calls: list[Any], *, rate: float, seconds: float, sample_s: float
) -> dict[str, Any]:
    interval = BATCH / rate
    samples: list[tuple[float, float]] = []
    received = 0
    produced = 0
    late_calls = 0

    async def read_back() -> None:
        nonlocal received
        hw = rb.bounds(TOPIC, 0)[1]
        async for result in rb.subscribe_batches(TOPIC, 0, hw):
            received += len(result.data)

    async def sample() -> None:
        started = time.monotonic()
        while True:
            samples.append((time.monotonic() - started, rss_bytes(daemon_pid) / MB))
            log(f"t={samples[-1][0]:7.0f}s rss={samples[-1][1]:7.1f} MB produced={produced:,}")
            await asyncio.sleep(sample_s)

    reader = asyncio.create_task(read_back())
    sampler = asyncio.create_task(sample())
    in_flight: set[asyncio.Task[Any]] = set()
    start = time.perf_counter()
    i = 0
    try:
        while (scheduled := start + i * interval) < start + seconds:
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if len(in_flight) >= MAX_IN_FLIGHT:
                await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            if time.perf_counter() - scheduled > interval:
                late_calls += 1
            task = asyncio.create_task(rb.produce_many(TOPIC, calls[i % len(calls)]))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
            produced += BATCH
            i += 1
        await asyncio.gather(*in_flight)
    finally:
        elapsed = time.perf_counter() - start
        sampler.cancel()
        reader.cancel()
        await asyncio.gather(sampler, reader, return_exceptions=True)
    samples.append((elapsed, rss_bytes(daemon_pid) / MB))
    tail = [s for s in samples if s[0] >= elapsed / 3]
    growth = (tail[-1][1] - tail[0][1]) / tail[0][1] if tail and tail[0][1] else 0.0
    slope = slope_mb_per_min(tail)
    return {
        "offered_msg_per_s": rate,
        "achieved_msg_per_s": produced / elapsed,
        "calls": i,
        "late_calls": late_calls,
        "max_in_flight": MAX_IN_FLIGHT,
        "seconds": elapsed,
        "bytes_read_back": received,
        "rss_first_MB": samples[0][1],
        "rss_peak_MB": max(m for _, m in samples),
        "rss_last_MB": samples[-1][1],
        "tail_growth_fraction": growth,
        "tail_slope_MB_per_min": slope,
        "flat": growth < 0.10 and slope < 1.0,
        "samples": samples,
    }


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, help="length of the soak (default 30; quick 1)")
    parser.add_argument("--load", type=float, default=0.8, help="fraction of the measured ceiling (default 0.8)")
    parser.add_argument("--rate", type=float, help="offer this many msg/s instead of measuring the ceiling")
    parser.add_argument("--sample-s", type=float, default=10.0, help="seconds between RSS samples")
    args = parser.parse_args()
    minutes = args.minutes or (1.0 if args.quick else 30.0)
    rng = random.Random(args.seed)
    calls = [[(None, rng.randbytes(SMALL)) for _ in range(BATCH)] for _ in range(16)]

    with bench_dir(args.tmp_root, "soak") as root:
        facts = machine_facts(root)
        daemon = DaemonProcess(root)
        try:
            address = daemon.wait_ready()
            with lkstream.connect(address) as rb:
                rb.create_topic(TOPIC, 1, retention_bytes=RETENTION_BYTES)

                async def go() -> dict[str, Any]:
                    ceiling = await measure_ceiling(rb, calls, 5.0)
                    rate = args.rate or args.load * ceiling
                    log(f"ceiling {ceiling:,.0f} msg/s; offering {rate:,.0f} msg/s for {minutes} min")
                    result = await soak(rb, daemon.pid, calls, rate=rate, seconds=60 * minutes, sample_s=args.sample_s)
                    return {"ceiling_msg_per_s": ceiling, **result}

                result = asyncio.run(go())
        finally:
            code = daemon.stop()
            log(f"daemon stopped, exit code {code}")
    log(
        f"RSS {result['rss_first_MB']:.1f} -> peak {result['rss_peak_MB']:.1f} -> {result['rss_last_MB']:.1f} MB; "
        f"tail growth {100 * result['tail_growth_fraction']:.1f}%, slope {result['tail_slope_MB_per_min']:.2f} MB/min"
    )
    payload = {
        "settings": {
            "fsync_mode": "group",
            "value_bytes": SMALL,
            "batch_records": BATCH,
            "minutes": minutes,
            "load_fraction": None if args.rate else args.load,
            "segment_max_bytes": SEGMENT_BYTES,
            "retention_bytes": RETENTION_BYTES,
        },
        "targets": [
            {
                "target": "server RSS flat over the run at 80% load (tail growth < 10%, slope < 1 MB/min)",
                "measured": {"tail_slope_MB_per_min": result["tail_slope_MB_per_min"]},
                "verdict": "pass" if result["flat"] else "MISS",
            }
        ],
        "results": result,
    }
    emit("soak_daemon", args, payload, facts)


if __name__ == "__main__":
    main()
