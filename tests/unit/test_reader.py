"""lkstream.storage.reader: read-only access that sees what recovery would keep, and scan_segment."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from lkstream import Broker, CorruptRecordError, InvalidArgumentError
from lkstream.format.batch import stamp_base_offset
from lkstream.format.codec import decode_batch, encode_batch
from lkstream.storage.files import MemoryFile
from lkstream.storage.reader import (
    DataDirReader,
    PartitionReader,
    ScannedBatch,
    ScanProblem,
    scan_segment,
)

from .datadir import batch_positions, build, flip_byte, part_dir, segment_paths


def offsets_read(reader: PartitionReader, start: int = 0) -> list[int]:
    out: list[int] = []
    for batch in reader.batches(start):
        out += [r.offset for r in decode_batch(batch.data, "t", 0)]
    return out


def snapshot(root: str) -> dict[str, tuple[bytes, int]]:
    out = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                out[path] = (f.read(), os.stat(path).st_mtime_ns)
    return out


def stamped_batch(base: int, count: int = 2) -> bytearray:
    batch = encode_batch([(None, b"x%d" % i) for i in range(count)], timestamp_ms=1_000)
    stamp_base_offset(batch, base)
    return batch


# -- scan_segment ------------------------------------------------------------------------------------


def test_scan_yields_each_batch_with_its_position_and_header() -> None:
    batches = [stamped_batch(0), stamped_batch(2), stamped_batch(4)]
    file = MemoryFile(data=b"".join(batches))
    items = [i for i in scan_segment(file, expected_offset=0) if isinstance(i, ScannedBatch)]
    assert len(items) == 3
    assert [i.position for i in items] == [0, len(batches[0]), len(batches[0]) + len(batches[1])]
    assert [i.header.base_offset for i in items] == [0, 2, 4]


def test_scan_resumes_after_a_crc_mismatch_when_the_frame_is_intact() -> None:
    first, second, third = stamped_batch(0), stamped_batch(2), stamped_batch(4)
    second[-1] ^= 0x01  # inside the records: the CRC fails, the length is fine
    items = list(scan_segment(MemoryFile(data=bytes(first + second + third)), expected_offset=0))
    assert isinstance(items[1], ScanProblem) and items[1].resumable
    assert "CRC-32C mismatch" in items[1].reason and items[1].position == len(first)
    assert isinstance(items[2], ScannedBatch) and items[2].header.base_offset == 4


def test_scan_stops_at_a_length_that_leads_nowhere() -> None:
    first, second = stamped_batch(0), stamped_batch(2)
    second[8:12] = (10_000).to_bytes(4, "big")  # batch_length beyond the file
    items = list(scan_segment(MemoryFile(data=bytes(first + second + stamped_batch(4)))))
    assert isinstance(items[-1], ScanProblem) and not items[-1].resumable
    assert items[-1].reason.startswith("truncated batch")
    assert len(items) == 2


def test_scan_reports_an_offset_gap_and_goes_on() -> None:
    items = list(scan_segment(MemoryFile(data=bytes(stamped_batch(0) + stamped_batch(5))), expected_offset=0))
    assert isinstance(items[1], ScanProblem) and items[1].resumable
    assert "does not continue at offset 2" in items[1].reason


def test_scan_never_raises_on_arbitrary_bytes() -> None:
    seed = 20240601
    rng = random.Random(seed)
    valid = bytes(stamped_batch(0))
    for n in range(300):
        data = bytearray(valid * 2)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        data = data[: rng.randint(0, len(data))] + rng.randbytes(rng.randint(0, 80))
        items = list(scan_segment(MemoryFile(data=bytes(data)), expected_offset=0))  # must not raise
        assert all(isinstance(i, (ScannedBatch, ScanProblem)) for i in items), f"seed {seed} case {n}"


# -- listing and reading -----------------------------------------------------------------------------


def test_lists_topics_and_partitions(data_dir: str) -> None:
    build(data_dir, batches=1, topic="a", partitions=3)
    build(data_dir, batches=1, topic="b")
    reader = DataDirReader(data_dir)
    assert reader.topics() == ["a", "b"]
    assert reader.partitions("a") == [0, 1, 2]


def test_rejects_a_directory_that_is_not_a_data_dir(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="not an LKSTREAM data directory"):
        DataDirReader(str(tmp_path))


def test_batches_yield_every_offset_in_order_across_segments(data_dir: str) -> None:
    written = build(data_dir, batches=12)
    reader = DataDirReader(data_dir).partition("t", 0)
    assert len(reader.segments) >= 3
    assert offsets_read(reader) == written
    assert reader.end_offset() == written[-1] + 1
    assert reader.log_start_offset == 0


def test_batches_from_an_offset_start_with_the_batch_that_holds_it(data_dir: str) -> None:
    build(data_dir, batches=12)
    reader = DataDirReader(data_dir).partition("t", 0)
    first = next(reader.batches(16))
    assert first.header.base_offset == 15 and first.header.last_offset == 17
    assert offsets_read(reader, 16)[:3] == [15, 16, 17]
    assert list(reader.batches(reader.end_offset())) == []


def test_an_offset_below_the_log_start_begins_at_the_log_start(data_dir: str) -> None:
    build(data_dir, batches=12)
    first_seg = segment_paths(data_dir)[0]
    os.remove(first_seg)  # as retention would
    os.remove(first_seg[:-4] + ".idx")
    reader = DataDirReader(data_dir).partition("t", 0)
    assert reader.log_start_offset == 12
    assert offsets_read(reader, 0)[0] == 12


def test_reader_never_writes_and_never_takes_the_lock(data_dir: str) -> None:
    build(data_dir, batches=12)
    with Broker(persist_dir=data_dir) as broker:  # a live owner: the reader must not need the lock
        before = snapshot(data_dir)
        reader = DataDirReader(data_dir)
        assert offsets_read(reader.partition("t", 0))
        if os.path.exists("/proc/locks"):
            assert reader.lock_holder() == os.getpid()
        assert snapshot(data_dir) == before
        broker.produce_many_sync("t", [(None, b"after")])  # the broker is unaffected


def test_stops_quietly_at_a_torn_tail_like_recovery(data_dir: str) -> None:
    written = build(data_dir, batches=6)
    active = segment_paths(data_dir)[-1]
    first_batch = Path(active).read_bytes()[: batch_positions(active)[1]]
    with open(active, "ab") as f:
        f.write(first_batch[: len(first_batch) // 2])  # half a batch: what a crash mid-write leaves
    reader = DataDirReader(data_dir).partition("t", 0)
    assert offsets_read(reader) == written
    assert reader.end_offset() == written[-1] + 1
    with Broker(persist_dir=data_dir) as broker:  # recovery agrees on where the log ends
        assert broker.describe_topic("t").partitions[0].next_offset == written[-1] + 1


def test_stops_quietly_at_a_zero_filled_tail(data_dir: str) -> None:
    written = build(data_dir, batches=6)
    with open(segment_paths(data_dir)[-1], "ab") as f:
        f.write(b"\0" * 4096)
    assert offsets_read(DataDirReader(data_dir).partition("t", 0)) == written


def test_corruption_in_a_sealed_segment_raises_with_path_and_position(data_dir: str) -> None:
    build(data_dir, batches=12)
    sealed = segment_paths(data_dir)[0]
    second = batch_positions(sealed)[1]
    flip_byte(sealed, second + 100)
    reader = DataDirReader(data_dir).partition("t", 0)
    with pytest.raises(CorruptRecordError) as info:
        list(reader.batches())
    assert info.value.path == sealed and info.value.position == second


def test_corruption_before_the_recovery_point_raises_but_is_a_tail_without_a_checkpoint(data_dir: str) -> None:
    written = build(data_dir, batches=6)
    active = segment_paths(data_dir)[-1]
    last = batch_positions(active)[-1]
    flip_byte(active, last + 100)
    # A clean close checkpoints the whole active segment as fsynced: bad bytes in it are corruption.
    with pytest.raises(CorruptRecordError):
        list(DataDirReader(data_dir).partition("t", 0).batches())
    # Without a checkpoint recovery validates the whole segment and truncates there: so does the reader.
    os.remove(os.path.join(part_dir(data_dir), "checkpoint.meta"))
    reader = DataDirReader(data_dir).partition("t", 0)
    assert offsets_read(reader) == written[:-3]
