"""lkstream.storage.cleaner: one pass keeps every key's latest record, offsets and order (issue 24)."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from lkstream.errors import CorruptRecordError, StorageError
from lkstream.format.batch import check_batch
from lkstream.format.codec import Compression, encode_batch
from lkstream.storage.cleaner import CleanerPolicy, assess, clean_pass
from lkstream.storage.clock import ManualClock
from lkstream.storage.keymap import new_key_map
from lkstream.storage.log import LogConfig, PartitionLog
from lkstream.storage.producers import SNAPSHOT_NAME
from lkstream.storage.reader import open_read_only, scan_segment
from lkstream.storage.segment import Segment
from lkstream.storage.swap import CleanedWriter

from .keyed import append, clean, latest, read_all
from .support import FIXED_TS

DAY_MS = 86_400_000


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(FIXED_TS)


@pytest.fixture
def logs(tmp_path: Path, clock: ManualClock) -> Iterator[list[PartitionLog]]:
    opened: list[PartitionLog] = []
    yield opened
    for plog in opened:
        plog.close()


def _open(tmp_path: Path, clock: ManualClock, logs: list[PartitionLog], **config: object) -> PartitionLog:
    config.setdefault("segment_max_bytes", 1500)
    plog = PartitionLog(str(tmp_path / "p"), "t", 0, LogConfig(**config), clock=clock)  # type: ignore[arg-type]
    logs.append(plog)
    return plog


def _fill(plog: PartitionLog, clock: ManualClock, rng: random.Random, batches: int, keys: int = 12) -> None:
    for n in range(batches):
        records = [
            (f"k{rng.randrange(keys)}".encode(), None if rng.random() < 0.15 else f"v{n}.{i}".encode())
            for i in range(rng.randrange(1, 5))
        ]
        append(plog, clock, records)
        clock.advance(1)


def _contiguous(plog: PartitionLog) -> None:
    """Batches cover every offset from each segment's base to the next segment's (docs/adr/0006)."""
    expected = None
    for path in plog.segment_paths():
        file = open_read_only(path)
        try:
            for item in scan_segment(file, expected_offset=int(os.path.basename(path)[:20])):
                assert not hasattr(item, "reason"), item
                assert expected is None or item.header.base_offset == expected
                expected = item.header.next_offset
        finally:
            file.close()


def test_a_pass_keeps_the_latest_record_of_every_key_with_its_offset(
    tmp_path: Path, clock: ManualClock, logs: list[PartitionLog]
) -> None:
    plog = _open(tmp_path, clock, logs)
    _fill(plog, clock, random.Random(7), 150)
    before = read_all(plog)
    end, size = plog.next_offset, plog.stats().size_bytes
    stats = clean(plog, clock)
    after = read_all(plog)
    assert latest(after) == latest(before)
    assert plog.next_offset == end and plog.stats().size_bytes < size / 3
    assert [r.offset for r in after] == sorted(r.offset for r in after)
    assert {(r.offset, r.key, r.value) for r in after} <= {(r.offset, r.key, r.value) for r in before}
    assert stats.records_kept < stats.records_read and stats.map_end == plog.cleaning_snapshot().active_base
    _contiguous(plog)
    # Only what the active segment holds was never looked at: the next pass has nothing to do.
    assert assess(plog.cleaning_snapshot(), CleanerPolicy(), clock.now_ms()).dirty_bytes == 0


def test_tombstones_stay_until_their_horizon_then_go_with_every_older_value(
    tmp_path: Path, clock: ManualClock, logs: list[PartitionLog]
) -> None:
    plog = _open(tmp_path, clock, logs)
    append(plog, clock, [(b"a", b"1"), (b"b", b"1")])
    append(plog, clock, [(b"a", None)])
    for n in range(30):  # seal the segments holding them
        append(plog, clock, [(b"c", f"{n}".encode() * 40)])
    policy = CleanerPolicy(delete_retention_ms=DAY_MS)
    clean(plog, clock, policy)
    assert latest(read_all(plog))[b"a"][1] is None, "a tombstone younger than delete.retention.ms was removed"
    clock.advance(DAY_MS)
    append(plog, clock, [(b"c", b"new")])  # dirty again: a pass runs
    stats = clean(plog, clock, policy)
    state = latest(read_all(plog))
    assert b"a" not in state and state[b"b"][1] == b"1"
    assert stats.tombstones_removed == 1


def test_segments_younger_than_the_min_compaction_lag_are_left_alone(
    tmp_path: Path, clock: ManualClock, logs: list[PartitionLog]
) -> None:
    plog = _open(tmp_path, clock, logs)
    _fill(plog, clock, random.Random(3), 60)
    before = read_all(plog)
    policy = CleanerPolicy(min_compaction_lag_ms=DAY_MS)
    assert assess(plog.cleaning_snapshot(), policy, clock.now_ms()).dirty_bytes == 0
    assert clean(plog, clock, policy).groups == 0
    assert read_all(plog) == before
    clock.advance(DAY_MS)
    assert clean(plog, clock, policy).groups > 0


def test_a_key_map_too_small_for_the_log_cleans_it_in_several_passes(
    tmp_path: Path, clock: ManualClock, logs: list[PartitionLog]
) -> None:
    plog = _open(tmp_path, clock, logs)
    _fill(plog, clock, random.Random(11), 120, keys=60)
    before = latest(read_all(plog))
    active_base = plog.cleaning_snapshot().active_base
    ends = []
    while not ends or ends[-1] < active_base:
        ends.append(clean(plog, clock, budget=24 * 12).map_end)  # a map of 10 keys
        assert len(ends) < 50, "the passes made no progress"
    assert len(ends) > 3 and ends == sorted(set(ends))
    assert latest(read_all(plog)) == before


def test_an_idempotent_producers_last_batch_stays_empty_and_its_retry_is_still_a_duplicate(
    tmp_path: Path, clock: ManualClock, logs: list[PartitionLog]
) -> None:
    plog = _open(tmp_path, clock, logs, segment_max_bytes=400)
    batch = encode_batch([(b"k", b"old")], timestamp_ms=clock.now_ms())
    batch[43:57] = (77).to_bytes(8, "big") + (0).to_bytes(2, "big") + (0).to_bytes(4, "big")
    from lkstream.format.batch import compute_crc

    batch[17:21] = compute_crc(batch).to_bytes(4, "big")
    retry = bytearray(batch)
    first = plog.append(batch)
    for n in range(12):
        append(plog, clock, [(b"k", f"new-{n}".encode() * 10)])
    clean(plog, clock)
    kept = [r for r in read_all(plog) if r.offset == first.base_offset]
    assert kept == [], "the superseded record stayed"
    plog.close()
    os.remove(os.path.join(plog.directory, SNAPSHOT_NAME))  # the state comes back from batch headers alone
    reopened = _open(tmp_path, clock, logs, segment_max_bytes=400)
    result = reopened.append(retry)
    assert result.duplicate and result.base_offset == first.base_offset


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_compressed_batches_are_filtered_and_compressed_again_with_their_codec(
    tmp_path: Path, clock: ManualClock, logs: list[PartitionLog], codec: Compression
) -> None:
    plog = _open(tmp_path, clock, logs, segment_max_bytes=600)
    for n in range(20):
        append(plog, clock, [(f"k{i}".encode(), f"v{n}".encode() * 20) for i in range(4)], codec)
    before = latest(read_all(plog))
    clean(plog, clock)
    assert latest(read_all(plog)) == before
    codecs = set()
    for path in plog.segment_paths():
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while pos < len(data):
            header = check_batch(data, pos)
            if header.records_count:
                codecs.add(header.compression)
            pos += header.size
    assert codecs == {codec}


def test_records_without_a_key_are_removed_as_kafka_removes_them(
    tmp_path: Path, clock: ManualClock, logs: list[PartitionLog]
) -> None:
    plog = _open(tmp_path, clock, logs)
    for n in range(20):
        append(plog, clock, [(None, f"keyless-{n}".encode() * 10), (b"k", f"{n}".encode())])
    stats = clean(plog, clock)
    sealed_end = plog.cleaning_snapshot().active_base
    assert [r.key for r in read_all(plog) if r.offset < sealed_end] == [b"k"]
    assert stats.keyless_removed > 0


def test_a_damaged_batch_stops_the_pass_before_anything_is_replaced(
    tmp_path: Path, clock: ManualClock, logs: list[PartitionLog]
) -> None:
    plog = _open(tmp_path, clock, logs)
    _fill(plog, clock, random.Random(5), 60)
    first = plog.segment_paths()[0]
    with open(first, "r+b") as f:
        f.seek(70)
        f.write(b"\xff")
    names = sorted(os.listdir(plog.directory))
    with pytest.raises(CorruptRecordError):
        clean(plog, clock)
    assert sorted(os.listdir(plog.directory)) == names, "a given-up pass left files behind"


def test_a_group_changed_under_the_pass_is_left_as_it_is_now(
    tmp_path: Path, clock: ManualClock, logs: list[PartitionLog]
) -> None:
    plog = _open(tmp_path, clock, logs)
    _fill(plog, clock, random.Random(9), 60)
    snapshot = plog.cleaning_snapshot()

    def replace_after_delete_records(old: Sequence[Segment], writer: CleanedWriter) -> bool:
        plog.delete_records(snapshot.sealed[0].next_offset)  # DeleteRecords wins the race for segment 0
        return plog.replace_segments(old, writer)

    stats = clean_pass(snapshot, CleanerPolicy(), new_key_map(1 << 20), clock.now_ms(), replace_after_delete_records)
    assert stats.groups_skipped == 1 and stats.groups == len(snapshot.sealed) - 1
    assert not [n for n in os.listdir(plog.directory) if n.endswith((".cleaned", ".swap", ".deleted"))]
    assert read_all(plog)[0].offset >= snapshot.sealed[0].next_offset


def test_a_segment_deleted_under_the_pass_gives_the_pass_up(
    tmp_path: Path, clock: ManualClock, logs: list[PartitionLog]
) -> None:
    plog = _open(tmp_path, clock, logs)
    _fill(plog, clock, random.Random(9), 60)
    snapshot = plog.cleaning_snapshot()
    plog.delete_records(snapshot.sealed[1].next_offset)
    with pytest.raises(StorageError):
        clean_pass(snapshot, CleanerPolicy(), new_key_map(1 << 20), clock.now_ms(), plog.replace_segments)
    assert not [n for n in os.listdir(plog.directory) if n.endswith((".cleaned", ".swap", ".deleted"))]


def test_small_cleaned_segments_are_merged_by_a_later_pass(
    tmp_path: Path, clock: ManualClock, logs: list[PartitionLog]
) -> None:
    plog = _open(tmp_path, clock, logs)
    _fill(plog, clock, random.Random(2), 100, keys=5)
    clean(plog, clock)
    count = plog.stats().segment_count
    _fill(plog, clock, random.Random(4), 10, keys=5)
    clean(plog, clock)
    assert plog.stats().segment_count < count


def test_the_dirty_ratio_and_the_max_compaction_lag(
    tmp_path: Path, clock: ManualClock, logs: list[PartitionLog]
) -> None:
    plog = _open(tmp_path, clock, logs)
    _fill(plog, clock, random.Random(8), 60)
    clean(plog, clock)
    _fill(plog, clock, random.Random(8), 10)
    dirtiness = assess(plog.cleaning_snapshot(), CleanerPolicy(), clock.now_ms())
    assert 0 < dirtiness.ratio < 1 and dirtiness.dirty_bytes > 0
    strict = CleanerPolicy(min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=DAY_MS)
    assert not assess(plog.cleaning_snapshot(), strict, clock.now_ms()).due(strict)
    clock.advance(DAY_MS)
    assert assess(plog.cleaning_snapshot(), strict, clock.now_ms()).due(strict), "max.compaction.lag.ms passed"
