"""lkstream.storage.offsets: durable committed consumer offsets."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lkstream.errors import CorruptRecordError, InvalidArgumentError, StorageError
from lkstream.storage import files
from lkstream.storage.clock import ManualClock
from lkstream.storage.offsets import OffsetStore


@pytest.fixture
def store(tmp_path: Path) -> OffsetStore:
    return OffsetStore(str(tmp_path), clock=ManualClock(1_000))


def test_read_committed_is_none_before_any_commit(store: OffsetStore) -> None:
    assert store.read_committed("g", "t", 0) is None


def test_commit_then_read_back(store: OffsetStore) -> None:
    store.commit("g", "t", 0, 42)
    store.commit("g", "t", 1, 7)
    store.commit("other", "t", 0, 3)
    assert store.read_committed("g", "t", 0) == 42
    assert store.read_committed("g", "t", 1) == 7
    assert store.read_committed("other", "t", 0) == 3


def test_a_later_commit_replaces_the_earlier(store: OffsetStore) -> None:
    store.commit("g", "t", 0, 1)
    store.commit("g", "t", 0, 2)
    assert store.read_committed("g", "t", 0) == 2


def test_commits_survive_a_new_store_on_the_same_directory(tmp_path: Path) -> None:
    OffsetStore(str(tmp_path)).commit("g", "t", 0, 99)
    assert OffsetStore(str(tmp_path)).read_committed("g", "t", 0) == 99


def test_file_layout_is_group_topic_partition_json(store: OffsetStore, tmp_path: Path) -> None:
    store.commit("grp", "orders", 3, 15)
    path = tmp_path / "offsets" / "grp__orders__part3.offset"
    assert store.path_for("grp", "orders", 3) == str(path)
    assert json.loads(path.read_bytes()) == {"offset": 15, "committed_ms": 1_000}
    assert sorted(os.listdir(tmp_path / "offsets")) == ["grp__orders__part3.offset"]


def test_commit_is_atomic_when_the_rename_fails(store: OffsetStore, monkeypatch: pytest.MonkeyPatch) -> None:
    store.commit("g", "t", 0, 10)

    def failing_replace(src: str, dst: str) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(files.os, "replace", failing_replace)
    with pytest.raises(StorageError, match="rename"):
        store.commit("g", "t", 0, 20)
    monkeypatch.undo()
    assert store.read_committed("g", "t", 0) == 10  # the old commit, whole


def test_commit_fsyncs_file_and_directory(store: OffsetStore, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(files.os, "fsync", spy)
    store.commit("g", "t", 0, 5)
    assert len(synced) == 2  # the tmp file, then the directory


def test_stray_tmp_files_are_swept_by_the_owning_store(tmp_path: Path) -> None:
    OffsetStore(str(tmp_path)).commit("g", "t", 0, 1)
    stray = tmp_path / "offsets" / "g__t__part0.offset.tmp"
    stray.write_bytes(b"{half")
    again = OffsetStore(str(tmp_path), sweep_tmp=True)
    assert not stray.exists()
    assert again.read_committed("g", "t", 0) == 1


def test_a_second_store_leaves_tmp_files_of_live_commits_alone(tmp_path: Path) -> None:
    OffsetStore(str(tmp_path)).commit("g", "t", 0, 1)
    in_flight = tmp_path / "offsets" / "g__t__part0.offset.123-456.tmp"
    in_flight.write_bytes(b"{half")
    OffsetStore(str(tmp_path))
    assert in_flight.exists()


def test_group_and_topic_pairs_never_share_an_offset_file(store: OffsetStore) -> None:
    with pytest.raises(InvalidArgumentError):
        store.path_for("g_", "x", 0)  # would collide with ("g", "_x")
    assert store.path_for("g", "_x", 0) != store.path_for("g", "x", 0)


@pytest.mark.parametrize("group", ["..", ".", "a/b", "", "a__b", "x" * 250, "sp ace", None])
def test_bad_group_names_are_rejected(store: OffsetStore, group: object) -> None:
    with pytest.raises(InvalidArgumentError):
        store.commit(group, "t", 0, 1)  # type: ignore[arg-type]


@pytest.mark.parametrize("topic", ["..", ".", "a/b", "", "x" * 250, "../etc"])
def test_bad_topic_names_are_rejected(store: OffsetStore, topic: str) -> None:
    with pytest.raises(InvalidArgumentError):
        store.commit("g", topic, 0, 1)


@pytest.mark.parametrize("partition", [-1, "0", 1.0, None, True])
def test_bad_partitions_are_rejected(store: OffsetStore, partition: object) -> None:
    with pytest.raises(InvalidArgumentError):
        store.commit("g", "t", partition, 1)  # type: ignore[arg-type]


@pytest.mark.parametrize("offset", [-1, 1.5, "3", None, True])
def test_bad_offsets_are_rejected(store: OffsetStore, offset: object) -> None:
    with pytest.raises(InvalidArgumentError):
        store.commit("g", "t", 0, offset)  # type: ignore[arg-type]


def test_nothing_is_written_for_a_rejected_commit(store: OffsetStore, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError):
        store.commit("..", "t", 0, 1)
    assert os.listdir(tmp_path / "offsets") == []


@pytest.mark.parametrize(
    "content",
    [
        b"garbage",
        b"",
        b"{}",
        b'{"offset": "12"}',
        b'{"offset": -4}',
        b"[1, 2]",
        b'{"offset": 1.5}',
        b'{"offset": true}',
    ],
)
def test_garbage_offset_file_raises_corrupt_record(store: OffsetStore, content: bytes) -> None:
    path = store.path_for("g", "t", 0)
    with open(path, "wb") as f:
        f.write(content)
    with pytest.raises(CorruptRecordError) as info:
        store.read_committed("g", "t", 0)
    assert info.value.path == path


def test_forget_topic_removes_only_that_topics_offsets(store: OffsetStore) -> None:
    store.commit("g", "t", 0, 5)
    store.commit("g", "t", 1, 6)
    store.commit("g", "t__x", 0, 7)
    store.commit("h", "_t", 0, 8)
    assert store.forget_topic("t") == 2
    assert store.read_committed("g", "t", 0) is None
    assert store.read_committed("g", "t__x", 0) == 7
    assert store.read_committed("h", "_t", 0) == 8
