"""The sink's column encoder writes the same bytes as the record encoder, and rejects bad buffers."""

from __future__ import annotations

import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lkstream.format.codec import Compression, decode_batch, encode_batch
from lkstream.format.validate import check_batch
from lkstream.spark import columns
from lkstream.spark.columns import as_binary, buffers, encode_rows

TS = 1_700_000_000_123

fields = st.one_of(st.none(), st.binary(max_size=300))


def _native(keys: pa.Array | None, values: pa.Array, start: int, end: int) -> bytes:
    assert columns._NATIVE is not None
    batch, _ = columns._NATIVE.encode_columns(buffers(keys), buffers(values), start, end, TS)
    return bytes(batch)


def _reference(keys: list[bytes | None] | None, values: list[bytes | None]) -> bytes:
    pairs = list(zip(keys if keys is not None else [None] * len(values), values, strict=True))
    batch = encode_batch(pairs, timestamp_ms=TS)
    batch[17:21] = b"\0\0\0\0"  # the CRC: the C call leaves it to finish()
    return bytes(batch)


def test_the_c_column_encoder_is_built() -> None:
    # pip install compiles it; the fallback is slower by a Python object per row (docs/spark.md).
    assert columns.NATIVE


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(st.tuples(fields, fields), min_size=1, max_size=200),
    keyed=st.booleans(),
    cut=st.data(),
)
@example(rows=[(None, b"")], keyed=False, cut=None)
@example(rows=[(None, None)] * 3, keyed=True, cut=None)
@example(rows=[(b"k", b"v" * 200)] * 70, keyed=True, cut=None)  # offset deltas past 63: two-byte varints
def test_column_encoder_matches_the_record_encoder(
    rows: list[tuple[bytes | None, bytes | None]], keyed: bool, cut: st.DataObject | None
) -> None:
    key_list = [k for k, _ in rows] if keyed else None
    value_list = [v for _, v in rows]
    start, end = 0, len(rows)
    if cut is not None:
        start = cut.draw(st.integers(0, len(rows) - 1))
        end = cut.draw(st.integers(start + 1, len(rows)))
    # A sliced array has a non-zero offset: the encoder must honour it.
    keys = pa.array([b"pad", *key_list], type=pa.binary()).slice(1) if key_list is not None else None
    values = pa.array([b"pad", *value_list], type=pa.binary()).slice(1)
    want = _reference(key_list[start:end] if key_list is not None else None, value_list[start:end])
    assert _native(keys, values, start, end) == want


def test_encode_rows_gives_a_valid_batch_with_strings_and_compression() -> None:
    values = pa.array(["a", None, "ccc" * 100], type=pa.string())
    keys = pa.array([None, b"k", b""], type=pa.large_binary())
    batch = bytes(encode_rows(as_binary(keys), as_binary(values), 0, 3, Compression.GZIP))
    check_batch(batch)
    records = decode_batch(batch, "t", 0, 0)
    assert [(r.key, r.value) for r in records] == [(None, b"a"), (b"k", None), (b"", b"ccc" * 100)]


def test_column_encoder_rejects_offsets_outside_the_data() -> None:
    assert columns._NATIVE is not None
    offsets = pa.py_buffer(pa.array([0, 4, 900], type=pa.int32()).buffers()[1])
    bad = (offsets, pa.py_buffer(b"abcdefgh"), None, 0, 2)
    with pytest.raises(ValueError, match="outside its data"):
        columns._NATIVE.encode_columns(None, bad, 0, 2, TS)


@pytest.mark.parametrize(
    ("start", "end"),
    [(0, 0), (-1, 1), (0, 3), (2, 1)],
)
def test_column_encoder_rejects_a_bad_row_range(start: int, end: int) -> None:
    assert columns._NATIVE is not None
    values = pa.array([b"a", b"b"])
    with pytest.raises(ValueError, match="not a non-empty range"):
        columns._NATIVE.encode_columns(None, buffers(values), start, end, TS)


def test_column_encoder_rejects_short_buffers_and_mismatched_columns() -> None:
    assert columns._NATIVE is not None
    values = buffers(pa.array([b"a", b"b"]))
    assert values is not None
    with pytest.raises(ValueError, match="offsets buffer is too short"):
        columns._NATIVE.encode_columns(None, (values[0], values[1], None, 0, 5), 0, 1, TS)
    with pytest.raises(ValueError, match="one length"):
        columns._NATIVE.encode_columns(buffers(pa.array([b"k"])), values, 0, 1, TS)
    with pytest.raises(TypeError, match="value column must be None or"):
        columns._NATIVE.encode_columns(None, [1, 2], 0, 1, TS)


def test_the_python_fallback_writes_the_same_records(monkeypatch: pytest.MonkeyPatch) -> None:
    values = pa.array([b"x" * 10, None, b""])
    native = bytes(encode_rows(None, values, 0, 3))
    monkeypatch.setattr(columns, "NATIVE", False)
    fallback = bytes(encode_rows(None, values, 0, 3))
    decoded = [[(r.key, r.value) for r in decode_batch(b, "t", 0, 0)] for b in (native, fallback)]
    assert decoded[0] == decoded[1] == [(None, b"x" * 10), (None, None), (None, b"")]
