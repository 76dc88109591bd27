"""The numpy decoder gives the same Arrow columns as the C codec, for every batch shape."""

from __future__ import annotations

import random

import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
import pytest

from lkstream.format.batch import stamp_base_offset
from lkstream.format.codec import Compression, encode_batch
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
