"""Recovery of a segment whose tail holds arbitrary bytes: the valid prefix survives whole."""

from __future__ import annotations

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lkstream.format.batch import check_batch, stamp_base_offset
from lkstream.format.codec import decode_batches, encode_batch
from lkstream.storage.files import MemoryFile
from lkstream.storage.segment import Segment

SETTINGS = settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def _valid_prefix(batch_sizes: list[int], base: int) -> bytes:
    out = bytearray()
    offset = base
    for n in batch_sizes:
        batch = encode_batch([(None, bytes([offset % 256]) * 5)] * n, timestamp_ms=1)
        stamp_base_offset(batch, offset)
        out += batch
        offset += n
    return bytes(out)


@SETTINGS
@given(
    batch_sizes=st.lists(st.integers(1, 4), max_size=5),
    base=st.integers(0, 1000),
    tail=st.binary(max_size=300),
    torn=st.booleans(),
)
@example(batch_sizes=[2], base=0, tail=bytes(4096), torn=False)
def test_recovery_keeps_the_valid_prefix_and_drops_any_garbage_tail(
    batch_sizes: list[int], base: int, tail: bytes, torn: bool
) -> None:
    prefix = _valid_prefix(batch_sizes, base)
    if torn:  # the start of one more real batch, cut short
        tail = _valid_prefix([3], base + sum(batch_sizes))[: max(1, len(tail) % 80)]
    seg = Segment("/d", base, MemoryFile("/d/seg", prefix + tail), MemoryFile("/d/idx"), 0)
    report = seg.recover(0, base)
    assert report.valid_bytes == len(prefix)
    assert report.truncated_bytes == len(tail)
    assert bytes(seg.file.data) == prefix  # type: ignore[attr-defined]
    assert seg.next_offset == base + sum(batch_sizes)
    assert len(seg.index) == len(batch_sizes)
    offsets = [r.offset for r in decode_batches(prefix, "t", 0)]
    assert offsets == list(range(base, base + sum(batch_sizes)))
    if prefix:
        check_batch(seg.read(0, 1 << 20, seg.size))
