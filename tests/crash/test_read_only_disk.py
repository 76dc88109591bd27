"""Issue 12, finding 1: when the topics directory refuses changes, create and delete fail whole.

A delete that failed half-way (read-only directory) used to leave a ghost: gone from the broker,
back after a restart; a half-created topic became a zombie. Here ``topics/`` is made immutable
(``chattr +i``: even root may not add, remove or rename entries; the segment files inside stay
writable, as on a directory whose permissions were taken away). Root and a filesystem with the
attribute (ext4) are needed; the test is skipped with the reason otherwise. The delete and the
create fail with ``StorageAccessError`` naming the path (FAILED_PRECONDITION over gRPC, not
INTERNAL), the topic stays whole and served, nothing is left behind, and a restart once the
directory is writable again sees exactly the topics there were.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from lkstream import Broker, StorageAccessError
from lkstream.wire.contract import status_for


def _chattr(flag: str, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["chattr", flag, str(path)], capture_output=True, text=True, check=False)


@pytest.fixture
def data(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("chattr +i needs root")
    probe = tmp_path / "probe"
    probe.mkdir()
    done = _chattr("+i", probe)
    if done.returncode != 0:
        pytest.skip(f"this filesystem has no immutable attribute: {done.stderr.strip()}")
    _chattr("-i", probe)
    path = tmp_path / "data"
    yield path
    _chattr("-i", path / "topics")  # never leave an undeletable directory behind


def test_delete_and_create_in_a_directory_that_refuses_changes_fail_whole(data: Path) -> None:
    broker = Broker(persist_dir=str(data), partitions=2)
    try:
        broker.produce_many_sync("kept", [(None, b"a"), (None, b"b")], partition=0)
        assert _chattr("+i", data / "topics").returncode == 0

        with pytest.raises(StorageAccessError) as info:
            broker.delete_topic("kept")
        assert info.value.path == str(data / "topics" / "kept")
        assert "not writable" in str(info.value)
        assert status_for(info.value).name == "FAILED_PRECONDITION"
        assert broker.list_topics() == ["kept"]  # still whole and served
        assert [r.value for r in broker.read_from("kept", 0, 0)] == [b"a", b"b"]
        broker.produce_many_sync("kept", [(None, b"c")], partition=0)

        with pytest.raises(StorageAccessError):
            broker.create_topic("new", 3)
        with pytest.raises(StorageAccessError):
            broker.produce_many_sync("auto", [(None, b"x")])  # an auto-create fails the same way
        assert broker.list_topics() == ["kept"]
        assert sorted(os.listdir(data / "topics")) == ["kept"]
        assert os.listdir(data / "trash") == []  # the staged topics were removed at once
    finally:
        _chattr("-i", data / "topics")
        broker.close()
    with Broker(persist_dir=str(data)) as reopened:
        assert reopened.list_topics() == ["kept"]  # no ghost came back, no zombie appeared
        assert [r.value for r in reopened.read_from("kept", 0, 0)] == [b"a", b"b", b"c"]
        reopened.create_topic("new", 3)
        reopened.delete_topic("kept")
        assert reopened.list_topics() == ["new"]
