"""The regression pass a developer runs before and after a produce-side change (about 2 minutes).

Runs the rows of issue 14 that the produce side answers for, at small sizes, 3 runs each:

* ``bench_producer.py``: ``200B_keyed_p4`` (the seed's pattern: ``str`` ticker keys, 4
  partitions, calls of 1,000), ``send_200B`` (``Producer.send`` one at a time), ``200B_keyed``
  and ``200B`` (references);
* ``bench_latency.py``: ack latency at 10,000 msg/s, open model, ``Producer(linger_ms=0)`` and
  ``produce_many`` of one record, with the pacer's own floor.

``--against REF`` measures a git revision's ``lkstream/`` (``git archive REF lkstream``, unpacked
into a temporary directory and put first on ``PYTHONPATH``) in the same session, alternating
with the working tree's, so before and after share the machine's load; the table then shows
both medians and the median of the per-run ratios. The benchmark scripts themselves always come
from the working tree.

    .venv/bin/python benchmarks/quick.py                   # the working tree only
    .venv/bin/python benchmarks/quick.py --against "$(git merge-base main HEAD)"   # before and after

Prints a table on stderr, the JSON document on stdout, and saves it as
``benchmarks/results/quick-<stamp>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _common import REPO, emit, log, machine_facts

HERE = Path(__file__).resolve().parent
PRODUCER_ROWS = "200B_keyed_p4,send_200B,200B_keyed,200B"
# (script, scenario, field, higher is better, target): the rows of the table, in order.
ROWS = [
    ("bench_producer", "200B_keyed_p4", "msg_per_s", True, 1_500_000),
    ("bench_producer", "send_200B", "msg_per_s", True, 1_000_000),
    ("bench_producer", "200B_keyed", "msg_per_s", True, None),
    ("bench_producer", "200B", "msg_per_s", True, None),
    ("bench_latency", "producer_send", "p99_ms", False, 0.5),
    ("bench_latency", "produce_many_1", "p99_ms", False, 0.5),
    ("bench_latency", "producer_send", "p50_ms", False, None),
    ("bench_latency", "produce_many_1", "p50_ms", False, None),
    ("bench_latency", "pacer", "p99_ms", False, None),
]


def run_script(script: str, args: list[str], pythonpath: Path | None) -> dict[str, Any]:
    """Run one benchmark script once (``--runs 1``) and return its JSON document."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    cmd = [sys.executable, str(HERE / f"{script}.py"), "--runs", "1", "--no-save", *args]
    done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, check=False, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


@contextmanager
def revision_tree(ref: str) -> Iterator[Path]:
    """``lkstream/`` of git revision ``ref`` in a temporary directory."""
    with tempfile.TemporaryDirectory(prefix="lkstream-quick-") as tmp:
        archive = subprocess.run(
            ["git", "archive", "--format=tar", ref, "lkstream"], cwd=REPO, capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        yield Path(tmp)


def one_pass(pythonpath: Path | None, msgs: int, seconds: float) -> dict[str, dict[str, float]]:
    """Each row's value from one run of each script: {scenario/field: value}."""
    producer = run_script("bench_producer", ["--only", PRODUCER_ROWS, "--msgs-200b", str(msgs)], pythonpath)
    latency = run_script("bench_latency", ["--seconds", str(seconds)], pythonpath)
    docs = {"bench_producer": producer, "bench_latency": latency}
    out: dict[str, dict[str, float]] = {}
    for script, scenario, field, _, _ in ROWS:
        out.setdefault(script, {})[f"{scenario}/{field}"] = docs[script]["results"][scenario][field]["median"]
    return out


def table(runs: dict[str, list[dict[str, dict[str, float]]]]) -> list[dict[str, Any]]:
    rows = []
    for script, scenario, field, higher, target in ROWS:
        key = f"{scenario}/{field}"
        row: dict[str, Any] = {"row": key, "target": target}
        for side, passes in runs.items():
            values = [p[script][key] for p in passes]
            row[side] = {"median": statistics.median(values), "runs": values}
        if "before" in runs:
            ratios = [a[script][key] / b[script][key] for a, b in zip(runs["after"], runs["before"], strict=True)]
            row["after_over_before"] = {"median": statistics.median(ratios), "runs": ratios}
        if target is not None:
            median = row["after"]["median"]
            row["verdict"] = "pass" if (median >= target if higher else median <= target) else "miss"
        rows.append(row)
    return rows


def show(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        before = f"{row['before']['median']:>14,.3f}" if "before" in row else ""
        ratio = f"  x{row['after_over_before']['median']:.2f}" if "after_over_before" in row else ""
        verdict = f"  {row.get('verdict', '')} (target {row['target']:,})" if row["target"] is not None else ""
        print(f"{row['row']:<28}{before}{row['after']['median']:>14,.3f}{ratio}{verdict}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", help="git revision to measure side by side (e.g. main)")
    parser.add_argument("--runs", type=int, default=3, help="passes per side (default 3)")
    parser.add_argument("--msgs", type=int, default=500_000, help="messages per throughput row and run")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per latency scenario and run")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()
    args.quick, args.seed = False, None  # for emit(): the scripts use their own default seeds
    facts = machine_facts(REPO)
    runs: dict[str, list[dict[str, dict[str, float]]]] = {"after": []}
    with revision_or_none(args.against) as before_tree:
        if before_tree is not None:
            runs["before"] = []
        for n in range(args.runs):
            if before_tree is not None:
                log(f"pass {n + 1}/{args.runs}: {args.against}")
                runs["before"].append(one_pass(before_tree, args.msgs, args.seconds))
            log(f"pass {n + 1}/{args.runs}: working tree")
            runs["after"].append(one_pass(None, args.msgs, args.seconds))
    rows = table(runs)
    show(rows)
    payload = {"against": args.against, "msgs_per_row": args.msgs, "latency_seconds": args.seconds, "rows": rows}
    emit("quick", args, payload, facts)


@contextmanager
def revision_or_none(ref: str | None) -> Iterator[Path | None]:
    if ref is None:
        yield None
    else:
        with revision_tree(ref) as tree:
            yield tree


if __name__ == "__main__":
    main()
