"""The lkstream batch source over a daemon (bootstrap) and a data directory (path): schema, options, errors."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

import lkstream
from lkstream import Broker
from tests.integration.conftest import DaemonProcess

KAFKA_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
)
HEADERS = StructField(
    "headers",
    ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
)


def _records(n: int, prefix: str = "v") -> list[tuple[bytes, bytes]]:
    return [(b"k%d" % i, f"{prefix}{i}".encode()) for i in range(n)]


@pytest.fixture(params=["bootstrap", "path"])
def log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str, Any]]:
    """``(option name, option value, producer)`` for a daemon or a data directory."""
    if request.param == "bootstrap":
        daemon: DaemonProcess = request.getfixturevalue("spark_daemon")
        with lkstream.connect(daemon.address) as client:
            yield "bootstrap", daemon.address, client
    else:
        data = tmp_path / "data"
        broker = Broker(persist_dir=str(data), partitions=2)
        try:
            yield "path", str(data), broker
        finally:
            broker.close()


def _read(spark: Any, log: tuple[str, str, Any], **options: str) -> Any:
    reader = spark.read.format("lkstream").option(log[0], log[1])
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_schema_is_the_kafka_source_schema(spark: Any, log: tuple[str, str, Any], topic_name: str) -> None:
    log[2].create_topic(topic_name, partitions=2)
    df = _read(spark, log, subscribe=topic_name)
    assert [(f.name, f.dataType) for f in df.schema.fields] == [(f.name, f.dataType) for f in KAFKA_SCHEMA.fields]
    with_headers = _read(spark, log, subscribe=topic_name, includeHeaders="true")
    assert with_headers.schema.fields[-1].name == "headers"
    assert with_headers.schema.fields[-1].dataType == HEADERS.dataType


def test_batch_read_returns_every_record_with_its_coordinates(
    spark: Any, log: tuple[str, str, Any], topic_name: str
) -> None:
    producer = log[2]
    producer.create_topic(topic_name, partitions=2)
    before = int(time.time() * 1000)
    placed = producer.produce_many_sync(topic_name, _records(300))
    producer.produce_many_sync(topic_name, [(None, b"headed", [("h1", b"x"), ("h2", None)])], partition=1)
    rows = _read(spark, log, subscribe=topic_name, includeHeaders="true").collect()
    assert len(rows) == 301
    by_value = {r["value"]: r for r in rows}
    for i, (pid, offset) in enumerate(placed):
        row = by_value[b"v%d" % i]
        assert (row["key"], row["topic"], row["partition"], row["offset"]) == (b"k%d" % i, topic_name, pid, offset)
        assert row["timestamp"].timestamp() * 1000 >= before - 1000
        assert row["timestampType"] == 0
        assert row["headers"] is None
    headed = by_value[b"headed"]
    assert headed["key"] is None and headed["partition"] == 1
    assert [(h["key"], h["value"]) for h in headed["headers"]] == [("h1", b"x"), ("h2", None)]


def test_batch_read_of_an_empty_topic_returns_no_rows(spark: Any, log: tuple[str, str, Any], topic_name: str) -> None:
    """No range to read: Spark plans one placeholder partition, which reads nothing (it failed an assert)."""
    log[2].create_topic(topic_name, partitions=2)
    assert _read(spark, log, subscribe=topic_name).count() == 0
    assert _read(spark, log, subscribe=topic_name, includeHeaders="true").collect() == []


def test_starting_and_ending_offsets_select_a_range(spark: Any, log: tuple[str, str, Any], topic_name: str) -> None:
    producer = log[2]
    producer.create_topic(topic_name, partitions=2)
    producer.produce_many_sync(topic_name, _records(100), partition=0)
    producer.produce_many_sync(topic_name, _records(50), partition=1)
    starting = json.dumps({topic_name: {"0": 10, "1": -2}})
    ending = json.dumps({topic_name: {"0": 20, "1": -1}})
    rows = _read(spark, log, subscribe=topic_name, startingOffsets=starting, endingOffsets=ending).collect()
    got = sorted((r["partition"], r["offset"]) for r in rows)
    assert got == [(0, o) for o in range(10, 20)] + [(1, o) for o in range(50)]


def test_assign_reads_only_the_named_partitions(spark: Any, log: tuple[str, str, Any], topic_name: str) -> None:
    producer = log[2]
    producer.create_topic(topic_name, partitions=2)
    producer.produce_many_sync(topic_name, _records(7), partition=0)
    producer.produce_many_sync(topic_name, _records(5), partition=1)
    rows = _read(spark, log, assign=json.dumps({topic_name: [1]})).collect()
    assert sorted(r["offset"] for r in rows) == list(range(5))
    assert {r["partition"] for r in rows} == {1}


def test_subscribe_pattern_reads_every_matching_topic(spark: Any, log: tuple[str, str, Any], topic_name: str) -> None:
    producer = log[2]
    for suffix in ("a", "b"):
        producer.create_topic(f"{topic_name}.{suffix}", partitions=1)
        producer.produce_many_sync(f"{topic_name}.{suffix}", _records(3, suffix))
    producer.create_topic(f"{topic_name}x", partitions=1)
    producer.produce_many_sync(f"{topic_name}x", _records(3, "x"))
    pattern = topic_name.replace(".", r"\.") + r"\.(a|b)"
    rows = _read(spark, log, subscribePattern=pattern).collect()
    assert sorted(r["value"] for r in rows) == sorted(b"%s%d" % (s, i) for s in (b"a", b"b") for i in range(3))


def test_offsets_by_timestamp(spark: Any, log: tuple[str, str, Any], topic_name: str) -> None:
    producer = log[2]
    producer.create_topic(topic_name, partitions=1)
    producer.produce_many_sync(topic_name, _records(5, "old"))
    time.sleep(0.05)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    producer.produce_many_sync(topic_name, _records(3, "new"))
    starting = json.dumps({topic_name: {"0": cut}})
    rows = _read(spark, log, subscribe=topic_name, startingOffsetsByTimestamp=starting).collect()
    assert sorted(r["value"] for r in rows) == [b"new0", b"new1", b"new2"]
    rows = _read(spark, log, subscribe=topic_name, startingTimestamp=str(cut)).collect()
    assert len(rows) == 3
    rows = _read(spark, log, subscribe=topic_name, endingTimestamp=str(cut)).collect()
    assert sorted(r["value"] for r in rows) == [b"old%d" % i for i in range(5)]


def test_min_partitions_splits_a_large_range_into_tasks(spark: Any, log: tuple[str, str, Any], topic_name: str) -> None:
    producer = log[2]
    producer.create_topic(topic_name, partitions=1)
    for _ in range(4):
        producer.produce_many_sync(topic_name, _records(250))
    df = _read(spark, log, subscribe=topic_name, minPartitions="4")
    assert df.rdd.getNumPartitions() == 4
    offsets = sorted(r["offset"] for r in df.select("offset").collect())
    assert offsets == list(range(1000))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "t", "bogus": "1"}, "unknown lkstream source option(s) bogus"),
        ({"subscribe": "t", "assign": '{"t": [0]}'}, "exactly one of the options subscribe"),
        ({"subscribe": "t", "startingOffsets": "{oops"}, "startingOffsets is not valid JSON"),
        ({"subscribe": "t", "startingOffsets": "latest"}, "not allowed in a batch query"),
        ({"subscribe": "t", "maxOffsetsPerTrigger": "5"}, "for streaming queries only"),
        ({"subscribe": "t", "minPartitions": "0"}, "minPartitions must be >= 1"),
    ],
)
def test_bad_options_fail_at_planning_with_a_clear_message(
    spark: Any, tmp_path: Path, options: dict[str, str], message: str
) -> None:
    reader = spark.read.format("lkstream").option("path", str(tmp_path))
    for name, value in options.items():
        reader = reader.option(name, value)
    with pytest.raises(Exception, match="Failed to initialize Python data source reader") as info:
        reader.load().collect()
    assert message in str(info.value)


def test_missing_topic_fails_naming_it(spark: Any, log: tuple[str, str, Any], topic_name: str) -> None:
    log[2].create_topic(topic_name + ".other", partitions=1)
    with pytest.raises(Exception, match=f"topic '{topic_name}' does not exist"):
        _read(spark, log, subscribe=topic_name).collect()


def test_unreachable_daemon_fails_naming_the_address(spark: Any) -> None:
    reader = spark.read.format("lkstream").option("bootstrap", "127.0.0.1:1").option("subscribe", "t")
    with pytest.raises(Exception, match=re.escape("127.0.0.1:1")):
        reader.load().collect()


def test_both_or_neither_address_option_is_rejected(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="exactly one of the options bootstrap"):
        spark.read.format("lkstream").option("subscribe", "t").load().collect()
