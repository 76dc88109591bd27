"""The first queries of a Spark session on the ``lkstream`` format (issue 14, row 8): what a user waits for.

The first read and the first write of a session start Spark's Python processes for the format
(planners and workers, each importing pyspark and lkstream); later queries reuse them. This
script times, in a fresh Spark session per run, the first ``path`` read, the first
``bootstrap`` read and the first sink write of a small log (10,000 rows: the wall time is the
start-up, not the rows), each as its own Spark action, after the session itself has started.

``--tree DIR`` (repeatable) measures the ``lkstream/`` of other trees too (``git archive REV
lkstream`` unpacked, C extensions compiled, as ``quick.py --against`` makes them), run by
run, the order turned each run (ABBA...), so a changing load does not favour one tree:

    .venv/bin/python benchmarks/spark_first_query.py --runs 4 --tree /tmp/main-tree
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO, emit, log, machine_facts

ROWS = 10_000  # two batches of 5,000, one a partition
ACTIONS = ("first_path_read", "first_bootstrap_read", "first_write")


def one_session() -> dict[str, float]:
    """Seconds of each first action in a new session (run inside the measured tree)."""
    from _common import bench_dir
    from bench_daemon import DaemonProcess
    from bench_spark import TOPIC, VALUE_BYTES, build_log, session

    seconds: dict[str, float] = {}
    with bench_dir(REPO / ".bench-tmp", "spark-first") as root:
        build_log(root / "data", ROWS, 1)
        daemon = DaemonProcess(root)
        try:
            address = daemon.wait_ready()
            spark = session()
            reads = {
                "first_path_read": ("path", str(root / "data")),
                "first_bootstrap_read": ("bootstrap", address),
            }
            for action, (option, where) in reads.items():
                start = time.perf_counter()
                df = spark.read.format("lkstream").option(option, where).option("subscribe", TOPIC).load()
                df.write.format("noop").mode("overwrite").save()
                seconds[action] = time.perf_counter() - start
            rows = spark.range(ROWS, numPartitions=2).selectExpr(f"CAST(repeat('x', {VALUE_BYTES}) AS BINARY) AS value")
            start = time.perf_counter()
            rows.write.mode("append").format("lkstream").option("bootstrap", address).option("topic", "first").save()
            seconds["first_write"] = time.perf_counter() - start
            spark.stop()
        finally:
            daemon.stop()
    return seconds


def run_tree(tree: Path) -> dict[str, float]:
    """One session importing lkstream from ``tree`` (inside it, the tree first on PYTHONPATH)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(REPO)]), "SPARK_LOCAL_IP": "127.0.0.1"}
    code = f"import sys, json; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
    code += "import spark_first_query as m; print(json.dumps(m.one_session()))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True, check=False, timeout=600
    )
    if done.returncode != 0:
        raise SystemExit(f"a session on {tree} failed:\n{done.stderr[-2000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--tree", action="append", default=[], help="another tree holding lkstream/ (repeatable)")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()
    args.quick, args.seed = False, None
    trees = [("working tree", REPO), *((t, Path(t)) for t in args.tree)]
    seconds: dict[str, dict[str, list[float]]] = {name: {a: [] for a in ACTIONS} for name, _ in trees}
    for run in range(args.runs):
        for name, tree in trees if run % 2 == 0 else trees[::-1]:
            for action, value in run_tree(tree).items():
                seconds[name][action].append(value)
            log(f"run {run + 1}/{args.runs} {name}: " + ", ".join(f"{a} {seconds[name][a][-1]:.2f} s" for a in ACTIONS))
    results: dict[str, Any] = {
        name: {a: {"median_s": round(statistics.median(v), 3), "runs": [round(x, 3) for x in v]} for a, v in by.items()}
        for name, by in seconds.items()
    }
    for action in ACTIONS:
        line = "  ".join(f"{name}: {results[name][action]['median_s']:6.2f} s" for name, _ in trees)
        print(f"{action:<22}{line}", file=sys.stderr)
    emit("spark_first_query", args, {"rows": ROWS, "results": results}, machine_facts(REPO))


if __name__ == "__main__":
    main()
