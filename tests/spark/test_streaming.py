"""The lkstream streaming source: micro-batches, admission control, AvailableNow, new topics, data loss."""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import lkstream
from lkstream import Broker
from tests.integration.conftest import DaemonProcess
from tests.spark.conftest import start_daemon_at


def _stream(spark: Any, option: str, address: str, **options: str) -> Any:
    reader = spark.readStream.format("lkstream").option(option, address)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def _drain(df: Any, name: str, checkpoint: Path) -> Any:
    """Run ``df`` with Trigger.AvailableNow into a memory table; return the finished query."""
    query = (
        df.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120), "the AvailableNow query did not finish in 120 s"
    assert query.exception() is None
    return query


@contextlib.contextmanager
def _live(df: Any, name: str, checkpoint: Path) -> Iterator[tuple[Any, float]]:
    """Run ``topic`` and ``v`` (the value as text) of ``df`` every 200 ms into a memory table.

    Yields the query, once it has made progress, and a deadline 60 s from the start.
    """
    query = (
        df.selectExpr("topic", "CAST(value AS STRING) AS v")
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 60
        while not query.recentProgress:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        yield query, deadline
    finally:
        query.stop()


def test_available_now_respects_max_offsets_per_trigger(
    spark: Any, spark_daemon: DaemonProcess, tmp_path: Path, topic_name: str
) -> None:
    with lkstream.connect(spark_daemon.address) as client:
        client.create_topic(topic_name, partitions=2)
        client.produce_many_sync(topic_name, [(None, b"a%d" % i) for i in range(700)], partition=0)
        client.produce_many_sync(topic_name, [(None, b"b%d" % i) for i in range(300)], partition=1)
    df = _stream(
        spark,
        "bootstrap",
        spark_daemon.address,
        subscribe=topic_name,
        startingOffsets="earliest",
        maxOffsetsPerTrigger="300",
    )
    query = _drain(df.select("partition", "offset"), "limits", tmp_path / "cp")
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert batches == [300, 300, 300, 100]
    rows = spark.sql("SELECT partition, offset FROM limits").collect()
    assert sorted((r[0], r[1]) for r in rows) == [(0, o) for o in range(700)] + [(1, o) for o in range(300)]


def test_continuous_micro_batches_pick_up_new_records_and_new_topics(
    spark: Any, spark_daemon: DaemonProcess, tmp_path: Path, topic_name: str
) -> None:
    pattern = topic_name.replace(".", r"\.") + r"\..*"
    with lkstream.connect(spark_daemon.address) as client:
        client.create_topic(topic_name + ".a", partitions=1)
        client.produce_many_sync(topic_name + ".a", [(None, b"before")])
        df = _stream(spark, "bootstrap", spark_daemon.address, subscribePattern=pattern, startingOffsets="latest")
        with _live(df, "live", tmp_path / "cp") as (query, deadline):
            client.produce_many_sync(topic_name + ".a", [(None, b"after")])
            client.create_topic(topic_name + ".b", partitions=2)
            client.produce_many_sync(topic_name + ".b", [(None, b"new-topic")])
            wanted = {(topic_name + ".a", "after"), (topic_name + ".b", "new-topic")}
            while True:
                got = {(r[0], r[1]) for r in spark.sql("SELECT topic, v FROM live").collect()}
                if got == wanted:
                    break
                assert query.exception() is None
                assert time.monotonic() < deadline, f"saw {got}, want {wanted}"
                time.sleep(0.2)


def test_streaming_over_a_data_directory(spark: Any, tmp_path: Path, topic_name: str) -> None:
    data = tmp_path / "data"
    with Broker(persist_dir=str(data), partitions=2) as broker:
        broker.create_topic(topic_name, partitions=2)
        broker.produce_many_sync(topic_name, [(b"k%d" % i, b"v%d" % i) for i in range(200)])
    df = _stream(spark, "path", str(data), subscribe=topic_name, startingOffsets="earliest")
    _drain(df, "fromdir", tmp_path / "cp")
    assert spark.sql("SELECT count(*) FROM fromdir").collect()[0][0] == 200


def test_streaming_start_fails_for_a_missing_topic(spark: Any, spark_daemon: DaemonProcess, tmp_path: Path) -> None:
    df = _stream(spark, "bootstrap", spark_daemon.address, subscribe="no.such.topic")
    with pytest.raises(Exception, match=re.escape("topic 'no.such.topic' does not exist")):
        query = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp")).start()
        query.awaitTermination(60)
        raise AssertionError(f"the query started: {query.exception()}")


def _retention_broker(data: Path) -> Broker:
    return Broker(persist_dir=str(data), partitions=1, segment_max_bytes=4096, retention_bytes=4096)


def _produce_and_expire(broker: Broker, topic: str) -> int:
    """Fill several tiny segments, let retention delete the oldest; return the new log start."""
    broker.create_topic(topic, partitions=1, retention_bytes=4096)
    for i in range(40):
        broker.produce_many_sync(topic, [(None, b"%04d" % i + b"x" * 400)])
    broker.enforce_retention()
    start = broker.describe_topic(topic).partitions[0].log_start_offset
    assert start > 0, "retention deleted nothing"
    return start


@pytest.mark.parametrize("kind", ["path", "bootstrap"])
def test_fail_on_data_loss_names_the_lost_offsets_or_skips_them(
    spark: Any, tmp_path: Path, topic_name: str, kind: str
) -> None:
    data = tmp_path / "data"
    daemon = None
    with _retention_broker(data) as broker:
        log_start = _produce_and_expire(broker, topic_name)
    if kind == "bootstrap":
        daemon = start_daemon_at(tmp_path, "data", segment_max_bytes=4096)
        address = daemon.address
    else:
        address = str(data)
    try:
        starting = json.dumps({topic_name: {"0": 0}})
        df = spark.read.format("lkstream").option(kind, address).option("subscribe", topic_name)
        with pytest.raises(Exception, match=rf"{topic_name}\[0\] from offset 0 to {log_start - 1}"):
            df.option("startingOffsets", starting).load().collect()
        rows = df.option("startingOffsets", starting).option("failOnDataLoss", "false").load().collect()
        assert sorted(r["offset"] for r in rows) == list(range(log_start, 40))
    finally:
        if daemon is not None:
            daemon.terminate()


def test_a_new_empty_topic_matching_the_pattern_does_not_fail_the_stream(
    spark: Any, spark_daemon: DaemonProcess, tmp_path: Path, topic_name: str
) -> None:
    # The micro-batch that first sees the new topic has nothing to read (its offsets go from 0 to
    # 0): it must run as an empty batch, not fail (a batch read plans a placeholder partition then).
    pattern = re.escape(topic_name) + r"\..*"
    with lkstream.connect(spark_daemon.address) as client:
        client.create_topic(topic_name + ".a", partitions=1)
        df = _stream(spark, "bootstrap", spark_daemon.address, subscribePattern=pattern, startingOffsets="earliest")
        with _live(df, "emptynew", tmp_path / "cp") as (query, deadline):
            client.create_topic(topic_name + ".b", partitions=2)
            seen_b = False
            while not seen_b:  # a micro-batch whose end offsets name the empty topic ran
                assert query.exception() is None, query.exception()
                assert time.monotonic() < deadline, "no micro-batch saw the new topic"
                seen_b = any(
                    topic_name + ".b" in json.dumps(p["sources"][0]["endOffset"]) for p in query.recentProgress
                )
                time.sleep(0.2)
            client.produce_many_sync(topic_name + ".b", [(None, b"later")])
            while spark.sql("SELECT v FROM emptynew").collect() != [("later",)]:
                assert query.exception() is None, query.exception()
                assert time.monotonic() < deadline, "the record produced after the empty batch never came"
                time.sleep(0.2)
