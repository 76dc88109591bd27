"""What holds the memory of the peer suite's embedded phases (issue 14, row 7), phase by phase.

Runs the embedded block of ``benchmarks.suite.run`` (the same phases, sizes and order as the suite,
``LkEmbedded`` in this process, which imports nothing but LKSTREAM and the suite's own modules, as
the suite's child process does) and records after each phase: VmRSS and VmHWM, the bytes the hot
tails hold (``Broker.tail_budget``), and with ``--trace`` the bytes Python's allocator holds
(``tracemalloc``) with the top allocation sites at the phase that peaked. The difference between
VmRSS and what Python holds is memory the C allocator keeps after Python freed it.

    python -m benchmarks.e2e.bench_rss              # about 30 s
    python -m benchmarks.e2e.bench_rss --trace      # slower (tracemalloc), with allocation sites
"""

from __future__ import annotations

import gc
import shutil
import time
import tracemalloc
from pathlib import Path
from typing import Any

from benchmarks._common import base_parser, bench_dir, emit, log, machine_facts
from benchmarks.suite import run as suite
from benchmarks.suite.core import Schedule, keyed_records, payloads
from benchmarks.suite.lk_embedded import LkEmbedded

MiB = 1024 * 1024


def memory() -> dict[str, float]:
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return {k: int(fields[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM")}


class Phases:
    """Runs the suite's phases one by one and records memory after each."""

    def __init__(self, system: LkEmbedded, trace: bool) -> None:
        self.system = system
        self.trace = trace
        self.rows: list[dict[str, Any]] = []
        self.peak: tuple[float, str, Any] = (0.0, "", None)

    def after(self, phase: str) -> None:
        row: dict[str, Any] = {"phase": phase, **memory()}
        row["hot_tail_MiB"] = self.system.target.tail_budget.bytes / MiB
        row["gc_tracked_objects"] = len(gc.get_objects())
        if self.trace:
            current, peak = tracemalloc.get_traced_memory()
            row["python_MiB"], row["python_peak_MiB"] = current / MiB, peak / MiB
            if peak > self.peak[0]:
                self.peak = (peak, phase, tracemalloc.take_snapshot())
            tracemalloc.reset_peak()
        self.rows.append(row)
        log(f"{phase:28} " + ", ".join(f"{k}={v:,.1f}" for k, v in row.items() if isinstance(v, float)))

    def run(self, prof: suite.Profile, seed: int) -> None:
        s = self.system
        for size in prof.sizes:
            values = payloads(seed, size)
            for parts in prof.partitions:
                topic = f"r0.s{size}.p{parts}"
                produced = s.produce(topic, parts, values, prof.max_msgs, prof.max_seconds)
                self.after(f"produce {size} B x{parts}")
                s.consume(topic, parts, produced.msgs, prof.consume_timeout)
                self.after(f"consume {size} B x{parts}")
                if parts == 1:
                    s.produce_many(topic + ".many", 1, values, prof.max_msgs, prof.max_seconds)
                    self.after(f"produce_many {size} B")
        s.produce_keyed("r0.keyed", suite.KEYED_PARTITIONS, keyed_records(seed, suite.KEYED_VALUE), prof.max_msgs, 1.5)
        self.after("produce_keyed")
        schedule = Schedule(rate=suite.FIXED_RATE, seconds=prof.latency_seconds)
        for name, phase in (
            ("ack_10k", s.ack_latency),
            ("ack_10k_unbatched", s.ack_latency_unbatched),
            ("ack_10k_one_call", s.ack_latency_one_call),
        ):
            phase(f"r0.{name}", schedule, suite.LATENCY_VALUE)
            self.after(name)
        # The suite offers 80% of this run's 1 KiB ceiling; a fixed 250k msg/s stands in for it here.
        s.ack_latency("r0.ack80", Schedule(rate=250_000, seconds=0.6), suite.LATENCY_VALUE)
        self.after("ack_80pct (250k msg/s offered)")
        s.e2e("r0.e2e", schedule, suite.LATENCY_VALUE)
        self.after("e2e_10k")


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--trace", action="store_true", help="tracemalloc: Python's share and allocation sites")
    args = parser.parse_args()
    args.runs = 1
    started = time.perf_counter()
    if args.trace:
        tracemalloc.start(6)
    with bench_dir(args.tmp_root, "rss") as root:
        facts = machine_facts(root)
        system = LkEmbedded()
        system.start(root / "data")
        log(f"started: {memory()}")
        phases = Phases(system, args.trace)
        try:
            phases.run(suite.QUICK if args.quick else suite.FULL, args.seed or 20240601)
        finally:
            system.stop()
            shutil.rmtree(root / "data", ignore_errors=True)
    peak_phase = max(phases.rows, key=lambda r: r["VmRSS"])
    payload: dict[str, Any] = {
        "phases": phases.rows,
        "peak": {"VmHWM_MB": max(r["VmHWM"] for r in phases.rows) * 1.048576, "phase": peak_phase["phase"]},
        "seconds": time.perf_counter() - started,
    }
    if phases.peak[2] is not None:
        stats = phases.peak[2].statistics("lineno")[:15]
        payload["top_allocations_at_python_peak"] = {
            "phase": phases.peak[1],
            "sites": [{"where": str(s.traceback[0]), "MiB": s.size / MiB, "count": s.count} for s in stats],
        }
        for s in stats[:8]:
            log(f"  {s.size / MiB:8.1f} MiB  {s.traceback[0]}")
    emit("bench_rss", args, payload, facts)


if __name__ == "__main__":
    main()
