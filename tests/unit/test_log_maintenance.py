"""lkstream.storage.log_maintenance: rolling by time (segment.ms) and DeleteRecords' log start (issue 24)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lkstream.errors import OffsetOutOfRangeError
from lkstream.storage.clock import ManualClock
from lkstream.storage.log import LogConfig, PartitionLog
from lkstream.storage.marks import MARKS_NAME, Marks, read_marks, write_marks

from .keyed import append, read_all
from .support import FIXED_TS

HOUR_MS = 3_600_000


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(FIXED_TS)


def _open(tmp_path: Path, clock: ManualClock, **config: object) -> PartitionLog:
    return PartitionLog(str(tmp_path / "p"), "t", 0, LogConfig(**config), clock=clock)  # type: ignore[arg-type]


def test_segment_ms_rolls_on_the_next_append_after_the_segment_held_data_that_long(
    tmp_path: Path, clock: ManualClock
) -> None:
    plog = _open(tmp_path, clock, segment_ms=HOUR_MS)
    append(plog, clock, [(b"k", b"1")])
    clock.advance(HOUR_MS - 1)
    append(plog, clock, [(b"k", b"2")])
    assert plog.stats().segment_count == 1
    clock.advance(1)
    append(plog, clock, [(b"k", b"3")])
    assert plog.stats().segment_count == 2 and plog.cleaning_snapshot().active_base == 2
    sealed = plog.cleaning_snapshot().sealed[0]
    assert sealed.sealed_ms == clock.now_ms(), "a sealed segment's time comes from the log's clock"
    plog.close()


def test_a_quiet_partition_is_rolled_by_the_maintenance_thread(tmp_path: Path, clock: ManualClock) -> None:
    plog = _open(tmp_path, clock, segment_ms=HOUR_MS)
    assert not plog.roll_if_due(), "an empty active segment is never rolled"
    append(plog, clock, [(b"k", b"1")])
    clock.advance(HOUR_MS)
    assert plog.roll_if_due() and not plog.roll_if_due()
    assert plog.stats().segment_count == 2 and plog.next_offset == 1
    plog.close()


def test_after_a_restart_the_active_segment_rolls_by_its_first_batch_time(tmp_path: Path, clock: ManualClock) -> None:
    plog = _open(tmp_path, clock, segment_ms=HOUR_MS)
    append(plog, clock, [(b"k", b"1")])
    plog.close()
    clock.advance(HOUR_MS)
    reopened = _open(tmp_path, clock, segment_ms=HOUR_MS)
    assert reopened.roll_if_due(), "the restart reset the segment's age"
    reopened.close()


def test_delete_records_moves_the_log_start_inside_a_segment_and_a_restart_keeps_it(
    tmp_path: Path, clock: ManualClock
) -> None:
    plog = _open(tmp_path, clock, segment_max_bytes=300)
    for n in range(20):
        append(plog, clock, [(b"k", f"value-{n}".encode() * 3), (b"j", b"x")])
    segments = plog.stats().segment_count
    assert plog.delete_records(13) == 13
    assert plog.log_start_offset == 13 and plog.stats().segment_count < segments
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(12, 1000)
    # A read from the start returns the batch holding it; a reader skips offset 12.
    assert next(r.offset for r in read_all(plog)) == 13
    assert plog.delete_records(5) == 13, "the log start never moves back"
    with pytest.raises(OffsetOutOfRangeError):
        plog.delete_records(plog.high_watermark + 1)
    plog.close()
    reopened = _open(tmp_path, clock, segment_max_bytes=300)
    assert reopened.log_start_offset == 13
    assert read_marks(reopened.directory) == Marks(13, 0, -1)
    reopened.close()


def test_delete_records_up_to_the_high_watermark_empties_the_log_for_readers(
    tmp_path: Path, clock: ManualClock
) -> None:
    plog = _open(tmp_path, clock, segment_max_bytes=300)
    for n in range(10):
        append(plog, clock, [(b"k", f"value-{n}".encode() * 3)])
    assert plog.delete_records(plog.high_watermark) == 10
    assert read_all(plog) == [] and plog.stats().segment_count == 1
    append(plog, clock, [(b"k", b"after")])
    assert [r.offset for r in read_all(plog)] == [10]
    plog.close()


def test_a_log_start_beyond_what_recovery_kept_starts_the_log_over_there(tmp_path: Path, clock: ManualClock) -> None:
    """A power loss took back records DeleteRecords had moved past (group mode): Kafka starts the log at its start."""
    plog = _open(tmp_path, clock)
    for n in range(5):
        append(plog, clock, [(b"k", f"{n}".encode())])
    plog.close()
    write_marks(plog.directory, Marks(40, 0, -1))
    reopened = _open(tmp_path, clock)
    assert (reopened.log_start_offset, reopened.next_offset) == (40, 40)
    append(reopened, clock, [(b"k", b"next")])
    assert [r.offset for r in read_all(reopened)] == [40]
    reopened.close()


def test_a_damaged_marks_file_is_read_as_missing(tmp_path: Path, clock: ManualClock) -> None:
    plog = _open(tmp_path, clock, segment_max_bytes=300)
    for n in range(10):
        append(plog, clock, [(b"k", f"value-{n}".encode() * 3)])
    plog.delete_records(7)
    plog.close()
    with open(os.path.join(plog.directory, MARKS_NAME), "r+b") as f:
        f.seek(10)
        f.write(b"\xff")
    reopened = _open(tmp_path, clock, segment_max_bytes=300)
    assert reopened.log_start_offset <= 7
    reopened.close()
