"""The JVM reader alone (issue 14, row 8): nanoseconds a row of ``RangeReader``, no Spark job.

One partition of ``bench_spark.py``'s log (2,000,000 records of 200 B; ``--values`` as there),
read by ``benchmarks/micro/java/io/lkstream/spark/ReaderLoop.java`` in a plain JVM, page cache warm.
Each pass is timed; the first ``--warm`` passes (the JIT compiling) are dropped. Modes:

``decode``  the reader hands out its columnar batches and nothing reads them: file reads,
            CRC-32C, the record walk and the columns' bookkeeping;
``values``  every row's key, value, offset, timestamp and type read as Spark's ``ColumnarToRow``
            reads them (each value copied into an array of its own).

``--against REV`` compiles the reader of a git revision too and runs the two alternately, one
JVM per mode and side, ``--runs`` rounds; ratios are after / before, round by round.

    python -m benchmarks.micro.micro_jvm_reader [--against REV] [--runs N] [--values ticks]
"""

from __future__ import annotations

import io
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from benchmarks._common import REPO, base_parser, bench_dir, emit, log, machine_facts, summary
from benchmarks.e2e.bench_spark import TOPIC, build_log

LOOP_SOURCE = REPO / "benchmarks" / "micro" / "java" / "io" / "lkstream" / "spark" / "ReaderLoop.java"
READER_SOURCES = "lkstream/spark/java"
MODES = ("decode", "values")


def pyspark_jars() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "jars" / "*")


def compile_reader(sources: list[Path], out: Path) -> None:
    """The reader's sources (and the loop) into ``out``, as ``lkstream.spark.jvm`` compiles them."""
    command = ["javac", "--release", "17", "-nowarn", "-cp", pyspark_jars(), "-d", str(out)]
    subprocess.run([*command, *map(str, sources), str(LOOP_SOURCE)], check=True)


def reader_at(revision: str, into: Path) -> list[Path]:
    """The Java sources of the reader at ``revision`` (``git archive``), unpacked under ``into``."""
    archive = subprocess.run(
        ["git", "archive", revision, READER_SOURCES], cwd=REPO, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return sorted((into / READER_SOURCES).rglob("*.java"))


def ns_per_row(classes: Path, partition: Path, rows: int, mode: str, *, passes: int, warm: int) -> float:
    """Median ns a row over the passes after the first ``warm`` ones, in a fresh JVM."""
    done = subprocess.run(
        ["java", "-Xmx2g", "-cp", f"{classes}:{pyspark_jars()}", "io.lkstream.spark.ReaderLoop",
         str(partition), str(rows), mode, str(passes)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    timings = [tuple(map(int, line.split())) for line in done.stdout.split("\n") if line.strip()]
    if any(count != rows for count, _ in timings):
        raise SystemExit(f"the reader handed out {[c for c, _ in timings]} rows, not {rows}")
    return statistics.median(ns / count for count, ns in timings[warm:])


def main() -> None:
    parser = base_parser(__doc__ or "")
    parser.add_argument("--against", metavar="REV", help="also run the reader of this git revision")
    parser.add_argument("--values", choices=("constant", "ticks"), default="constant")
    parser.add_argument("--passes", type=int, default=15, help="passes per JVM (default 15)")
    parser.add_argument("--warm", type=int, default=5, help="passes dropped as warm-up (default 5)")
    args = parser.parse_args()
    rows = 200_000 if args.quick else 4_000_000
    runs = 1 if args.quick else args.runs
    with bench_dir(args.tmp_root, "jvm-reader") as root, tempfile.TemporaryDirectory() as scratch:
        log(f"writing {rows:,} records ({args.values})")
        build_log(root / "data", rows, args.seed, args.values)
        partition = root / "data" / "topics" / TOPIC / "part0"
        sides: dict[str, Path] = {}
        if args.against:
            sides["before"] = Path(scratch) / "before"
            compile_reader(reader_at(args.against, Path(scratch) / "src"), sides["before"])
        sides["after"] = Path(scratch) / "after"
        compile_reader(sorted((REPO / READER_SOURCES).rglob("*.java")), sides["after"])
        per_partition = rows // 2
        measured: dict[str, dict[str, list[float]]] = {mode: {side: [] for side in sides} for mode in MODES}
        for run in range(runs):
            for mode in MODES:
                for side, classes in sides.items():
                    ns = ns_per_row(classes, partition, per_partition, mode, passes=args.passes, warm=args.warm)
                    measured[mode][side].append(ns)
                    log(f"run {run} {mode} {side}: {ns:.1f} ns/row")
        results: dict[str, Any] = {}
        for mode, by_side in measured.items():
            results[mode] = {side: {"ns_per_row": summary(values, 1)} for side, values in by_side.items()}
            if args.against:
                ratios = [a / b for a, b in zip(by_side["after"], by_side["before"], strict=True)]
                results[mode]["after_over_before"] = summary(ratios, 3)
        payload = {
            "rows_per_pass": per_partition,
            "values": args.values,
            "against": args.against,
            "passes": args.passes,
            "warm": args.warm,
            "results": results,
        }
        emit("micro_jvm_reader", args, payload, machine_facts(root))


if __name__ == "__main__":
    sys.exit(main())
