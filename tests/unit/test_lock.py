"""lkstream.storage.lock: one broker per data directory."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from lkstream import Broker, DataDirLockedError
from lkstream.storage.lock import LOCK_NAME, DataDirLock


def test_second_lock_on_the_same_directory_fails_at_once(tmp_path: Path) -> None:
    first = DataDirLock(str(tmp_path))
    try:
        started = time.monotonic()
        with pytest.raises(DataDirLockedError) as info:
            DataDirLock(str(tmp_path))
        assert time.monotonic() - started < 1.0
        assert info.value.path == str(tmp_path / LOCK_NAME)
        assert "locked by another broker" in str(info.value)
    finally:
        first.release()


def test_lock_file_holds_the_owner_pid(tmp_path: Path) -> None:
    lock = DataDirLock(str(tmp_path))
    try:
        assert (tmp_path / LOCK_NAME).read_text() == f"{os.getpid()}\n"
    finally:
        lock.release()


def test_released_lock_can_be_taken_again(tmp_path: Path) -> None:
    DataDirLock(str(tmp_path)).release()
    again = DataDirLock(str(tmp_path))
    again.release()
    again.release()  # idempotent


def test_second_broker_on_the_same_dir_raises_data_dir_locked(data_dir: str) -> None:
    with Broker(persist_dir=data_dir):
        started = time.monotonic()
        with pytest.raises(DataDirLockedError, match="locked"):
            Broker(persist_dir=data_dir)
        assert time.monotonic() - started < 1.0


def test_after_close_a_new_broker_opens_the_dir(data_dir: str) -> None:
    first = Broker(persist_dir=data_dir)
    first.produce_many_sync("t", [(b"k", b"v")])
    first.close()
    with Broker(persist_dir=data_dir) as second:
        assert [r.value for r in second.read_from("t", 0, 0)] == [b"v"]


def test_a_failed_second_broker_leaves_the_first_working(data_dir: str) -> None:
    with Broker(persist_dir=data_dir) as first:
        with pytest.raises(DataDirLockedError):
            Broker(persist_dir=data_dir)
        assert first.produce_many_sync("t", [(None, b"still works")]) == [(0, 0)]
