"""lkstream.format._decode: the C record decoder gives aiokafka's records, untracked by the garbage collector."""

from __future__ import annotations

import gc
import struct

import pytest

from lkstream.errors import CorruptRecordError
from lkstream.format import codec
from lkstream.format.batch import ATTRIBUTES_AT, HEADER_SIZE, TIMESTAMP_TYPE_MASK, compute_crc, parse_header
from lkstream.format.codec import Compression, Record, decode_batch, decode_batches, encode_batch

from .support import FIXED_TS


def _reference(batch: bytes, min_offset: int = 0) -> list[Record]:
    """aiokafka's decoder: what decode_batch gives when the extension is not built."""
    header = parse_header(batch)
    section = codec.check_records(batch, header, 1 << 26)
    return codec._decode_with_aiokafka(batch, header, section, topic="t", partition=3, min_offset=min_offset)


def _stamped(batch: bytearray, base: int) -> bytes:
    struct.pack_into(">q", batch, 0, base)
    return bytes(batch)


def test_the_native_decoder_is_built() -> None:
    """pip compiles lkstream/format/_decode.c; without it records stay GC-tracked and consume is about 2x slower."""
    assert codec.NATIVE_DECODE, "lkstream.format._decode is not built: run `make venv` (needs gcc and Python headers)"


@pytest.mark.parametrize("compression", list(Compression))
def test_native_records_equal_aiokafkas(compression: Compression) -> None:
    records = [(b"k", b"v" * 300), (None, None), (b"", b""), ("clé".encode(), b"x")]
    headers = [[("h", b"1"), ("\u00e9", None)], [], [("", b"")], []]
    stamps = [FIXED_TS, FIXED_TS - 5_000, FIXED_TS + 2**33, FIXED_TS]
    batch = _stamped(encode_batch(records, headers=headers, timestamps=stamps, compression=compression), 1000)
    native = decode_batch(batch, "t", 3)
    assert native == _reference(batch)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in native][1] == (
        1001,
        FIXED_TS - 5_000,
        None,
        None,
        (),
    )


def test_a_log_append_time_batch_gives_every_record_the_max_timestamp() -> None:
    batch = bytearray(encode_batch([(None, b"a"), (None, b"b")], timestamps=[FIXED_TS, FIXED_TS + 9]))
    struct.pack_into(">h", batch, ATTRIBUTES_AT, TIMESTAMP_TYPE_MASK)
    struct.pack_into(">I", batch, 17, compute_crc(batch))
    native = decode_batch(bytes(batch), "t", 3)
    assert [(r.timestamp, r.timestamp_type) for r in native] == [(FIXED_TS + 9, 1), (FIXED_TS + 9, 1)]
    assert native == _reference(bytes(batch))


def test_min_offset_and_max_records_cut_the_records() -> None:
    batches = [_stamped(encode_batch([(None, b"%d" % i) for i in range(5)]), base) for base in (0, 5, 10)]
    data = b"".join(batches)
    assert [r.offset for r in decode_batches(data, "t", 3, min_offset=3, max_records=4)] == [3, 4, 5, 6]
    assert [r.offset for r in decode_batch(batches[0], "t", 3, min_offset=2)] == [2, 3, 4]
    assert decode_batch(batches[0], "t", 3, min_offset=2) == _reference(batches[0], 2)


def test_records_and_their_headers_are_not_tracked_by_the_gc() -> None:
    batch = _stamped(encode_batch([(b"k", b"v"), (None, b"w")], headers=[[("h", b"1")], []]), 0)
    records = decode_batch(batch, "t", 3)
    assert not any(gc.is_tracked(r) for r in records)
    assert not gc.is_tracked(records[0].headers) and not gc.is_tracked(records[0].headers[0])
    del records
    gc.collect()  # an untracked tuple subclass is freed like any other


def test_records_that_do_not_decode_raise_corrupt_record() -> None:
    good = bytearray(encode_batch([(b"key", b"value")]))
    # A walk-valid change the decoder must still refuse to read past: a key length past the record.
    bad = good[:HEADER_SIZE] + bytes([good[HEADER_SIZE]]) + good[HEADER_SIZE + 1 :]
    bad[HEADER_SIZE + 4] = 0x7E  # key length 63
    struct.pack_into(">I", bad, 17, compute_crc(bad))
    with pytest.raises(CorruptRecordError):
        decode_batch(bytes(bad), "t", 3)
