"""A new topic's partitions create their files at their first write (issue 12, finding 9).

Creating a topic of thousands of partitions used to create two files per partition
(segment and index): most of the create's time, and file-system work that queued the
group commit's fsyncs behind it. Now only the directories are made; a partition's first
segment appears when it is first written, and its directory entry is fsynced with the
file's first fsync, before anything in it is called durable.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lkstream import Broker
from lkstream.storage import pacing
from lkstream.storage.files import fsync_dir
from lkstream.storage.handles import FileBudget
from lkstream.storage.pacing import Pacer
from lkstream.storage.topics import TopicStore
from lkstream.storage.verify import verify_data_dir


def _files(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


def test_a_new_topic_creates_no_segment_files_until_a_partition_is_written(tmp_path: Path) -> None:
    data = tmp_path / "d"
    with Broker(persist_dir=str(data), fsync_mode="sync") as broker:
        broker.create_topic("wide", 8)
        parts = [data / "topics" / "wide" / f"part{pid}" for pid in range(8)]
        assert [_files(p) for p in parts] == [[]] * 8
        assert [broker.read_from("wide", pid, 0) for pid in range(8)] == [[]] * 8  # reads create nothing
        assert [_files(p) for p in parts] == [[]] * 8
        broker.produce_many_sync("wide", [(None, b"a"), (None, b"b")], partition=3)
        assert "00000000000000000000.seg" in _files(parts[3])
        assert [_files(p) for i, p in enumerate(parts) if i != 3] == [[]] * 7
    with Broker(persist_dir=str(data)) as broker:
        assert [broker.partition("wide", pid).high_watermark for pid in range(8)] == [0, 0, 0, 2, 0, 0, 0, 0]
        assert [r.value for r in broker.read_from("wide", 3, 0)] == [b"a", b"b"]
        broker.produce_many_sync("wide", [(None, b"c")], partition=5)
        assert [r.offset for r in broker.read_from("wide", 5, 0)] == [0]
    report = verify_data_dir(str(data))
    assert report.problems == []
    assert [s.end_offset for s in report.partitions] == [0, 0, 0, 2, 0, 1, 0, 0]


def test_a_deferred_file_reads_empty_and_is_created_by_its_first_write(tmp_path: Path) -> None:
    budget = FileBudget(4)
    f = budget.deferred_file(str(tmp_path / "seg"))
    assert (f.size(), f.pread(10, 0), budget.open_files) == (0, b"", 0)
    f.truncate(0)
    f.fsync()  # nothing written: nothing to create or sync
    assert not (tmp_path / "seg").exists()
    f.append(b"hello")
    assert (tmp_path / "seg").read_bytes() == b"hello"
    assert f.pread(5, 0) == b"hello"
    f.close()


def test_a_deferred_file_fsyncs_its_directory_entry_once_with_its_first_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced_dirs: list[str] = []
    real = fsync_dir

    def spy(path: str) -> None:
        synced_dirs.append(path)
        real(path)

    monkeypatch.setattr("lkstream.storage.handles.fsync_dir", spy)
    f = FileBudget(4).deferred_file(str(tmp_path / "seg"))
    f.append(b"x")
    assert synced_dirs == []  # written, not yet durable
    f.fsync()
    assert synced_dirs == [str(tmp_path)]
    f.append(b"y")
    f.fsync()
    assert synced_dirs == [str(tmp_path)]  # the entry is durable already
    f.close()


def test_an_existing_file_is_not_deferred_and_syncs_no_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced_dirs: list[str] = []
    monkeypatch.setattr("lkstream.storage.handles.fsync_dir", synced_dirs.append)
    f = FileBudget(4).file(str(tmp_path / "seg"))  # created now; the log fsyncs the directory itself
    f.append(b"x")
    f.fsync()
    assert synced_dirs == []
    f.close()


class _FakeClock:
    """``perf_counter`` for the pacer: each reading is ``tick`` seconds after the previous one."""

    def __init__(self, tick: float = 0.001) -> None:
        self.now = 0.0
        self.tick = tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


def test_creating_and_removing_a_large_topic_pauses_for_other_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pauses: list[float] = []
    monkeypatch.setattr("lkstream.storage.pacing.sleep", pauses.append)
    # A reading takes a quarter of WORK_S: the pacer pauses every 3-4 steps (a pause adds a reading).
    monkeypatch.setattr("lkstream.storage.pacing.perf_counter", _FakeClock(pacing.WORK_S / 4))
    with Broker(persist_dir=str(tmp_path / "d"), max_partitions=400) as broker:
        broker.create_topic("wide", 400)  # one directory per partition; their files come at first use
        created = len(pauses)
        assert 400 // 5 <= created <= 400 // 2
        assert set(pauses) == {pacing.PAUSE_S}
        broker.delete_topic("wide")
        broker.settle_trash()  # the trash thread removes the files behind the delete
        assert 400 // 5 <= len(pauses) - created <= 400 // 2
    assert os.listdir(tmp_path / "d" / "trash") == []


def test_emptying_the_trash_removes_every_partition_of_a_deleted_topic(tmp_path: Path) -> None:
    store = TopicStore(str(tmp_path))
    store.create("t", 3)
    (Path(store.partition_dir("t", 1)) / "00000000000000000000.seg").write_bytes(b"data")
    trashed = store.move_to_trash("t")
    store.empty(trashed)
    assert not os.path.exists(trashed)
    assert store.list() == []


def test_a_pacer_sleeps_once_its_work_time_has_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    pauses: list[float] = []
    monkeypatch.setattr("lkstream.storage.pacing.sleep", pauses.append)
    monkeypatch.setattr("lkstream.storage.pacing.perf_counter", _FakeClock())
    pacer = Pacer(work_s=0.0025, pause_s=0.002)  # readings: start, then one per step (and one per pause)
    for _ in range(10):
        pacer.step()
    assert (pauses, pacer.pauses) == ([0.002] * 3, 3)
    with pytest.raises(ValueError):
        Pacer(work_s=0)
