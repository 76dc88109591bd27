"""Properties of produce-time batch validation (issue 12, finding 2), for arbitrary and mutated bytes.

For any input, :func:`validate_producer_batch` accepts it or raises InvalidArgumentError
(RecordTooLargeError is one); never another exception. A batch it accepts decodes, with the
offsets and timestamps its header promises, in LKSTREAM's decoder. The C record walk and its
Python reference give the same answer for every input. Derandomized: a failure replays as is;
counterexamples found belong in an ``@example``.
"""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lkstream.errors import CorruptRecordError, InvalidArgumentError
from lkstream.format import batch as B
from lkstream.format.codec import Compression, decode_batch, encode_batch
from lkstream.format.rewrite import record_spans, record_spans_py
from lkstream.format.validate import Limits, validate_producer_batch, walk_records, walk_records_py

SETTINGS = settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
LIMITS = Limits(max_decompressed_bytes=1 << 20, max_compression_ratio=1000)
MAX_BYTES = 1 << 20

keys = st.none() | st.binary(max_size=20)
values = st.none() | st.binary(max_size=200)
header_lists = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=10)), max_size=3)
records = st.lists(st.tuples(keys, values, header_lists), min_size=1, max_size=8)


def _valid(items: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]], codec: int) -> bytearray:
    return encode_batch(
        [(k, v) for k, v, _ in items],
        headers=[h for _, _, h in items],
        compression=Compression(codec),
        timestamp_ms=1_700_000_000_000,
    )


def _check(data: bytes) -> None:
    """Accept-and-decode or InvalidArgumentError; anything else fails the property."""
    try:
        header = validate_producer_batch(data, MAX_BYTES, LIMITS)
    except InvalidArgumentError:
        return
    try:
        decoded = decode_batch(bytes(data), "t", 0)
    except CorruptRecordError as exc:  # pragma: no cover - the property failing
        raise AssertionError(f"accepted a batch the decoder rejects: {exc}") from exc
    assert [r.offset for r in decoded] == list(range(header.base_offset, header.next_offset))
    assert max(r.timestamp for r in decoded) == header.max_timestamp


def _recrc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, B.CRC_AT, B.compute_crc(batch))
    return bytes(batch)


@SETTINGS
@given(data=st.binary(max_size=400))
@example(data=b"")
@example(data=b"\x00" * 61)
def test_arbitrary_bytes_are_accepted_and_decodable_or_invalid_argument(data: bytes) -> None:
    _check(data)


@SETTINGS
@given(
    items=records,
    codec=st.sampled_from([0, 0, 0, 1, 2, 3, 4]),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1, max_size=4),
)
def test_mutated_valid_batches_with_a_recomputed_crc_never_slip_through(
    items: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    codec: int,
    flips: list[tuple[int, int]],
) -> None:
    """Flip bytes after the CRC field and recompute the CRC: only the full validation can catch it."""
    batch = _valid(items, codec)
    for at, mask in flips:
        position = B.ATTRIBUTES_AT + at % (len(batch) - B.ATTRIBUTES_AT)
        batch[position] ^= mask
    _check(_recrc(batch))


@SETTINGS
@given(items=records, cut=st.integers(1, 50), extra=st.binary(min_size=1, max_size=8))
def test_truncated_or_extended_records_sections_are_refused(
    items: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]], cut: int, extra: bytes
) -> None:
    batch = _valid(items, 0)
    for section in (batch[B.HEADER_SIZE : max(B.HEADER_SIZE, len(batch) - cut)], batch[B.HEADER_SIZE :] + extra):
        changed = bytearray(batch[: B.HEADER_SIZE]) + section
        struct.pack_into(">i", changed, B.BATCH_LENGTH_AT, len(changed) - B.LOG_OVERHEAD)
        try:
            validate_producer_batch(_recrc(changed), MAX_BYTES, LIMITS)
        except InvalidArgumentError:
            continue
        raise AssertionError("a records section that lost or gained bytes was accepted")


def _outcome(walk: object, section: bytes, count: int, base: int) -> object:
    try:
        return walk(section, count, base)  # type: ignore[operator]
    except ValueError as exc:
        return ("error", str(exc))


@SETTINGS
@given(section=st.binary(max_size=300), count=st.integers(0, 40), base=st.integers(-(2**63), 2**63 - 1))
@example(section=b"\x0c\x00\x00\x00\x01\x02v\x00\x00", count=1, base=0)
def test_the_c_walk_and_the_python_walk_agree_on_any_bytes(section: bytes, count: int, base: int) -> None:
    assert _outcome(walk_records, section, count, base) == _outcome(walk_records_py, section, count, base)


@SETTINGS
@given(items=records, flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), max_size=3))
def test_the_c_walk_and_the_python_walk_agree_on_mutated_records(
    items: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]], flips: list[tuple[int, int]]
) -> None:
    batch = _valid(items, 0)
    section = bytearray(batch[B.HEADER_SIZE :])
    for at, mask in flips:
        section[at % len(section)] ^= mask
    count = len(items)
    base = 1_700_000_000_000
    assert _outcome(walk_records, bytes(section), count, base) == _outcome(walk_records_py, bytes(section), count, base)


@SETTINGS
@given(
    section=st.binary(max_size=300),
    count=st.integers(0, 40),
    base=st.integers(-(2**63), 2**63 - 1),
    last=st.integers(-1, 60),
)
@example(section=b"\x0c\x00\x00\x02\x01\x02v\x00\x00", count=1, base=0, last=3)
def test_the_c_walk_and_the_python_walk_agree_on_cleaned_batches(
    section: bytes, count: int, base: int, last: int
) -> None:
    """Issue 24: a batch read from a cleaned log walks with its last offset delta (offsetDeltas may skip)."""

    def outcome(walk: object) -> object:
        try:
            return walk(section, count, base, last)  # type: ignore[operator]
        except ValueError as exc:
            return ("error", str(exc))

    assert outcome(walk_records) == outcome(walk_records_py)


def _spans_outcome(spans: object, section: bytes, count: int) -> object:
    try:
        return spans(section, count)  # type: ignore[operator]
    except ValueError:
        return "error"


@SETTINGS
@given(
    items=records, codec=st.just(0), flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), max_size=2)
)
def test_the_c_and_python_record_spans_agree(
    items: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    codec: int,
    flips: list[tuple[int, int]],
) -> None:
    """The cleaner's record walk (issue 24) on sections the read walk accepts: the same spans, keys and
    tombstone flags from C and Python; on anything else the C one raises ValueError, nothing worse."""
    section = bytearray(_valid(items, codec)[B.HEADER_SIZE :])
    intact = record_spans_py(bytes(section), len(items))
    assert [(key, tombstone) for *_, key, tombstone in intact] == [(k, v is None) for k, v, _ in items]
    for at, mask in flips:
        section[at % len(section)] ^= mask
    walked = _outcome(walk_records, bytes(section), len(items), 0)
    native = _spans_outcome(record_spans, bytes(section), len(items))
    if not isinstance(walked, tuple):  # the walk accepted it: a section the cleaner may meet
        assert native == _spans_outcome(record_spans_py, bytes(section), len(items))
