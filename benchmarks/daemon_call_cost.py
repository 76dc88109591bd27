"""The cost of one small produce call against the daemon: wall time and CPU of each process per call.

Row 6 of issue 14 is a threshold: at 10,000 msg/s in 1 ms ticks a ``Producer`` keeps up only while
a call to the daemon takes less than a tick, so its p50 tells "behind or not", not how much a
change costs. This measures the call itself: a fresh daemon (``bench_daemon.DaemonProcess``),
``await rb.produce_many(topic, [(None, 200 B)] * records)`` called ``--calls`` times one after
the other from ``asyncio.run`` (as the open-model harness does), and per call the wall time
(p50, p90, mean, calls over 2 and 5 ms, the slowest) and the CPU time of the daemon
(``/proc/PID/stat``) and of this client (``getrusage``). CPU per call moves less with the
machine's load than wall time does; compare revisions interleaved (``PYTHONPATH`` to a
revision's tree, as ``quick.py --against`` builds one).

    .venv/bin/python benchmarks/daemon_call_cost.py --runs 3
    PYTHONPATH=/path/to/rev .venv/bin/python benchmarks/daemon_call_cost.py --runs 1 --no-save
"""

from __future__ import annotations

import asyncio
import os
import resource
import time
from typing import Any

from _common import base_parser, bench_dir, emit, log, machine_facts, percentile, summary
from bench_daemon import SMALL, DaemonProcess

import lkstream

WARMUP_CALLS = 300


def process_cpu_s(pid: int, path: str = "") -> float:
    """User + system CPU seconds of process ``pid`` (fields 14 and 15 of /proc/PID/stat, or of ``path``)."""
    with open(path or f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main_thread_cpu_s(pid: int) -> float:
    """User + system CPU seconds of the main thread (the event loop) of process ``pid``."""
    return process_cpu_s(pid, f"/proc/{pid}/task/{pid}/stat")


def own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def one_run(rb: Any, daemon_pid: int, topic: str, records: int, calls: int) -> dict[str, float]:
    batch = [(None, bytes(SMALL))] * records
    rb.create_topic(topic, 1)

    async def go() -> tuple[list[float], float, float, float, float]:
        for _ in range(WARMUP_CALLS):
            await rb.produce_many(topic, batch)
        walls = []
        loop0 = main_thread_cpu_s(daemon_pid)
        daemon0, own0, started = process_cpu_s(daemon_pid), own_cpu_s(), time.perf_counter()
        for _ in range(calls):
            before = time.perf_counter()
            await rb.produce_many(topic, batch)
            walls.append(time.perf_counter() - before)
        elapsed = time.perf_counter() - started
        daemon_cpu = process_cpu_s(daemon_pid) - daemon0
        return walls, daemon_cpu, main_thread_cpu_s(daemon_pid) - loop0, own_cpu_s() - own0, elapsed

    walls, daemon_cpu, loop_cpu, client_cpu, elapsed = asyncio.run(go())
    walls.sort()
    return {
        "wall_p50_us": 1e6 * percentile(walls, 50),
        "wall_p90_us": 1e6 * percentile(walls, 90),
        "wall_mean_us": 1e6 * elapsed / calls,
        "wall_max_ms": 1e3 * walls[-1],
        "calls_over_2ms": float(sum(w > 0.002 for w in walls)),
        "calls_over_5ms": float(sum(w > 0.005 for w in walls)),
        "daemon_cpu_us_per_call": 1e6 * daemon_cpu / calls,
        "daemon_loop_thread_cpu_us_per_call": 1e6 * loop_cpu / calls,
        "client_cpu_us_per_call": 1e6 * client_cpu / calls,
        "loadavg": os.getloadavg()[0],
    }


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=10, help="records per call (default 10: one 1 ms tick)")
    parser.add_argument("--calls", type=int, help="calls per run (default 3,000; quick 500)")
    args = parser.parse_args()
    calls = args.calls or (500 if args.quick else 3000)
    runs: list[dict[str, float]] = []
    with bench_dir(args.tmp_root, "call-cost") as root:
        facts = machine_facts(root)
        for run in range(args.runs):
            run_root = root / f"run{run}"
            run_root.mkdir()
            daemon = DaemonProcess(run_root)  # a fresh daemon per run, as bench_daemon starts one
            try:
                rb = lkstream.connect(daemon.wait_ready())
                try:
                    runs.append(one_run(rb, daemon.pid, f"cost.{run}", args.records, calls))
                finally:
                    rb.close()
            finally:
                daemon.stop()
            log(f"run {run + 1}: " + ", ".join(f"{k}={v:,.1f}" for k, v in runs[-1].items()))
    payload = {
        "settings": {"records_per_call": args.records, "calls": calls, "value_bytes": SMALL, "fsync_mode": "group"},
        "results": {"produce_many": {k: summary([r[k] for r in runs]) for k in runs[0]}},
    }
    emit("daemon_call_cost", args, payload, facts)


if __name__ == "__main__":
    main()
