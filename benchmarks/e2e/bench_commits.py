"""Committed-offset throughput with durable writes: the offsets journal vs per-file atomic_write.

``journal``         ``OffsetStore.commit`` from ``--threads`` threads (default 8), each
                    cycling over its own ``--groups`` groups (default 64, so 512 keys in
                    all) for ``--seconds`` (default 5): a commit returns once fsynced,
                    concurrent commits share one fsync (group commit). Compaction (1 MiB
                    journal) runs inside the measurement. Target: >= 2,000 commits/s.
``journal_submit``  the same through the non-blocking ``OffsetStore.submit`` (each thread
                    keeps up to 32 commits in flight); counts commits whose callback ran.
``atomic_write``    the path offsets took before the journal: one tmp + fsync + rename +
                    directory fsync per commit (``lkstream.storage.files.atomic_write``),
                    same threads, groups and duration.

Each scenario runs ``--runs`` times (default 3); the figure is the median commits/s, and
``ratio_journal_vs_atomic_write`` compares the medians measured in the same run. On a
shared or virtualised disk fsync latency dominates and varies a lot between runs.

    python -m benchmarks.e2e.bench_commits           # full: 3 x 5 s per scenario
    python -m benchmarks.e2e.bench_commits --quick   # smoke run: 1 s per scenario
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks._common import base_parser, bench_dir, emit, log, machine_facts, summary, verdict
from lkstream.storage.files import atomic_write
from lkstream.storage.offsets import OffsetStore

TARGET = 2_000.0
TOPIC = "orders"


def run_threads(threads: int, seconds: float, work: Callable[[int, Callable[[], bool]], int]) -> tuple[int, float]:
    """Run ``work(thread_no, keep_going)`` on ``threads`` threads; return (commits, elapsed)."""
    barrier = threading.Barrier(threads + 1)
    counts = [0] * threads
    deadline = 0.0

    def keep_going() -> bool:
        return time.monotonic() < deadline

    def body(n: int) -> None:
        barrier.wait()
        counts[n] = work(n, keep_going)

    workers = [threading.Thread(target=body, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    deadline = time.monotonic() + seconds
    started = time.perf_counter()
    barrier.wait()
    for w in workers:
        w.join()
    return sum(counts), time.perf_counter() - started


def journal_run(root: Path, threads: int, groups: int, seconds: float) -> dict[str, Any]:
    store = OffsetStore(str(root))
    assert store.journal is not None
    fsyncs_before = store.journal.fsyncs

    def work(n: int, keep_going: Callable[[], bool]) -> int:
        done = 0
        while keep_going():
            store.commit(f"g{n}-{done % groups}", TOPIC, done % 4, done)
            done += 1
        return done

    commits, elapsed = run_threads(threads, seconds, work)
    fsyncs = store.journal.fsyncs - fsyncs_before
    store.close()
    check = OffsetStore(str(root), read_only=True).list_committed()
    assert len(check) >= threads, "commits did not survive close + reopen"
    return {"commits": commits, "seconds": elapsed, "fsyncs": fsyncs}


def submit_run(root: Path, threads: int, groups: int, seconds: float) -> dict[str, Any]:
    store = OffsetStore(str(root))
    errors: list[BaseException] = []

    def work(n: int, keep_going: Callable[[], bool]) -> int:
        window = threading.Semaphore(32)
        acked = [0]
        lock = threading.Lock()

        def on_durable(error: BaseException | None) -> None:
            if error is not None:
                errors.append(error)
            with lock:
                acked[0] += 1
            window.release()

        sent = 0
        while keep_going():
            window.acquire()
            store.submit(f"g{n}-{sent % groups}", {(TOPIC, sent % 4): sent}, on_durable)
            sent += 1
        for _ in range(32):  # wait for the ones in flight
            window.acquire()
        return acked[0]

    commits, elapsed = run_threads(threads, seconds, work)
    store.close()
    assert not errors, errors[:3]
    return {"commits": commits, "seconds": elapsed}


def atomic_write_run(root: Path, threads: int, groups: int, seconds: float) -> dict[str, Any]:
    directory = root / "offsets-old"
    directory.mkdir(exist_ok=True)

    def work(n: int, keep_going: Callable[[], bool]) -> int:
        done = 0
        while keep_going():
            group = f"g{n}-{done % groups}"
            body = json.dumps({"offset": done, "committed_ms": int(time.time() * 1000)}).encode() + b"\n"
            atomic_write(str(directory / f"{group}__{TOPIC}__part{done % 4}.offset"), body)
            done += 1
        return done

    commits, elapsed = run_threads(threads, seconds, work)
    return {"commits": commits, "seconds": elapsed}


SCENARIOS: dict[str, Callable[[Path, int, int, float], dict[str, Any]]] = {
    "journal": journal_run,
    "journal_submit": submit_run,
    "atomic_write": atomic_write_run,
}


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--groups", type=int, default=64, help="groups per thread")
    parser.add_argument("--seconds", type=float, help="seconds per run (default 5; quick 1)")
    args = parser.parse_args()
    seconds = args.seconds or (1.0 if args.quick else 5.0)
    results: dict[str, Any] = {}
    with bench_dir(args.tmp_root, "commits") as root:
        facts = machine_facts(root)
        for name, scenario in SCENARIOS.items():
            rates: list[float] = []
            extra: list[dict[str, Any]] = []
            for run in range(args.runs):
                run_dir = root / f"{name}-{run}"
                run_dir.mkdir()
                out = scenario(run_dir, args.threads, args.groups, seconds)
                rate = out["commits"] / out["seconds"]
                rates.append(rate)
                extra.append(out)
                log(f"{name} run {run + 1}: {rate:,.0f} commits/s {out}")
            results[name] = {"commits_per_s": summary(rates, 1), "detail": extra}
            if "fsyncs" in extra[0]:
                per = [o["commits"] / max(1, o["fsyncs"]) for o in extra]
                results[name]["commits_per_fsync"] = summary(per, 2)
    journal = results["journal"]["commits_per_s"]["median"]
    old = results["atomic_write"]["commits_per_s"]["median"]
    payload = {
        "config": {"threads": args.threads, "groups_per_thread": args.groups, "seconds": seconds, "pid": os.getpid()},
        "target_commits_per_s": TARGET,
        "scenarios": results,
        "ratio_journal_vs_atomic_write": round(journal / old, 2) if old else None,
        "verdict": {
            "journal": verdict(journal, TARGET),
            "journal_submit": verdict(results["journal_submit"]["commits_per_s"]["median"], TARGET),
        },
        "note": "2-core shared machine: fsync latency and CPU contention make these numbers noisy",
    }
    emit("bench_commits", args, payload, facts)


if __name__ == "__main__":
    main()
