"""The Spark source over a compacted topic (issue 24): fewer rows than offsets, ranges planned by offsets.

A cleaned log keeps offsets but not every record: batches lose records (keeping their last
offset) and empty batches cover removed runs. The Python ``path`` source, the JVM reader
(``jvm.read_path``) and the source over a live broker's Kafka lane read the same rows, and
an offset range that starts or ends inside a removed run reads exactly the records in it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from lkstream import Broker
from lkstream.spark import jvm
from lkstream.storage.cleaner import CleanerPolicy, clean_pass
from lkstream.storage.clock import ManualClock
from lkstream.storage.keymap import new_key_map
from tests.integration.conftest import DaemonFactory, start_daemon

__all__ = ["start_daemon"]

pytestmark = pytest.mark.spark

CODECS = ("none", "zstd")
START_MS = 1_700_000_000_000


@pytest.fixture(scope="module")
def compacted(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, dict[int, tuple[bytes, bytes]]]]:
    """Topics ``k.<codec>``: 600 offsets of 20 keys, cleaned once; returns the records that survived."""
    path = str(tmp_path_factory.mktemp("compacted") / "data")
    clock = ManualClock(START_MS)
    survivors: dict[str, dict[int, tuple[bytes, bytes]]] = {}
    with Broker(persist_dir=path, segment_max_bytes=4096, log_cleaner_enabled=False, clock=clock) as broker:
        for codec in CODECS:
            topic = f"k.{codec}"
            broker.create_topic(topic, 1, configs={"cleanup.policy": "compact"})
            for n in range(60):
                records = [(f"key-{(n * 10 + i) % 20}".encode(), f"v{n}.{i}".encode() * 3) for i in range(9)]
                records.append((f"once-{n}".encode(), b"kept"))  # a key seen once: survivors all along the log
                broker.produce_many_sync(topic, records, partition=0, compression=None if codec == "none" else codec)
            log = broker.partition(topic, 0).log
            stats = clean_pass(
                log.cleaning_snapshot(), CleanerPolicy(), new_key_map(1 << 20), clock.now_ms(), log.replace_segments
            )
            assert stats.records_kept < stats.records_read
            kept: dict[int, tuple[bytes, bytes]] = {}
            offset, end = 0, broker.partition(topic, 0).high_watermark
            while offset < end:
                got = broker.read_from(topic, 0, offset)
                kept.update({r.offset: (r.key, r.value) for r in got})  # type: ignore[misc]
                offset = got[-1].offset + 1
            survivors[topic] = kept
    return path, survivors


def _python_read(spark: Any, path: str, **options: str) -> Any:
    reader = spark.read.format("lkstream").option("path", path)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


@pytest.mark.parametrize("codec", CODECS)
def test_both_readers_return_the_surviving_records_and_only_them(
    spark: Any, compacted: tuple[str, dict[str, dict[int, tuple[bytes, bytes]]]], codec: str
) -> None:
    path, survivors = compacted
    topic = f"k.{codec}"
    expected = sorted((offset, bytes(k), bytes(v)) for offset, (k, v) in survivors[topic].items())
    assert len(expected) < 600, "the clean removed records: fewer rows than offsets"
    for frame in (_python_read(spark, path, subscribe=topic), jvm.read_path(spark, path, subscribe=topic)):
        rows = sorted((r.offset, bytes(r.key), bytes(r.value)) for r in frame.collect())
        assert rows == expected


def test_ranges_that_start_and_end_inside_removed_offsets(
    spark: Any, compacted: tuple[str, dict[str, dict[int, tuple[bytes, bytes]]]]
) -> None:
    path, survivors = compacted
    kept = sorted(survivors["k.none"])
    removed = sorted(set(range(kept[-1])) - set(kept))
    start, end = removed[len(removed) // 4], removed[len(removed) // 2]  # the keys seen once survive between
    options = {
        "subscribe": "k.none",
        "startingOffsets": f'{{"k.none": {{"0": {start}}}}}',
        "endingOffsets": f'{{"k.none": {{"0": {end}}}}}',
        "minPartitions": "4",  # ranges split at offsets that hold no record
    }
    expected = [offset for offset in kept if start <= offset < end]
    assert expected, "the range holds records"
    for frame in (_python_read(spark, path, **options), jvm.read_path(spark, path, **options)):
        assert sorted(r.offset for r in frame.collect()) == expected


def test_the_source_over_a_live_broker_reads_the_same_rows(
    spark: Any,
    compacted: tuple[str, dict[str, dict[int, tuple[bytes, bytes]]]],
    tmp_path: Path,
    start_daemon: DaemonFactory,
) -> None:
    path, survivors = compacted
    copy = tmp_path / "live"
    shutil.copytree(path, copy)
    daemon = start_daemon(data_dir=copy)
    frame = spark.read.format("lkstream").option("bootstrap", daemon.address).option("subscribe", "k.zstd").load()
    rows = sorted((r.offset, bytes(r.key), bytes(r.value)) for r in frame.collect())
    assert rows == sorted((o, bytes(k), bytes(v)) for o, (k, v) in survivors["k.zstd"].items())
