"""lkstream.storage.index: the sparse offset index of one segment."""

from __future__ import annotations

import struct

import pytest

from lkstream.errors import InvariantViolation
from lkstream.storage.files import MemoryFile
from lkstream.storage.index import ENTRY_SIZE, IndexDamaged, OffsetIndex


def _index(interval: int = 0, data: bytes = b"") -> OffsetIndex:
    return OffsetIndex(MemoryFile("0.idx", data), interval)


def _raw(*entries: tuple[int, int]) -> bytes:
    return b"".join(struct.pack(">QQ", o, p) for o, p in entries)


def test_entry_is_sixteen_bytes_offset_then_position_big_endian() -> None:
    idx = _index()
    idx.maybe_add(0x0102, 0x0304)
    idx.flush()
    assert ENTRY_SIZE == 16
    assert bytes(idx.file.data) == bytes.fromhex("00000000000001020000000000000304")  # type: ignore[attr-defined]


def test_interval_zero_indexes_every_batch() -> None:
    idx = _index(0)
    for i in range(5):
        idx.maybe_add(i * 10, i * 100)
    assert len(idx) == 5


def test_sparse_interval_adds_first_batch_then_every_interval_bytes() -> None:
    idx = _index(250)
    for i in range(10):  # batches of 100 bytes at positions 0, 100, ..., 900
        idx.maybe_add(i * 3, i * 100)
    assert idx.entries() == [(0, 0), (9, 300), (18, 600), (27, 900)]


def test_add_rejects_entry_not_above_the_last() -> None:
    idx = _index(0)
    idx.maybe_add(10, 100)
    with pytest.raises(InvariantViolation):
        idx.maybe_add(10, 200)
    with pytest.raises(InvariantViolation):
        idx.maybe_add(20, 100)


def test_lookup_finds_last_entry_at_or_below_offset() -> None:
    idx = _index(0)
    for offset, position in [(0, 0), (10, 500), (20, 1000)]:
        idx.maybe_add(offset, position)
    assert idx.lookup(0) == (0, 0)
    assert idx.lookup(9) == (0, 0)
    assert idx.lookup(10) == (10, 500)
    assert idx.lookup(19) == (10, 500)
    assert idx.lookup(10**9) == (20, 1000)


def test_lookup_below_first_entry_returns_none() -> None:
    idx = _index(0)
    idx.maybe_add(100, 0)
    assert idx.lookup(99) is None
    assert _index().lookup(5) is None


def test_flush_writes_only_new_entries_and_reports_whether_it_wrote() -> None:
    idx = _index(0)
    idx.maybe_add(0, 0)
    assert idx.flush() is True
    assert idx.flush() is False
    idx.maybe_add(5, 50)
    assert idx.flush() is True
    assert bytes(idx.file.data) == _raw((0, 0), (5, 50))  # type: ignore[attr-defined]


def test_load_reads_back_flushed_entries() -> None:
    idx = _index(0)
    for i in range(4):
        idx.maybe_add(i * 2, i * 64)
    idx.flush()
    again = OffsetIndex(idx.file, 0)
    again.load()
    assert again.entries() == idx.entries()
    assert again.last_entry == (6, 192)


def test_load_then_add_continues_after_the_loaded_entries() -> None:
    idx = _index(100, _raw((0, 0), (5, 200)))
    idx.load()
    idx.maybe_add(7, 250)  # within the interval of the last entry
    idx.maybe_add(9, 300)
    assert idx.entries() == [(0, 0), (5, 200), (9, 300)]


def test_load_rejects_size_not_a_multiple_of_sixteen() -> None:
    with pytest.raises(IndexDamaged, match="multiple of 16"):
        _index(0, _raw((0, 0)) + b"\x00").load()


def test_load_rejects_non_increasing_offsets() -> None:
    with pytest.raises(IndexDamaged, match="strictly increasing"):
        _index(0, _raw((0, 0), (5, 100), (5, 200))).load()


def test_load_rejects_non_increasing_positions() -> None:
    with pytest.raises(IndexDamaged, match="strictly increasing"):
        _index(0, _raw((0, 0), (5, 100), (6, 50))).load()


def test_load_rejects_negative_entries() -> None:
    with pytest.raises(IndexDamaged, match="negative"):
        _index(0, b"\xff" * 16).load()


def test_load_of_empty_file_gives_empty_index() -> None:
    idx = _index(0)
    idx.load()
    assert len(idx) == 0
    assert idx.last_entry is None


def test_truncate_to_position_drops_entries_at_or_past_it_in_memory_and_file() -> None:
    idx = _index(0)
    for offset, position in [(0, 0), (3, 100), (6, 200), (9, 300)]:
        idx.maybe_add(offset, position)
    idx.flush()
    idx.truncate_to_position(200)
    assert idx.entries() == [(0, 0), (3, 100)]
    assert bytes(idx.file.data) == _raw((0, 0), (3, 100))  # type: ignore[attr-defined]
    idx.maybe_add(6, 200)  # the interval restarts from the last kept entry
    assert idx.last_entry == (6, 200)


def test_truncate_to_position_past_every_entry_changes_nothing() -> None:
    idx = _index(0)
    idx.maybe_add(0, 0)
    idx.flush()
    idx.truncate_to_position(1)
    assert idx.entries() == [(0, 0)]
    assert len(idx.file.data) == ENTRY_SIZE  # type: ignore[attr-defined]


def test_truncate_drops_unflushed_entries_without_touching_file() -> None:
    idx = _index(0)
    idx.maybe_add(0, 0)
    idx.flush()
    idx.maybe_add(5, 100)
    idx.truncate_to_position(100)
    assert idx.flush() is False
    assert bytes(idx.file.data) == _raw((0, 0))  # type: ignore[attr-defined]


def test_reset_forgets_everything_and_empties_the_file() -> None:
    idx = _index(0)
    idx.maybe_add(0, 0)
    idx.flush()
    idx.reset()
    assert len(idx) == 0
    assert idx.file.size() == 0
    idx.maybe_add(0, 0)  # accepts a fresh first entry
    assert idx.entries() == [(0, 0)]
