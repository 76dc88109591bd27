"""lkstream.format.validate: a batch from outside is checked completely before it is appended.

Issue 12, finding 2 (poison batches) and finding 3 (compression bombs). Every batch here
passes the frame checks (length, magic, CRC recomputed), as a client that knows the
format could send it; only the full validation refuses it.
"""

from __future__ import annotations

import gzip
import zlib

import pytest

from lkstream.errors import InvalidArgumentError, RecordTooLargeError
from lkstream.format import batch as B
from lkstream.format.codec import Compression, decode_batch, encode_batch
from lkstream.format.validate import (
    DEFAULT_LIMITS,
    NATIVE,
    Limits,
    validate_producer_batch,
    walk_records,
    walk_records_py,
)

from .support import FIXED_TS, make_batch, rewrite, spec_record, zigzag_varint

LIMIT = 1 << 20


def _three() -> bytearray:
    return make_batch([(None, b"a"), (None, b"b"), (None, b"c")])


def _records(batch: bytes | bytearray) -> bytes:
    return bytes(batch[B.HEADER_SIZE :])


def _refused(batch: bytes | bytearray, match: str, limits: Limits = DEFAULT_LIMITS) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        validate_producer_batch(batch, LIMIT, limits)


def test_the_native_record_walk_is_built() -> None:
    """pip compiles lkstream/format/_records.c; without it validation is about 50x slower."""
    assert NATIVE, "lkstream.format._records is not built: run `make venv` (needs gcc and the Python headers)"


@pytest.mark.parametrize("compression", list(Compression))
def test_a_batch_the_codec_built_is_accepted(compression: Compression) -> None:
    batch = encode_batch(
        [(b"k", b"v" * 300), (None, None), (b"", b"")],
        headers=[[("h", b"1"), ("\u00e9", None)], [], []],
        compression=compression,
        timestamp_ms=FIXED_TS,
    )
    header = validate_producer_batch(batch, LIMIT)
    assert header.records_count == 3


def test_a_header_that_says_three_records_over_two_is_refused() -> None:
    """The finding's reproduction: records_count 3, last_offset_delta 2, two records, CRC recomputed."""
    two = make_batch([(None, b"a"), (None, b"b")])
    poison = rewrite(two, records_count=3, last_offset_delta=2)
    B.check_batch(poison)  # the frame is fine
    _refused(poison, "records_count is 3 but the batch holds 2")


def test_records_count_of_two_to_the_31_minus_one_is_refused() -> None:
    _refused(rewrite(_three(), records_count=2**31 - 1, last_offset_delta=2**31 - 2), "records_count")


def test_compression_code_seven_is_refused() -> None:
    _refused(rewrite(_three(), attributes=7), "unknown compression code 7")


@pytest.mark.parametrize("bits", [0x40, 0x80, 0x100, -0x8000])
def test_unknown_attribute_bits_are_refused(bits: int) -> None:
    _refused(rewrite(_three(), attributes=bits), "unknown attribute bits")


def test_log_append_time_from_a_producer_is_refused() -> None:
    _refused(rewrite(_three(), attributes=B.TIMESTAMP_TYPE_MASK), "LogAppendTime")


def test_garbage_records_are_refused() -> None:
    _refused(rewrite(_three(), records=b"\xff" * 40), "record 0")


def test_trailing_bytes_after_the_last_record_are_refused() -> None:
    _refused(rewrite(_three(), records=_records(_three()) + b"\x00"), "1 bytes after the last of 3")


@pytest.mark.parametrize(
    ("record", "match"),
    [
        (spec_record(0, attributes=1), "attributes 1 are not 0"),
        (spec_record(5), "offsetDelta 5, expected 0"),
        (spec_record(0, headers=[(b"\xff", b"x")]), "header key is not UTF-8"),
    ],
)
def test_a_bad_field_inside_a_record_is_refused(record: bytes, match: str) -> None:
    _refused(rewrite(make_batch(1), records=record, records_count=1, last_offset_delta=0), match)


def _single(record_body: bytes) -> bytearray:
    return rewrite(make_batch(1), records=zigzag_varint(len(record_body)) + record_body)


def test_a_key_length_past_the_record_is_refused() -> None:
    body = b"\x00" + zigzag_varint(0) + zigzag_varint(0) + zigzag_varint(50) + b"k" + zigzag_varint(-1) + b"\x00"
    _refused(_single(body), "key of 50 bytes runs past the end of the record")


def test_a_negative_value_length_below_minus_one_is_refused() -> None:
    body = b"\x00" + zigzag_varint(0) + zigzag_varint(0) + zigzag_varint(-1) + zigzag_varint(-2) + b"\x00"
    _refused(_single(body), "value length -2 is negative")


def test_a_varint_in_a_longer_than_shortest_form_is_refused() -> None:
    # offsetDelta 0 written as two bytes: Kafka's decoders read it, but a second encoding of one
    # record is a parser differential, so only the shortest form is accepted.
    body = b"\x00" + zigzag_varint(0) + b"\x80\x00" + zigzag_varint(-1) + zigzag_varint(1) + b"v" + b"\x00"
    _refused(_single(body), "shortest varint form")


def test_a_six_byte_int32_varint_is_refused() -> None:
    body = b"\x00" + zigzag_varint(0) + zigzag_varint(0) + b"\x81\x80\x80\x80\x80\x01" + b"\x00"
    _refused(_single(body), "varint")


def test_a_record_length_that_overstates_the_body_is_refused() -> None:
    record = spec_record(0)
    longer = zigzag_varint(len(record) - 1 + 2) + record[1:] + b"\x00\x00"
    _refused(rewrite(make_batch(1), records=longer), "left over inside the record")


def test_a_max_timestamp_that_no_record_has_is_refused() -> None:
    _refused(rewrite(_three(), max_timestamp=FIXED_TS + 5), "max_timestamp")


def test_over_max_bytes_is_record_too_large() -> None:
    batch = _three()
    with pytest.raises(RecordTooLargeError):
        validate_producer_batch(batch, len(batch) - 1)


# -- compression (finding 3) -------------------------------------------------------------------


def _gzip_batch(records_section: bytes, count: int) -> bytearray:
    return rewrite(
        make_batch(1),
        records=gzip.compress(records_section),
        attributes=1,
        records_count=count,
        last_offset_delta=count - 1,
    )


def test_a_gzip_bomb_is_refused_without_inflating_it() -> None:
    """0.26 MB of gzip inflating to 256 MiB was accepted; now the cap stops the inflater."""
    big = spec_record(0, b"\x00" * (64 << 20))
    bomb = _gzip_batch(big, 1)
    assert len(bomb) < 100_000
    _refused(bomb, "inflate beyond", Limits(max_decompressed_bytes=16 << 20, max_compression_ratio=10_000))
    _refused(bomb, "inflate beyond", Limits(max_decompressed_bytes=1 << 30, max_compression_ratio=256))


def test_a_well_compressed_batch_within_the_limits_is_accepted() -> None:
    batch = encode_batch([(None, b"x" * 10_000)], compression=Compression.GZIP, timestamp_ms=FIXED_TS)
    validate_producer_batch(batch, LIMIT, Limits(max_decompressed_bytes=20_000, max_compression_ratio=1_000))
    _refused(batch, "inflate beyond", Limits(max_decompressed_bytes=20_000, max_compression_ratio=2))


@pytest.mark.parametrize("compression", [c for c in Compression if c is not Compression.NONE])
def test_every_codec_is_bounded(compression: Compression) -> None:
    batch = encode_batch([(None, b"\x00" * 300_000)], compression=compression, timestamp_ms=FIXED_TS)
    _refused(batch, "inflate beyond", Limits(max_decompressed_bytes=100_000, max_compression_ratio=10_000))
    validate_producer_batch(batch, LIMIT, Limits(max_decompressed_bytes=400_000, max_compression_ratio=10_000))


@pytest.mark.parametrize("compression", [c for c in Compression if c is not Compression.NONE])
def test_truncated_compressed_records_are_refused(compression: Compression) -> None:
    batch = encode_batch([(None, bytes(range(256)) * 100)], compression=compression, timestamp_ms=FIXED_TS)
    cut = rewrite(batch, records=_records(batch)[:-7])
    with pytest.raises(InvalidArgumentError):
        validate_producer_batch(cut, LIMIT)


def test_gzip_with_bytes_after_the_stream_is_refused() -> None:
    section = _records(make_batch(1))
    stream = zlib.compressobj(wbits=31)
    data = stream.compress(section) + stream.flush() + b"junk"
    _refused(rewrite(make_batch(1), records=data, attributes=1), "after the end of the stream")


# -- the C walk and its Python reference agree ---------------------------------------------------


def test_the_python_and_c_walks_agree_on_a_valid_section() -> None:
    batch = encode_batch([(b"k", b"v"), (None, b"w" * 200)], headers=[[("a", b"b")], []], timestamp_ms=FIXED_TS)
    section = _records(batch)
    assert walk_records(section, 2, FIXED_TS) == walk_records_py(section, 2, FIXED_TS) == FIXED_TS


def test_decoding_an_accepted_batch_gives_its_records() -> None:
    batch = encode_batch([(b"k", b"v"), (None, None)], headers=[[("h", None)], []], timestamp_ms=FIXED_TS)
    validate_producer_batch(batch, LIMIT)
    records = decode_batch(bytes(batch), "t", 0)
    assert [(r.offset, r.key, r.value, tuple(r.headers)) for r in records] == [
        (0, b"k", b"v", (("h", None),)),
        (1, None, None, ()),
    ]
