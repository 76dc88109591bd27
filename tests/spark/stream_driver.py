"""A Spark driver for the exactly-once test: LKSTREAM -> Parquet file sink with a checkpoint.

Run as ``python stream_driver.py BOOTSTRAP TOPIC CHECKPOINT OUTPUT MODE`` where
MODE is ``run`` (micro-batches of at most 500 records until killed) or
``drain`` (Trigger.AvailableNow, batches of at most 2500: process what is there, then exit 0).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


def main() -> None:
    bootstrap, topic, checkpoint, output, mode = sys.argv[1:6]
    from pyspark.sql import SparkSession

    import lkstream.spark

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    lkstream.spark.register(spark)
    source = (
        spark.readStream.format("lkstream")
        .option("bootstrap", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "500" if mode == "run" else "2500")
        .load()
        .selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
    )
    writer = source.writeStream.format("parquet").option("checkpointLocation", checkpoint).option("path", output)
    if mode == "drain":
        writer.trigger(availableNow=True).start().awaitTermination()
    else:
        query = writer.trigger(processingTime="0 seconds").start()
        print("started", flush=True)
        query.awaitTermination()


if __name__ == "__main__":
    main()
