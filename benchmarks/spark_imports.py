"""What lkstream costs each Python process Spark starts for the ``lkstream`` format (issue 14, row 8).

Spark runs a Python data source in processes of its own: planners on the driver (they
unpickle ``LkstreamDataSource`` and make the reader or writer) and workers that run the
tasks (they unpickle the reader or writer, then open the log). Each imports what the
pickles name. This script times those imports in fresh interpreters, after the imports
Spark's own worker module has already made (``pyspark.worker``, which loads pyarrow), so
the figure is what lkstream adds to each such process:

``planner``        ``lkstream.spark`` and a reader and writer made (the planning processes)
``read_path``      a read task of ``path``: the source and the read-only storage reader
``read_bootstrap`` a read task of ``bootstrap``: the source and the gRPC client
``write``          a write task: the sink (and the gRPC client)

``--tree DIR`` (repeatable) times the ``lkstream/`` of other trees too (for example
``git archive main lkstream`` unpacked, its C extensions compiled as ``quick.py --against``
does), run by run interleaved with the working tree's, so both share the machine's load:

    .venv/bin/python benchmarks/spark_imports.py --runs 7 --tree /tmp/main-tree
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO, emit, log, machine_facts

BASELINE = "import pyspark.worker, pyspark.sql.datasource"
ROLES = {
    "planner": "import lkstream.spark as s; d = s.LkstreamDataSource; "
    "import lkstream.spark.source, lkstream.spark.sink",
    "read_path": "import lkstream.spark.source, lkstream.spark.access, lkstream.storage.reader",
    "read_bootstrap": "import lkstream.spark.source, lkstream.spark.access, lkstream.client.remote",
    "write": "import lkstream.spark.sink",
}
PROBE = """
import sys, time
{baseline}
start = time.perf_counter()
{role}
seconds = time.perf_counter() - start
import lkstream
print(seconds, lkstream.__file__, len([m for m in sys.modules if m.startswith("lkstream")]))
"""


def time_role(tree: Path, role: str) -> tuple[float, int]:
    """Seconds of ``role``'s imports in a fresh interpreter importing lkstream from ``tree``."""
    code = PROBE.format(baseline=BASELINE, role=ROLES[role])
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # ``-c`` puts the working directory first on sys.path: run inside the tree, as a Spark worker would.
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True, check=True, timeout=120
    )
    seconds, origin, modules = done.stdout.split()
    if not Path(origin).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"{tree}: lkstream was imported from {origin}, not from the tree")
    return float(seconds), int(modules)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tree", action="append", default=[], help="another tree holding lkstream/ (repeatable)")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()
    args.quick, args.seed = False, None
    trees = {"working tree": REPO, **{t: Path(t) for t in args.tree}}
    seconds: dict[str, dict[str, list[float]]] = {name: {role: [] for role in ROLES} for name in trees}
    modules: dict[str, dict[str, int]] = {name: {} for name in trees}
    for run in range(args.runs):
        for role in ROLES:
            for name, tree in trees.items():  # interleaved: every tree once per role and run
                value, count = time_role(tree, role)
                seconds[name][role].append(value)
                modules[name][role] = count
        log(f"run {run + 1}/{args.runs} done")
    results: dict[str, dict[str, dict[str, Any]]] = {
        name: {
            role: {
                "median_s": round(statistics.median(v), 4),
                "runs": [round(x, 4) for x in v],
                "modules": modules[name][role],
            }
            for role, v in by_role.items()
        }
        for name, by_role in seconds.items()
    }
    for role in ROLES:
        line = "  ".join(f"{name}: {results[name][role]['median_s'] * 1000:6.0f} ms" for name in trees)
        print(f"{role:<16}{line}", file=sys.stderr)
    emit("spark_imports", args, {"baseline": BASELINE, "roles": ROLES, "results": results}, machine_facts(REPO))


if __name__ == "__main__":
    main()
