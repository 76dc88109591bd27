"""A Kafka job moved to the lkstream source by changing the format name (issue 26, items 5, 8, 9, 11).

A real local SparkSession against a real daemon: Kafka's option names, minOffsetsPerTrigger
with maxTriggerDelay, startingOffsetsByTimestampStrategy, maxRecordsPerPartition, the lag
metrics, and what a user reads when the query cannot be planned.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

import lkstream
from lkstream.spark import offsets_behind_latest
from tests.integration.conftest import DaemonProcess
from tests.spark.test_streaming import _drain, _stream


def _read(spark: Any, **options: str) -> Any:
    reader = spark.read.format("lkstream")
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def _rows(spark: Any, name: str) -> int:
    return int(spark.sql(f"SELECT count(*) FROM {name}").collect()[0][0])


def _wait_for_rows(spark: Any, name: str, count: int, within_s: float = 90) -> None:
    deadline = time.monotonic() + within_s
    while (rows := _rows(spark, name)) < count:
        assert time.monotonic() < deadline, f"{name} holds {rows} rows after {within_s} s, not {count}"
        time.sleep(0.2)
    assert rows == count, f"{name} holds {rows} rows, not {count}"


def test_a_kafka_job_s_options_run_unchanged_but_the_format(
    spark: Any, spark_daemon: DaemonProcess, topic_name: str
) -> None:
    with lkstream.connect(spark_daemon.address) as client:
        client.create_topic(topic_name, 2)
        client.produce_many_sync(topic_name, [(b"k%d" % n, b"v%d" % n) for n in range(50)])
    kafka_options = {
        "kafka.bootstrap.servers": spark_daemon.address,
        "subscribe": topic_name,
        "startingOffsets": "earliest",
        "kafka.group.id": "spark-job",
        "groupIdPrefix": "spark-kafka-source",
        "kafka.fetch.max.bytes": "1048576",
        "kafkaConsumer.pollTimeoutMs": "512",
        "fetchOffset.numRetries": "3",
        "failOnDataLoss": "true",
    }
    assert _read(spark, **kafka_options).count() == 50
    kafka_options.pop("startingOffsets")
    df = _stream(
        spark,
        "kafka.bootstrap.servers",
        kafka_options.pop("kafka.bootstrap.servers"),
        startingOffsets="earliest",
        **kafka_options,
    )
    _drain(df, "kafka_named", Path(spark_daemon.data_dir).parent / f"cp-{topic_name}")
    assert _rows(spark, "kafka_named") == 50


def test_kafka_s_security_options_are_refused_with_ours_named(spark: Any, spark_daemon: DaemonProcess) -> None:
    reader = spark.read.format("lkstream").option("kafka.bootstrap.servers", spark_daemon.address)
    reader = reader.option("subscribe", "t").option("kafka.security.protocol", "SSL")
    with pytest.raises(Exception, match=r"kafka\.security\.protocol configure Kafka's own client") as info:
        reader.load().collect()
    assert "tlsCa" in str(info.value)


def test_bootstrap_at_the_kafka_listener_fails_at_once_saying_so(spark: Any, spark_daemon: DaemonProcess) -> None:
    started = time.monotonic()
    reader = spark.read.format("lkstream").option("kafka.bootstrap.servers", spark_daemon.kafka_address)
    with pytest.raises(Exception, match="this is the Kafka listener") as info:
        reader.option("subscribe", "t").load().collect()
    assert "server.grpc_port" in str(info.value) and "does the daemon use TLS" not in str(info.value)
    assert time.monotonic() - started < 30


def test_min_offsets_per_trigger_holds_batches_back_until_enough_records_wait(
    spark: Any, spark_daemon: DaemonProcess, topic_name: str, tmp_path: Path
) -> None:
    with lkstream.connect(spark_daemon.address) as client:
        client.create_topic(topic_name, 2)
        df = _stream(
            spark, "bootstrap", spark_daemon.address, subscribe=topic_name, startingOffsets="earliest",
            minOffsetsPerTrigger="100", maxTriggerDelay="1h",
        )  # fmt: skip
        query = (
            df.writeStream.format("memory")
            .queryName("held")
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        try:
            # As Kafka's source, the first trigger goes whatever waits: one record, once it is read, starts the clock.
            client.produce_many_sync(topic_name, [(b"first", b"v")])
            _wait_for_rows(spark, "held", 1)
            client.produce_many_sync(topic_name, [(b"k%d" % n, b"v") for n in range(60)])
            time.sleep(3)  # fifteen triggers: each finds 60 < 100 records waiting
            assert _rows(spark, "held") == 1
            client.produce_many_sync(topic_name, [(b"k%d" % n, b"v") for n in range(60, 110)])
            _wait_for_rows(spark, "held", 111)
            assert query.exception() is None
        finally:
            query.stop()


def test_max_trigger_delay_lets_a_small_batch_through(
    spark: Any, spark_daemon: DaemonProcess, topic_name: str, tmp_path: Path
) -> None:
    with lkstream.connect(spark_daemon.address) as client:
        client.create_topic(topic_name, 1)
        df = _stream(
            spark, "bootstrap", spark_daemon.address, subscribe=topic_name, startingOffsets="earliest",
            minOffsetsPerTrigger="1000", maxTriggerDelay="2s",
        )  # fmt: skip
        query = (
            df.writeStream.format("memory")
            .queryName("delayed")
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        try:
            client.produce_many_sync(topic_name, [(None, b"v")])  # the first trigger goes whatever waits
            _wait_for_rows(spark, "delayed", 1)
            # 10 of the 1,000 wanted: held back at most maxTriggerDelay (2 s), then let through
            # (with maxTriggerDelay=1h they would wait, as the test above shows).
            client.produce_many_sync(topic_name, [(None, b"v")] * 10)
            _wait_for_rows(spark, "delayed", 11)
        finally:
            query.stop()


def test_starting_offsets_by_timestamp_strategy(spark: Any, spark_daemon: DaemonProcess, topic_name: str) -> None:
    with lkstream.connect(spark_daemon.address) as client:
        client.create_topic(topic_name, 2)
        client.produce_many_sync(topic_name, [(None, b"old")] * 3, partition=0)
        client.produce_many_sync(topic_name, [(None, b"old")] * 3, partition=1)
        time.sleep(0.05)
        cut = int(time.time() * 1000)
        time.sleep(0.05)
        client.produce_many_sync(topic_name, [(None, b"new")] * 2, partition=1)
    options = {"bootstrap": spark_daemon.address, "subscribe": topic_name, "startingTimestamp": str(cut)}
    # Partition 0 has no record at or after the time: Kafka's default fails the query, naming it.
    with pytest.raises(Exception, match=re.escape(f"{topic_name}[0] has no record at or after the starting timestamp")):
        _read(spark, **options).collect()
    rows = _read(spark, **options, startingOffsetsByTimestampStrategy="latest").collect()
    assert sorted((r["partition"], r["value"]) for r in rows) == [(1, b"new"), (1, b"new")]
    # Per partition: each one that has a record at or after its time starts there.
    by_partition = json.dumps({topic_name: {"0": 0, "1": cut}})
    rows = _read(
        spark, bootstrap=spark_daemon.address, subscribe=topic_name, startingOffsetsByTimestamp=by_partition
    ).collect()
    assert sorted((r["partition"], r["value"]) for r in rows) == [(0, b"old")] * 3 + [(1, b"new")] * 2


def test_max_records_per_partition_splits_tasks(spark: Any, spark_daemon: DaemonProcess, topic_name: str) -> None:
    with lkstream.connect(spark_daemon.address) as client:
        client.create_topic(topic_name, 1)
        client.produce_many_sync(topic_name, [(None, b"v")] * 1000)
    df = _read(spark, bootstrap=spark_daemon.address, subscribe=topic_name, maxRecordsPerPartition="300")
    assert df.rdd.getNumPartitions() == 4
    assert sorted(r["offset"] for r in df.select("offset").collect()) == list(range(1000))


def test_progress_gives_kafka_s_offsets_behind_latest(
    spark: Any, spark_daemon: DaemonProcess, topic_name: str, tmp_path: Path
) -> None:
    with lkstream.connect(spark_daemon.address) as client:
        client.create_topic(topic_name, 2)
        client.produce_many_sync(topic_name, [(None, b"v")] * 600, partition=0)
        client.produce_many_sync(topic_name, [(None, b"v")] * 400, partition=1)
    df = _stream(
        spark, "bootstrap", spark_daemon.address, subscribe=topic_name, startingOffsets="earliest",
        maxOffsetsPerTrigger="300",
    )  # fmt: skip
    query = _drain(df, "lagging", tmp_path / "cp")
    first, *_, last = query.recentProgress
    (source,) = first["sources"]
    lag = offsets_behind_latest(source)
    assert lag is not None and lag.topics == (topic_name,)
    end = json.loads(source["endOffset"])[topic_name]
    behind = [600 - end["0"], 400 - end["1"]]
    assert (lag.max, lag.min, lag.avg) == (max(behind), min(behind), sum(behind) / 2)
    assert sum(end.values()) == 300 and lag.max > 0
    final = offsets_behind_latest(last["sources"][0])
    assert final is not None and (final.max, final.min, final.avg) == (0, 0, 0.0)


@pytest.mark.parametrize(
    ("options", "ours"),
    [
        ({"subscribe": "t", "bogus": "1"}, "unknown lkstream source option(s) bogus"),
        ({"subscribe": "no.such.topic"}, "topic 'no.such.topic' does not exist"),
    ],
)
def test_a_stream_that_cannot_be_planned_ends_with_our_message(
    spark: Any, spark_daemon: DaemonProcess, tmp_path: Path, options: dict[str, str], ours: str
) -> None:
    df = _stream(spark, "bootstrap", spark_daemon.address, **options)
    with pytest.raises(Exception) as info:
        query = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp")).start()
        query.awaitTermination(60)
        raise AssertionError(f"the query started: {query.exception()}")
    _assert_ours_last(str(info.value), ours)


def test_a_stream_against_no_daemon_ends_with_our_message(spark: Any, tmp_path: Path) -> None:
    df = _stream(spark, "bootstrap", "127.0.0.1:1", subscribe="t")
    with pytest.raises(Exception) as info:
        query = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp")).start()
        query.awaitTermination(90)
        raise AssertionError(f"the query started: {query.exception()}")
    _assert_ours_last(str(info.value), "cannot reach the lkstream daemon at 127.0.0.1:1")


def _assert_ours_last(text: str, ours: str) -> None:
    """The user's traceback: ours is there, and it is the last Python exception (no PySpark one below it)."""
    assert "UnboundLocalError" not in text, text
    raised = [line for line in text.splitlines() if re.match(r"^[\w.]+(Error|Exception): ", line)]
    assert raised, text
    assert ours in raised[-1], raised
    assert raised[-1].startswith("lkstream.errors."), raised
