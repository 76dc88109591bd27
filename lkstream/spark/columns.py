"""The sink's batches, encoded straight from the Arrow columns Spark hands a Python worker.

:func:`encode_rows` turns rows ``[start, end)`` of a ``value`` column (and an optional
``key`` column) into one finished v2 batch. With the C extension
``lkstream.format._columns`` (built by ``pip install``) it reads Arrow's offset and data
buffers directly: no Python object is made per row, and the copy into the batch runs
without the GIL. Without it (an install that could not compile C) the rows become
``(key, value)`` pairs for :func:`lkstream.format.codec.encode_batch`, which yields the
same bytes (``tests/spark/test_columns.py``).
"""

from __future__ import annotations

from typing import Any, Final

import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

from lkstream.format.codec import Compression, encode_batch, now_ms
from lkstream.format.encode import finish
from lkstream.spark._native import native

_NATIVE: Final = native("_columns")
#: Whether the C column encoder is in use.
NATIVE: Final = _NATIVE is not None

#: (offsets, data, validity, array offset, length) of one Arrow binary column, as the C encoder takes it.
Buffers = tuple[Any, Any, Any, int, int]


def as_binary(column: pa.Array) -> pa.Array:
    """``column`` as Arrow ``binary`` (32-bit offsets): strings share their buffers, large types are cast."""
    if pa.types.is_binary(column.type):
        return column
    return column.cast(pa.binary())


def buffers(column: pa.Array | None) -> Buffers | None:
    """The buffers of a ``binary`` column for the C encoder (None: no column, every row null)."""
    if column is None:
        return None
    validity, offsets, data = column.buffers()
    if data is None:  # every value empty or null: Arrow may leave the data buffer out
        data = pa.py_buffer(b"")
    return (offsets, data, validity if column.null_count else None, column.offset, len(column))


def encode_rows(
    keys: pa.Array | None, values: pa.Array, start: int, end: int, compression: Compression = Compression.NONE
) -> bytearray:
    """Rows ``[start, end)`` of binary ``values`` (and ``keys``) as one finished batch, every record at now."""
    timestamp = now_ms()
    if NATIVE:
        batch, _ = _NATIVE.encode_columns(buffers(keys), buffers(values), start, end, timestamp)
        return finish(batch, int(compression))
    pairs = list(
        zip(
            keys.slice(start, end - start).to_pylist() if keys is not None else [None] * (end - start),
            values.slice(start, end - start).to_pylist(),
            strict=True,
        )
    )
    return encode_batch(pairs, compression=compression, timestamp_ms=timestamp)
