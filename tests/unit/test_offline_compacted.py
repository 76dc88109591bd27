"""verify, dump, backup/restore and the read-only reader over a cleaned log (issue 24).

A cleaned log is valid (no problem), and real damage in it is still caught; backup
keeps the log start DeleteRecords set, and a clean that rewrites segments while the
backup runs makes the copy start over rather than lose or mix offsets.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from lkstream import Broker
from lkstream.cli import cli
from lkstream.errors import CorruptRecordError
from lkstream.format.codec import decode_batch
from lkstream.storage import backup as backup_module
from lkstream.storage.backup import backup_data_dir
from lkstream.storage.clock import ManualClock
from lkstream.storage.marks import MARKS_NAME
from lkstream.storage.reader import DataDirReader, SegmentFiles
from lkstream.storage.restore import restore_backup
from lkstream.storage.verify import verify_data_dir

from .datadir import batch_positions, part_dir, segment_paths
from .keyed import clean
from .support import FIXED_TS

COMPACT = {"cleanup.policy": "compact,delete"}


def _compacted(data_dir: str, rounds: int = 40) -> dict[bytes | None, bytes | None]:
    """A compacted topic ``t`` cleaned once; returns the latest value of every key."""
    clock = ManualClock(FIXED_TS)
    with Broker(persist_dir=data_dir, segment_max_bytes=4096, log_cleaner_enabled=False, clock=clock) as broker:
        broker.create_topic("t", 1, configs=COMPACT)
        for n in range(rounds):
            broker.produce_many_sync("t", [(f"k{n % 7}".encode(), f"v{n}".encode() * 30)], partition=0)
        assert clean(broker.partition("t", 0).log, clock).groups > 0
        return {f"k{i}".encode(): f"v{max(n for n in range(rounds) if n % 7 == i)}".encode() * 30 for i in range(7)}


def _offline_state(data_dir: str) -> dict[bytes | None, bytes | None]:
    reader = DataDirReader(data_dir).partition("t", 0)
    state: dict[bytes | None, bytes | None] = {}
    for raw in reader.batches(0):
        for record in decode_batch(raw.data, "t", 0):
            state[record.key] = record.value
    return state


def test_verify_and_the_reader_accept_a_cleaned_log(data_dir: str) -> None:
    expected = _compacted(data_dir)
    report = verify_data_dir(data_dir)
    assert report.problems == []
    assert _offline_state(data_dir) == expected
    [summary] = report.partitions
    assert summary.records < summary.end_offset, "fewer records than offsets: the clean removed some"


def test_verify_still_catches_damage_in_a_cleaned_segment(data_dir: str) -> None:
    _compacted(data_dir)
    sealed = segment_paths(data_dir)[0]
    first = batch_positions(sealed)[0]
    with open(sealed, "r+b") as f:  # the base offset of the first batch: outside the CRC
        f.seek(first)
        f.write((5).to_bytes(8, "big"))
    errors = [p for p in verify_data_dir(data_dir).problems if p.severity == "error"]
    assert errors and errors[0].path == sealed and "does not continue" in errors[0].message
    with pytest.raises(CorruptRecordError):
        _offline_state(data_dir)


def test_an_unfinished_rewrite_and_a_damaged_marks_file_are_warnings(data_dir: str) -> None:
    _compacted(data_dir)
    directory = part_dir(data_dir)
    with open(os.path.join(directory, "00000000000000000000.seg.cleaned"), "wb") as f:
        f.write(b"half")
    with open(os.path.join(directory, MARKS_NAME), "r+b") as f:
        f.write(b"XXXX")
    problems = verify_data_dir(data_dir).problems
    assert [p.severity for p in problems] == ["warning", "warning"], problems
    assert "unfinished segment rewrite" in problems[0].message and "damaged" in problems[1].message


def test_dump_shows_the_empty_batches_of_a_cleaned_segment(data_dir: str) -> None:
    _compacted(data_dir)
    result = CliRunner().invoke(cli, ["dump", segment_paths(data_dir)[0], "--records"])
    assert result.exit_code == 0, result.output
    assert "count: 0" in result.output and "0 problems" in result.output


def test_backup_keeps_the_log_start_and_the_cleaned_state(data_dir: str, tmp_path: Path) -> None:
    expected = _compacted(data_dir)
    with Broker(persist_dir=data_dir, log_cleaner_enabled=False) as broker:
        start = broker.partition("t", 0).high_watermark - 10
        broker.delete_records("t", {0: start})
    report = backup_data_dir(data_dir, str(tmp_path / "b"))
    assert report.partitions[0].log_start_offset == start
    restore_backup(str(tmp_path / "b"), str(tmp_path / "r"))
    assert verify_data_dir(str(tmp_path / "r")).problems == []
    with Broker(persist_dir=str(tmp_path / "r"), log_cleaner_enabled=False) as broker:
        assert broker.partition("t", 0).log_start_offset == start
        assert broker.read_from("t", 0, start)[0].offset >= start
    assert _offline_state(str(tmp_path / "r")).items() <= expected.items()


def test_a_clean_during_a_backup_makes_the_copy_start_over(
    data_dir: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cleaner merges segments after the backup listed them: the copy restarts, nothing is lost."""
    clock = ManualClock(FIXED_TS)
    with Broker(persist_dir=data_dir, segment_max_bytes=4096, log_cleaner_enabled=False, clock=clock) as broker:
        broker.create_topic("t", 1, configs=COMPACT)
        log = broker.partition("t", 0).log
        for n in range(90):
            broker.produce_many_sync("t", [(f"k{n % 3}".encode(), f"v{n}".encode() * 30)], partition=0)
            if n == 60:
                clean(log, clock)  # small cleaned segments, which the next pass merges
        expected = {r.key: r.value for r in _read_all(broker)}
        before = log.stats().segment_count
        original = backup_module.list_segments
        listings = []

        def listed_then_cleaned(directory: str) -> list[SegmentFiles]:
            segments = original(directory)
            listings.append(len(segments))
            if len(listings) == 1:
                clean(log, clock)  # merges the first segments into one: the listing is stale now
            return segments

        monkeypatch.setattr(backup_module, "list_segments", listed_then_cleaned)
        report = backup_data_dir(data_dir, str(tmp_path / "b"))
    assert log.stats().segment_count < before, "the clean under the backup merged segments"
    assert len(listings) == 2, "the copy started over once"
    assert report.partitions[0].log_start_offset == 0
    restore_backup(str(tmp_path / "b"), str(tmp_path / "r"))
    assert verify_data_dir(str(tmp_path / "r")).problems == []
    assert _offline_state(str(tmp_path / "r")) == expected


def _read_all(broker: Broker) -> list:  # type: ignore[type-arg]
    out, offset, end = [], 0, broker.partition("t", 0).high_watermark
    while offset < end:
        records = broker.read_from("t", 0, offset)
        out += records
        offset = records[-1].offset + 1
    return out


def test_describe_offline_shows_a_compacted_partitions_dirty_ratio(data_dir: str) -> None:
    _compacted(data_dir)
    result = CliRunner().invoke(cli, ["topics", "describe", "t", "--data-dir", data_dir])
    assert result.exit_code == 0, result.output
    header, row = result.output.splitlines()[1:3]
    assert header.split()[-1] == "DIRTY" and row.split()[-1] == "0%"
    with Broker(persist_dir=data_dir, segment_max_bytes=4096, log_cleaner_enabled=False) as broker:
        for n in range(40):
            broker.produce_many_sync("t", [(b"k", f"more-{n}".encode() * 30)], partition=0)
    result = CliRunner().invoke(cli, ["topics", "describe", "t", "--data-dir", data_dir])
    assert result.output.splitlines()[2].split()[-1] not in ("0%", "-"), result.output
