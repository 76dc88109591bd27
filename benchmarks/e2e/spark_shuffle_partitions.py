"""What ``spark.sql.shuffle.partitions`` costs a small streaming aggregation (issue 26, item 10).

A clickstream job as docs/spark.md's readers write it: ``readStream.format("lkstream")``
over a data directory (``path``), JSON values parsed, a 1-minute windowed count per page
with a 1-minute watermark, ``append`` mode into the ``noop`` sink, ``Trigger.AvailableNow``
(one run reads everything). The same query runs with Spark's default 200 shuffle
partitions and with 4 (twice the cores of ``local[2]``), alternating, each run with a
fresh checkpoint; the time is the query's wall time from ``start()`` to the end of
``awaitTermination`` (the session is started and warmed before). The machine's load is
recorded: other processes on the same cores make these figures noisy.

    .venv/bin/python -m benchmarks.e2e.spark_shuffle_partitions              # 200,000 clicks, 3 runs each
    .venv/bin/python -m benchmarks.e2e.spark_shuffle_partitions --quick      # 20,000 clicks, 1 run each
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

from benchmarks._common import base_parser, bench_dir, emit, log, machine_facts, summary
from lkstream import Broker
from lkstream.format.codec import encode_batch

TOPIC = "clicks"
PAGES = 20
SETTINGS = (200, 4)


def write_clicks(data: Path, count: int, seed: int) -> None:
    """``count`` JSON clicks over an hour of event time, 2 partitions, batches of 5,000."""
    rng = random.Random(seed)
    start_ms = 1_795_000_000_000
    with Broker(persist_dir=str(data), partitions=2) as broker:
        broker.create_topic(TOPIC, 2)
        for first in range(0, count, 5000):
            rows = range(first, min(count, first + 5000))
            events = [start_ms + n * 3_600_000 // count for n in rows]
            pairs = [
                (
                    f"user-{rng.randrange(1000)}".encode(),
                    json.dumps({"page": f"p{rng.randrange(PAGES)}", "t": t}).encode(),
                )
                for t in events
            ]
            broker.produce_batch_sync(TOPIC, (first // 5000) % 2, encode_batch(pairs, timestamps=events))


def run_query(spark: Any, data: Path, checkpoint: Path, shuffle_partitions: int) -> float:
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
    clicks = (
        spark.readStream.format("lkstream")
        .option("path", str(data))
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .load()
        .select(F.from_json(F.col("value").cast("string"), "page STRING, t LONG").alias("c"))
        .select(F.col("c.page").alias("page"), F.timestamp_millis(F.col("c.t")).alias("ts"))
    )
    counts = clicks.withWatermark("ts", "1 minute").groupBy(F.window("ts", "1 minute"), "page").count()
    started = time.monotonic()
    query = (
        counts.writeStream.format("noop")
        .outputMode("append")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.monotonic() - started
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return elapsed


def main() -> None:
    parser = base_parser(__doc__.splitlines()[0])
    args = parser.parse_args()
    count = 20_000 if args.quick else 200_000
    runs = 1 if args.quick else args.runs
    from pyspark.sql import SparkSession

    import lkstream.spark

    with bench_dir(args.tmp_root, "spark-shuffle") as work:
        facts = machine_facts(work)
        data = work / "data"
        log(f"writing {count:,} clicks")
        write_clicks(data, count, args.seed)
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("lkstream-shuffle-partitions")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")  # stderr keeps to the benchmark's own lines
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        lkstream.spark.register(spark)
        try:
            log("warming the session (one untimed run with 4 shuffle partitions)")
            run_query(spark, data, work / "cp-warm", 4)
            seconds: dict[int, list[float]] = {n: [] for n in SETTINGS}
            for run in range(runs):
                for n in SETTINGS if run % 2 == 0 else SETTINGS[::-1]:
                    elapsed = run_query(spark, data, work / f"cp-{n}-{run}", n)
                    seconds[n].append(elapsed)
                    log(f"run {run + 1}: {n} shuffle partitions: {elapsed:.1f} s")
        finally:
            spark.stop()
        ratios = [a / b for a, b in zip(seconds[200], seconds[4], strict=True)]
        payload = {
            "clicks": count,
            "query": "windowed count per page, 1-minute windows and watermark, append, noop, availableNow",
            "seconds": {f"shuffle_partitions_{n}": summary(values) for n, values in seconds.items()},
            "ratio_200_over_4": summary(ratios),
        }
        emit("spark_shuffle_partitions", args, payload, facts)


if __name__ == "__main__":
    main()
