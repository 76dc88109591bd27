"""lkstream.storage.handles: one budget of open files for every partition (issue 12, finding 1).

Each partition used to keep two descriptors open per segment for its whole life, so one
``POST /topics {"partitions": 10000}`` exhausted them and the data directory could not be
opened again. Real files here; only an fsync failure is simulated (a real one needs a failing disk).
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lkstream import Broker
from lkstream.errors import PartitionLimitError, StorageError
from lkstream.storage.handles import FileBudget, derive_capacity


def _fds_under(directory: Path) -> int:
    """Descriptors this process holds on files below ``directory`` (other tests' leftovers do not count)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        count += target.startswith(str(directory))
    return count


@pytest.fixture
def budget() -> Iterator[FileBudget]:
    yield FileBudget(4)


def test_files_open_lazily_and_never_more_than_the_capacity(budget: FileBudget, tmp_path: Path) -> None:
    files = [budget.file(str(tmp_path / f"f{n}")) for n in range(20)]
    assert budget.open_files <= 4
    for n, f in enumerate(files):
        f.append(f"record {n}".encode())
        assert budget.open_files <= 4
    for n, f in enumerate(files):
        assert f.pread(100, 0) == f"record {n}".encode()
    assert budget.open_files <= 4 and budget.evictions >= 16
    for f in files:
        f.close()
    assert budget.open_files == 0


def test_a_dirty_file_is_fsynced_before_its_descriptor_is_evicted(budget: FileBudget, tmp_path: Path) -> None:
    files = [budget.file(str(tmp_path / f"f{n}")) for n in range(5)]
    for f in files:
        f.append(b"unsynced")  # nothing fsynced: every eviction must fsync first
    assert budget.eviction_fsyncs >= 1
    assert not files[0].dirty  # the evicted one was fsynced on its way out
    for f in files:
        f.fsync()
        assert not f.dirty


def test_clean_files_are_evicted_before_dirty_ones(budget: FileBudget, tmp_path: Path) -> None:
    dirty = budget.file(str(tmp_path / "dirty"))
    dirty.append(b"x")
    clean = [budget.file(str(tmp_path / f"c{n}")) for n in range(3)]
    for f in clean:
        f.pread(1, 0)
    budget.file(str(tmp_path / "one-more")).pread(1, 0)
    assert budget.eviction_fsyncs == 0 and dirty.dirty  # a clean file made room


def test_a_failed_fsync_at_eviction_sticks_to_the_file(
    budget: FileBudget, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    victim = budget.file(str(tmp_path / "victim"))
    victim.append(b"maybe lost")
    real = os.fdatasync

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    others = [budget.file(str(tmp_path / f"o{n}")) for n in range(3)]
    for f in others:
        f.append(b"x")  # every open file is dirty: the oldest, the victim, must go
    monkeypatch.setattr(os, "fdatasync", failing)
    budget.file(str(tmp_path / "one-more")).pread(1, 0)
    monkeypatch.setattr(os, "fdatasync", real)
    assert budget.eviction_fsyncs == 1
    with pytest.raises(StorageError, match="earlier fsync failed"):
        victim.fsync()  # the log turns this into "refuses appends until a restart"
    with pytest.raises(StorageError, match="earlier fsync failed"):
        victim.fsync()


def test_the_capacity_is_the_descriptor_limit_minus_the_reserve() -> None:
    assert derive_capacity(100, 512, limit=1024) == 100
    assert derive_capacity(0, 512, limit=1024) == 512
    assert derive_capacity(0, 512, limit=65536) == 65024
    assert derive_capacity(0, 512, limit=128) == 32  # a small limit keeps a quarter for files


def test_a_broker_with_more_partitions_than_descriptors_produces_and_reads_them_all(tmp_path: Path) -> None:
    with Broker(persist_dir=str(tmp_path / "d"), max_open_files=16, segment_max_bytes=4096) as broker:
        broker.create_topic("wide", 300)
        for pid in range(300):
            broker.produce_many_sync("wide", [(None, f"{pid}".encode())] * 3, partition=pid)
        assert [r.value for r in broker.read_from("wide", 299, 0)] == [b"299"] * 3
        # The budget's 16, plus the offsets journal and its directory, and the LOCK. The group
        # committer may still be fsyncing the last partitions (each new segment's file, then its
        # directory entry through a descriptor of its own); an eviction it makes meanwhile counts
        # the new slot a moment before the victim's close. Once it is idle, the bounds are exact.
        deadline = time.monotonic() + 30
        while (counts := (broker.files.open_files, _fds_under(tmp_path / "d")))[0] > 16 or counts[1] > 16 + 3:
            assert time.monotonic() < deadline, f"(budgeted files, descriptors) stay at {counts}"
            time.sleep(0.01)
    with Broker(persist_dir=str(tmp_path / "d"), max_open_files=16) as broker:
        assert all(broker.partition("wide", pid).high_watermark == 3 for pid in range(300))
        assert [r.value for r in broker.read_from("wide", 7, 0)] == [b"7"] * 3


def test_topics_beyond_max_partitions_are_refused_and_leave_nothing_behind(tmp_path: Path) -> None:
    data = tmp_path / "d"
    with Broker(persist_dir=str(data), max_partitions=10, partitions=3) as broker:
        broker.create_topic("a", 6)
        with pytest.raises(PartitionLimitError) as info:
            broker.create_topic("b", 5)
        assert (info.value.requested, info.value.existing, info.value.limit) == (5, 6, 10)
        broker.produce_many_sync("auto", [(None, b"x")])  # auto-created with 3: 9 in all
        with pytest.raises(PartitionLimitError):
            broker.produce_many_sync("auto2", [(None, b"x")], partition=0)
        broker.create_topic("c", 1)
        assert broker.list_topics() == ["a", "auto", "c"]
        assert sorted(os.listdir(data / "topics")) == ["a", "auto", "c"]


def test_a_partition_that_fails_to_open_at_its_first_use_is_opened_by_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new topic's partitions open at their first use (issue 12, finding 9): the create
    opens none, so it cannot fail half-way there; a first use that fails (EMFILE) leaves
    the topic whole and the partition unopened, and the next use opens it."""
    from lkstream.broker import broker as broker_module

    real = broker_module.PartitionLog
    opened: list[int] = []

    def failing(*args: object, **kwargs: object) -> object:
        opened.append(1)
        if len(opened) == 1:
            raise OSError(errno.EMFILE, "Too many open files")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    with Broker(persist_dir=str(tmp_path / "d")) as broker:
        monkeypatch.setattr(broker_module, "PartitionLog", failing)
        broker.create_topic("half", 5)
        assert opened == [], "the create must open no partition"
        assert broker.describe_topic("half").settings.partitions == 5
        with pytest.raises(OSError):
            broker.produce_many_sync("half", [(None, b"x")], partition=2)
        assert broker.produce_many_sync("half", [(None, b"x")], partition=2) == [(2, 0)]
        assert len(opened) == 2, "only the partition used is opened"
        assert [p.high_watermark for p in broker.describe_topic("half").partitions] == [0, 0, 1, 0, 0]
