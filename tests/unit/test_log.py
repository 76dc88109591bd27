"""lkstream.storage.log: PartitionLog append, read, rotation, retention, recovery."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from lkstream.errors import (
    BrokerClosedError,
    CorruptRecordError,
    InvariantViolation,
    OffsetOutOfRangeError,
    StorageError,
)
from lkstream.format.batch import check_batch
from lkstream.format.codec import Record, decode_batches
from lkstream.storage.checkpoint import CHECKPOINT_NAME, read_checkpoint
from lkstream.storage.clock import ManualClock
from lkstream.storage.files import MemoryFile
from lkstream.storage.index import ENTRY
from lkstream.storage.log import LogConfig, PartitionLog
from lkstream.storage.segment import format_segment_name

from .support import FIXED_TS, make_batch

DAY_MS = 86_400_000


@pytest.fixture
def log_dir(tmp_path: Path) -> str:
    return str(tmp_path / "topics" / "t" / "part0")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(FIXED_TS)


class Opener:
    """Opens PartitionLogs on one directory and closes whatever is left open at teardown."""

    def __init__(self, directory: str, clock: ManualClock) -> None:
        self.directory = directory
        self.clock = clock
        self.opened: list[PartitionLog] = []

    def __call__(self, **config: object) -> PartitionLog:
        plog = PartitionLog(self.directory, "t", 0, LogConfig(**config), clock=self.clock)  # type: ignore[arg-type]
        self.opened.append(plog)
        return plog


@pytest.fixture
def open_log(log_dir: str, clock: ManualClock) -> Iterator[Opener]:
    opener = Opener(log_dir, clock)
    yield opener
    for plog in opener.opened:
        plog.close()


def _append(plog: PartitionLog, records: int = 2, *, ts: int = FIXED_TS, value_size: int = 10) -> int:
    return plog.append(make_batch(records, timestamp_ms=ts, value_size=value_size)).base_offset


def _read_all(plog: PartitionLog, offset: int, max_bytes: int = 1 << 20) -> list[Record]:
    """Read from ``offset`` up to the high watermark, as a consumer would."""
    out: list[Record] = []
    while offset < plog.high_watermark:
        data = plog.read(offset, max_bytes).data
        records = decode_batches(data, "t", 0, offset)
        assert records, f"read at {offset} below the high watermark returned nothing"
        out.extend(records)
        offset = records[-1].offset + 1
    return out


def _values(records: list[Record]) -> list[bytes | None]:
    return [r.value for r in records]


# -- append and read -------------------------------------------------------------------------------


def test_new_log_is_empty_and_starts_at_offset_zero(open_log: Opener) -> None:
    plog = open_log()
    assert (plog.log_start_offset, plog.next_offset, plog.high_watermark) == (0, 0, 0)
    assert plog.read(0, 1000).data == b""


def test_append_assigns_contiguous_offsets_to_batches(open_log: Opener) -> None:
    plog = open_log()
    first = plog.append(make_batch(3))
    second = plog.append(make_batch(2))
    assert (first.base_offset, first.last_offset) == (0, 2)
    assert (second.base_offset, second.last_offset) == (3, 4)
    assert plog.next_offset == 5


def test_append_stamps_base_offset_in_place(open_log: Opener) -> None:
    plog = open_log()
    _append(plog, 4)
    batch = make_batch(1)
    plog.append(batch)
    assert check_batch(batch).base_offset == 4


def test_append_rejects_batch_with_bad_crc(open_log: Opener) -> None:
    plog = open_log()
    _append(plog, 1)
    batch = make_batch(1)
    batch[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        plog.append(batch)
    assert plog.next_offset == 1
    assert plog.stats().size_bytes == len(make_batch(1))


def test_append_rejects_more_than_one_batch(open_log: Opener) -> None:
    plog = open_log()
    with pytest.raises(InvariantViolation):
        plog.append(make_batch(1) + make_batch(1))
    assert plog.next_offset == 0


def test_append_of_a_checksummed_batch_skips_only_the_crc_pass(open_log: Opener) -> None:
    """The broker's own batches (CRC computed a moment ago) are framed-checked, not checksummed again."""
    plog = open_log()
    plog.append(make_batch(3), checksummed=True)
    assert [r.offset for r in _read_all(plog, 0)] == [0, 1, 2]
    with pytest.raises(InvariantViolation):
        plog.append(make_batch(1) + make_batch(1), checksummed=True)
    assert plog.next_offset == 3


def test_read_returns_the_appended_records_from_any_offset(open_log: Opener) -> None:
    plog = open_log()
    for _ in range(5):
        _append(plog, 3)
    every = _read_all(plog, 0)
    assert [r.offset for r in every] == list(range(15))
    assert [r.offset for r in _read_all(plog, 7)] == list(range(7, 15))
    assert _values(_read_all(plog, 7)) == _values(every[7:])


def test_read_returns_whole_batches_starting_with_the_one_holding_offset(open_log: Opener) -> None:
    plog = open_log()
    _append(plog, 3)
    _append(plog, 3)
    result = plog.read(4, 10**6)
    assert check_batch(result.data).base_offset == 3
    assert (result.log_start_offset, result.high_watermark) == (0, 6)


def test_read_honours_max_bytes_but_returns_at_least_one_batch(open_log: Opener) -> None:
    plog = open_log()
    size = len(make_batch(2))
    for _ in range(4):
        _append(plog, 2)
    assert len(plog.read(0, 1).data) == size
    assert len(plog.read(0, 2 * size).data) == 2 * size
    assert len(plog.read(0, 3 * size - 1).data) == 2 * size


def test_read_at_next_offset_returns_empty(open_log: Opener) -> None:
    plog = open_log()
    _append(plog, 2)
    result = plog.read(2, 1000)
    assert result.data == b""
    assert result.high_watermark == 2


@pytest.mark.parametrize("offset", [-1, 3, 100])
def test_read_out_of_range_names_earliest_and_latest(open_log: Opener, offset: int) -> None:
    plog = open_log()
    _append(plog, 2)
    with pytest.raises(OffsetOutOfRangeError) as info:
        plog.read(offset, 1000)
    err = info.value
    assert (err.offset, err.earliest, err.latest) == (offset, 0, 2)
    assert (err.topic, err.partition) == ("t", 0)
    assert "earliest is 0, latest is 2" in str(err)


# -- rotation --------------------------------------------------------------------------------------


def test_rotation_happens_when_segment_would_exceed_segment_max_bytes(open_log: Opener, log_dir: str) -> None:
    size = len(make_batch(2))
    plog = open_log(segment_max_bytes=3 * size)
    for _ in range(3):
        _append(plog, 2)
    assert plog.stats().segment_count == 1
    _append(plog, 2)  # a fourth batch would exceed the limit
    assert plog.stats().segment_count == 2
    assert sorted(n for n in os.listdir(log_dir) if n.endswith(".seg")) == [
        format_segment_name(0),
        format_segment_name(6),
    ]
    assert os.path.getsize(os.path.join(log_dir, format_segment_name(0))) == 3 * size


def test_a_batch_larger_than_segment_max_bytes_gets_a_segment_of_its_own(open_log: Opener) -> None:
    plog = open_log(segment_max_bytes=100)
    _append(plog, 1, value_size=500)
    _append(plog, 1, value_size=500)
    assert plog.stats().segment_count == 2
    assert [r.offset for r in _read_all(plog, 0)] == [0, 1]


def test_rotation_fsyncs_and_checkpoints_the_new_active_segment(open_log: Opener, log_dir: str) -> None:
    size = len(make_batch(1))
    plog = open_log(segment_max_bytes=size)
    _append(plog, 1)
    _append(plog, 1)
    checkpoint = read_checkpoint(log_dir)
    assert checkpoint is not None
    assert (checkpoint.last_sealed_base, checkpoint.active_base) == (0, 1)
    assert plog.durable_next_offset == 1  # everything in the sealed segment is durable


def test_reads_stop_at_a_segment_boundary_and_continue_from_the_next_offset(open_log: Opener) -> None:
    size = len(make_batch(2))
    plog = open_log(segment_max_bytes=2 * size)
    for _ in range(6):
        _append(plog, 2)
    assert plog.stats().segment_count == 3
    first = decode_batches(plog.read(0, 10**6).data, "t", 0)
    assert [r.offset for r in first] == [0, 1, 2, 3]
    assert [r.offset for r in _read_all(plog, 0)] == list(range(12))
    assert [r.offset for r in _read_all(plog, 5)] == list(range(5, 12))


def test_sparse_index_lookup_across_many_batches(open_log: Opener) -> None:
    plog = open_log(index_interval_bytes=500)
    for _ in range(40):
        _append(plog, 2)
    for offset in (0, 1, 39, 40, 41, 79):
        assert plog.read(offset, 1).data
        assert decode_batches(plog.read(offset, 1).data, "t", 0, offset)[0].offset == offset


# -- retention -------------------------------------------------------------------------------------


def _segments_of(plog: PartitionLog, batches: int, per_segment: int, **kw: object) -> None:
    for _ in range(batches):
        _append(plog, 2, **kw)  # type: ignore[arg-type]


def test_retention_bytes_deletes_oldest_sealed_segments(open_log: Opener, log_dir: str) -> None:
    size = len(make_batch(2))
    plog = open_log(segment_max_bytes=2 * size, retention_bytes=3 * size)
    _segments_of(plog, 8, 2)  # four segments of two batches, offsets 0-15
    deleted = plog.enforce_retention()
    assert deleted == [0, 4]
    assert plog.log_start_offset == 8
    assert plog.stats().size_bytes == 4 * size
    assert not os.path.exists(os.path.join(log_dir, format_segment_name(0)))
    assert not os.path.exists(os.path.join(log_dir, format_segment_name(0, ".idx")))
    assert [r.offset for r in _read_all(plog, 8)] == list(range(8, 16))


def test_retention_never_deletes_the_active_segment(open_log: Opener) -> None:
    plog = open_log(retention_bytes=0, retention_ms=0)
    _append(plog, 2)
    assert plog.enforce_retention() == []
    assert plog.stats().segment_count == 1
    assert plog.log_start_offset == 0


def test_retention_is_off_when_both_limits_are_unset(open_log: Opener) -> None:
    size = len(make_batch(2))
    plog = open_log(segment_max_bytes=size)
    _segments_of(plog, 5, 1)
    assert plog.enforce_retention() == []
    assert plog.stats().segment_count == 5


def test_retention_ms_deletes_segments_whose_newest_record_is_older(open_log: Opener, clock: ManualClock) -> None:
    size = len(make_batch(2))
    plog = open_log(segment_max_bytes=size, retention_ms=DAY_MS)
    _append(plog, 2, ts=clock.now_ms())
    _append(plog, 2, ts=clock.now_ms())
    clock.advance(DAY_MS // 2)
    _append(plog, 2, ts=clock.now_ms())
    _append(plog, 2, ts=clock.now_ms())  # active segment
    assert plog.enforce_retention() == []
    clock.advance(DAY_MS // 2 + 1)
    assert plog.enforce_retention() == [0, 2]
    assert plog.log_start_offset == 4
    clock.advance(DAY_MS)
    assert plog.enforce_retention() == [4]
    assert plog.log_start_offset == 6
    assert plog.stats().segment_count == 1


def test_retention_ms_uses_timestamps_of_segments_sealed_before_reopen(open_log: Opener, clock: ManualClock) -> None:
    size = len(make_batch(2))
    plog = open_log(segment_max_bytes=size, retention_ms=DAY_MS)
    _append(plog, 2, ts=clock.now_ms())
    _append(plog, 2, ts=clock.now_ms() + 2 * DAY_MS)
    _append(plog, 2, ts=clock.now_ms() + 2 * DAY_MS)
    plog.close()
    plog = open_log(segment_max_bytes=size, retention_ms=DAY_MS)
    clock.advance(DAY_MS + 1)
    assert plog.enforce_retention() == [0]


def test_reader_in_a_deleted_range_gets_out_of_range_with_the_new_log_start(open_log: Opener) -> None:
    size = len(make_batch(2))
    plog = open_log(segment_max_bytes=size, retention_bytes=2 * size)
    _segments_of(plog, 6, 1)
    position = 1  # a consumer part-way through the first segment
    plog.enforce_retention()
    with pytest.raises(OffsetOutOfRangeError) as info:
        plog.read(position, 1000)
    assert info.value.earliest == plog.log_start_offset == 8
    assert info.value.latest == 12
    assert "earliest is 8" in str(info.value)


def test_log_start_survives_reopen_after_retention(open_log: Opener) -> None:
    size = len(make_batch(2))
    plog = open_log(segment_max_bytes=size, retention_bytes=size)
    _segments_of(plog, 4, 1)
    plog.enforce_retention()
    start = plog.log_start_offset
    plog.close()
    again = open_log(segment_max_bytes=size, retention_bytes=size)
    assert again.log_start_offset == start == 6
    assert again.next_offset == 8


# -- reopen and recovery ---------------------------------------------------------------------------


def test_reopen_keeps_every_record_and_continues_offsets(open_log: Opener) -> None:
    size = len(make_batch(2))
    plog = open_log(segment_max_bytes=3 * size, index_interval_bytes=100)
    for _ in range(10):
        _append(plog, 2)
    before = _read_all(plog, 0)
    plog.close()
    again = open_log(segment_max_bytes=3 * size, index_interval_bytes=100)
    assert again.recovery.truncated_bytes == 0
    assert again.recovery.checkpoint_problem == ""
    assert (again.log_start_offset, again.next_offset) == (0, 20)
    assert _read_all(again, 0) == before
    assert _append(again, 1) == 20
    assert again.stats().segment_count == 4


def test_reopen_after_abandoning_an_open_log_recovers_everything_written(open_log: Opener, log_dir: str) -> None:
    plog = open_log()
    for _ in range(5):
        _append(plog, 2)
    # No close(): the checkpoint still says the log is empty, the index was never flushed.
    again = PartitionLog(log_dir, "t", 0, LogConfig())
    try:
        assert again.next_offset == 10
        assert again.recovery.truncated_bytes == 0
        assert [r.offset for r in _read_all(again, 0)] == list(range(10))
    finally:
        again.close()


def test_reopen_truncates_a_garbage_tail_of_the_active_segment(open_log: Opener, log_dir: str) -> None:
    plog = open_log()
    _append(plog, 2)
    _append(plog, 2)
    plog.close()
    seg_path = os.path.join(log_dir, format_segment_name(0))
    good_size = os.path.getsize(seg_path)
    with open(seg_path, "ab") as f:
        f.write(bytes(make_batch(3))[:50])
    again = open_log()
    assert again.recovery.truncated_bytes == 50
    assert again.recovery.report.valid_bytes == good_size
    assert os.path.getsize(seg_path) == good_size
    assert again.next_offset == 4
    assert _append(again, 1) == 4


def test_reopen_with_a_damaged_checkpoint_validates_the_whole_active_segment(open_log: Opener, log_dir: str) -> None:
    plog = open_log()
    _append(plog, 3)
    plog.close()
    with open(os.path.join(log_dir, CHECKPOINT_NAME), "wb") as f:
        f.write(b"not a checkpoint")
    again = open_log()
    assert "damaged" in again.recovery.checkpoint_problem
    assert again.next_offset == 3
    assert [r.offset for r in _read_all(again, 0)] == [0, 1, 2]


def test_reopen_sweeps_tmp_files_and_orphan_indexes(open_log: Opener, log_dir: str) -> None:
    plog = open_log()
    _append(plog, 1)
    plog.close()
    for name in ("checkpoint.meta.tmp", format_segment_name(99, ".idx")):
        with open(os.path.join(log_dir, name), "wb") as f:
            f.write(b"x")
    again = open_log()
    assert sorted(again.recovery.swept_files) == sorted(["checkpoint.meta.tmp", format_segment_name(99, ".idx")])
    assert not os.path.exists(os.path.join(log_dir, format_segment_name(99, ".idx")))


def test_reopen_rebuilds_a_deleted_index_of_a_sealed_segment(open_log: Opener, log_dir: str) -> None:
    size = len(make_batch(2))
    plog = open_log(segment_max_bytes=4 * size, index_interval_bytes=0)
    for _ in range(6):
        _append(plog, 2)
    plog.close()
    idx_path = os.path.join(log_dir, format_segment_name(0, ".idx"))
    expected_size = os.path.getsize(idx_path)
    os.remove(idx_path)
    again = open_log(segment_max_bytes=4 * size, index_interval_bytes=0)
    assert [r.offset for r in _read_all(again, 3)] == list(range(3, 12))
    assert os.path.getsize(idx_path) == expected_size == 4 * 16


def test_reopen_rebuilds_a_deleted_index_of_the_active_segment(open_log: Opener, log_dir: str) -> None:
    plog = open_log(index_interval_bytes=0)
    for _ in range(4):
        _append(plog, 2)
    plog.close()
    idx_path = os.path.join(log_dir, format_segment_name(0, ".idx"))
    os.remove(idx_path)
    again = open_log(index_interval_bytes=0)
    assert again.recovery.report.index_rebuilt is True
    assert os.path.getsize(idx_path) == 4 * 16
    assert [r.offset for r in _read_all(again, 5)] == [5, 6, 7]


def test_operations_on_a_closed_log_raise_broker_closed(open_log: Opener) -> None:
    plog = open_log()
    plog.close()
    plog.close()  # idempotent
    with pytest.raises(BrokerClosedError):
        plog.append(make_batch(1))
    with pytest.raises(BrokerClosedError):
        plog.read(0, 100)


# -- visibility and flush --------------------------------------------------------------------------


def test_without_visible_after_fsync_appends_are_readable_at_once(open_log: Opener) -> None:
    plog = open_log(visible_after_fsync=False)
    _append(plog, 2)
    assert plog.high_watermark == 2
    assert plog.durable_next_offset == 0
    assert len(_read_all(plog, 0)) == 2


def test_with_visible_after_fsync_appends_are_hidden_until_flush(open_log: Opener) -> None:
    plog = open_log(visible_after_fsync=True)
    _append(plog, 2)
    assert plog.next_offset == 2
    assert plog.high_watermark == 0
    assert plog.read(0, 1000).data == b""
    with pytest.raises(OffsetOutOfRangeError) as info:
        plog.read(1, 1000)
    assert info.value.latest == 0
    assert plog.flush() == 2
    assert plog.high_watermark == 2
    assert [r.offset for r in _read_all(plog, 0)] == [0, 1]


def test_with_visible_after_fsync_a_read_stops_at_the_durable_position(open_log: Opener) -> None:
    plog = open_log(visible_after_fsync=True)
    _append(plog, 2)
    plog.flush()
    _append(plog, 2)
    data = plog.read(0, 10**6).data
    assert [r.offset for r in decode_batches(data, "t", 0)] == [0, 1]


def test_with_visible_after_fsync_rotation_makes_the_sealed_segment_visible(open_log: Opener) -> None:
    size = len(make_batch(2))
    plog = open_log(visible_after_fsync=True, segment_max_bytes=size)
    _append(plog, 2)
    _append(plog, 2)
    assert plog.high_watermark == 2
    assert [r.offset for r in _read_all(plog, 0)] == [0, 1]


def test_flush_returns_durable_next_offset_and_resets_unflushed_bytes(open_log: Opener) -> None:
    plog = open_log()
    _append(plog, 3)
    assert plog.unflushed_bytes == len(make_batch(3))
    assert plog.flush() == 3
    assert plog.durable_next_offset == 3
    assert plog.unflushed_bytes == 0
    assert plog.flush() == 3  # nothing new: no fsync needed


def test_flush_writes_checkpoint_once_the_interval_passed(open_log: Opener, clock: ManualClock, log_dir: str) -> None:
    plog = open_log(checkpoint_interval_ms=1000)
    _append(plog, 2)
    plog.flush()
    assert read_checkpoint(log_dir) is None  # a new log writes none at open, and the interval has not passed
    clock.advance(1000)
    _append(plog, 2)
    plog.flush()
    checkpoint = read_checkpoint(log_dir)
    assert checkpoint is not None
    assert (checkpoint.next_offset, checkpoint.recovery_point) == (4, 2 * len(make_batch(2)))


def test_stats_report_sizes_and_counts(open_log: Opener) -> None:
    size = len(make_batch(2))
    plog = open_log(segment_max_bytes=2 * size)
    for _ in range(5):
        _append(plog, 2)
    stats = plog.stats()
    assert (stats.log_start_offset, stats.next_offset, stats.high_watermark) == (0, 10, 10)
    assert (stats.segment_count, stats.size_bytes, stats.active_segment_bytes) == (3, 5 * size, size)
    assert len(plog.segment_paths()) == 3


def test_recovery_truncation_is_logged_with_topic_partition_and_byte_range(
    open_log: Opener, log_dir: str, caplog: pytest.LogCaptureFixture
) -> None:
    plog = open_log()
    _append(plog, 2)
    plog.close()
    seg_path = os.path.join(log_dir, format_segment_name(0))
    good = os.path.getsize(seg_path)
    with open(seg_path, "ab") as f:
        f.write(b"\x00" * 100)
    with caplog.at_level("WARNING", logger="lkstream.storage"):
        open_log()
    message = " ".join(r.getMessage() for r in caplog.records)
    assert "t[0]" in message
    assert f"bytes {good}..{good + 100}" in message


class _SharedMemoryFiles:
    """A file factory that hands out one MemoryFile per path, surviving a log reopen."""

    def __init__(self) -> None:
        self.files: dict[str, MemoryFile] = {}

    def __call__(self, path: str) -> MemoryFile:
        return self.files.setdefault(path, MemoryFile(path))


def test_reopen_after_a_crash_fsyncs_the_recovered_tail_before_calling_it_durable(log_dir: str) -> None:
    files = _SharedMemoryFiles()
    config = LogConfig(visible_after_fsync=True)
    first = PartitionLog(log_dir, "t", 0, config, file_factory=files)
    first.append(make_batch(3))  # written, never fsynced: the process "dies" here
    segment = files.files[first.segment_paths()[-1]]
    assert segment.durable != bytes(segment.data)
    reopened = PartitionLog(log_dir, "t", 0, config, file_factory=files)
    assert reopened.high_watermark == 3
    assert segment.durable == bytes(segment.data), "records became visible without being on disk"
    reopened.close()


class _FailingFsyncFile(MemoryFile):
    fail = False

    def fsync(self) -> None:
        if _FailingFsyncFile.fail:
            raise StorageError("cannot fsync (Input/output error)", path=self.path)
        super().fsync()


def test_a_failed_fsync_makes_the_log_refuse_appends_until_restart(log_dir: str) -> None:
    plog = PartitionLog(log_dir, "t", 0, LogConfig(), file_factory=_FailingFsyncFile)
    plog.append(make_batch(1))
    _FailingFsyncFile.fail = True
    try:
        with pytest.raises(StorageError):
            plog.flush()
        with pytest.raises(StorageError, match="restart the broker"):
            plog.append(make_batch(1))
    finally:
        _FailingFsyncFile.fail = False
    assert plog.next_offset == 1


def test_read_in_a_gap_between_segments_serves_the_next_data(open_log: Opener, log_dir: str) -> None:
    plog = open_log(segment_max_bytes=4096)
    for _ in range(30):
        _append(plog, 2, value_size=200)
    bases = [int(os.path.basename(p)[:20]) for p in plog.segment_paths()]
    assert len(bases) >= 4
    plog.close()
    missing = bases[1]
    for suffix in (".seg", ".idx"):
        os.remove(os.path.join(log_dir, format_segment_name(missing, suffix)))
    reopened = open_log(segment_max_bytes=4096)
    records = _read_all(reopened, missing, max_bytes=1)
    assert records and records[0].offset == bases[2], "a read inside the gap must move on, not return nothing"


def test_offset_for_timestamp_finds_the_first_batch_at_or_after_it(open_log: Opener) -> None:
    plog = open_log(segment_max_bytes=4096)
    bases = [_append(plog, 2, ts=FIXED_TS + 1000 * i, value_size=300) for i in range(20)]
    assert len(plog.segment_paths()) > 2
    assert plog.offset_for_timestamp(FIXED_TS - 1) == 0
    assert plog.offset_for_timestamp(FIXED_TS + 7000) == bases[7]
    assert plog.offset_for_timestamp(FIXED_TS + 6500) == bases[7]
    assert plog.offset_for_timestamp(FIXED_TS + 19_001) is None


def test_offset_for_timestamp_survives_a_reopen(open_log: Opener) -> None:
    plog = open_log(segment_max_bytes=4096)
    bases = [_append(plog, 2, ts=FIXED_TS + 1000 * i, value_size=300) for i in range(12)]
    plog.close()
    reopened = open_log(segment_max_bytes=4096)
    assert reopened.offset_for_timestamp(FIXED_TS + 11_000) == bases[11]
    assert reopened.offset_for_timestamp(FIXED_TS + 3000) == bases[3]


def test_close_fsyncs_appends_that_land_after_its_flush(log_dir: str) -> None:
    files = _SharedMemoryFiles()
    plog = PartitionLog(log_dir, "t", 0, LogConfig(), file_factory=files)
    plog.append(make_batch(1))
    real_flush = plog.flush

    def flush_then_append() -> int:
        durable = real_flush()
        plog.append(make_batch(1))  # a producer that slipped in before close() takes the lock
        return durable

    plog.flush = flush_then_append  # type: ignore[method-assign]
    plog.close()
    segment = files.files[plog.segment_paths()[-1]]
    assert segment.durable == bytes(segment.data), "close() checkpointed bytes it never fsynced"


def test_close_closes_files_even_when_the_final_fsync_fails(log_dir: str) -> None:
    plog = PartitionLog(log_dir, "t", 0, LogConfig(), file_factory=_FailingFsyncFile)
    plog.append(make_batch(1))
    _FailingFsyncFile.fail = True
    try:
        with pytest.raises(StorageError):
            plog.close()
    finally:
        _FailingFsyncFile.fail = False
    with pytest.raises(BrokerClosedError):
        plog.read(0, 100)


def test_an_older_checkpoint_never_overwrites_a_newer_one(open_log: Opener, log_dir: str) -> None:
    plog = open_log(segment_max_bytes=4096)
    plog.append(make_batch(2, value_size=300))
    plog.flush()
    stale = plog._checkpoint_now()  # taken by a flush whose write is still pending...
    for _ in range(10):  # ...while appends roll the log and write newer checkpoints
        plog.append(make_batch(2, value_size=300))
    assert len(plog.segment_paths()) > 1
    newer = read_checkpoint(log_dir)
    plog._store_checkpoint(stale)
    assert read_checkpoint(log_dir) == newer


class _StallingIndexFile(MemoryFile):
    """An index file whose writes block until released: the kernel stalling a write (ext4's journal)."""

    stall = threading.Event()
    release = threading.Event()

    def append(self, data: bytes | bytearray | memoryview) -> int:
        if self.path.endswith(".idx") and not self.release.is_set():
            self.stall.set()
            self.release.wait(30)
        return super().append(data)


def test_append_does_not_wait_for_the_group_commit_index_write(log_dir: str) -> None:
    _StallingIndexFile.stall.clear()
    _StallingIndexFile.release.set()  # recovery's own index write at open passes
    plog = PartitionLog(log_dir, "t", 0, LogConfig(index_interval_bytes=0), file_factory=_StallingIndexFile)
    _StallingIndexFile.release.clear()
    plog.append(make_batch(1))
    flusher = threading.Thread(target=plog.flush)
    flusher.start()
    try:
        assert _StallingIndexFile.stall.wait(10), "flush never wrote the index"
        # The flush is stuck in the index write: appends must still go through (no lock held).
        appended: list[int] = []
        appender = threading.Thread(
            target=lambda: appended.extend(plog.append(make_batch(1)).base_offset for _ in range(3))
        )
        appender.start()
        appender.join(5)
        assert not appender.is_alive(), "an append waited for the group commit's index write"
        assert appended == [1, 2, 3]
    finally:
        _StallingIndexFile.release.set()
        flusher.join(10)
    assert not flusher.is_alive()
    plog.flush()
    index = plog._segments[-1].index
    written = bytes(index.file.data)  # type: ignore[attr-defined]
    entries = [ENTRY.unpack_from(written, i) for i in range(0, len(written), ENTRY.size)]
    assert entries == index.entries(), "the index file lost or repeated entries"
    assert [offset for offset, _ in entries] == [0, 1, 2, 3]
    plog.close()


def test_index_flushes_racing_appends_write_each_entry_once(log_dir: str) -> None:
    plog = PartitionLog(log_dir, "t", 0, LogConfig(index_interval_bytes=0), file_factory=MemoryFile)
    stop = threading.Event()

    def flush_until_stopped() -> None:
        while not stop.is_set():
            plog.flush()

    flushers = [threading.Thread(target=flush_until_stopped) for _ in range(2)]
    for flusher in flushers:
        flusher.start()
    try:
        for _ in range(2000):
            plog.append(make_batch(1))
    finally:
        stop.set()
        for flusher in flushers:
            flusher.join(10)
    plog.flush()
    index = plog._segments[-1].index
    written = bytes(index.file.data)  # type: ignore[attr-defined]
    entries = [ENTRY.unpack_from(written, i) for i in range(0, len(written), ENTRY.size)]
    assert [offset for offset, _ in entries] == list(range(2000))
    assert entries == index.entries()
    plog.close()


def test_flush_waits_its_turn_when_the_lock_stays_held(log_dir: str) -> None:
    """The group commit tries the lock politely first, then queues: a long holder delays it, never loses it."""
    plog = PartitionLog(log_dir, "t", 0, LogConfig(), file_factory=MemoryFile)
    plog.append(make_batch(3))
    durable: list[int] = []
    flusher = threading.Thread(target=lambda: durable.append(plog.flush()))
    with plog._lock:  # a reader or a roll holding the lock longer than the polite tries last
        flusher.start()
        flusher.join(0.2)
        assert flusher.is_alive() and not durable, "flush went ahead without the lock"
    flusher.join(10)
    assert durable == [3]
    assert plog.durable_next_offset == 3
    plog.close()
