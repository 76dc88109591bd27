"""A market-data pipeline on Spark Structured Streaming over LKSTREAM (issue 5).

    python examples/spark_pipeline.py                         # everything, one command
    python examples/spark_pipeline.py --bootstrap 127.0.0.1:9090   # against a running daemon (make run)

Four parts, all real:

1. **Daemon.** Without ``--bootstrap`` a daemon is started on a free loopback port
   over ``--persist-dir`` (default ``./example-data``, the embedded examples'
   directory, so it never collides with ``make run``'s ``./data``) and stopped at
   the end.
2. **Producer.** Synthetic ticks ``{"s": symbol, "p": price, "q": quantity, "t": event
   time ms}`` keyed by symbol into ``market.ticks`` (4 partitions). Event time runs
   ``--speedup`` times faster than the wall clock, so minutes of market pass in seconds.
3. **Streaming job.** ``spark.readStream.format("lkstream")`` on ``market.ticks``; parse
   the JSON; 1-minute OHLC bars and volume per symbol with a 30-second watermark
   (append mode: a bar is emitted once its minute can no longer change). Two queries
   share the plan: one appends bars to a Parquet archive (``--archive``, exactly-once
   through its checkpoint), one writes them as JSON to the LKSTREAM topic
   ``market.bars`` (at-least-once).
4. **Consumer.** Prints every bar appearing in ``market.bars``.

At the end the Parquet archive is read back and summarised.

Each run starts over: the previous run's archive and the checkpoints beside it
(``<archive>.checkpoint/``) are removed first, because a checkpoint belongs to the
log it read (another ``--bootstrap`` or a fresh data directory would not have its
offsets). The script only removes an archive it wrote itself.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import lkstream  # noqa: E402

SYMBOLS = ["AAPL", "TSLA", "MSFT", "NVDA", "AMZN", "GOOG", "META", "NFLX"]
READY = re.compile(r"lkstream daemon ready: grpc=(\S+)")
MARKER = ".lkstream-example"


def start_daemon(persist_dir: Path, workdir: Path) -> tuple[subprocess.Popen[str], str]:
    """A daemon subprocess on free loopback ports; returns it and its gRPC address."""
    config = workdir / "daemon.yml"
    config.write_text(
        f"persist_dir: {persist_dir.resolve()}\npartitions: 4\n"
        "server:\n  grpc_host: 127.0.0.1\n  grpc_port: 0\n  http_host: 127.0.0.1\n  http_port: 0\n  kafka_port: -1\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "lkstream.grpc_server", "--config", str(config), "--log-level", "WARNING"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        match = READY.search(line)
        if match:
            threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep the pipe drained
            return proc, match.group(1)
    # The daemon printed its one-line reason (a data directory in use, say) on stderr.
    raise SystemExit(f"spark_pipeline.py: the daemon over {persist_dir} did not start (exit {proc.wait()})")


def produce_ticks(address: str, seconds: float, speedup: float, stop: threading.Event) -> None:
    """Ticks for ``seconds`` of wall time, event time ``speedup`` times faster."""
    rng = random.Random(7)
    prices = {s: 100.0 + 25 * i for i, s in enumerate(SYMBOLS)}
    with lkstream.connect(address) as client:
        started = time.time()
        event_start_ms = int(started * 1000)
        sent = 0
        while time.time() - started < seconds and not stop.is_set():
            event_ms = event_start_ms + int((time.time() - started) * 1000 * speedup)
            records = []
            for _ in range(200):
                symbol = rng.choice(SYMBOLS)
                prices[symbol] *= 1 + rng.gauss(0, 0.0005)
                tick = {"s": symbol, "p": round(prices[symbol], 4), "q": rng.randint(1, 500), "t": event_ms}
                records.append((symbol, json.dumps(tick).encode()))
            client.produce_many_sync("market.ticks", records)
            sent += len(records)
            time.sleep(0.05)
        # One last tick well past the end pushes the watermark over the final minutes.
        final = {"s": SYMBOLS[0], "p": prices[SYMBOLS[0]], "q": 0, "t": event_ms + 120_000}
        client.produce_many_sync("market.ticks", [(SYMBOLS[0], json.dumps(final).encode())])
        print(
            f"[producer] appended {sent} synthetic ticks to market.ticks over {time.time() - started:.1f}s", flush=True
        )


def print_bars(address: str, stop: threading.Event, seen: list[dict[str, Any]], start: int) -> None:
    """Follow ``market.bars`` (one partition) from offset ``start`` and print each bar."""
    with lkstream.connect(address) as client:
        positions: dict[int, int] = {0: start}
        while not stop.is_set():
            try:
                count = len(client.describe_topic("market.bars").partitions)
            except lkstream.UnknownTopicError:
                time.sleep(0.5)
                continue
            got = False
            for pid in range(count):
                for record in client.read_from("market.bars", pid, positions.get(pid, 0)):
                    positions[pid] = record.offset + 1
                    bar = json.loads(record.value or b"{}")
                    seen.append(bar)
                    got = True
                    print(
                        f"[bars] {bar['start']} {bar['symbol']:5} O={bar['open']:.2f} H={bar['high']:.2f} "
                        f"L={bar['low']:.2f} C={bar['close']:.2f} V={bar['volume']}",
                        flush=True,
                    )
            if not got:
                time.sleep(0.5)


def fresh_outputs(archive: Path, checkpoint: Path) -> None:
    """Remove the previous run's archive and checkpoint, refusing to touch a directory this script did not write."""
    if archive.exists():
        names = {p.name for p in archive.iterdir()}
        ours = MARKER in names or (
            "_spark_metadata" in names
            and all(n.startswith(("part-", ".part-", "_spark_metadata", "_SUCCESS", ".")) for n in names)
        )
        if names and not ours:
            raise SystemExit(f"--archive {archive} exists and was not written by this example: choose another path")
        shutil.rmtree(archive)
        print(f"[archive] starting over: removed the previous run's {archive}", flush=True)
    shutil.rmtree(checkpoint, ignore_errors=True)
    archive.mkdir(parents=True)
    (archive / MARKER).write_text("written by examples/spark_pipeline.py; removed by its next run\n")


def bars_query(spark: Any, address: str, starting: str) -> Any:
    """The streaming plan: ticks -> 1-minute OHLC bars per symbol, with a watermark."""
    from pyspark.sql import functions as F

    tick = "s STRING, p DOUBLE, q LONG, t LONG"
    ticks = (
        spark.readStream.format("lkstream")
        .option("bootstrap", address)
        .option("subscribe", "market.ticks")
        .option("startingOffsets", starting)
        .option("maxOffsetsPerTrigger", "200000")
        .load()
        .select(F.from_json(F.col("value").cast("string"), tick).alias("tick"))
        .select(
            F.col("tick.s").alias("symbol"),
            F.col("tick.p").alias("price"),
            F.col("tick.q").alias("qty"),
            F.timestamp_millis(F.col("tick.t")).alias("ts"),
        )
        .where("symbol IS NOT NULL AND price IS NOT NULL AND ts IS NOT NULL")  # records that are not ticks
    )
    return (
        ticks.withWatermark("ts", "30 seconds")
        .groupBy(F.window("ts", "1 minute"), "symbol")
        .agg(
            F.min_by("price", "ts").alias("open"),
            F.max("price").alias("high"),
            F.min("price").alias("low"),
            F.max_by("price", "ts").alias("close"),
            F.sum("qty").alias("volume"),
        )
        .select(F.col("window.start").alias("start"), "symbol", "open", "high", "low", "close", "volume")
    )


def start_queries(spark: Any, address: str, archive_path: str, checkpoints: Path) -> tuple[Any, Any]:
    """The two streaming queries: bars to the Parquet archive and to the topic ``market.bars``."""
    # Start at the current end of market.ticks (ticks of earlier runs are not re-aggregated).
    with lkstream.connect(address) as client:
        ends = {str(p): s.high_watermark for p, s in enumerate(client.describe_topic("market.ticks").partitions)}
    plan = bars_query(spark, address, json.dumps({"market.ticks": ends}))
    archive = (
        plan.writeStream.format("parquet")
        .option("path", archive_path)
        .option("checkpointLocation", str(checkpoints / "archive"))
        .trigger(processingTime="3 seconds")
        .start()
    )
    to_topic = (
        plan.selectExpr(
            "symbol AS key",
            "to_json(struct(CAST(start AS STRING) AS start, symbol, open, high, low, close, volume)) AS value",
        )
        .writeStream.format("lkstream")
        .option("bootstrap", address)
        .option("topic", "market.bars")
        .option("checkpointLocation", str(checkpoints / "bars"))
        .trigger(processingTime="3 seconds")
        .start()
    )
    return archive, to_topic


def run(spark: Any, address: str, args: argparse.Namespace, checkpoints: Path) -> None:
    """Producer, streaming queries and consumer, until every tick is aggregated and printed."""
    stop = threading.Event()
    bars: list[dict[str, Any]] = []
    archive, to_topic = start_queries(spark, address, args.archive, checkpoints)
    with lkstream.connect(address) as client:
        bars_before = client.bounds("market.bars", 0)[1]
    consumer = threading.Thread(target=print_bars, args=(address, stop, bars, bars_before), daemon=True)
    consumer.start()
    producer = threading.Thread(target=produce_ticks, args=(address, args.seconds, args.speedup, stop))
    producer.start()
    try:
        producer.join()
        # Drain: every tick processed, then the watermark moved by the final tick closes the last
        # minutes in a no-data micro-batch, which the second round waits for.
        for _ in range(2):
            for query in (archive, to_topic):
                query.processAllAvailable()
            time.sleep(5)
        deadline = time.time() + 30
        with lkstream.connect(address) as client:
            while time.time() < deadline and len(bars) < client.bounds("market.bars", 0)[1] - bars_before:
                time.sleep(0.5)
    finally:
        archive.stop()
        to_topic.stop()
        stop.set()
        consumer.join(5)
    if Path(args.archive).exists():
        stored = spark.read.parquet(args.archive)
        print(f"[archive] {stored.count()} bars in {args.archive}", flush=True)
        stored.orderBy("start", "symbol").show(16, truncate=False)
    print(f"[consumer] printed {len(bars)} bars from market.bars", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", help="address of a running daemon (default: start one)")
    parser.add_argument("--persist-dir", default="./example-data", help="data directory of the started daemon")
    parser.add_argument("--archive", default="./spark-bars", help="Parquet archive of the bars")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long the producer runs")
    parser.add_argument("--speedup", type=float, default=20.0, help="event-time minutes per wall-clock minute")
    args = parser.parse_args()

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")
    from pyspark.sql import SparkSession

    import lkstream.spark

    workdir = Path(tempfile.mkdtemp(prefix="lkstream-spark-"))
    checkpoints = Path(f"{args.archive.rstrip('/')}.checkpoint")
    fresh_outputs(Path(args.archive), checkpoints)
    daemon = None
    address = args.bootstrap
    if address is None:
        daemon, address = start_daemon(Path(args.persist_dir), workdir)
        print(f"[daemon] started on {address} over {args.persist_dir}", flush=True)
    try:
        # Spark before the first gRPC call of this process: PySpark starts its JVM with fork() and a
        # preexec_fn, and a fork after gRPC calls can hang the child in gRPC's post-fork handler
        # (seen once in CI; docs/spark.md, "The driver process and fork").
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("lkstream-market-bars")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate()
        )
        try:
            spark.sparkContext.setLogLevel("ERROR")
            with lkstream.connect(address) as client:
                for topic, partitions in (("market.ticks", 4), ("market.bars", 1)):
                    if topic not in client.list_topics():
                        client.create_topic(topic, partitions)
            lkstream.spark.register(spark)
            run(spark, address, args, checkpoints)
        finally:
            spark.stop()
    finally:
        if daemon is not None:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(20)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
