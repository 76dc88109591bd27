"""A delete returns at its commit point; the trash thread removes the files behind it (finding 9)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from lkstream import Broker
from lkstream.storage.trash import TrashEmptier


def test_submit_returns_before_the_removal_and_settle_waits_for_it() -> None:
    release = threading.Event()
    emptied: list[str] = []

    def empty(path: str, stop: threading.Event) -> None:
        assert release.wait(30), "the test never released the removal"
        emptied.append(path)

    emptier = TrashEmptier(empty)
    try:
        emptier.submit("trash/a-1")
        emptier.submit("trash/b-2")
        assert emptied == []  # submit did not wait for the blocked removal
        release.set()
        emptier.settle()
        assert emptied == ["trash/a-1", "trash/b-2"]
    finally:
        emptier.close()


def test_close_stops_a_long_removal_and_skips_what_is_queued() -> None:
    started = threading.Event()
    seen: list[str] = []

    def empty(path: str, stop: threading.Event) -> None:
        seen.append(path)
        started.set()
        assert stop.wait(30), "close never asked the removal to stop"

    emptier = TrashEmptier(empty)
    emptier.submit("trash/a-1")
    emptier.submit("trash/b-2")
    assert started.wait(30)
    emptier.close()
    assert seen == ["trash/a-1"]


def test_a_failed_removal_does_not_end_the_thread() -> None:
    emptied: list[str] = []

    def empty(path: str, stop: threading.Event) -> None:
        if path.endswith("bad"):
            raise OSError(5, "Input/output error")
        emptied.append(path)

    emptier = TrashEmptier(empty)
    try:
        emptier.submit("trash/bad")
        emptier.submit("trash/good")
        emptier.settle()
        assert emptied == ["trash/good"]
    finally:
        emptier.close()


def test_a_deleted_topic_is_gone_at_once_and_its_files_follow(tmp_path: Path) -> None:
    data = tmp_path / "d"
    with Broker(persist_dir=str(data)) as broker:
        broker.create_topic("t", 8)
        broker.produce_many_sync("t", [(b"k", b"v")] * 10)
        broker.delete_topic("t")
        assert "t" not in broker.list_topics()
        broker.create_topic("t", 2)  # a new incarnation while the old files may still be in the trash
        assert broker.bounds("t", 0) == (0, 0)
        broker.settle_trash()
        assert os.listdir(data / "trash") == []


def test_files_left_in_the_trash_at_close_are_removed_at_the_next_open(tmp_path: Path) -> None:
    data = tmp_path / "d"
    with Broker(persist_dir=str(data), max_partitions=2000) as broker:
        broker.create_topic("wide", 2000)
        broker.delete_topic("wide")
    # Closed at once: the thread may have stopped half-way; whatever it left is swept on open.
    with Broker(persist_dir=str(data)) as broker:
        assert broker.list_topics() == []
        assert os.listdir(data / "trash") == []
