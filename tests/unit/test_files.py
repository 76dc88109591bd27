"""lkstream.storage.files: the file seam, its in-memory twin and atomic_write."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from lkstream.errors import DiskFullError, StorageError
from lkstream.storage import files
from lkstream.storage.files import MemoryFile, OsFile, atomic_write


def test_memory_file_append_pread_truncate() -> None:
    f = MemoryFile()
    assert f.append(b"hello") == 0
    assert f.append(b" world") == 5
    assert f.pread(5, 3) == b"lo wo"
    assert f.pread(100, 8) == b"rld"
    f.truncate(5)
    assert f.size() == 5


def test_memory_file_crash_drops_bytes_after_the_last_fsync() -> None:
    f = MemoryFile()
    f.append(b"durable")
    f.fsync()
    f.append(b"lost")
    f.crash()
    assert bytes(f.data) == b"durable"


def test_os_file_tracks_size_and_reads_positionally(tmp_path: Path) -> None:
    path = str(tmp_path / "f")
    f = OsFile(path)
    try:
        assert f.append(b"abc") == 0
        assert f.append(b"def") == 3
        assert f.size() == 6
        assert f.pread(2, 2) == b"cd"
        f.fsync()
        f.truncate(4)
        assert f.size() == 4 == os.path.getsize(path)
    finally:
        f.close()
    f.close()  # idempotent
    again = OsFile(path)
    assert again.size() == 4
    again.close()


def test_os_file_rolls_back_a_failed_append(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "f")
    f = OsFile(path)
    f.append(b"keep")
    real_pwrite = os.pwrite
    calls = {"n": 0}

    def torn_pwrite(fd: int, data: memoryview, position: int) -> int:
        calls["n"] += 1
        if calls["n"] == 1:
            return real_pwrite(fd, bytes(data[:3]), position)  # a short write lands part of the data
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.os, "pwrite", torn_pwrite)
    with pytest.raises(DiskFullError) as info:
        f.append(b"0123456789")
    monkeypatch.undo()
    assert info.value.path == path
    assert f.size() == 4
    assert os.path.getsize(path) == 4
    assert f.append(b"!") == 4
    f.close()


def test_os_file_open_of_a_missing_file_without_create_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="cannot open"):
        OsFile(str(tmp_path / "missing"), create=False)


def test_atomic_write_replaces_content_and_leaves_no_tmp(tmp_path: Path) -> None:
    path = str(tmp_path / "meta")
    atomic_write(path, b"one")
    atomic_write(path, b"two")
    assert Path(path).read_bytes() == b"two"
    assert os.listdir(tmp_path) == ["meta"]


def test_atomic_write_keeps_the_old_content_when_the_write_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "meta")
    atomic_write(path, b"old")

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(files.os, "fsync", failing_fsync)
    with pytest.raises(StorageError):
        atomic_write(path, b"new")
    monkeypatch.undo()
    assert Path(path).read_bytes() == b"old"


def test_a_failed_atomic_write_leaves_no_tmp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "meta"
    target.write_bytes(b"old")

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(DiskFullError):
        atomic_write(str(target), b"new")
    monkeypatch.undo()
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["meta"], "a half-written tmp file was left holding space"
