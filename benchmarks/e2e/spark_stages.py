"""Where the Spark rows' time goes (issue 14, row 8): each stage alone, and CPU per process.

Stages, on the log of ``bench_spark.py`` (200-byte values, 2 partitions, ``local[2]``):

``decode_path`` / ``decode_bootstrap``  ``read_range`` of every task in this process, no
        Spark: the source's own work (reading or fetching, checking, decoding to Arrow).
``spark_floor_source``  a Python data source yielding ready-made Arrow batches of the
        same schema and size into ``noop``: PySpark's Arrow transfer to the JVM and
        Spark's own work, with no decoding at all (the best any Python source can do).
``source_path`` / ``source_bootstrap`` / ``parquet``  as in ``bench_spark.py``.
``spark_floor_sink``  ``spark.range`` -> a Python data source writer that only counts
        its Arrow batches: Spark's generation and Arrow transfer to the worker.
``sink``  the same rows into the ``lkstream`` sink (daemon).

Each Spark stage also reports the CPU seconds that each process group spent during it
(from /proc: the JVM, the Python workers, the daemon), so a bound can be named by
process. Stages run in turn, run by run; medians.

    python -m benchmarks.e2e.spark_stages --rows 2000000 --runs 3
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from benchmarks._common import base_parser, bench_dir, emit, log, machine_facts, summary
from benchmarks.e2e.bench_daemon import DaemonProcess
from benchmarks.e2e.bench_spark import TOPIC, VALUE_BYTES, build_log, session

# Process groups whose CPU is counted, by a substring of their command line.
_GROUPS = (("java", "jvm"), ("lkstream.grpc_server", "daemon"), ("pyspark.daemon pyspark.worker", "workers"))


def cpu_seconds(marker: str) -> dict[str, float]:
    """CPU seconds so far of this benchmark's processes, by group: the JVM and workers of this
    virtualenv's pyspark, and the daemon whose command line names ``marker`` (its data root)."""
    out: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        group = next((name for needle, name in _GROUPS if needle in cmd), None)
        if group is None or (marker if group == "daemon" else sys.prefix) not in cmd:
            continue
        out[group] = out.get(group, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def floor_source(rows: int) -> Any:
    """A Python data source of ``rows`` ready-made rows of the lkstream schema (defined here: pickled by value)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from lkstream.spark.arrow import spark_ddl

    class Part(InputPartition):  # type: ignore[misc]
        def __init__(self, count: int) -> None:
            self.count = count

    class Reader(DataSourceReader):  # type: ignore[misc]
        def partitions(self) -> list[Part]:
            return [Part(rows // 2), Part(rows - rows // 2)]

        def read(self, partition: Any) -> Iterator[Any]:
            import numpy as np
            import pyarrow as pa

            from lkstream.spark.arrow import arrow_schema

            n = 65_536
            value = pa.Array.from_buffers(
                pa.binary(),
                n,
                [
                    None,
                    pa.py_buffer(np.arange(n + 1, dtype=np.int32) * VALUE_BYTES),
                    pa.py_buffer(b"x" * VALUE_BYTES * n),
                ],
            )
            columns = [
                pa.nulls(n, pa.binary()),
                value,
                pa.array([TOPIC] * n),
                pa.array(np.zeros(n, dtype=np.int32)),
                pa.array(np.arange(n, dtype=np.int64)),
                pa.array(np.full(n, 1_700_000_000_000_000, dtype=np.int64)).cast(pa.timestamp("us", tz="UTC")),
                pa.array(np.zeros(n, dtype=np.int32)),
            ]
            batch = pa.RecordBatch.from_arrays(columns, schema=arrow_schema(False))
            left = partition.count
            while left > 0:
                yield batch.slice(0, min(n, left))
                left -= n

    class FloorSource(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return "spark_floor_source"

        def schema(self) -> str:
            return spark_ddl(False)

        def reader(self, schema: Any) -> Reader:
            return Reader()

    return FloorSource


def floor_sink() -> Any:
    """A Python data source writer that counts its Arrow batches and drops them."""
    from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

    class Counter(DataSourceArrowWriter):  # type: ignore[misc]
        def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
            for _ in iterator:
                pass
            return WriterCommitMessage()

    class FloorSink(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return "spark_floor_sink"

        def writer(self, schema: Any, overwrite: bool) -> Counter:
            return Counter()

    return FloorSink


def decode_alone(access: dict[str, str], rows: int) -> Callable[[], None]:
    """Every task's ``read_range`` in this process (no Spark)."""
    from lkstream.spark.options import parse_source_options
    from lkstream.spark.source import Planner, read_range

    options = parse_source_options({**access, "subscribe": TOPIC}, streaming=False)
    planner = Planner(options)
    try:
        tps = planner.topic_partitions(strict=True)
        start = planner.resolve(tps, "earliest", None, None, "starting")
        end = planner.resolve(tps, "latest", None, None, "ending")
        tasks = planner.ranges(start, end)
    finally:
        planner.close()

    def run() -> None:
        got = sum(chunk.num_rows for task in tasks for chunk in read_range(task))
        assert got == rows, f"decoded {got} rows of {rows}"

    return run


def main() -> None:
    parser = base_parser(__doc__ or "")
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows in the log (the sink writes half)")
    args = parser.parse_args()
    rows = 200_000 if args.quick else args.rows
    runs = 1 if args.quick else args.runs
    with bench_dir(args.tmp_root, "spark-stages") as root:
        data = root / "data"
        build_log(data, rows, args.seed)
        facts = machine_facts(root)
        daemon = DaemonProcess(root)
        marker = str(root)
        try:
            address = daemon.wait_ready()
            spark = session()
            spark.dataSource.register(floor_source(rows))
            spark.dataSource.register(floor_sink())

            def lk(**opts: str) -> Any:
                reader = spark.read.format("lkstream").option("subscribe", TOPIC)
                for key, value in opts.items():
                    reader = reader.option(key, value)
                return reader.load()

            def noop(df: Any) -> Callable[[], None]:
                return lambda: df.write.format("noop").mode("overwrite").save()

            parquet = root / "parquet"
            lk(path=str(data)).write.parquet(str(parquet))
            generated = spark.range(rows // 2, numPartitions=2).selectExpr(
                f"CAST(repeat('x', {VALUE_BYTES}) AS BINARY) AS value"
            )
            topics = iter(range(10**6))

            def sink() -> None:
                writer = generated.write.mode("append").format("lkstream").option("bootstrap", address)
                writer.option("topic", f"stages.sink.{next(topics)}").save()

            stages: dict[str, tuple[int, Callable[[], None], bool]] = {
                "decode_path": (rows, decode_alone({"path": str(data)}, rows), False),
                "decode_bootstrap": (rows, decode_alone({"bootstrap": address}, rows), False),
                "spark_floor_source": (rows, noop(spark.read.format("spark_floor_source").load()), True),
                "source_path": (rows, noop(lk(path=str(data))), True),
                "source_bootstrap": (rows, noop(lk(bootstrap=address)), True),
                "parquet": (rows, noop(spark.read.parquet(str(parquet))), True),
                "spark_floor_sink": (
                    rows // 2,
                    lambda: generated.write.mode("append").format("spark_floor_sink").save(),
                    True,
                ),
                "sink": (rows // 2, sink, True),
            }
            for _, action, _ in stages.values():
                action()  # warm: workers, imports, page cache
            rates: dict[str, list[float]] = {name: [] for name in stages}
            cpu: dict[str, dict[str, list[float]]] = {name: {} for name in stages}
            for run in range(runs):
                for name, (count, action, in_spark) in stages.items():
                    before = cpu_seconds(marker) if in_spark else {}
                    own = time.process_time()
                    start = time.perf_counter()
                    action()
                    seconds = time.perf_counter() - start
                    used = (
                        {k: v - before.get(k, 0.0) for k, v in cpu_seconds(marker).items()}
                        if in_spark
                        else {"this_process": time.process_time() - own}
                    )
                    rates[name].append(count / seconds)
                    for group, value in used.items():
                        cpu[name].setdefault(group, []).append(value * 1e6 / count)
                    log(f"{name} run {run}: {count / seconds:,.0f} rows/s, CPU us/row {_fmt(used, count)}")
            spark.stop()
        finally:
            daemon.stop()
    results = {
        name: {
            "rows": stages[name][0],
            "rows_per_s": summary(rates[name], 0),
            "cpu_us_per_row": {group: round(statistics.median(values), 3) for group, values in cpu[name].items()},
        }
        for name in stages
    }
    emit("spark_stages", args, {"value_bytes": VALUE_BYTES, "master": "local[2]", "results": results}, facts)


def _fmt(used: dict[str, float], count: int) -> str:
    return ", ".join(f"{k} {v * 1e6 / count:.2f}" for k, v in sorted(used.items()))


if __name__ == "__main__":
    main()
