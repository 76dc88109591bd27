"""lkstream.format.batch: the v2 RecordBatch header, validation and offset stamping."""

from __future__ import annotations

import struct

import crc32c
import pytest

from lkstream.errors import CorruptRecordError, InvalidArgumentError, RecordTooLargeError
from lkstream.format import batch as B
from lkstream.format.batch import (
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    check_batch,
    compute_crc,
    parse_header,
    read_length_prefix,
    span_of_whole_batches,
    stamp_base_offset,
)
from lkstream.format.codec import encode_batch
from lkstream.format.rewrite import empty_batch
from lkstream.format.validate import validate_producer_batch as check_producer_batch

from .support import FIXED_TS, make_batch, zigzag_varint

# -- a batch built by hand from the Kafka v2 specification ----------------------------------------


def _spec_record(offset_delta: int, key: bytes, value: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    body = bytearray()
    body += b"\x00"  # attributes
    body += zigzag_varint(0)  # timestamp delta
    body += zigzag_varint(offset_delta)
    body += zigzag_varint(len(key)) + key
    body += zigzag_varint(len(value)) + value
    body += zigzag_varint(len(headers))
    for hk, hv in headers:
        body += zigzag_varint(len(hk)) + hk + zigzag_varint(len(hv)) + hv
    return zigzag_varint(len(body)) + bytes(body)


def _spec_batch(base_offset: int, timestamp: int, records: bytes, count: int) -> bytes:
    """Header fields packed one by one at the offsets the Kafka protocol guide gives."""
    after_crc = struct.pack(">hiqqqhii", 0, count - 1, timestamp, timestamp, -1, -1, -1, count) + records
    crc = crc32c.crc32c(after_crc)
    batch_length = 4 + 1 + 4 + len(after_crc)  # leader epoch + magic + crc + the rest
    return struct.pack(">qiibI", base_offset, batch_length, -1, 2, crc) + after_crc


# Golden vector: one record, key b"key", value b"value", header ("h", b"v"), create time
# 1_700_000_000_000 ms, base offset 0. Pinned so a codec upgrade cannot drift the format.
GOLDEN_HEX = (
    "000000000000000000000044ffffffff0283794a1d0000000000000000018bcfe568000000018bcfe568"
    "00ffffffffffffffffffffffffffff0000000124000000066b65790a76616c75650202680276"
)
GOLDEN_CRC = 0x83794A1D


def test_header_layout_offsets_match_the_kafka_v2_specification() -> None:
    assert (B.BASE_OFFSET_AT, B.BATCH_LENGTH_AT, B.LEADER_EPOCH_AT, B.MAGIC_AT) == (0, 8, 12, 16)
    assert (B.CRC_AT, B.ATTRIBUTES_AT, B.LAST_OFFSET_DELTA_AT) == (17, 21, 23)
    assert (B.BASE_TIMESTAMP_AT, B.MAX_TIMESTAMP_AT, B.PRODUCER_ID_AT) == (27, 35, 43)
    assert (B.PRODUCER_EPOCH_AT, B.BASE_SEQUENCE_AT, B.RECORDS_COUNT_AT) == (51, 53, 57)
    assert HEADER_SIZE == HEADER.size == 61
    assert LOG_OVERHEAD == 12
    assert MAGIC == 2


def test_crc32c_is_the_castagnoli_polynomial() -> None:
    # The standard check value of CRC-32C (RFC 3720 appendix B.4).
    assert crc32c.crc32c(b"123456789") == 0xE3069283


def test_encode_batch_matches_a_batch_built_from_the_specification() -> None:
    record = _spec_record(0, b"key", b"value", [(b"h", b"v")])
    expected = _spec_batch(0, FIXED_TS, record, 1)
    built = encode_batch([(b"key", b"value")], headers=[[("h", b"v")]], timestamp_ms=FIXED_TS)
    assert bytes(built) == expected


def test_golden_batch_bytes_and_crc_are_pinned() -> None:
    built = encode_batch([(b"key", b"value")], headers=[[("h", b"v")]], timestamp_ms=FIXED_TS)
    assert bytes(built).hex() == GOLDEN_HEX
    header = check_batch(bytes.fromhex(GOLDEN_HEX))
    assert header.crc == GOLDEN_CRC == compute_crc(built)


def test_parse_header_reads_every_field() -> None:
    batch = make_batch(3, base_offset=42, timestamp_ms=FIXED_TS)
    h = parse_header(batch)
    assert h.base_offset == 42
    assert h.batch_length == len(batch) - LOG_OVERHEAD
    assert h.size == len(batch)
    assert h.magic == 2
    assert h.records_count == 3
    assert h.last_offset_delta == 2
    assert h.last_offset == 44
    assert h.next_offset == 45
    assert h.base_timestamp == h.max_timestamp == FIXED_TS
    assert h.compression == 0


def test_parse_header_rejects_fewer_than_61_bytes() -> None:
    with pytest.raises(CorruptRecordError, match="truncated header"):
        parse_header(bytes(60))


def test_read_length_prefix_returns_base_offset_and_total_size() -> None:
    batch = make_batch(2, base_offset=7)
    assert read_length_prefix(b"junk" + batch, 4) == (7, len(batch))


def test_check_batch_accepts_a_valid_batch_at_a_position() -> None:
    batch = make_batch(2, base_offset=5)
    buf = b"\x00" * 9 + bytes(batch) + b"\xff" * 3
    header = check_batch(buf, 9, 9 + len(batch))
    assert header.base_offset == 5
    assert header.size == len(batch)


# -- every kind of damage is a CorruptRecordError that names its reason --------------------------


def _with(batch: bytearray, fmt: str, at: int, value: int) -> bytearray:
    damaged = bytearray(batch)
    struct.pack_into(fmt, damaged, at, value)
    return damaged


def test_check_batch_rejects_truncated_header() -> None:
    batch = make_batch(1)
    with pytest.raises(CorruptRecordError) as info:
        check_batch(batch[:40])
    assert "truncated header" in info.value.reason


def test_check_batch_rejects_batch_length_smaller_than_a_header() -> None:
    damaged = _with(make_batch(1), ">i", B.BATCH_LENGTH_AT, 10)
    with pytest.raises(CorruptRecordError) as info:
        check_batch(damaged)
    assert "smaller than a header" in info.value.reason


def test_check_batch_rejects_negative_batch_length() -> None:
    damaged = _with(make_batch(1), ">i", B.BATCH_LENGTH_AT, -5)
    with pytest.raises(CorruptRecordError, match="smaller than a header"):
        check_batch(damaged)


def test_check_batch_rejects_batch_cut_short() -> None:
    batch = make_batch(3)
    with pytest.raises(CorruptRecordError) as info:
        check_batch(batch[:-1])
    assert "truncated batch" in info.value.reason


def test_check_batch_rejects_batch_extending_past_end_argument() -> None:
    batch = make_batch(3)
    with pytest.raises(CorruptRecordError, match="truncated batch"):
        check_batch(bytes(batch) + b"\x00" * 10, 0, len(batch) - 1)


def test_check_batch_rejects_wrong_magic() -> None:
    damaged = _with(make_batch(1), ">b", B.MAGIC_AT, 1)
    with pytest.raises(CorruptRecordError) as info:
        check_batch(damaged)
    assert "magic 1" in info.value.reason


def test_check_batch_rejects_a_negative_records_count() -> None:
    damaged = _with(make_batch(1), ">i", B.RECORDS_COUNT_AT, -1)
    with pytest.raises(CorruptRecordError) as info:
        check_batch(damaged)
    assert "inconsistent counts" in info.value.reason


def test_check_batch_accepts_an_empty_batch_over_at_least_one_offset() -> None:
    # The cleaner writes these over removed records (docs/adr/0006); a producer may not send one.
    assert check_batch(empty_batch(7, 4, 1000)).next_offset == 12
    bad = bytearray(empty_batch(7, 0, 1000))
    bad[B.LAST_OFFSET_DELTA_AT : B.LAST_OFFSET_DELTA_AT + 4] = (-1).to_bytes(4, "big", signed=True)
    bad[B.CRC_AT : B.CRC_AT + 4] = B.compute_crc(bad).to_bytes(4, "big")
    with pytest.raises(CorruptRecordError, match="inconsistent counts"):
        check_batch(bad)


def test_check_batch_rejects_last_offset_delta_below_records_count() -> None:
    damaged = _with(make_batch(3), ">i", B.LAST_OFFSET_DELTA_AT, 0)
    with pytest.raises(CorruptRecordError, match="inconsistent counts"):
        check_batch(damaged)


def test_check_batch_rejects_bad_crc() -> None:
    batch = make_batch(2)
    damaged = _with(batch, ">I", B.CRC_AT, parse_header(batch).crc ^ 1)
    with pytest.raises(CorruptRecordError) as info:
        check_batch(damaged)
    assert "CRC-32C mismatch" in info.value.reason


def test_check_batch_rejects_flipped_payload_byte_by_crc() -> None:
    damaged = make_batch(2)
    damaged[-1] ^= 0x40
    with pytest.raises(CorruptRecordError, match="CRC-32C mismatch"):
        check_batch(damaged)


def test_check_batch_rejects_all_zero_bytes() -> None:
    with pytest.raises(CorruptRecordError):
        check_batch(bytes(200))


def test_corrupt_record_error_message_names_path_and_position() -> None:
    err = CorruptRecordError("CRC-32C mismatch", path="/d/0.seg", position=123)
    assert str(err) == "corrupt record batch in /d/0.seg at byte 123: CRC-32C mismatch"
    assert err.reason == "CRC-32C mismatch"


# -- stamping --------------------------------------------------------------------------------------


def test_stamp_base_offset_leaves_the_crc_valid() -> None:
    batch = make_batch(4, base_offset=0)
    crc_before = parse_header(batch).crc
    stamp_base_offset(batch, 1_234_567_890_123)
    header = check_batch(batch)
    assert header.base_offset == 1_234_567_890_123
    assert header.crc == crc_before == compute_crc(batch)


def test_stamp_base_offset_changes_only_the_first_eight_bytes() -> None:
    batch = make_batch(2)
    before = bytes(batch)
    stamp_base_offset(batch, 99)
    assert bytes(batch[8:]) == before[8:]
    assert bytes(batch[:8]) == struct.pack(">q", 99)


def test_stamp_base_offset_writes_through_a_memoryview() -> None:
    batch = make_batch(1)
    stamp_base_offset(memoryview(batch), 17)
    assert check_batch(batch).base_offset == 17


# -- producer batches ------------------------------------------------------------------------------


def test_check_producer_batch_accepts_one_whole_batch() -> None:
    batch = make_batch(3)
    assert check_producer_batch(batch, max_bytes=len(batch)).records_count == 3


def test_check_producer_batch_rejects_batch_over_max_bytes() -> None:
    batch = make_batch(3)
    with pytest.raises(RecordTooLargeError) as info:
        check_producer_batch(batch, max_bytes=len(batch) - 1)
    assert info.value.limit == len(batch) - 1
    assert info.value.size == len(batch)


def test_check_producer_batch_rejects_trailing_bytes() -> None:
    batch = bytes(make_batch(1)) + b"\x00"
    with pytest.raises(InvalidArgumentError, match="header says"):
        check_producer_batch(batch, max_bytes=10_000)


def test_check_producer_batch_rejects_two_concatenated_batches() -> None:
    batch = bytes(make_batch(1)) * 2
    with pytest.raises(InvalidArgumentError, match="header says"):
        check_producer_batch(batch, max_bytes=10_000)


def test_check_producer_batch_turns_corruption_into_invalid_argument() -> None:
    damaged = make_batch(1)
    damaged[-1] ^= 1
    with pytest.raises(InvalidArgumentError, match="rejected producer batch: CRC-32C mismatch"):
        check_producer_batch(damaged, max_bytes=10_000)


@pytest.mark.parametrize("flag", [B.CONTROL_MASK, B.TRANSACTIONAL_MASK])
def test_check_producer_batch_rejects_control_and_transactional_batches(flag: int) -> None:
    batch = make_batch(1)
    struct.pack_into(">h", batch, B.ATTRIBUTES_AT, flag)
    struct.pack_into(">I", batch, B.CRC_AT, compute_crc(batch))
    check_batch(batch)  # still a valid batch on the wire
    with pytest.raises(InvalidArgumentError, match="control and transactional"):
        check_producer_batch(batch, max_bytes=10_000)


def test_span_of_whole_batches_counts_from_min_offset_and_ignores_a_cut_batch() -> None:
    first = bytearray(encode_batch([(None, b"a"), (None, b"b"), (None, b"c")]))
    second = bytearray(encode_batch([(None, b"d"), (None, b"e")]))
    stamp_base_offset(first, 10)
    stamp_base_offset(second, 13)
    data = bytes(first + second)
    assert span_of_whole_batches(data, 10) == (5, 15)
    assert span_of_whole_batches(data, 12) == (3, 15)  # the first batch starts before the reader
    assert span_of_whole_batches(data[:-1], 11) == (2, 13)  # the second is cut: not counted
    assert span_of_whole_batches(b"", 7) == (0, 7)
