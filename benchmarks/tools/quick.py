"""The regression pass a developer runs before and after a change (``make bench-quick``).

The figures of docs/benchmarks.md's API tables, at small sizes, 3 passes by default, each script
run once a pass (``--runs 1``):

* ``e2e.bench_producer``: ``produce_many`` of 1,000 ``str``-keyed records to 4 partitions
  (``200B_keyed_p4``), ``Producer.send`` one record at a time (``send_200B``), and the keyed and
  keyless one-partition references;
* ``e2e.bench_latency``: embedded ack latency at 10,000 msg/s, open model, ``Producer(linger_ms=0)``
  and ``produce_many`` of one record, with the pacer's own floor;
* ``e2e.bench_consumer``: ``Consumer.consume`` with a no-op handler (1M records), and the decode
  loop alone (``decoded_partition``);
* the peer suite's embedded block (``suite.run --systems lkstream-embedded``, full sizes, one run):
  its peak RSS (``--no-rss`` skips it: 30 s a pass);
* ``e2e.bench_daemon`` (the daemon, one client process): ``produce_many`` sync and async, consume
  (raw fetch, fetch and decode with one read ahead, the public ``Consumer``), ack latency at 10,000
  msg/s in 1 ms ticks (``Producer(linger_ms=0)``, ``linger_ms=1``, ``produce_many`` of one, the
  pacer's floor) and produce-to-consume through ``subscribe()`` and through the ``Consumer``
  (``--no-daemon`` skips them: about 40 s a pass), and the suite's daemon block for its peak RSS;
* ``e2e.bench_spark`` with ``--spark`` (about 3 minutes a pass): the source through ``bootstrap``,
  the ``path`` and JVM ``read_path`` sources against Spark's Parquet source (ratio per pass) and
  the sink.

``--against REF`` measures a git revision's ``lkstream/`` in the same session, alternating with
the working tree's, so before and after share the machine's load: ``git archive REF lkstream``
is unpacked into a temporary directory, its C extensions are compiled there (a revision without
them would otherwise run the pure-Python fallbacks), the directory goes first on ``PYTHONPATH``,
and every script of that side runs inside the directory, since each ``python -m`` it starts (the
script itself, the daemon, Spark's Python workers and planners, the peer suite) puts its working
directory first on ``sys.path``; ``bench_spark`` checks that its Spark workers import the same tree
as its driver, and this script that it is the side's tree. The table shows both medians and the
median of the per-pass ratios. The benchmark scripts themselves always come from the working tree.
``--spark-only`` runs the Spark rows alone.

    python -m benchmarks.tools.quick                   # the working tree only (about 3.5 minutes)
    python -m benchmarks.tools.quick --against "$(git merge-base main HEAD)"   # before and after
    python -m benchmarks.tools.quick --against main --spark-only --runs 3     # Spark, side by side

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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks._common import REPO, emit, log, machine_facts

PRODUCER_ROWS = "200B_keyed_p4,send_200B,200B_keyed,200B"
CONSUMER_ROWS = "consumer_consume,decoded_partition"
# (script, scenario, field, higher is better, target): the rows of the table, in order.
ROWS = [
    ("bench_producer", "200B_keyed_p4", "msg_per_s", True, 1_500_000),
    ("bench_producer", "send_200B", "msg_per_s", True, 1_000_000),
    ("bench_latency", "producer_send", "p99_ms", False, 0.5),
    ("bench_latency", "produce_many_1", "p99_ms", False, 0.5),
    ("bench_consumer", "consumer_consume", "msg_per_s", True, 2_000_000),
    ("suite", "lkstream-embedded", "peak_rss_MB", False, 150),
    ("bench_producer", "200B_keyed", "msg_per_s", True, None),
    ("bench_producer", "200B", "msg_per_s", True, None),
    ("bench_latency", "producer_send", "p50_ms", False, None),
    ("bench_latency", "produce_many_1", "p50_ms", False, None),
    ("bench_latency", "pacer", "p99_ms", False, None),
    ("bench_latency", "producer_send", "loop_thread_waits", False, None),
    ("bench_latency", "produce_many_1", "loop_thread_waits", False, None),
    ("bench_latency", "pacer", "loop_thread_waits", False, None),
    ("bench_latency", "producer_send", "loop_thread_blocked_ms", False, None),
    ("bench_latency", "produce_many_1", "loop_thread_blocked_ms", False, None),
    ("bench_latency", "pacer", "loop_thread_blocked_ms", False, None),
    ("bench_latency", "produce_many_1", "loop_thread_runqueue_ms", False, None),
    # With --latency-only (bench_latency.py --stalls): slow produce calls by cause.
    ("bench_latency", "produce_many_1", "stalls_blocked", False, None),
    ("bench_latency", "producer_send", "stalls_blocked", False, None),
    ("bench_latency", "produce_many_1", "stalls_on_cpu", False, None),
    ("bench_latency", "producer_send", "stalls_on_cpu", False, None),
    ("bench_latency", "produce_many_1", "stalls_preempted", False, None),
    ("bench_latency", "producer_send", "stalls_preempted", False, None),
    ("bench_latency", "producer_send", "gc_gen0_collections", False, None),
    ("bench_latency", "produce_many_1", "gc_gen0_collections", False, None),
    ("bench_consumer", "decoded_partition", "msg_per_s", True, None),
    # The daemon's rows (issue 14, rows 5-8).
    ("bench_daemon", "produce_many_sync", "msg_per_s", True, 1_100_000),
    ("bench_daemon", "produce_many_async", "msg_per_s", True, 1_100_000),
    ("bench_daemon", "fetch_pipelined", "msg_per_s", True, 1_300_000),
    ("bench_daemon", "consumer", "msg_per_s", True, 1_300_000),
    ("bench_daemon", "ack_10k_linger0", "p50_ms", False, 0.5),
    ("bench_daemon", "ack_10k_linger0", "p99_ms", False, 2.0),
    ("bench_daemon", "e2e", "p99_ms", False, 3.0),
    ("bench_daemon", "e2e_consumer", "p99_ms", False, 3.0),
    ("suite-daemon", "lkstream-daemon", "peak_rss_MB", False, 150),
    ("bench_spark", "source_bootstrap_noop", "rows_per_s", True, 1_500_000),
    ("bench_spark", "path_over_parquet", "ratio", True, 0.8),
    ("bench_spark", "path_jvm_over_parquet", "ratio", True, 0.8),
    ("bench_spark", "sink", "rows_per_s", True, 1_000_000),
    ("bench_daemon", "ack_10k_one_call", "p50_ms", False, None),
    ("bench_daemon", "ack_10k_one_call", "p99_ms", False, None),
    ("bench_daemon", "ack_10k_linger1", "p50_ms", False, None),
    ("bench_daemon", "ack_10k_linger1", "p99_ms", False, None),
    ("bench_daemon", "ack_10k_pacer", "p99_ms", False, None),
    ("bench_daemon", "e2e", "p50_ms", False, None),
    ("bench_daemon", "fetch_raw", "msg_per_s", True, None),
    ("bench_spark", "source_path_noop", "rows_per_s", True, None),
    ("bench_spark", "parquet_noop", "rows_per_s", True, None),
    ("bench_spark", "sink_first", "rows_per_s", True, None),
]
DAEMON_PHASES = (
    "produce_many_sync,produce_many_async,fetch_raw,fetch_pipelined,consumer,"
    "ack_10k_pacer,ack_10k_linger0,ack_10k_one_call,ack_10k_linger1,e2e,e2e_consumer"
)


def _env(tree: Path | None) -> dict[str, str]:
    """The environment of a script measuring ``tree`` (None: the working tree): the tree first on
    ``PYTHONPATH``, then the working tree (for ``benchmarks``)."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(tree), str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _cwd(tree: Path | None) -> Path:
    """Where a script measuring ``tree`` runs: inside the tree, because every ``python -m`` it starts
    (the daemon, Spark's Python workers, the peer suite) puts its working directory first on
    ``sys.path``, before ``PYTHONPATH``."""
    return REPO if tree is None else tree


def run_script(script: str, args: list[str], pythonpath: Path | None) -> dict[str, Any]:
    """One run of ``benchmarks.e2e.<script>`` (``--runs 1``) measuring ``pythonpath``'s tree (None: the
    working tree's); returns the JSON document it prints."""
    cmd = [sys.executable, "-m", f"benchmarks.e2e.{script}", "--runs", "1", "--no-save", *args]
    done = subprocess.run(
        cmd, check=False, env=_env(pythonpath), cwd=_cwd(pythonpath), capture_output=True, text=True, timeout=900
    )
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    doc: dict[str, Any] = json.loads(done.stdout)
    measured = doc.get("lkstream_tree")  # bench_spark.py says which tree its driver and workers ran
    if measured is not None and Path(measured).resolve() != _cwd(pythonpath).resolve():
        raise SystemExit(f"{script} measured the lkstream of {measured}, not of {_cwd(pythonpath)}")
    return doc


def run_suite(pythonpath: Path | None, system: str = "lkstream-embedded") -> dict[str, Any]:
    """The peer suite's block of ``system``, once, at full sizes: its resources row as ``{"results": ...}``."""
    with tempfile.TemporaryDirectory(prefix="lkstream-quick-suite-") as tmp:
        out = Path(tmp) / "peers.json"
        cmd = [sys.executable, "-m", "benchmarks.suite.run", "--systems", system, "--runs", "1"]
        cmd += ["--no-extras", "--out", str(out)]
        done = subprocess.run(
            cmd, check=False, env=_env(pythonpath), cwd=_cwd(pythonpath), capture_output=True, text=True, timeout=900
        )
        if done.returncode != 0 or not out.exists():
            raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
        doc = json.loads(out.read_text())
    rows = [r for r in doc["raw"] if r["metric"] == "resources"]
    return {"results": {r["system"]: {"peak_rss_MB": {"median": r["peak_rss_MB"]}} for r in rows}}


@contextmanager
def revision_tree(ref: str) -> Iterator[Path]:
    """``lkstream/`` of git revision ``ref`` in a temporary directory, its C extensions compiled."""
    with tempfile.TemporaryDirectory(prefix="lkstream-quick-") as tmp:
        archive = subprocess.run(
            ["git", "archive", "--format=tar", ref, "lkstream"], cwd=REPO, capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        build_extensions(Path(tmp))
        yield Path(tmp)


def build_extensions(tree: Path) -> None:
    """Compile every ``lkstream/<package>/_*.c`` of ``tree`` in place, as ``pip install`` would."""
    sources = sorted((tree / "lkstream").glob("*/_*.c"))
    modules = [
        f"Extension('lkstream.{p.parent.name}.{p.stem}', ['lkstream/{p.parent.name}/{p.name}'])" for p in sources
    ]
    if not modules:
        return
    code = (
        "from setuptools import Extension, setup\n"
        f"setup(name='lkstream-rev', ext_modules=[{', '.join(modules)}], script_args=['build_ext', '--inplace', '-q'])"
    )
    subprocess.run([sys.executable, "-c", code], cwd=tree, check=True, capture_output=True, timeout=300)
    log(f"compiled {', '.join(p.name for p in sources)} for the revision")


def one_pass(pythonpath: Path | None, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Each row's value from one run of each benchmark: {script: {scenario/field: value}}."""
    steps: dict[str, Callable[[], dict[str, Any]]] = {
        "bench_producer": lambda: run_script(
            "bench_producer", ["--only", PRODUCER_ROWS, "--msgs-200b", str(args.msgs)], pythonpath
        ),
        "bench_latency": lambda: run_script(
            "bench_latency", ["--seconds", str(args.seconds), *(["--stalls"] if args.latency_only else [])], pythonpath
        ),
        "bench_consumer": lambda: run_script(
            "bench_consumer",
            ["--only", CONSUMER_ROWS, "--msgs", str(args.consume_msgs), "--random-gb", "0", "--no-gc-variants"],
            pythonpath,
        ),
    }
    if args.latency_only:  # row 3 alone: the only step whose runs are short enough to repeat often
        steps = {"bench_latency": steps["bench_latency"]}
    elif not args.no_rss:
        steps["suite"] = lambda: run_suite(pythonpath)
    if not args.no_daemon and not args.latency_only:
        steps["bench_daemon"] = lambda: run_script(
            "bench_daemon",
            ["--msgs", str(args.msgs), "--phase-seconds", str(args.seconds), "--only", DAEMON_PHASES],
            pythonpath,
        )
        if not args.no_rss:
            steps["suite-daemon"] = lambda: run_suite(pythonpath, "lkstream-daemon")
    if (args.spark or args.spark_only) and not args.latency_only:
        steps["bench_spark"] = lambda: run_script("bench_spark", ["--rows", str(args.spark_rows)], pythonpath)
    if args.spark_only:  # row 8 alone
        steps = {"bench_spark": steps["bench_spark"]}
    docs = {script: step() for script, step in steps.items()}
    out: dict[str, dict[str, float]] = {}
    for script, scenario, field, _, _ in ROWS:
        if script in docs and field in docs[script]["results"][scenario]:  # some fields come with options only
            out.setdefault(script, {})[f"{scenario}/{field}"] = docs[script]["results"][scenario][field]["median"]
    return out


def table(runs: dict[str, list[dict[str, dict[str, float]]]]) -> list[dict[str, Any]]:
    rows = []
    for script, scenario, field, higher, target in ROWS:
        key = f"{scenario}/{field}"
        if key not in runs["after"][0].get(script, {}):
            continue
        row: dict[str, Any] = {"row": key, "target": target}
        for side, passes in runs.items():
            values = [p[script][key] for p in passes]
            row[side] = {"median": statistics.median(values), "runs": values}
        if "before" in runs:
            pairs = zip(runs["after"], runs["before"], strict=True)
            ratios = [a[script][key] / b[script][key] for a, b in pairs if b[script][key]]  # counts may be 0
            if ratios:
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
        print(f"{row['row']:<36}{before}{row['after']['median']:>14,.3f}{ratio}{verdict}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", help="git revision to measure side by side (e.g. main)")
    parser.add_argument("--runs", type=int, default=3, help="passes per side (default 3)")
    parser.add_argument("--msgs", type=int, default=500_000, help="messages per throughput row and run")
    parser.add_argument("--consume-msgs", type=int, default=1_000_000, help="records of the consume rows' log")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per latency scenario and run")
    parser.add_argument("--no-rss", action="store_true", help="skip the peer suite's blocks (row 7)")
    parser.add_argument("--no-daemon", action="store_true", help="skip the daemon's rows (bench_daemon.py)")
    parser.add_argument("--spark", action="store_true", help="add the Spark rows (bench_spark.py, ~3 min a pass)")
    parser.add_argument("--spark-only", action="store_true", help="row 8 only (bench_spark.py)")
    parser.add_argument("--spark-rows", type=int, default=2_000_000, help="rows of the Spark rows' log")
    parser.add_argument("--latency-only", action="store_true", help="row 3 only (bench_latency.py): the ack tail")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()
    args.quick, args.seed = False, None  # for emit(): the scripts use their own default seeds
    facts = machine_facts(REPO)
    runs: dict[str, list[dict[str, dict[str, float]]]] = {"after": []}
    with revision_or_none(args.against) as before_tree:
        if before_tree is not None:
            runs["before"] = []
        for n in range(args.runs):
            # Odd passes measure the revision first, even ones the working tree first, so a load that
            # grows or falls during the run (or what one side leaves behind, e.g. dirty pages being
            # written back) does not always favour the same side.
            sides = [("before", before_tree, args.against), ("after", None, "working tree")]
            for side, tree, name in sides if n % 2 == 0 else sides[::-1]:
                if side == "before" and tree is None:
                    continue
                log(f"pass {n + 1}/{args.runs}: {name}")
                runs[side].append(one_pass(tree, args))
    rows = table(runs)
    show(rows)
    payload = {
        "against": args.against,
        "msgs_per_row": args.msgs,
        "consume_msgs": args.consume_msgs,
        "latency_seconds": args.seconds,
        "spark_rows": args.spark_rows if args.spark or args.spark_only else None,
        "rows": rows,
    }
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
