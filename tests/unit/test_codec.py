"""lkstream.format.codec: client-side encoding and decoding of record batches."""

from __future__ import annotations

import struct

import pytest

from lkstream.errors import CorruptRecordError, InvalidArgumentError
from lkstream.format import batch as B
from lkstream.format.batch import check_batch, parse_header, stamp_base_offset
from lkstream.format.codec import (
    Compression,
    Record,
    decode_batch,
    decode_batches,
    encode_batch,
    iter_batches,
)

from .support import FIXED_TS, make_batch


def _decode(batch: bytearray, min_offset: int = 0) -> list[Record]:
    return decode_batch(bytes(batch), "t", 3, min_offset)


def test_round_trip_keeps_keys_values_offsets_and_timestamps() -> None:
    pairs = [(b"a", b"1"), (b"b", b"22"), (b"c", b"333")]
    batch = encode_batch(pairs, timestamp_ms=FIXED_TS)
    stamp_base_offset(batch, 100)
    records = _decode(batch)
    assert [(r.key, r.value) for r in records] == pairs
    assert [r.offset for r in records] == [100, 101, 102]
    assert {r.timestamp for r in records} == {FIXED_TS}
    assert {(r.topic, r.partition) for r in records} == {("t", 3)}


def test_round_trip_keeps_none_keys_and_values() -> None:
    pairs = [(None, b"v"), (b"k", None), (None, None), (b"", b"")]
    records = _decode(encode_batch(pairs, timestamp_ms=FIXED_TS))
    assert [(r.key, r.value) for r in records] == pairs


def test_round_trip_keeps_headers_per_record() -> None:
    headers = [[("trace", b"abc"), ("empty", None)], [], [("x", b""), ("x", b"dup")]]
    batch = encode_batch([(b"k", b"v")] * 3, headers=headers, timestamp_ms=FIXED_TS)
    assert [list(r.headers) for r in _decode(batch)] == headers


def test_round_trip_keeps_per_record_timestamps() -> None:
    stamps = [FIXED_TS, FIXED_TS + 5, FIXED_TS - 3]
    batch = encode_batch([(b"k", b"v")] * 3, timestamps=stamps)
    header = parse_header(batch)
    assert [r.timestamp for r in _decode(batch)] == stamps
    assert header.max_timestamp == FIXED_TS + 5


def test_encode_batch_defaults_timestamp_to_now() -> None:
    from lkstream.format.codec import now_ms

    before = now_ms()
    batch = encode_batch([(b"k", b"v")])
    after = now_ms()
    assert before <= _decode(batch)[0].timestamp <= after


@pytest.mark.parametrize("codec", list(Compression))
def test_round_trip_with_each_compression_codec(codec: Compression) -> None:
    pairs = [(f"key{i}".encode(), b"payload-" * 50 + str(i).encode()) for i in range(20)]
    headers = [[("n", str(i).encode())] for i in range(20)]
    batch = encode_batch(pairs, headers=headers, compression=codec, timestamp_ms=FIXED_TS)
    header = check_batch(batch)
    assert header.compression == int(codec)
    records = _decode(batch)
    assert [(r.key, r.value) for r in records] == pairs
    assert [list(r.headers) for r in records] == headers


@pytest.mark.parametrize("codec", [c for c in Compression if c is not Compression.NONE])
def test_compressed_batch_is_smaller_for_repetitive_values(codec: Compression) -> None:
    pairs = [(None, b"x" * 1000)] * 10
    plain = encode_batch(pairs, timestamp_ms=FIXED_TS)
    packed = encode_batch(pairs, compression=codec, timestamp_ms=FIXED_TS)
    assert len(packed) < len(plain) // 4


@pytest.mark.parametrize(
    ("name", "codec"),
    [("zstd", Compression.ZSTD), ("GZIP", Compression.GZIP), (None, Compression.NONE), (3, Compression.LZ4)],
)
def test_compression_parse_accepts_names_numbers_and_none(name: object, codec: Compression) -> None:
    assert Compression.parse(name) is codec  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["brotli", 9, ""])
def test_compression_parse_rejects_unknown_codecs(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="unknown compression"):
        Compression.parse(bad)  # type: ignore[arg-type]


def test_encode_batch_rejects_empty_record_list() -> None:
    with pytest.raises(InvalidArgumentError, match="at least one record"):
        encode_batch([])


def test_encode_batch_rejects_headers_of_wrong_length() -> None:
    with pytest.raises(InvalidArgumentError, match="headers"):
        encode_batch([(b"k", b"v")] * 2, headers=[[]])


def test_encode_batch_rejects_timestamps_of_wrong_length() -> None:
    with pytest.raises(InvalidArgumentError, match="timestamps"):
        encode_batch([(b"k", b"v")] * 2, timestamps=[1])


def test_encode_batch_encodes_str_keys_and_values_as_utf8() -> None:
    (record,) = decode_batch(bytes(encode_batch([("clé", "wert")])), "t", 0)  # type: ignore[list-item]
    assert (record.key, record.value) == ("clé".encode(), b"wert")


@pytest.mark.parametrize("value", [3, 2.5, ["x"], object()])
def test_encode_batch_rejects_values_that_are_not_bytes_str_or_none(value: object) -> None:
    with pytest.raises(InvalidArgumentError, match="bytes, str or None"):
        encode_batch([(b"k", value)])  # type: ignore[list-item]


def test_decode_batch_skips_records_below_min_offset() -> None:
    batch = make_batch(5, base_offset=10)
    assert [r.offset for r in _decode(batch, min_offset=12)] == [12, 13, 14]


def test_decode_batch_raises_corrupt_record_for_undecodable_records() -> None:
    # A valid header, length and CRC around bytes that are not varint-framed records.
    garbage = bytearray(make_batch(2)[: B.HEADER_SIZE]) + b"\xff" * 20
    struct.pack_into(">i", garbage, B.BATCH_LENGTH_AT, len(garbage) - B.LOG_OVERHEAD)
    struct.pack_into(">I", garbage, B.CRC_AT, B.compute_crc(garbage))
    check_batch(garbage)
    with pytest.raises(CorruptRecordError, match="undecodable"):
        _decode(garbage)


def test_iter_batches_yields_positions_of_concatenated_batches() -> None:
    a, b, c = make_batch(1, base_offset=0), make_batch(2, base_offset=1), make_batch(3, base_offset=3)
    data = bytes(a + b + c)
    assert [pos for pos, _ in iter_batches(data)] == [0, len(a), len(a) + len(b)]
    assert [batch for _, batch in iter_batches(data)] == [bytes(a), bytes(b), bytes(c)]


@pytest.mark.parametrize("cut", [1, 11, 12, 40, 61, -1])
def test_iter_batches_skips_a_trailing_partial_batch(cut: int) -> None:
    a, b = make_batch(2, base_offset=0), make_batch(2, base_offset=2)
    partial = bytes(b)[:cut]
    found = list(iter_batches(bytes(a) + partial))
    assert found == [(0, bytes(a))]


def test_iter_batches_raises_on_a_complete_corrupt_batch() -> None:
    a, b = make_batch(2, base_offset=0), make_batch(2, base_offset=2)
    b[-1] ^= 0xFF
    it = iter_batches(bytes(a + b))
    assert next(it) == (0, bytes(a))
    with pytest.raises(CorruptRecordError, match="CRC"):
        next(it)


def test_iter_batches_on_empty_input_yields_nothing() -> None:
    assert list(iter_batches(b"")) == []


def test_decode_batches_decodes_every_whole_batch_from_min_offset() -> None:
    data = bytes(make_batch(3, base_offset=0) + make_batch(3, base_offset=3))
    assert [r.offset for r in decode_batches(data, "t", 0, 2)] == [2, 3, 4, 5]


def test_decode_batches_skips_only_the_crc_for_bytes_this_process_checked() -> None:
    """An embedded consumer's reads were CRC-checked by the log (or at append): the frame checks still run."""
    batch = bytearray(make_batch(3))
    batch[B.CRC_AT] ^= 0x01  # the stored CRC no longer matches; the records are intact
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_batches(bytes(batch), "t", 0)
    assert len(decode_batches(bytes(batch), "t", 0, crc_checked=True)) == 3
    bad_magic = bytearray(make_batch(3))
    bad_magic[B.MAGIC_AT] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        decode_batches(bytes(bad_magic), "t", 0, crc_checked=True)
