"""The numpy decoder gives the same Arrow columns as the C codec, for every batch shape."""

from __future__ import annotations

import random
import struct

import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lkstream.errors import CorruptRecordError
from lkstream.format.batch import (
    ATTRIBUTES_AT,
    CRC_AT,
    HEADER_SIZE,
    MAX_TIMESTAMP_AT,
    TIMESTAMP_TYPE_MASK,
    compute_crc,
    stamp_base_offset,
)
from lkstream.format.codec import Compression, encode_batch
from lkstream.spark import arrow
from lkstream.spark.arrow import ArrowBuilder, arrow_schema, decode_fast


def _batch(records: list[tuple[bytes | None, bytes | None]], base: int = 0, **kw: object) -> bytes:
    built = encode_batch(records, **kw)  # type: ignore[arg-type]
    stamp_base_offset(built, base)
    return bytes(built)


def _both(batch: bytes, start: int, end: int, include_headers: bool = False) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    fast = ArrowBuilder("t", 3, include_headers)
    fast.add(batch, start, end)
    simple = ArrowBuilder("t", 3, include_headers, fast=False)
    simple.add(batch, start, end)
    got, want = fast.flush(), simple.flush()
    assert got is not None and want is not None
    return got, want


@pytest.mark.parametrize("count", [1, 2, 63, 64, 65, 200, 8200])
@pytest.mark.parametrize("value_size", [0, 7, 200])
def test_fixed_size_records_decode_like_the_codec(count: int, value_size: int) -> None:
    batch = _batch([(None, bytes([i % 251]) * value_size) for i in range(count)], base=1000)
    got, want = _both(batch, 0, 2**62)
    assert got.equals(want)
    assert got.column("offset").to_pylist() == list(range(1000, 1000 + count))


def test_variable_records_with_nulls_decode_like_the_codec() -> None:
    rng = random.Random(5)
    records = [
        (
            None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 300)),
            None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 2000)),
        )
        for _ in range(700)
    ]
    batch = _batch(records, base=5)
    got, want = _both(batch, 0, 2**62)
    assert got.equals(want)
    assert got.column("key").to_pylist() == [k for k, _ in records]
    assert got.column("value").to_pylist() == [v for _, v in records]


def test_an_offset_range_cuts_inside_a_batch() -> None:
    batch = _batch([(b"k", b"%d" % i) for i in range(100)], base=50)
    got, want = _both(batch, 60, 70)
    assert got.equals(want)
    assert got.column("offset").to_pylist() == list(range(60, 70))


def test_compressed_and_headed_batches_take_the_codec() -> None:
    compressed = _batch([(None, b"x" * 100)] * 10, compression=Compression.ZSTD)
    assert decode_fast(compressed, 0, 100, include_headers=False) is None
    headed = _batch([(None, b"v")], headers=[[("h", b"1")]])
    assert decode_fast(headed, 0, 100, include_headers=True) is None
    assert decode_fast(headed, 0, 100, include_headers=False) is not None
    got, _ = _both(headed, 0, 100, include_headers=True)
    assert got.column("headers").to_pylist() == [[{"key": "h", "value": b"1"}]]


def test_timestamps_and_schema_match_spark() -> None:
    batch = _batch([(None, b"a"), (None, b"b")], timestamps=[1_700_000_000_123, 1_700_000_000_456])
    got, _ = _both(batch, 0, 10)
    assert got.schema == arrow_schema(False)
    assert [t.value for t in got.column("timestamp")] == [1_700_000_000_123_000, 1_700_000_000_456_000]
    assert got.column("timestampType").to_pylist() == [0, 0]
    assert got.column("topic").to_pylist() == ["t", "t"]
    assert got.column("partition").to_pylist() == [3, 3]


def test_the_c_decoder_is_built() -> None:
    # pip install compiles it; without it the numpy decoder runs, about half as fast (docs/spark.md).
    assert arrow.NATIVE


def _chunk(
    batches: list[tuple[bytes, int, int]], include_headers: bool = False, *, fast: bool = True
) -> pa.RecordBatch:
    builder = ArrowBuilder("t", 3, include_headers, fast=fast)
    for batch, start, end in batches:
        builder.add(batch, start, end)
    chunk = builder.flush()
    assert chunk is not None
    return chunk


def test_a_chunk_of_mixed_batches_decodes_like_the_codec() -> None:
    plain = _batch([(b"k%d" % i, b"v" * i) for i in range(70)], base=0)
    compressed = _batch([(None, b"z" * 50)] * 20, base=70, compression=Compression.GZIP)
    headed = _batch([(b"h", b"w")] * 3, base=90, headers=[[("a", b"1")]] * 3)
    empty_values = _batch([(None, b"")] * 5, base=93)
    pieces = [(plain, 10, 2**62), (compressed, 0, 2**62), (headed, 0, 2**62), (empty_values, 0, 95)]
    for include_headers in (False, True):
        got = _chunk(pieces, include_headers)
        assert got.equals(_chunk(pieces, include_headers, fast=False))
        assert got.column("offset").to_pylist() == list(range(10, 95))


def test_the_numpy_decoder_still_serves_without_the_extension(monkeypatch: pytest.MonkeyPatch) -> None:
    batch = _batch([(None, b"x" * 30)] * 100, base=7)
    want = _chunk([(batch, 0, 2**62)], fast=False)
    monkeypatch.setattr(arrow, "_NATIVE", None)
    assert arrow.scan(batch, 0, 2**62, include_headers=False) is None
    assert _chunk([(batch, 0, 2**62)]).equals(want)


def set_log_append_time(batch: bytearray, when: int) -> None:
    """Mark ``batch`` LogAppendTime at ``when`` (ms), as a broker with that setting would, and re-sign it."""
    struct.pack_into(
        ">h", batch, ATTRIBUTES_AT, struct.unpack_from(">h", batch, ATTRIBUTES_AT)[0] | TIMESTAMP_TYPE_MASK
    )
    struct.pack_into(">q", batch, MAX_TIMESTAMP_AT, when)
    struct.pack_into(">I", batch, CRC_AT, compute_crc(batch))


def test_log_append_time_batches_take_the_max_timestamp() -> None:
    built = encode_batch([(None, b"a"), (None, b"b")], timestamps=[1_000, 2_000])
    set_log_append_time(built, 5_000)
    batch = bytes(built)
    got = _chunk([(batch, 0, 10)])
    assert got.equals(_chunk([(batch, 0, 10)], fast=False))
    assert [t.value for t in got.column("timestamp")] == [5_000_000, 5_000_000]
    assert got.column("timestampType").to_pylist() == [1, 1]


def test_the_c_decoder_rejects_a_truncated_record() -> None:
    batch = bytearray(_batch([(None, b"x" * 40)] * 3))
    batch[HEADER_SIZE] = 0x7E  # the first record's length no longer matches its fields: the walk goes astray
    with pytest.raises(CorruptRecordError, match="malformed"):
        ArrowBuilder("t", 0, False).add(bytes(batch), 0, 10)


def test_fill_refuses_totals_its_pieces_do_not_hold() -> None:
    assert arrow._NATIVE is not None
    batch = _batch([(None, b"abc")] * 4)
    rows, keys, values, _ = arrow._NATIVE.scan(batch, 0, 10)
    assert (rows, keys, values) == (4, 0, 12)
    with pytest.raises(ValueError, match="more than the totals"):
        arrow._NATIVE.fill([(batch, 0, 10)], 3, 0, 12)
    with pytest.raises(ValueError, match="less than the totals"):
        arrow._NATIVE.fill([(batch, 0, 10)], 5, 0, 12)


@settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(st.tuples(st.none() | st.binary(max_size=80), st.none() | st.binary(max_size=300)), min_size=1),
    base=st.integers(0, 2**40),
    cut=st.tuples(st.integers(0, 60), st.integers(0, 60)),
)
@example(records=[(None, b"")] * 64, base=0, cut=(0, 64))  # offsetDelta 64: a two-byte varint
def test_the_c_decoder_matches_the_codec(
    records: list[tuple[bytes | None, bytes | None]], base: int, cut: tuple[int, int]
) -> None:
    batch = _batch(records, base=base)
    start, end = base + min(cut), base + max(cut) + 1
    if not any(start <= base + i < end for i in range(len(records))):
        return
    got, want = _both(batch, start, end)
    assert got.equals(want)
