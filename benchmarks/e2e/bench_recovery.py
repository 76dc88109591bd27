"""Restart after SIGKILL, writer memory, and a crash soak (embedded broker, fsync_mode "group").

Part 1, big log (``--gb``, default 10 GB of log):

* run 1: a writer *process* produces 200-byte values in batches of 1,000 until the data
  directory holds ``--gb`` GB; its RSS is sampled every 0.25 s (target: < 300 MB and flat).
  It is then killed with SIGKILL while producing.
* runs 2..N: a new writer appends to the same log for a seeded 1-3 s and is SIGKILLed.
* after every kill a fresh process opens ``Broker(persist_dir=...)`` and reads the first and
  the last record ("ready"); the time from the constructor to ready is the restart time
  (target: < 2 s). Every acknowledged offset must be readable afterwards.
* ``--cold`` adds one restart after ``echo 3 > /proc/sys/vm/drop_caches`` (needs root).

Part 2, crash soak (``--soak-msgs``, default 1,000,000; ``--kills``, default 3): a child
process produces messages ``i = 0..N-1`` (value and key derived from ``i``, so every record
is checkable) in batches of ``--soak-batch`` (default 100) and reports every acknowledged
offset on a pipe. It is SIGKILLed at seeded random points (the seed is printed); after
each kill the parent opens the log, checks that every acknowledged record is present,
correct and in order (and that nothing after it is torn or wrong), and restarts the child,
which resumes at the recovered end. The last child runs to completion; the whole log is
then verified once more. Repeated ``--runs`` times with seeds ``seed + run``.

    python -m benchmarks.e2e.bench_recovery             # full: 10 GB, 3 x (1M, 3 kills)
    python -m benchmarks.e2e.bench_recovery --quick     # 0.5 GB, 200k messages
    python -m benchmarks.e2e.bench_recovery --gb 0      # soak only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from benchmarks._common import (
    GB,
    MB,
    base_parser,
    bench_dir,
    check_free_space,
    dir_bytes,
    emit,
    log,
    machine_facts,
    rss_bytes,
    summary,
    verdict,
)

BATCH = 1000
VALUE = 200
TOPIC = "bench.recovery"
SOAK_TOPIC = "soak"
RSS_LIMIT = 300 * 1024**2
RSS_FLAT_MB = 30.0  # "flat": RSS grows by less than this from 10% of the write to the end


# -- child processes -------------------------------------------------------------------------------


def child_writer(data: str, seed: int) -> None:
    """Produce forever; print the last acknowledged offset after every call."""
    from lkstream import Broker

    rng = random.Random(seed)
    calls = [[(None, rng.randbytes(VALUE)) for _ in range(BATCH)] for _ in range(16)]
    out = sys.stdout

    async def produce() -> None:
        broker = Broker(persist_dir=data, fsync_mode="group")
        i = 0
        while True:
            result = await broker.produce_many(TOPIC, calls[i % 16])
            out.write(f"{result[-1][1]}\n")
            out.flush()
            i += 1

    asyncio.run(produce())


def child_open(data: str) -> None:
    """Open the log, read its first and last record, print timings as JSON."""
    t_import = time.perf_counter()
    from lkstream import Broker

    imported = time.perf_counter()
    broker = Broker(persist_dir=data, fsync_mode="group")
    opened = time.perf_counter()
    partition = broker.partition(TOPIC, 0)
    end = partition.high_watermark
    first = partition.read_from(0, max_msgs=1, max_bytes=1)
    last = partition.read_from(end - 1, max_msgs=1, max_bytes=1)
    ready = time.perf_counter()
    recovery = [
        {
            "segment": os.path.basename(r.segment),
            "truncated_bytes": r.truncated_bytes,
            "index_rebuilt": r.report.index_rebuilt,
            "checkpoint_problem": r.checkpoint_problem,
        }
        for r in broker.recoveries
    ]
    stats = partition.stats()
    broker.close()
    doc = {
        "import_s": imported - t_import,
        "open_s": opened - imported,
        "ready_s": ready - imported,
        "close_s": time.perf_counter() - ready,
        "high_watermark": end,
        "first_offset": first[0].offset,
        "last_offset": last[-1].offset,
        "segments": stats.segment_count,
        "log_bytes": stats.size_bytes,
        "recovery": recovery,
    }
    print(json.dumps(doc), flush=True)


def soak_value(i: int) -> tuple[bytes, bytes]:
    """Key and value of soak message ``i`` (checkable without storing anything)."""
    key = b"K%02d" % (i % 50)
    body = (b"%012d|" % i) * 16  # 208 bytes, unique per message
    return key, body[:VALUE]


def child_soak(data: str, total: int, batch: int) -> None:
    """Produce soak messages from the recovered end to ``total``; print acked offsets."""
    from lkstream import Broker

    out = sys.stdout

    async def produce() -> None:
        broker = Broker(persist_dir=data, fsync_mode="group")
        start = 0
        if SOAK_TOPIC in broker.list_topics():
            start = broker.partition(SOAK_TOPIC, 0).high_watermark
        out.write(f"START {start}\n")
        out.flush()
        i = start
        while i < total:
            n = min(batch, total - i)
            result = await broker.produce_many(SOAK_TOPIC, [soak_value(j) for j in range(i, i + n)])
            if result[0][1] != i or result[-1][1] != i + n - 1:
                raise SystemExit(f"offsets {result[0]}..{result[-1]} do not match messages {i}..")
            out.write(f"{i + n - 1}\n")
            out.flush()
            i += n
        broker.close()
        out.write("DONE\n")
        out.flush()

    asyncio.run(produce())


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "benchmarks.e2e.bench_recovery", *args],
        stdout=subprocess.PIPE,
        text=True,
        bufsize=1,
    )


class AckReader:
    """Follows a child's stdout in a thread: the highest acknowledged offset so far."""

    def __init__(self, stream: IO[str]) -> None:
        self.acked = -1
        self.start: int | None = None
        self.done = False
        self.changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, args=(stream,), daemon=True)
        self._thread.start()

    def _run(self, stream: IO[str]) -> None:
        for line in stream:
            with self.changed:
                if line.startswith("START"):
                    self.start = int(line.split()[1])
                elif line.startswith("DONE"):
                    self.done = True
                else:
                    self.acked = int(line)
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def join(self) -> None:
        self._thread.join()


# -- part 1: big log, RSS, restart -----------------------------------------------------------------


def open_in_fresh_process(data: Path) -> dict[str, Any]:
    started = time.perf_counter()
    proc = spawn("--child", "open", "--data", str(data))
    out, _ = proc.communicate(timeout=600)
    if proc.returncode:
        raise SystemExit(f"opener failed with {proc.returncode}")
    doc: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    doc["process_wall_s"] = time.perf_counter() - started
    return doc


def write_and_kill(data: Path, target_bytes: int | None, seconds: float | None, seed: int) -> dict[str, Any]:
    """Run a writer until the log holds ``target_bytes`` (or for ``seconds``), then SIGKILL it."""
    start_bytes = dir_bytes(data) if data.exists() else 0
    proc = spawn("--child", "writer", "--data", str(data), "--seed", str(seed))
    acks = AckReader(proc.stdout)  # type: ignore[arg-type]
    samples: list[tuple[float, int, int]] = []  # (seconds, bytes written, rss)
    started = time.perf_counter()
    last_log = started
    while True:
        time.sleep(0.25)
        now = time.perf_counter()
        written = dir_bytes(data) - start_bytes
        rss = rss_bytes(proc.pid)
        if proc.poll() is not None:
            raise SystemExit(f"writer exited early with {proc.returncode}")
        samples.append((now - started, written, rss))
        if now - last_log > 5:
            log(f"  writer: {written / GB:.2f} GB written, RSS {rss / MB:.0f} MB")
            last_log = now
        if (target_bytes is not None and written >= target_bytes) or (seconds is not None and now - started >= seconds):
            break
    acked_before_kill = acks.acked
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    acks.join()
    elapsed = time.perf_counter() - started
    written = dir_bytes(data) - start_bytes
    after_warmup = [s for s in samples if s[1] >= 0.1 * written] or samples
    rss_max = max(s[2] for s in samples)
    return {
        "write_seconds": elapsed,
        "written_bytes": written,
        "write_MB_per_s": written / elapsed / MB,
        "acked_offset_at_kill": acks.acked,
        "acked_offset_sampled_before_kill": acked_before_kill,
        "rss_max_MB": rss_max / MB,
        "rss_at_10pct_MB": after_warmup[0][2] / MB,
        "rss_at_end_MB": samples[-1][2] / MB,
        "rss_growth_after_10pct_MB": (samples[-1][2] - after_warmup[0][2]) / MB,
        "rss_samples": [(round(t, 2), w, r) for t, w, r in samples[:: max(1, len(samples) // 200)]],
    }


def part_big(root: Path, nbytes: int, runs: int, seed: int, cold: bool) -> dict[str, Any]:
    data = root / "big"
    rng = random.Random(seed)
    runs_out = []
    for run in range(runs):
        if run == 0:
            log(f"run 1: writing {nbytes / GB:.1f} GB with a writer process")
            written = write_and_kill(data, nbytes, None, seed)
        else:
            seconds = rng.uniform(1.0, 3.0)
            log(f"run {run + 1}: appending for {seconds:.2f}s, then SIGKILL")
            written = write_and_kill(data, None, seconds, seed + run)
        opened = open_in_fresh_process(data)
        lost = written["acked_offset_at_kill"] >= opened["high_watermark"]
        opened["acked_records_lost"] = lost
        log(
            f"run {run + 1}: killed at acked offset {written['acked_offset_at_kill']:,}, reopened "
            f"{opened['log_bytes'] / GB:.2f} GB / {opened['segments']} segments: open "
            f"{opened['open_s']:.3f}s ready {opened['ready_s']:.3f}s (process {opened['process_wall_s']:.2f}s)"
            f", RSS max {written['rss_max_MB']:.0f} MB"
        )
        if lost:
            raise SystemExit("acknowledged records lost after SIGKILL")
        runs_out.append({"write": written, "reopen": opened})
    out: dict[str, Any] = {"runs": runs_out}
    if cold:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        out["cold_reopen"] = open_in_fresh_process(data)
        log(f"cold reopen: {out['cold_reopen']['ready_s']:.3f}s ready")
    return out


# -- part 2: crash soak ----------------------------------------------------------------------------


def verify_soak(data: Path, acked: int, final: bool, total: int) -> dict[str, Any]:
    """Open the log in this process and check every record; return the recovery facts."""
    from lkstream import Broker

    started = time.perf_counter()
    broker = Broker(persist_dir=str(data), fsync_mode="group")
    open_s = time.perf_counter() - started
    try:
        recovery = [r for r in broker.recoveries if r.topic == SOAK_TOPIC]
        partition = broker.partition(SOAK_TOPIC, 0)
        end = partition.high_watermark
        if end <= acked:
            raise SystemExit(f"LOST acknowledged records: log ends at {end}, acked up to {acked}")
        offset = 0
        while offset < end:
            for record in partition.read_from(offset, max_bytes=4 * 1024 * 1024):
                if record.offset != offset or (record.key, record.value) != soak_value(offset):
                    raise SystemExit(f"record {record.offset} wrong or out of order (expected {offset})")
                offset += 1
        if final and end != total:
            raise SystemExit(f"final log has {end} records, expected {total}")
        return {
            "open_s": open_s,
            "verify_s": time.perf_counter() - started - open_s,
            "log_end": end,
            "acked": acked + 1,
            "unacked_but_kept": end - acked - 1,
            "truncated_bytes": sum(r.truncated_bytes for r in recovery),
            "truncation_reasons": [r.report.reason for r in recovery if r.truncated_bytes],
        }
    finally:
        broker.close()


def part_soak(root: Path, total: int, kills: int, batch: int, seed: int) -> dict[str, Any]:
    data = root / f"soak-{seed}"
    rng = random.Random(seed)
    points = sorted(rng.randrange(total // 20, total * 19 // 20) for _ in range(kills))
    delays = [rng.uniform(0.0, 0.02) for _ in range(kills)]
    log(f"soak seed {seed}: kill after acked >= {points} (+{[round(d * 1000, 1) for d in delays]} ms)")
    recoveries = []
    started = time.perf_counter()
    for point, delay in zip(points, delays, strict=True):
        proc = spawn("--child", "soak", "--data", str(data), "--total", str(total), "--batch", str(batch))
        acks = AckReader(proc.stdout)  # type: ignore[arg-type]
        with acks.changed:
            acks.changed.wait_for(lambda p=point, a=acks, c=proc: a.acked >= p or a.done or c.poll() is not None)
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        acks.join()
        if acks.done:
            raise SystemExit("the soak child finished before it could be killed; use more messages")
        check = verify_soak(data, acks.acked, final=False, total=total)
        check.update({"kill_after_acked": point, "resumed_at": acks.start, "acked_at_kill": acks.acked})
        recoveries.append(check)
        log(
            f"  kill {len(recoveries)}: acked {acks.acked + 1:,}, log end {check['log_end']:,}, "
            f"truncated {check['truncated_bytes']} B, reopen {check['open_s'] * 1000:.1f} ms: verified"
        )
    proc = spawn("--child", "soak", "--data", str(data), "--total", str(total), "--batch", str(batch))
    acks = AckReader(proc.stdout)  # type: ignore[arg-type]
    returncode = proc.wait()
    acks.join()
    if returncode != 0 or not acks.done:
        raise SystemExit(f"final soak child failed ({returncode})")
    final = verify_soak(data, acks.acked, final=True, total=total)
    final["resumed_at"] = acks.start
    log(f"  final: {final['log_end']:,} records verified in order")
    return {
        "seed": seed,
        "messages": total,
        "kills": kills,
        "kill_points": points,
        "recoveries": recoveries,
        "final": final,
        "seconds": time.perf_counter() - started,
        "verified": True,
    }


# -- main ------------------------------------------------------------------------------------------


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, help="log size for the restart test (default 10; quick 0.5; 0 skips)")
    parser.add_argument("--cold", action="store_true", help="also time a reopen after dropping the page cache")
    parser.add_argument("--soak-msgs", type=int, help="messages per soak (default 1,000,000; quick 200,000)")
    parser.add_argument("--kills", type=int, default=3, help="SIGKILLs per soak (default 3)")
    parser.add_argument("--soak-batch", type=int, default=100, help="records per produce call in the soak")
    parser.add_argument("--child", choices=("writer", "open", "soak"), help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--total", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "writer":
        return child_writer(args.data, args.seed)
    if args.child == "open":
        return child_open(args.data)
    if args.child == "soak":
        return child_soak(args.data, args.total, args.batch)

    gb = args.gb if args.gb is not None else (0.5 if args.quick else 10.0)
    soak_msgs = args.soak_msgs or (200_000 if args.quick else 1_000_000)
    payload: dict[str, Any] = {
        "settings": {
            "fsync_mode": "group",
            "batch_records": BATCH,
            "value_bytes": VALUE,
            "log_GB": gb,
            "soak_messages": soak_msgs,
            "soak_kills": args.kills,
            "soak_batch": args.soak_batch,
        }
    }
    targets = []
    with bench_dir(args.tmp_root, "recovery") as root:
        check_free_space(root, int(gb * GB * 1.05 + 3 * GB + soak_msgs * 300 * args.runs))
        facts = machine_facts(root)
        if gb > 0:
            big = part_big(root, int(gb * GB), args.runs, args.seed, args.cold)
            payload["restart"] = big
            runs = big["runs"]
            ready = summary([r["reopen"]["ready_s"] for r in runs])
            payload["restart_summary"] = {
                "log_GB": summary([r["reopen"]["log_bytes"] / GB for r in runs]),
                "open_s": summary([r["reopen"]["open_s"] for r in runs]),
                "ready_s": ready,
                "process_wall_s": summary([r["reopen"]["process_wall_s"] for r in runs]),
                "import_s": summary([r["reopen"]["import_s"] for r in runs]),
            }
            first = runs[0]["write"]
            flat = first["rss_growth_after_10pct_MB"] < RSS_FLAT_MB
            targets.append(
                {
                    "target": f"restart after SIGKILL with {gb:g} GB: ready < 2 s",
                    "measured": ready,
                    "unit": "s (Broker() + first and last record read, fresh process)",
                    "verdict": verdict(ready["median"], 2.0, higher_is_better=False)
                    + ("" if gb >= 10 else " (log smaller than 10 GB)"),
                }
            )
            targets.append(
                {
                    "target": "writer RSS while writing the log: < 300 MB and flat",
                    "measured": summary([r["write"]["rss_max_MB"] for r in runs], 1),
                    "unit": "MB (max RSS per run; growth after 10% of run 1: "
                    f"{first['rss_growth_after_10pct_MB']:.1f} MB)",
                    "verdict": "pass" if first["rss_max_MB"] * MB < RSS_LIMIT and flat else "miss",
                }
            )
        soaks = []
        for run in range(args.runs):
            soak = part_soak(root, soak_msgs, args.kills, args.soak_batch, args.seed + run)
            soaks.append(soak)
            shutil.rmtree(root / f"soak-{args.seed + run}", ignore_errors=True)
        payload["soak"] = soaks
        ok = all(s["verified"] for s in soaks)
        targets.append(
            {
                "target": f"crash soak: {soak_msgs:,} msgs x {args.kills} SIGKILLs, every recovery verified",
                "measured": {
                    "soaks": len(soaks),
                    "recoveries_verified": sum(len(s["recoveries"]) for s in soaks),
                    "seeds": [s["seed"] for s in soaks],
                    "reopen_ms": summary([r["open_s"] * 1000 for s in soaks for r in s["recoveries"]]),
                },
                "unit": "",
                "verdict": "pass" if ok and soak_msgs >= 1_000_000 else ("pass (small)" if ok else "miss"),
            }
        )
    payload["targets"] = targets
    emit("bench_recovery", args, payload, facts)


if __name__ == "__main__":
    main()
