"""Admin work off the event loop (issue 12, finding 9): other clients' produce/fetch p99 under topic churn.

Starts the daemon (fsync ``group``), then runs the normal clients of ``_hostile.py`` (a producer of
``--rate`` calls/s x 10 records of 200 B on a fixed schedule, point fetches of past offsets, a
Subscribe consumer checking every acknowledged record arrives once) for two windows of
``--seconds``: a quiet one, then one while a second process creates and deletes 4,000-partition
topics in a loop, alternately over gRPC and HTTP. Reports produce and fetch p50/p99/max of each
window and the admin calls' durations, for each of ``--runs`` runs (a fresh daemon each); the
verdict is on the medians over runs.

Before the fix each create or delete ran on the event loop for seconds, and every call of the
normal clients waited that long (produce p99 of seconds). Target: "unaffected": produce and fetch
p99 during churn at most 1.5 times the quiet window's p99 plus 5 ms (the quiet p99 itself depends
on how busy the machine is), and nothing lost.

Beside the clients, a process of its own sleeps 1 ms in a loop and records how late it wakes up
(``machine`` in each window): stalls it sees come from the machine (other processes on the
cores, the host), not from the daemon, and tell what a window's p99 can be at best. The
daemon's CPU time and the time its threads waited for a CPU (``cpu``: /proc schedstat; the
event loop's thread apart) and how busy the machine's cores were tell how much of a window's
latency is the machine's. The measuring process freezes its start-up objects out of its own
garbage collector's walks.

    python -m benchmarks.soak.bench_admin_isolation              # 3 runs of 2 x 60 s
    python -m benchmarks.soak.bench_admin_isolation --quick      # 3 runs of 2 x 10 s
    python -m benchmarks.soak.bench_admin_isolation --runs 1 --seconds 30   # one pair of windows
    python -m benchmarks.soak.bench_admin_isolation --daemon-tree DIR   # DIR/lkstream serves (A/B)
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks._common import REPO, base_parser, bench_dir, emit, log, machine_facts
from benchmarks.soak._hostile import Daemon, NormalClients, churn, latency_summary, process_sample, run_in_process

#: "Unaffected": p99 under churn at most this factor of the quiet window's p99, plus P99_SLACK_MS.
P99_FACTOR = 1.5
P99_SLACK_MS = 5.0
PARTITIONS = 4000
#: The machine probe's nap: it reports how much later than this it woke up.
PROBE_NAP_S = 0.001


async def machine_probe(seconds: float) -> dict[str, Any]:
    """Sleep PROBE_NAP_S in a loop for ``seconds`` (in a process of its own); summarise the lateness."""
    lateness: list[float] = []
    end = time.perf_counter() + seconds
    while (started := time.perf_counter()) < end:
        time.sleep(PROBE_NAP_S)  # blocking on purpose: this process serves nothing else
        lateness.append(time.perf_counter() - started - PROBE_NAP_S)
    return latency_summary(lateness)


def sched_sample(pid: int) -> dict[str, float]:
    """Seconds ``pid`` spent on a CPU and waiting for one (its threads' /proc schedstat), and the machine's busy time.

    ``loop_*`` is the main thread, which runs the daemon's event loop. A thread that ended
    meanwhile takes its counts with it: the sums are lower bounds.
    """
    on_cpu = waiting = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError, ValueError):
            on, delay, _ = (int(v) for v in Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split())
            on_cpu, waiting = on_cpu + on, waiting + delay
    loop_on, loop_wait, _ = (int(v) for v in Path(f"/proc/{pid}/schedstat").read_text().split())
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle + iowait
    hz = os.sysconf("SC_CLK_TCK")
    return {
        "cpu_s": on_cpu / 1e9,
        "runqueue_wait_s": waiting / 1e9,
        "loop_cpu_s": loop_on / 1e9,
        "loop_runqueue_wait_s": loop_wait / 1e9,
        "machine_busy_s": (sum(ticks[:8]) - idle) / hz,
        "machine_total_s": sum(ticks[:8]) / hz,
    }


def sched_delta(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, float]:
    """What the daemon and the machine did between two samples, per second of the window."""
    delta = {key: after[key] - before[key] for key in before}
    return {
        "daemon_cpu_cores": round(delta["cpu_s"] / seconds, 3),
        "daemon_runqueue_wait_per_s": round(delta["runqueue_wait_s"] / seconds, 3),
        "loop_cpu_share": round(delta["loop_cpu_s"] / seconds, 3),
        "loop_runqueue_wait_share": round(delta["loop_runqueue_wait_s"] / seconds, 3),
        "machine_busy_share": round(delta["machine_busy_s"] / max(delta["machine_total_s"], 1e-9), 3),
    }


async def measure(daemon: Daemon, seconds: float, rate: float) -> dict[str, Any]:
    clients = NormalClients(daemon.grpc, rate=rate)
    normal = asyncio.create_task(clients.run(2 * seconds))
    quiet_probe = await asyncio.to_thread(run_in_process, machine_probe, seconds)
    at_start = sched_sample(daemon.pid)
    await asyncio.sleep(seconds)
    at_churn = sched_sample(daemon.pid)
    log(f"quiet window done; churning {PARTITIONS}-partition topics for {seconds:.0f} s")
    join = await asyncio.to_thread(
        run_in_process, churn, daemon.grpc, daemon.http, PARTITIONS, seconds, ready_timeout=60.0
    )
    churn_probe = await asyncio.to_thread(run_in_process, machine_probe, seconds)
    await asyncio.sleep(seconds)
    at_end = sched_sample(daemon.pid)
    await normal
    admin = await asyncio.to_thread(join, 600.0)
    quiet, busy = clients.report(0, seconds), clients.report(seconds, 2 * seconds)
    quiet["machine"] = await asyncio.to_thread(quiet_probe, 60.0)
    busy["machine"] = await asyncio.to_thread(churn_probe, 60.0)
    quiet["cpu"] = sched_delta(at_start, at_churn, seconds)
    busy["cpu"] = sched_delta(at_churn, at_end, seconds)
    return {
        "quiet": quiet,
        "churn": busy,
        "admin": admin,
        "completeness": clients.completeness(),
        "daemon": process_sample(daemon.pid),
    }


def one_run(args: Any, seconds: float) -> dict[str, Any]:
    """A fresh daemon, a quiet window, then a churn window."""
    with bench_dir(args.tmp_root, "admin-isolation") as root:
        daemon = Daemon(root, {"fsync_mode": "group"}, tree=args.daemon_tree or REPO)
        try:
            daemon.wait_ready()
            gc.collect()
            gc.freeze()  # the measuring process's own full collections must not walk its start-up heap
            started = time.perf_counter()
            result = asyncio.run(measure(daemon, seconds, args.rate))
            log(f"measured in {time.perf_counter() - started:.0f} s")
        finally:
            code = daemon.stop()
            log(f"daemon stopped, exit code {code}")
    quiet, busy = result["quiet"], result["churn"]
    log(
        f"produce p99 {quiet['produce'].get('p99_ms')} -> {busy['produce'].get('p99_ms')} ms, "
        f"fetch p99 {quiet['fetch'].get('p99_ms')} -> {busy['fetch'].get('p99_ms')} ms; "
        f"machine lateness p99 {quiet['machine'].get('p99_ms')} -> {busy['machine'].get('p99_ms')} ms; "
        f"admin {result['admin']['topics_created']} creates, {result['admin']['topics_deleted']} deletes; "
        f"{result['completeness']}"
    )
    result["loadavg_at_end"] = list(os.getloadavg())
    return result


def p99_verdict(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The target on the medians over runs of each window's p99 (each run's own verdict beside it)."""

    def median_p99(window: str, kind: str) -> float:
        return float(statistics.median(r[window][kind].get("p99_ms", float("inf")) for r in runs))

    measured: dict[str, Any] = {}
    within = True
    for kind in ("produce", "fetch"):
        quiet, churned = median_p99("quiet", kind), median_p99("churn", kind)
        within = within and churned <= P99_FACTOR * quiet + P99_SLACK_MS
        measured[kind] = {"quiet_p99_ms": quiet, "churn_p99_ms": churned}
    measured["per_run"] = [
        all(
            r["churn"][kind].get("p99_ms", float("inf"))
            <= P99_FACTOR * r["quiet"][kind].get("p99_ms", 0.0) + P99_SLACK_MS
            for kind in ("produce", "fetch")
        )
        for r in runs
    ]
    return {
        "target": f"median over runs of produce and fetch p99 during {PARTITIONS}-partition topic churn <= "
        f"{P99_FACTOR} x quiet p99 + {P99_SLACK_MS} ms",
        "measured": measured,
        "verdict": "pass" if within else "MISS",
    }


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, help="length of each window (default 60; quick 10)")
    parser.add_argument("--rate", type=float, default=200.0, help="normal produce calls per second (default 200)")
    parser.add_argument(
        "--daemon-tree",
        type=Path,
        help="run the daemon of DIR/lkstream (another checkout, for A/B runs; default: this tree)",
    )
    args = parser.parse_args()
    seconds = args.seconds or (10.0 if args.quick else 60.0)
    with bench_dir(args.tmp_root, "admin-isolation") as root:
        facts = machine_facts(root)
    runs = [one_run(args, seconds) for _ in range(max(1, args.runs))]
    lost = sum(r["completeness"]["lost"] for r in runs)
    duplicated = sum(r["completeness"]["duplicates"] for r in runs)
    payload = {
        "settings": {
            "fsync_mode": "group",
            "window_s": seconds,
            "produce_calls_per_s": args.rate,
            "records": 10,
            "daemon_tree": str(args.daemon_tree or REPO),
        },
        "targets": [
            p99_verdict(runs),
            {
                "target": "every acknowledged record consumed exactly once, in every run",
                "measured": [r["completeness"] for r in runs],
                "verdict": "pass" if lost == 0 and duplicated == 0 else "MISS",
            },
        ],
        "results": runs[0],  # the first run, where earlier result files had their only one
        "runs": runs,
    }
    emit("bench_admin_isolation", args, payload, facts)


if __name__ == "__main__":
    main()
