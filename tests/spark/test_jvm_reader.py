"""The JVM reader (lkstream.spark.jvm.read_path) against the Python ``path`` source, and its failures."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import threading
import zipfile
from pathlib import Path
from typing import Any

import pytest

from lkstream import Broker
from lkstream.errors import InvalidArgumentError
from lkstream.spark import jvm
from lkstream.storage.reader import DataDirReader, PartitionReader

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def _records(batch: int, size: int) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]:
    """Null keys and values, empty values, records with and without headers (one with a null header value)."""
    out: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = []
    for i in range(size):
        key = None if i % 5 == 0 else b"k%d-%d" % (batch, i)
        value = None if i % 7 == 3 else b"" if i % 7 == 4 else b"v%d-" % i * (1 + i % 4)
        headers: list[tuple[str, bytes | None]] = [] if i % 3 else [("h", b"%d" % i), ("n", None)]
        out.append((key, value, headers))
    return out


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Topic ``c.<codec>`` per codec, 2 partitions, several segments each (4 KiB segments)."""
    path = str(tmp_path_factory.mktemp("jvm") / "data")
    broker = Broker(persist_dir=path, partitions=2, segment_max_bytes=4096, index_interval_bytes=1024)
    try:
        for codec in CODECS:
            topic = f"c.{codec}"
            broker.create_topic(topic, partitions=2)
            for batch in range(40):
                compression = None if codec == "none" else codec
                broker.produce_many_sync(topic, _records(batch, 30), partition=batch % 2, compression=compression)
    finally:
        broker.close()
    segments = os.listdir(DataDirReader(path).partition_dir("c.none", 0))
    assert len([s for s in segments if s.endswith(".seg")]) >= 3
    return path


def _python_read(spark: Any, path: str, **options: str) -> Any:
    reader = spark.read.format("lkstream").option("path", path)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def _same(spark: Any, path: str, **options: str) -> list[Any]:
    expected = _python_read(spark, path, **options)
    got = jvm.read_path(spark, path, **options)
    assert got.schema == expected.schema
    rows = got.collect()
    assert rows == expected.collect()
    assert got.rdd.getNumPartitions() == expected.rdd.getNumPartitions()
    return rows


@pytest.mark.parametrize(
    "options",
    [
        {"subscribePattern": r"c\..*"},
        {"subscribePattern": r"c\..*", "includeHeaders": "true"},
        {"subscribe": "c.zstd,c.none", "minPartitions": "9"},
        {
            "subscribe": "c.gzip,c.lz4",
            "includeHeaders": "true",
            "startingOffsets": '{"c.gzip": {"0": 17, "1": -2}, "c.lz4": {"0": 301, "1": 45}}',
            "endingOffsets": '{"c.gzip": {"0": 333, "1": -1}, "c.lz4": {"0": -1, "1": 46}}',
        },
    ],
    ids=["all-codecs", "headers", "min-partitions", "offsets"],
)
def test_read_path_equals_the_python_path_source(spark: Any, data_dir: str, options: dict[str, str]) -> None:
    rows = _same(spark, data_dir, **options)
    assert rows
    if options.get("includeHeaders"):
        assert any(r.headers for r in rows) and any(r.headers is None for r in rows)
    keys = [r.key for r in rows]
    values = [r.value for r in rows]
    assert None in keys and None in values and bytearray() in values


def test_offsets_are_dense_and_in_order_across_segments(spark: Any, data_dir: str) -> None:
    rows = jvm.read_path(spark, data_dir, subscribe="c.snappy").collect()
    for pid in (0, 1):
        offsets = [r.offset for r in rows if r.partition == pid]
        assert offsets == list(range(20 * 30))


def test_an_empty_range_is_an_empty_dataframe(spark: Any, data_dir: str) -> None:
    ending = '{"c.none": {"0": 0, "1": 0}}'
    assert jvm.read_path(spark, data_dir, subscribe="c.none", endingOffsets=ending).count() == 0


def test_batches_larger_than_the_read_window(spark: Any, tmp_path: Path) -> None:
    """Small batches and batches of 1.5 and 5 MiB (past the reader's 1 MiB window), every batch's values
    its own, a window often ending inside a batch: a refill never overwrites the values a columnar
    batch still points to."""
    path = str(tmp_path / "data")
    with Broker(persist_dir=path, partitions=1) as broker:
        broker.create_topic("big", partitions=1)
        for i in range(6):
            broker.produce_many_sync("big", [(b"s", b"small-%d" % i)] * 50, partition=0)
            broker.produce_many_sync("big", [(None, bytes([i]) * (50 * 1024))] * 30, partition=0)
            broker.produce_many_sync("big", [(b"l", bytes([100 + i]) * (50 * 1024))] * 100, partition=0)
    rows = _same(spark, path, subscribe="big")
    assert len(rows) == 6 * 180
    assert [len(r.value) for r in rows if r.key is None] == [50 * 1024] * 6 * 30
    assert [r.value[0] for r in rows if r.key == b"l"] == [100 + i for i in range(6) for _ in range(100)]


def _batch_positions(partition_dir: str) -> list[tuple[str, int, int, int]]:
    """``(segment path, byte position, base offset, next offset)`` of every batch of a partition."""
    return [
        (raw.segment, raw.position, raw.header.base_offset, raw.header.next_offset)
        for raw in PartitionReader(partition_dir).batches(0)
    ]


def test_a_flipped_byte_fails_the_job_naming_file_and_position(spark: Any, data_dir: str, tmp_path: Path) -> None:
    copy = str(tmp_path / "data")
    shutil.copytree(data_dir, copy)
    part = DataDirReader(copy).partition_dir("c.zstd", 1)
    segment, position, base, _ = _batch_positions(part)[5]
    with open(segment, "r+b") as f:
        f.seek(position + 70)
        byte = f.read(1)
        f.seek(position + 70)
        f.write(bytes([byte[0] ^ 0x40]))
    df = jvm.read_path(spark, copy, subscribe="c.zstd")
    with pytest.raises(Exception, match=rf"corrupt record batch in {segment} at byte {position}: CRC-32C mismatch"):
        df.collect()
    # A range that starts after the damaged batch skips it undecoded (the Python reader, which
    # CRC-checks every batch it walks past, would fail): the rows of the undamaged log.
    after = f'{{"c.zstd": {{"0": -2, "1": {base + 30}}}}}'
    rows = jvm.read_path(spark, copy, subscribe="c.zstd", startingOffsets=after).collect()
    assert rows == _python_read(spark, data_dir, subscribe="c.zstd", startingOffsets=after).collect()


def test_a_damaged_index_is_only_a_hint(spark: Any, data_dir: str, tmp_path: Path) -> None:
    """Index entries pointing anywhere (garbage, a wrong offset, past the file) leave the rows unchanged."""
    copy = str(tmp_path / "data")
    shutil.copytree(data_dir, copy)
    part = DataDirReader(copy).partition_dir("c.none", 0)
    indexes = sorted(n for n in os.listdir(part) if n.endswith(".idx"))
    entry = struct.Struct(">QQ")
    with open(os.path.join(part, indexes[0]), "wb") as f:
        f.write(os.urandom(40))
    with open(os.path.join(part, indexes[1]), "wb") as f:
        f.write(entry.pack(180, 0) + entry.pack(200, 3) + entry.pack(250, 10**9))
    starting = '{"c.none": {"0": 100, "1": -2}}'
    rows = jvm.read_path(spark, copy, subscribe="c.none", startingOffsets=starting, minPartitions="6").collect()
    assert (
        rows == _python_read(spark, data_dir, subscribe="c.none", startingOffsets=starting, minPartitions="6").collect()
    )


def _planned_on_a_copy(
    spark: Any, data_dir: str, tmp_path: Path, partition: int, **options: str
) -> tuple[str, Any, Any, str, list[str]]:
    """A copy of the data directory and two reads of it planned now (failing on data loss, and not);
    with the directory of ``c.none[partition]`` and its segment files, oldest first, to remove from."""
    copy = str(tmp_path / "data")
    shutil.copytree(data_dir, copy)
    failing = jvm.read_path(spark, copy, **options)
    skipping = jvm.read_path(spark, copy, failOnDataLoss="false", **options)
    part = DataDirReader(copy).partition_dir("c.none", partition)
    return copy, failing, skipping, part, sorted(n for n in os.listdir(part) if n.endswith(".seg"))


def test_records_retention_deleted_after_planning(spark: Any, data_dir: str, tmp_path: Path) -> None:
    copy, failing, skipping, part, segments = _planned_on_a_copy(spark, data_dir, tmp_path, 0, subscribe="c.none")
    oldest = segments[0]
    os.remove(os.path.join(part, oldest))
    os.remove(os.path.join(part, oldest.replace(".seg", ".idx")))
    start = PartitionReader(part).log_start_offset
    assert start > 0
    message = (
        rf"records of c\.none\[0\] from offset 0 to {start - 1} are no longer available \(retention deleted "
        rf"them; the log now starts at {start}\)\. Set failOnDataLoss=false to skip them"
    )
    with pytest.raises(Exception, match=message):
        failing.collect()
    rows = skipping.collect()
    assert rows == _python_read(spark, copy, subscribe="c.none").collect()
    assert min(r.offset for r in rows if r.partition == 0) == start


def test_a_log_cut_short_after_planning(spark: Any, data_dir: str, tmp_path: Path) -> None:
    """The newest segment removed after planning: the range cannot be completed (or ends early)."""
    _, failing, skipping, part, segments = _planned_on_a_copy(spark, data_dir, tmp_path, 1, assign='{"c.none": [1]}')
    newest = segments[-1]
    os.remove(os.path.join(part, newest))
    cut = int(newest.removesuffix(".seg"))
    with pytest.raises(Exception, match=rf"records of c\.none\[1\] from offset {cut} are no longer available"):
        failing.collect()
    assert [r.offset for r in skipping.collect()] == list(range(cut))


def test_read_path_takes_no_bootstrap_or_path_option(data_dir: str) -> None:
    with pytest.raises(InvalidArgumentError, match="bootstrap and path are not taken"):
        jvm.plan(data_dir, {"subscribe": "c.none", "bootstrap": "127.0.0.1:1"})
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        jvm.plan(data_dir, {"subscribe": "nope"})


def test_plan_gives_the_python_sources_tasks(data_dir: str) -> None:
    tasks, headers = jvm.plan(data_dir, {"subscribe": "c.none", "minPartitions": "4", "includeHeaders": "true"})
    assert headers
    assert [(t.topic, t.partition, t.start, t.end) for t in tasks] == [
        ("c.none", 0, 0, 300),
        ("c.none", 0, 300, 600),
        ("c.none", 1, 0, 300),
        ("c.none", 1, 300, 600),
    ]
    assert f'"dir": "{DataDirReader(data_dir).partition_dir("c.none", 1)}"' in jvm.ranges_json(data_dir, tasks)


def test_a_session_without_the_jar_is_told_how_to_add_it() -> None:
    class Missing:
        def __getattr__(self, name: str) -> Any:
            return self

        def __call__(self, *args: Any) -> Any:
            if args and args[0] == jvm.SOURCE_CLASS:
                raise RuntimeError(f"java.lang.ClassNotFoundException: {jvm.SOURCE_CLASS}")
            return self

    class Session:
        _jvm = Missing()

    with pytest.raises(jvm.JvmReaderError, match=r"spark\.jars.*jar_path\(\)"):
        jvm.read_path(Session(), "/nowhere", subscribe="t")


def test_the_jar_is_built_once_even_by_concurrent_callers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    paths: list[str] = []
    threads = [threading.Thread(target=lambda: paths.append(jvm.jar_path())) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(paths) == 2 and paths[0] == paths[1] == jvm.jar_path()
    assert os.listdir(tmp_path / "lkstream") == [".build.lock", os.path.basename(paths[0])] or sorted(
        os.listdir(tmp_path / "lkstream")
    ) == sorted([".build.lock", os.path.basename(paths[0])])
    with zipfile.ZipFile(paths[0]) as jar:
        assert "io/lkstream/spark/RangeSource.class" in jar.namelist()


def test_python_m_builds_the_jar_and_prints_its_path() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "lkstream.spark.jvm"], capture_output=True, text=True, timeout=300, check=True
    )
    assert done.stdout.strip() == jvm.jar_path()


def test_no_javac_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(jvm.JvmReaderError, match="needs javac, a Java Development Kit"):
        jvm.jar_path()
