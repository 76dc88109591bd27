"""lkstream.format.rewrite: a cleaned batch keeps every offset, timestamp and producer field (issue 24)."""

from __future__ import annotations

import struct

import pytest

from lkstream.errors import CorruptRecordError
from lkstream.format import batch as B
from lkstream.format.codec import Compression, decode_batch
from lkstream.format.rewrite import empty_batch, rebuild_batch, record_spans
from lkstream.format.validate import DEFAULT_MAX_DECOMPRESSED_BYTES, check_records

from .support import FIXED_TS, make_batch, rewrite


def _idempotent(batch: bytearray, producer_id: int = 42, epoch: int = 3, sequence: int = 100) -> bytearray:
    struct.pack_into(">qhi", batch, B.PRODUCER_ID_AT, producer_id, epoch, sequence)
    struct.pack_into(">I", batch, B.CRC_AT, B.compute_crc(batch))
    return batch


def _keep(batch: bytes | bytearray, wanted: set[int]) -> bytes:
    """The batch with only the records at the offset deltas ``wanted``."""
    header = B.check_batch(batch)
    section = check_records(batch, header, DEFAULT_MAX_DECOMPRESSED_BYTES)
    spans = record_spans(section, header.records_count)
    kept = [bytes(section[s:e]) for s, e, delta, *_ in spans if delta in wanted]
    newest = max(header.base_timestamp + ts for _, _, delta, ts, _, _ in spans if delta in wanted)
    return rebuild_batch(bytes(batch), kept, newest)


@pytest.mark.parametrize("codec", list(Compression))
def test_a_rebuilt_batch_keeps_offsets_timestamps_and_producer_fields(codec: Compression) -> None:
    records = [(f"k{i}".encode(), f"value-{i}".encode() * 3) for i in range(6)]
    timestamps = [FIXED_TS + 10 * i for i in range(6)]
    from lkstream.format.codec import encode_batch

    original = encode_batch(records, timestamps=timestamps, compression=codec)
    B.stamp_base_offset(original, 1000)
    original = _idempotent(original)
    cleaned = _keep(original, {1, 4})
    header, before = B.check_batch(cleaned), B.check_batch(original)
    assert (header.base_offset, header.last_offset, header.records_count) == (1000, 1005, 2)
    assert header.compression == codec and header.base_timestamp == before.base_timestamp
    assert header.max_timestamp == FIXED_TS + 40
    assert cleaned[B.PRODUCER_ID_AT : B.RECORDS_COUNT_AT] == original[B.PRODUCER_ID_AT : B.RECORDS_COUNT_AT]
    decoded = decode_batch(cleaned, "t", 0)
    assert [(r.offset, r.key, r.timestamp) for r in decoded] == [
        (1001, b"k1", FIXED_TS + 10),
        (1004, b"k4", FIXED_TS + 40),
    ]


def test_an_empty_batch_covers_its_offsets_and_decodes_to_nothing() -> None:
    batch = empty_batch(50, 9, FIXED_TS, attributes=0x10 | 4, producer=(7, 1, 20))
    header = B.check_batch(batch)
    assert (header.base_offset, header.next_offset, header.records_count, header.size) == (50, 60, 0, B.HEADER_SIZE)
    assert header.compression == 0 and header.max_timestamp == header.base_timestamp == FIXED_TS
    assert struct.unpack_from(">qhi", batch, B.PRODUCER_ID_AT) == (7, 1, 20)
    assert decode_batch(batch, "t", 0) == []


def test_an_empty_batch_with_bytes_after_its_header_is_corrupt() -> None:
    batch = rewrite(empty_batch(0, 0, FIXED_TS), records=b"\x00\x00")
    with pytest.raises(CorruptRecordError, match="empty batch holds 2 bytes"):
        decode_batch(bytes(batch), "t", 0)


def test_reads_accept_skipped_offset_deltas_but_not_beyond_the_last_offset() -> None:
    cleaned = _keep(make_batch(5), {0, 3})
    assert [r.offset for r in decode_batch(cleaned, "t", 0)] == [0, 3]
    beyond = rewrite(cleaned, last_offset_delta=2)
    with pytest.raises(CorruptRecordError, match=r"offsetDelta 3 is not in 1\.\.2"):
        decode_batch(bytes(beyond), "t", 0)


def test_a_producer_may_not_send_skipped_offset_deltas() -> None:
    from lkstream.errors import InvalidArgumentError
    from lkstream.format.validate import validate_producer_batch

    with pytest.raises(InvalidArgumentError, match="does not match records_count"):
        validate_producer_batch(_keep(make_batch(5), {0, 3}), 1 << 20)
    with pytest.raises(InvalidArgumentError, match=r"inconsistent counts|does not match"):
        validate_producer_batch(empty_batch(0, 0, FIXED_TS), 1 << 20)
