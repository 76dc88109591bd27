"""Properties of the batch format and codec, for arbitrary records and arbitrary bytes.

Derandomized: every run explores the same examples, so a failure replays as is;
a counterexample found once belongs in an ``@example``.
"""

from __future__ import annotations

import contextlib
import struct

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lkstream.errors import CorruptRecordError
from lkstream.format import batch as B
from lkstream.format.batch import check_batch, stamp_base_offset
from lkstream.format.codec import Compression, decode_batch, encode_batch, iter_batches

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)

keys = st.none() | st.binary(max_size=40)
values = st.none() | st.binary(max_size=300)
header_lists = st.lists(st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=20)), max_size=4)
records = st.lists(st.tuples(keys, values, header_lists), min_size=1, max_size=12)
timestamps = st.integers(0, 2**48)
compressions = st.sampled_from(list(Compression))


def _build(
    items: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]], compression: Compression, ts: int
) -> bytearray:
    return encode_batch(
        [(k, v) for k, v, _ in items],
        headers=[h for _, _, h in items],
        compression=compression,
        timestamp_ms=ts,
    )


@SETTINGS
@given(items=records, compression=compressions, ts=timestamps, base=st.integers(0, 2**62))
def test_encode_decode_round_trip(
    items: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    compression: Compression,
    ts: int,
    base: int,
) -> None:
    batch = _build(items, compression, ts)
    stamp_base_offset(batch, base)
    header = check_batch(batch)
    assert header.size == len(batch)
    assert (header.base_offset, header.records_count, header.last_offset_delta) == (base, len(items), len(items) - 1)
    assert header.compression == int(compression)
    decoded = decode_batch(bytes(batch), "t", 0)
    assert [(r.key, r.value, list(r.headers)) for r in decoded] == [(k, v, h) for k, v, h in items]
    assert [r.offset for r in decoded] == list(range(base, base + len(items)))
    assert {r.timestamp for r in decoded} == {ts}


@SETTINGS
@given(
    items=st.lists(st.tuples(keys, values, st.just([])), min_size=1, max_size=5),
    count=st.integers(1, 4),
    cut=st.integers(0, 10_000),
)
def test_iter_batches_yields_every_whole_batch_and_skips_a_partial_tail(
    items: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]], count: int, cut: int
) -> None:
    batches = [bytes(_build(items, Compression.NONE, 0)) for _ in range(count)]
    data = b"".join(batches)
    end = cut % (len(data) + 1)
    whole = 0
    while whole < count and sum(len(b) for b in batches[: whole + 1]) <= end:
        whole += 1
    assert [b for _, b in iter_batches(data[:end])] == batches[:whole]


@SETTINGS
@given(data=st.binary(max_size=400), pos=st.integers(0, 400), span=st.integers(0, 400))
@example(data=bytes(61), pos=0, span=61)
@example(data=b"\xff" * 80, pos=0, span=80)
@example(data=struct.pack(">qi", 0, -12) + bytes(60), pos=0, span=72)
def test_arbitrary_bytes_validate_or_raise_corrupt_record(data: bytes, pos: int, span: int) -> None:
    pos = min(pos, len(data))
    end = min(len(data), pos + span)
    try:
        header = check_batch(data, pos, end)
    except CorruptRecordError as exc:
        assert exc.reason
    else:
        assert header.magic == B.MAGIC
        assert pos + header.size <= end


@SETTINGS
@given(items=records, compression=compressions, data=st.data())
def test_mutated_valid_batches_validate_or_raise_corrupt_record(
    items: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    compression: Compression,
    data: st.DataObject,
) -> None:
    batch = bytearray(_build(items, compression, 1_700_000_000_000))
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        kind = data.draw(st.sampled_from(["set", "truncate", "extend"]), label="kind")
        if kind == "set":
            at = data.draw(st.integers(0, len(batch) - 1), label="at")
            batch[at] = data.draw(st.integers(0, 255), label="byte")
        elif kind == "truncate":
            del batch[data.draw(st.integers(0, len(batch) - 1), label="keep") :]
            if not batch:
                batch = bytearray(b"\x00")
        else:
            batch += data.draw(st.binary(min_size=1, max_size=20), label="tail")
    with contextlib.suppress(CorruptRecordError):  # any other exception fails the test
        check_batch(batch)


@SETTINGS
@given(items=records, compression=compressions, data=st.data())
def test_flipping_any_byte_in_the_crc_covered_range_is_detected(
    items: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    compression: Compression,
    data: st.DataObject,
) -> None:
    batch = _build(items, compression, 1_700_000_000_000)
    check_batch(batch)
    at = data.draw(st.integers(B.CRC_AT, len(batch) - 1), label="position")  # the CRC itself and all it covers
    flip = data.draw(st.integers(1, 255), label="xor")
    batch[at] ^= flip
    try:
        check_batch(batch)
    except CorruptRecordError:
        return
    raise AssertionError(f"flipping byte {at} with {flip:#04x} went undetected")


@SETTINGS
@given(items=records, data=st.data())
def test_flipping_header_bytes_outside_the_crc_is_detected_or_harmless(
    items: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]], data: st.DataObject
) -> None:
    """base_offset and the leader epoch are outside the CRC by design; length and magic are checked."""
    batch = _build(items, Compression.NONE, 0)
    at = data.draw(st.integers(0, B.CRC_AT - 1), label="position")
    batch[at] ^= data.draw(st.integers(1, 255), label="xor")
    if B.BATCH_LENGTH_AT <= at < B.LEADER_EPOCH_AT or at == B.MAGIC_AT:
        try:
            check_batch(batch)
        except CorruptRecordError:
            return
        raise AssertionError(f"damage to byte {at} (length or magic) went undetected")
    assert check_batch(batch).size == len(batch)  # base offset / leader epoch: by design not covered


def _framed(records_section: bytes, count: int, attributes: int) -> bytearray:
    """A batch whose header, length and CRC are right around arbitrary record bytes."""
    batch = bytearray(B.HEADER_SIZE) + records_section
    B.HEADER.pack_into(
        batch, 0, 0, len(batch) - B.LOG_OVERHEAD, -1, B.MAGIC, 0, attributes, count - 1, 0, 0, -1, -1, -1, count
    )
    struct.pack_into(">I", batch, B.CRC_AT, B.compute_crc(batch))
    return batch


@SETTINGS
@given(records_section=st.binary(max_size=200), count=st.integers(1, 5), codec=compressions)
@example(records_section=b"", count=1, codec=Compression.NONE)
@example(records_section=b"\x01\x02\x03", count=1, codec=Compression.GZIP)
def test_decoding_garbage_records_inside_a_valid_frame_raises_only_corrupt_record(
    records_section: bytes, count: int, codec: Compression
) -> None:
    batch = _framed(records_section, count, int(codec))
    check_batch(batch)
    with contextlib.suppress(CorruptRecordError):  # any other exception fails the test
        decode_batch(bytes(batch), "t", 0)


@SETTINGS
@given(data=st.binary(max_size=300))
def test_iter_batches_on_arbitrary_bytes_raises_only_corrupt_record(data: bytes) -> None:
    try:
        for _, batch in iter_batches(data):
            check_batch(batch)
    except CorruptRecordError:
        pass
