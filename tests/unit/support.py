"""Helpers shared by the unit tests (plain functions, no fixtures)."""

from __future__ import annotations

from collections.abc import Sequence

from lkstream.format.batch import BatchHeader, check_batch, stamp_base_offset
from lkstream.format.codec import Compression, KeyValue, encode_batch

FIXED_TS = 1_700_000_000_000
DEADLINE_S = 10.0


def make_batch(
    records: Sequence[KeyValue] | int = 1,
    *,
    base_offset: int = 0,
    timestamp_ms: int = FIXED_TS,
    value_size: int = 10,
    compression: Compression = Compression.NONE,
) -> bytearray:
    """A valid v2 batch; ``records`` may be a count (values ``b"v{i}"`` padded to ``value_size``)."""
    if isinstance(records, int):
        records = [(f"k{i}".encode(), f"v{i}".encode().ljust(value_size, b".")) for i in range(records)]
    batch = encode_batch(records, timestamp_ms=timestamp_ms, compression=compression)
    stamp_base_offset(batch, base_offset)
    return batch


def stamped(records: Sequence[KeyValue] | int, base_offset: int, **kw: object) -> tuple[bytearray, BatchHeader]:
    """A batch stamped at ``base_offset`` with its validated header (what a Segment appends)."""
    batch = make_batch(records, base_offset=base_offset, **kw)  # type: ignore[arg-type]
    return batch, check_batch(batch)
