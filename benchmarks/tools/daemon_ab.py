"""Daemon phases of several git revisions, interleaved: ``bench_daemon --runs 1`` per revision per round.

The daemon's latency figures swing by two orders of magnitude with the machine's load
(docs/benchmarks-notes.md, "How to measure on this machine"), so revisions are compared only
inside one session, alternating: each round runs every revision once, the order reversed every
other round. A revision is ``git archive``'d with its C extensions compiled and measured as
``quick --against`` measures it (``quick.run_script``), so the client and the daemon are both
that revision's; ``HEAD`` and other names resolve through git, and ``wt`` is the working tree as
it is. The benchmark script itself always comes from the working tree.

    python -m benchmarks.tools.daemon_ab d06e1ee main --rounds 4 --only ack_10k_linger1
    python -m benchmarks.tools.daemon_ab main wt --rounds 3 --only ack_10k_linger0,ack_10k_linger1,e2e

Prints each run as it ends and a summary per revision (median and every run) on stderr; the
JSON document on stdout, saved as ``benchmarks/results/daemon_ab-<stamp>.json``.
"""

from __future__ import annotations

import contextlib
import os
import statistics
from pathlib import Path
from typing import Any

from benchmarks._common import REPO, base_parser, emit, log, machine_facts
from benchmarks.tools.quick import revision_tree, run_script

FIELDS = ("p50_ms", "p99_ms", "msg_per_s", "pacer_lag_p99_ms")


def one_run(tree: Path | None, only: str, seconds: float) -> dict[str, float]:
    args = ["--only", only, "--phase-seconds", str(seconds)]
    results: dict[str, Any] = run_script("bench_daemon", args, tree)["results"]
    return {f"{phase}/{key}": r[key]["median"] for phase, r in results.items() for key in FIELDS if key in r}


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("revisions", nargs="+", help="git revisions, or wt for the working tree")
    parser.add_argument("--rounds", type=int, default=3, help="runs per revision (default 3)")
    parser.add_argument("--only", default="ack_10k_linger1", help="bench_daemon phases (comma-separated)")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each latency phase")
    args = parser.parse_args()
    facts = machine_facts(REPO)
    rows: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        trees = {rev: None if rev == "wt" else stack.enter_context(revision_tree(rev)) for rev in args.revisions}
        for round_ in range(args.rounds):
            order = args.revisions if round_ % 2 == 0 else args.revisions[::-1]
            for rev in order:
                load = os.getloadavg()[0]
                row = {
                    "revision": rev,
                    "round": round_,
                    "loadavg": load,
                    **one_run(trees[rev], args.only, args.seconds),
                }
                rows.append(row)
                log(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
    summary: dict[str, dict[str, Any]] = {}
    for rev in args.revisions:
        mine = [row for row in rows if row["revision"] == rev]
        keys = [k for k in mine[0] if "/" in k]
        summary[rev] = {
            k: {"median": statistics.median(r[k] for r in mine), "runs": [r[k] for r in mine]} for k in keys
        }
        summary[rev]["loadavg"] = {"runs": [r["loadavg"] for r in mine]}
        for key, value in summary[rev].items():
            log(
                f"{rev} {key}: "
                + (f"median {value['median']:.3f} " if "median" in value else "")
                + f"runs {value['runs']}"
            )
    args.runs = args.rounds
    emit("daemon_ab", args, {"revisions": args.revisions, "only": args.only, "rows": rows, "summary": summary}, facts)


if __name__ == "__main__":
    main()
