"""lkstream.storage.backup on real data directories: files that vanish mid-copy, corruption, atomicity.

The races are reproduced deterministically: the segment listing the backup works
from is taken, then real files are deleted (as retention or a topic delete would
do between the listing and the copy), then the backup goes on.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from lkstream import Broker
from lkstream.errors import CorruptRecordError
from lkstream.storage import backup as backup_module
from lkstream.storage.backup import backup_data_dir
from lkstream.storage.reader import SegmentFiles
from lkstream.storage.restore import restore_backup
from lkstream.storage.verify import verify_data_dir


def _fill(data_dir: str, topics: dict[str, int]) -> None:
    with Broker(persist_dir=data_dir, segment_max_bytes=4096) as broker:
        for topic, count in topics.items():
            broker.create_topic(topic, 1)
            for n in range(count):
                broker.produce_many_sync(topic, [(None, f"{topic}-{n:05d}".encode() * 4)], partition=0)


def _listing_then(monkeypatch: pytest.MonkeyPatch, action: Callable[[str, list[SegmentFiles]], None]) -> None:
    real = backup_module.list_segments

    def listed(directory: str) -> list[SegmentFiles]:
        segments = real(directory)
        action(directory, segments)
        return segments

    monkeypatch.setattr(backup_module, "list_segments", listed)


def test_segments_deleted_by_retention_mid_copy_move_the_log_start(
    data_dir: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fill(data_dir, {"t": 400})

    def retention(directory: str, segments: list[SegmentFiles]) -> None:
        for seg in segments[:2]:  # the two oldest go, as retention deletes them
            os.remove(seg.seg_path)
            os.remove(seg.idx_path)

    _listing_then(monkeypatch, retention)
    report = backup_data_dir(data_dir, str(tmp_path / "b"))
    [part] = report.partitions
    assert part.log_start_offset > 0 and part.end_offset == 400
    verdict = verify_data_dir(str(tmp_path / "b"))
    assert (verdict.errors, verdict.warnings) == (0, 0), verdict.problems
    restore_backup(str(tmp_path / "b"), str(tmp_path / "r"))
    with Broker(persist_dir=str(tmp_path / "r")) as broker:
        first = broker.read_from("t", 0, part.log_start_offset)[0]
        assert first.value == f"t-{part.log_start_offset:05d}".encode() * 4


def test_a_topic_deleted_mid_copy_is_left_out_and_named(
    data_dir: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fill(data_dir, {"gone": 50, "kept": 50})

    def delete_topic(directory: str, segments: list[SegmentFiles]) -> None:
        if os.path.basename(os.path.dirname(directory)) == "gone":
            shutil.rmtree(os.path.dirname(directory))

    _listing_then(monkeypatch, delete_topic)
    report = backup_data_dir(data_dir, str(tmp_path / "b"))
    assert [(p.topic, p.end_offset) for p in report.partitions] == [("kept", 50)]
    assert report.notes == ["topic 'gone' was deleted while the backup ran: left out"]
    assert not (tmp_path / "b" / "topics" / "gone").exists()
    assert verify_data_dir(str(tmp_path / "b")).errors == 0


def test_a_corrupt_sealed_segment_stops_the_backup_and_leaves_nothing(data_dir: str, tmp_path: Path) -> None:
    _fill(data_dir, {"t": 400})
    part = Path(data_dir) / "topics" / "t" / "part0"
    first = sorted(part.glob("*.seg"))[0]
    raw = bytearray(first.read_bytes())
    raw[100] ^= 0xFF
    first.write_bytes(bytes(raw))
    with pytest.raises(CorruptRecordError, match="run lkstream verify on the source"):
        backup_data_dir(data_dir, str(tmp_path / "b"))
    assert sorted(os.listdir(tmp_path)) == ["data"]


def test_a_torn_active_tail_is_left_out_as_recovery_would(data_dir: str, tmp_path: Path) -> None:
    _fill(data_dir, {"t": 30})
    active = sorted((Path(data_dir) / "topics" / "t" / "part0").glob("*.seg"))[-1]
    with active.open("ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x1e\x00\x00\x01\x00")  # half a batch header being written
    report = backup_data_dir(data_dir, str(tmp_path / "b"))
    assert report.partitions[0].end_offset == 30
    verdict = verify_data_dir(str(tmp_path / "b"))
    assert (verdict.errors, verdict.warnings) == (0, 0), verdict.problems


def test_offsets_of_a_topic_deleted_mid_copy_are_left_out(
    data_dir: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fill(data_dir, {"gone": 20, "kept": 20})
    with Broker(persist_dir=data_dir) as broker:
        broker.offset_store.commit("g", "gone", 0, 5)
        broker.offset_store.commit("g", "kept", 0, 7)

    def delete_topic(directory: str, segments: list[SegmentFiles]) -> None:
        if os.path.basename(os.path.dirname(directory)) == "gone":
            shutil.rmtree(os.path.dirname(directory))

    _listing_then(monkeypatch, delete_topic)
    report = backup_data_dir(data_dir, str(tmp_path / "b"))
    assert report.committed_offsets == 1
    assert "1 committed offset(s) of topics not in the backup left out" in report.notes
    verdict = verify_data_dir(str(tmp_path / "b"))
    assert (verdict.errors, verdict.warnings) == (0, 0), verdict.problems
