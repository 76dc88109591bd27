"""lkstream.storage.segment: one .seg file with its .idx, reads and recovery."""

from __future__ import annotations

import struct

import pytest

from lkstream.errors import CorruptRecordError, InvariantViolation
from lkstream.format import batch as B
from lkstream.format.codec import decode_batches
from lkstream.storage.files import MemoryFile
from lkstream.storage.index import ENTRY_SIZE
from lkstream.storage.segment import (
    Segment,
    format_segment_name,
    parse_segment_name,
)

from .support import FIXED_TS, stamped


def _segment(base: int = 0, interval: int = 0, seg: bytes = b"", idx: bytes = b"") -> Segment:
    return Segment("/d", base, MemoryFile("/d/seg", seg), MemoryFile("/d/idx", idx), interval)


def _fill(segment: Segment, batches: int, records_per_batch: int = 2) -> list[int]:
    """Append ``batches`` batches; return their positions."""
    positions = []
    for _ in range(batches):
        batch, header = stamped(records_per_batch, segment.next_offset)
        positions.append(segment.append(batch, header))
    return positions


def _offsets(data: bytes, min_offset: int = 0) -> list[int]:
    return [r.offset for r in decode_batches(data, "t", 0, min_offset)]


# -- names -----------------------------------------------------------------------------------------


def test_format_segment_name_is_twenty_zero_padded_digits() -> None:
    assert format_segment_name(42) == "00000000000000000042.seg"
    assert format_segment_name(7, ".idx") == "00000000000000000007.idx"


def test_format_segment_name_rejects_negative_base() -> None:
    with pytest.raises(InvariantViolation):
        format_segment_name(-1)


def test_parse_segment_name_round_trips() -> None:
    for base in (0, 1, 10**19):
        assert parse_segment_name(format_segment_name(base)) == (base, ".seg")
        assert parse_segment_name(format_segment_name(base, ".idx")) == (base, ".idx")


@pytest.mark.parametrize(
    "name",
    [
        "42.seg",
        "0000000000000000004a.seg",
        "00000000000000000042.seg.tmp",
        "00000000000000000042.log",
        "checkpoint.meta",
        "000000000000000000042.seg",
        "",
        "../00000000000000000042.seg",
    ],
)
def test_parse_segment_name_rejects_garbage(name: str) -> None:
    assert parse_segment_name(name) is None


# -- append and read -------------------------------------------------------------------------------


def test_append_returns_positions_and_advances_next_offset() -> None:
    seg = _segment(base=100)
    positions = _fill(seg, 3, records_per_batch=2)
    assert positions[0] == 0
    assert positions[1] > 0
    assert positions[2] > positions[1]
    assert seg.next_offset == 106
    assert seg.max_timestamp == FIXED_TS


def test_append_rejects_batch_not_continuing_the_segment() -> None:
    seg = _segment()
    _fill(seg, 1)
    batch, header = stamped(1, 5)
    with pytest.raises(InvariantViolation):
        seg.append(batch, header)


def test_position_of_finds_batch_holding_offset() -> None:
    seg = _segment(interval=0)
    positions = _fill(seg, 4, records_per_batch=3)  # offsets 0-2, 3-5, 6-8, 9-11
    assert seg.position_of(0, seg.size) == positions[0]
    assert seg.position_of(4, seg.size) == positions[1]
    assert seg.position_of(8, seg.size) == positions[2]
    assert seg.position_of(11, seg.size) == positions[3]
    assert seg.position_of(12, seg.size) == seg.size


def test_position_of_walks_forward_from_a_sparse_entry() -> None:
    seg = _segment(interval=10**6)  # only the first batch gets an entry
    positions = _fill(seg, 5)
    assert len(seg.index) == 1
    assert seg.position_of(7, seg.size) == positions[3]


def test_read_returns_whole_batches_up_to_max_bytes() -> None:
    seg = _segment()
    positions = _fill(seg, 5)
    batch_size = positions[1]
    data = seg.read(0, 2 * batch_size + 10, seg.size)
    assert len(data) == 2 * batch_size
    assert _offsets(data) == [0, 1, 2, 3]


def test_read_returns_at_least_one_batch_even_if_larger_than_max_bytes() -> None:
    seg = _segment()
    positions = _fill(seg, 2)
    data = seg.read(0, 1, seg.size)
    assert len(data) == positions[1]


def test_read_stops_at_end_argument() -> None:
    seg = _segment()
    positions = _fill(seg, 3)
    data = seg.read(0, 10**6, positions[2])
    assert _offsets(data) == [0, 1, 2, 3]
    assert seg.read(positions[2], 10**6, positions[2]) == b""


def test_read_rejects_batch_with_bad_crc_naming_path_and_position() -> None:
    seg = _segment()
    positions = _fill(seg, 3)
    seg.file.data[positions[1] + 70] ^= 0x01  # type: ignore[attr-defined]
    # The valid batch before the damage is served (issue 12, finding 2); reading the damaged one fails.
    assert seg.read(0, 10**6, seg.size) == seg.read(0, 1, positions[1])
    with pytest.raises(CorruptRecordError) as info:
        seg.read(positions[1], 10**6, seg.size)
    assert info.value.path == "/d/seg"
    assert info.value.position == positions[1]
    assert "CRC" in info.value.reason


# -- recovery --------------------------------------------------------------------------------------


def _sealed_bytes(batches: int) -> tuple[bytes, list[int]]:
    seg = _segment()
    positions = _fill(seg, batches)
    return bytes(seg.file.data), positions  # type: ignore[attr-defined]


def _index_bytes(positions: list[int], records_per_batch: int = 2) -> bytes:
    return b"".join(struct.pack(">QQ", records_per_batch * i, p) for i, p in enumerate(positions))


def test_recover_keeps_a_clean_segment_whole() -> None:
    data, positions = _sealed_bytes(4)
    seg = _segment(seg=data, idx=_index_bytes(positions))
    report = seg.recover(0, 0)
    assert (report.valid_bytes, report.truncated_bytes) == (len(data), 0)
    assert seg.next_offset == 8
    assert seg.size == len(data)
    assert report.index_rebuilt is False


def test_recover_truncates_a_torn_tail_batch() -> None:
    data, positions = _sealed_bytes(3)
    seg = _segment(seg=data[:-5])
    report = seg.recover(0, 0)
    assert report.valid_bytes == positions[2]
    assert report.truncated_bytes == len(data) - 5 - positions[2]
    assert seg.size == positions[2]
    assert seg.next_offset == 4
    assert "truncated batch" in report.reason


def test_recover_truncates_a_zero_filled_tail() -> None:
    data, _ = _sealed_bytes(2)
    seg = _segment(seg=data + bytes(4096))
    report = seg.recover(0, 0)
    assert report.truncated_bytes == 4096
    assert seg.size == len(data)
    assert seg.next_offset == 4


def test_recover_truncates_at_a_batch_with_bad_crc_and_drops_what_follows() -> None:
    data, positions = _sealed_bytes(4)
    damaged = bytearray(data)
    damaged[positions[1] + 65] ^= 0xFF
    seg = _segment(seg=bytes(damaged))
    report = seg.recover(0, 0)
    assert report.valid_bytes == positions[1]
    assert seg.next_offset == 2
    assert "CRC" in report.reason
    assert seg.file.durable == bytes(data[: positions[1]])  # type: ignore[attr-defined]


def test_recover_truncates_at_a_batch_whose_offset_does_not_continue() -> None:
    data, _ = _sealed_bytes(2)
    stray, _ = stamped(2, 50)  # valid CRC, wrong base offset
    seg = _segment(seg=data + bytes(stray))
    report = seg.recover(0, 0)
    assert report.valid_bytes == len(data)
    assert "does not continue" in report.reason
    assert seg.next_offset == 4


def test_recover_validates_only_from_the_trusted_position() -> None:
    data, positions = _sealed_bytes(3)
    damaged = bytearray(data)
    damaged[positions[0] + 65] ^= 0xFF  # before the trusted position: not re-validated
    seg = _segment(seg=bytes(damaged), idx=_index_bytes(positions[:1]))
    report = seg.recover(positions[1], 2)
    assert report.truncated_bytes == 0
    assert seg.next_offset == 6


def test_recover_rebuilds_index_entries_for_validated_batches() -> None:
    data, positions = _sealed_bytes(4)
    seg = _segment(seg=data)
    seg.recover(0, 0)
    assert seg.index.entries() == [(0, positions[0]), (2, positions[1]), (4, positions[2]), (6, positions[3])]
    assert seg.index.file.size() == 4 * ENTRY_SIZE  # flushed


def test_recover_rebuilds_a_damaged_index_from_the_start() -> None:
    data, positions = _sealed_bytes(3)
    seg = _segment(seg=data, idx=b"\x00" * 17)
    report = seg.recover(positions[2], 4)  # trust is withdrawn with the index
    assert report.index_rebuilt is True
    assert seg.index.entries() == [(0, positions[0]), (2, positions[1]), (4, positions[2])]
    assert seg.next_offset == 6


def test_recover_cuts_index_entries_pointing_into_the_truncated_tail() -> None:
    data, positions = _sealed_bytes(3)
    seg = _segment(seg=data[: positions[2] + 10], idx=_index_bytes(positions))
    seg.recover(0, 0)
    assert seg.index.entries() == [(0, positions[0]), (2, positions[1])]
    assert seg.index.file.size() == 2 * ENTRY_SIZE


def test_sealed_segment_loads_a_damaged_index_lazily_by_scanning() -> None:
    data, positions = _sealed_bytes(3)
    seg = _segment(seg=data, idx=b"garbage")
    seg.next_offset = 6
    assert seg.position_of(3, seg.size) == positions[1]
    assert seg.index_rebuilt is True
    assert seg.index.file.size() == 3 * ENTRY_SIZE


def test_recover_rebuilds_an_empty_index_of_a_non_empty_segment() -> None:
    data, positions = _sealed_bytes(3)
    seg = _segment(seg=data, idx=b"")
    report = seg.recover(len(data), 6)  # a checkpoint trusting everything cannot save a lost index
    assert report.index_rebuilt is True
    assert seg.index.entries() == [(0, positions[0]), (2, positions[1]), (4, positions[2])]
    assert seg.index.file.size() == 3 * ENTRY_SIZE


def test_sealed_segment_with_an_empty_index_rebuilds_it_on_first_read() -> None:
    data, positions = _sealed_bytes(3)
    seg = _segment(seg=data, idx=b"")
    assert seg.position_of(4, seg.size) == positions[2]
    assert seg.index_rebuilt is True
    assert len(seg.index) == 3


def test_empty_segment_with_empty_index_is_not_a_rebuild() -> None:
    seg = _segment()
    report = seg.recover(0, 0)
    assert report.index_rebuilt is False
    assert (report.valid_bytes, report.truncated_bytes) == (0, 0)


def test_scan_max_timestamp_reads_the_last_batch() -> None:
    data, _ = _sealed_bytes(3)
    seg = _segment(base=0, seg=data)
    seg.scan_max_timestamp()
    assert seg.max_timestamp == FIXED_TS


def test_scan_max_timestamp_stops_at_a_negative_batch_length() -> None:
    data, positions = _sealed_bytes(3)
    damaged = bytearray(data)
    damaged[positions[-1] + 8 : positions[-1] + 12] = (-12).to_bytes(4, "big", signed=True)
    seg = _segment(base=0, seg=bytes(damaged))
    seg.scan_max_timestamp()  # returns instead of walking backwards forever
    assert seg.max_timestamp == FIXED_TS


def test_magic_or_length_damage_in_header_is_reported_by_recovery() -> None:
    data, positions = _sealed_bytes(2)
    damaged = bytearray(data)
    struct.pack_into(">b", damaged, positions[1] + B.MAGIC_AT, 0)
    seg = _segment(seg=bytes(damaged))
    report = seg.recover(0, 0)
    assert report.valid_bytes == positions[1]
    assert "magic" in report.reason


def test_close_closes_both_files() -> None:
    seg = _segment()
    seg.close()
    assert seg.file.closed and seg.index.file.closed  # type: ignore[attr-defined]
