"""The lkstream sink: batch and streaming writes through a daemon, schema checks at query start."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import lkstream
from lkstream.spark.sink import RECORD_OVERHEAD, _lengths, cut_points
from tests.integration.conftest import DaemonProcess
from tests.spark.conftest import start_daemon_at


def _read_all(address: str, topic: str) -> list[Any]:
    with lkstream.connect(address) as client:
        out = []
        for pid in range(client.partitions_for(topic)):
            out.extend(client.read_from(topic, pid, 0, max_bytes=64 * 1024 * 1024))
        return out


def test_batch_write_round_trips_keys_values_headers_and_partitions(
    spark: Any, spark_daemon: DaemonProcess, topic_name: str
) -> None:
    with lkstream.connect(spark_daemon.address) as client:
        client.create_topic(topic_name, partitions=2)
    rows = [(f"k{i}", f"v{i}".encode(), i % 2, [("h", f"{i}".encode())]) for i in range(50)]
    df = spark.createDataFrame(
        rows, "key string, value binary, partition int, headers array<struct<key:string,value:binary>>"
    )
    df.write.mode("append").format("lkstream").option("bootstrap", spark_daemon.address).option(
        "topic", topic_name
    ).save()
    records = _read_all(spark_daemon.address, topic_name)
    assert sorted((r.key, r.value, r.partition, tuple(r.headers)) for r in records) == sorted(
        (k.encode(), v, p, (("h", h[0][1]),)) for k, v, p, h in rows
    )


def test_topic_column_routes_rows_and_keys_pick_partitions(
    spark: Any, spark_daemon: DaemonProcess, topic_name: str
) -> None:
    with lkstream.connect(spark_daemon.address) as client:
        client.create_topic(topic_name + ".x", partitions=2)
        client.create_topic(topic_name + ".y", partitions=2)
    rows = [(topic_name + (".x" if i % 3 else ".y"), f"key{i % 5}", f"value{i}") for i in range(60)]
    spark.createDataFrame(rows, "topic string, key string, value string").write.mode("append").format(
        "lkstream"
    ).option("bootstrap", spark_daemon.address).save()
    for suffix, wanted in ((".x", 40), (".y", 20)):
        records = _read_all(spark_daemon.address, topic_name + suffix)
        assert len(records) == wanted
        by_key: dict[bytes | None, set[int]] = {}
        for r in records:
            by_key.setdefault(r.key, set()).add(r.partition)
        assert all(len(parts) == 1 for parts in by_key.values()), "one key landed in two partitions"


def test_stream_round_trip_source_to_sink(
    spark: Any, spark_daemon: DaemonProcess, tmp_path: Path, topic_name: str
) -> None:
    source, target = topic_name + ".in", topic_name + ".out"
    with lkstream.connect(spark_daemon.address) as client:
        client.create_topic(source, partitions=2)
        client.create_topic(target, partitions=1)
        client.produce_many_sync(source, [(b"k%d" % i, b"%d" % i) for i in range(500)])
    query = (
        spark.readStream.format("lkstream")
        .option("bootstrap", spark_daemon.address)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("key", "CAST(CAST(CAST(value AS STRING) AS INT) * 2 AS STRING) AS value")
        .writeStream.format("lkstream")
        .option("bootstrap", spark_daemon.address)
        .option("topic", target)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    records = _read_all(spark_daemon.address, target)
    assert sorted(int(r.value) for r in records) == [2 * i for i in range(500)]


@pytest.mark.parametrize(
    ("ddl", "options", "message"),
    [
        ("key string", {"topic": "t"}, "needs a column named value"),
        ("value string, extra int", {"topic": "t"}, "does not know column 'extra'"),
        ("value int", {"topic": "t"}, "column value must be binary or string"),
        ("value string", {}, "needs a topic"),
        ("value string", {"topic": "t", "bogus": "1"}, "unknown lkstream sink option(s) bogus"),
    ],
)
def test_bad_sink_input_fails_at_query_start(
    spark: Any, spark_daemon: DaemonProcess, ddl: str, options: dict[str, str], message: str
) -> None:
    writer = (
        spark.createDataFrame([], ddl).write.mode("append").format("lkstream").option("bootstrap", spark_daemon.address)
    )
    for name, value in options.items():
        writer = writer.option(name, value)
    with pytest.raises(Exception, match="data source") as info:
        writer.save()
    assert message in str(info.value)


def test_sink_without_a_daemon_is_rejected(spark: Any, tmp_path: Path) -> None:
    writer = (
        spark.createDataFrame([("v",)], "value string").write.mode("append").format("lkstream").option("topic", "t")
    )
    with pytest.raises(Exception, match="needs option bootstrap"):
        writer.save()
    with pytest.raises(Exception, match=re.escape("127.0.0.1:1")):
        writer.option("bootstrap", "127.0.0.1:1").save()


def test_overwrite_is_rejected(spark: Any, spark_daemon: DaemonProcess) -> None:
    df = spark.createDataFrame([("v",)], "value string")
    writer = df.write.mode("overwrite").format("lkstream").option("bootstrap", spark_daemon.address)
    with pytest.raises(Exception, match="appends only"):
        writer.option("topic", "t").save()


@pytest.mark.parametrize("lane", [True, False], ids=["kafka-lane", "grpc-window"])
def test_one_task_s_batches_land_in_the_order_it_wrote_them(
    spark: Any, spark_daemon: DaemonProcess, tmp_path: Path, topic_name: str, lane: bool
) -> None:
    # With the daemon's Kafka listener the sink sends its batches through the lane, one at a time;
    # without it, up to 4 at once on one gRPC stream. Either way one partition's batches land in order.
    daemon = spark_daemon if lane else start_daemon_at(tmp_path, "grpc-only", kafka_port=-1)
    try:
        with lkstream.connect(daemon.address) as client:
            assert (client.kafka_lane is not None) == lane
            client.create_topic(topic_name, partitions=1)
        # One task, small batches: hundreds of batches of one partition.
        df = spark.range(20_000, numPartitions=1).selectExpr("CAST(CAST(id AS STRING) AS BINARY) AS value")
        df.write.mode("append").format("lkstream").option("bootstrap", daemon.address).option(
            "topic", topic_name
        ).option("batchBytes", "4096").save()
        records = _read_all(daemon.address, topic_name)
        assert [int(r.value) for r in records] == list(range(20_000))
        assert len({r.offset - int(r.value) for r in records}) == 1  # dense, in order, no duplicates
    finally:
        if not lane:
            daemon.terminate()


def test_rows_too_large_for_the_daemon_fail_the_write_naming_the_limit(
    spark: Any, tmp_path: Path, topic_name: str
) -> None:
    daemon = start_daemon_at(tmp_path, "small", max_message_bytes=1000)
    try:
        df = spark.createDataFrame([(b"x" * 10,), (b"y" * 5000,)], "value binary")
        writer = df.write.mode("append").format("lkstream").option("bootstrap", daemon.address)
        with pytest.raises(Exception, match="5000"):
            writer.option("topic", topic_name).save()
    finally:
        daemon.terminate()


@pytest.mark.parametrize("sizes", [[], [10], [10] * 1000, [5000, 1, 1, 5000, 70_000, 3], list(range(0, 3000, 7))])
def test_batches_are_cut_at_about_batch_bytes_and_hold_at_least_one_row(sizes: list[int]) -> None:
    budget = 4096
    rows = np.array(sizes, dtype=np.int64)
    bounds = [0, *cut_points(rows, budget), len(sizes)] if sizes else [0]
    for start, end in itertools.pairwise(bounds):
        assert end > start
        used = int((rows[start:end] + RECORD_OVERHEAD).sum())
        assert end - start == 1 or used <= budget, (start, end, used)
        if end < len(sizes):  # the next row would not have fit
            assert used + sizes[end] + RECORD_OVERHEAD > budget


def test_lengths_come_from_the_arrow_offsets_with_nulls_as_zero() -> None:
    column = pa.array([b"abc", None, b"", b"x" * 300], type=pa.binary())
    assert _lengths(column, 4).tolist() == [3, 0, 0, 300]
    assert _lengths(column.slice(1, 3), 3).tolist() == [0, 0, 300]
    assert _lengths(pa.array(["héllo", None], type=pa.large_string()), 2).tolist() == [6, 0]
    assert _lengths(None, 2).tolist() == [0, 0]
