"""lkstream.format.encode: the C encoder and its Python twin give the golden bytes, aiokafka's bytes, or one error.

Every test runs against both implementations (``impl`` fixture): the C extension
``_encode`` when it is built (the first test fails loudly when it is not) and the
pure-Python fallback that runs without a compiler.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from lkstream.format import encode as E
from lkstream.format.batch import check_batch, parse_header
from lkstream.format.codec import decode_batch

from .test_format_vectors import BATCH_HEX, RECORDS, TIMESTAMP_MS

Encode = Callable[[Any, int, Any, Any], tuple[bytearray, int]]
Routed = Callable[[Any, dict[Any, int], int, int], tuple[list[tuple[int, bytearray, int]], bytes]]
IMPLS = {"c": (E._NATIVE.encode, E._NATIVE.encode_routed, E._NATIVE.results) if E.NATIVE else None}
IMPLS["python"] = (E.encode_py, E.encode_routed_py, E.results_py)


@pytest.fixture(params=["c", "python"])
def impl(request: pytest.FixtureRequest) -> tuple[Encode, Routed, Any]:
    chosen = IMPLS[request.param]
    if chosen is None:
        pytest.fail("lkstream.format._encode is not built: run `make venv` (needs gcc and the Python headers)")
    return chosen


def _finished(encode: Encode, records: Any, ts: int = TIMESTAMP_MS, stamps: Any = None, headers: Any = None) -> bytes:
    batch, _ = encode(records, ts, stamps, headers)
    return bytes(E.finish(batch))


def aiokafka_batch(records: Any, ts: int, stamps: Any = None, headers: Any = None, codec: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 2**31 - 1)
    for i, (key, value) in enumerate(records):
        builder.append(i, ts if stamps is None else stamps[i], key, value, list(headers[i]) if headers else [])
    return bytes(builder.build())


def test_the_native_encoder_is_built() -> None:
    """pip compiles lkstream/format/_encode.c; without it encoding is about 80x slower (Python fallback)."""
    assert E.NATIVE, "lkstream.format._encode is not built: run `make venv` (needs gcc and the Python headers)"


def test_encode_gives_the_golden_vector(impl: Any) -> None:
    assert _finished(impl[0], RECORDS).hex() == BATCH_HEX


def test_encode_gives_aiokafkas_bytes_with_headers_and_timestamps(impl: Any) -> None:
    records = [(b"k", b"v" * 130), (None, None), (b"", b""), ("clé", "wert")]
    bytes_records = [(b"k", b"v" * 130), (None, None), (b"", b""), ("clé".encode(), b"wert")]
    headers = [[("h", b"1"), ("\u00e9", None)], [], [("x", b"")], []]
    stamps = [TIMESTAMP_MS + 5, TIMESTAMP_MS - 2**40, TIMESTAMP_MS, TIMESTAMP_MS + 70_000]
    mine = _finished(impl[0], records, stamps=stamps, headers=headers)
    assert mine == aiokafka_batch(bytes_records, TIMESTAMP_MS, stamps, headers)
    header = check_batch(mine)
    assert (header.base_timestamp, header.max_timestamp) == (stamps[0], max(stamps))


def test_encode_takes_headers_from_a_third_item(impl: Any) -> None:
    mine = _finished(impl[0], [(b"k", b"v", [("h", b"1")]), (b"k", b"w", ())])
    assert [r.headers for r in decode_batch(mine, "t", 0)] == [(("h", b"1"),), ()]


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_a_compressed_batch_decodes_and_matches_aiokafka(codec: int) -> None:
    records = [(b"k%d" % (i % 3), b"value %d " % i * 20) for i in range(200)]
    batch, _ = E.encode(records, TIMESTAMP_MS, compression=codec)
    assert parse_header(batch).compression == codec
    assert [(r.key, r.value) for r in decode_batch(bytes(batch), "t", 0)] == records
    if codec != 1:  # gzip writes the current second into its header
        assert bytes(batch) == aiokafka_batch(records, TIMESTAMP_MS, codec=codec)


def test_encode_reports_the_largest_key_plus_value(impl: Any) -> None:
    _, largest = impl[0]([(b"ab", b"c"), (None, b"x" * 9), ("é", None)], 0, None, None)
    assert largest == 9


def test_accepted_types_are_the_produce_paths(impl: Any) -> None:
    records = [(bytearray(b"k"), memoryview(b"v")), (b"k2", bytearray(b"w"))]
    mine = _finished(impl[0], records)
    assert [(r.key, r.value) for r in decode_batch(mine, "t", 0)] == [(b"k", b"v"), (b"k2", b"w")]


@pytest.mark.parametrize(
    ("records", "headers", "match"),
    [
        ([(b"k", 3)], None, "record 0: value must be bytes, str or None"),
        ([(b"k", b"v"), (2.5, b"v")], None, "record 1: key must be bytes, str or None"),
        ([(b"k", memoryview(b"abcd")[::2])], None, "not contiguous"),
        ([(b"k",)], None, "record 0 must be a"),
        ([b"kv"], None, "record 0 must be a"),
        ([(b"k", b"v")], [[("h", "text")]], "header value must be bytes or None"),
        ([(b"k", b"v")], [[(b"h", b"x")]], "header 0 must be a"),
        ([(b"k", b"v")], [{"h": b"x"}], "headers must be a list"),
    ],
)
def test_encode_refuses_what_the_produce_paths_refuse(impl: Any, records: Any, headers: Any, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        impl[0](records, 0, None, headers)


@pytest.mark.parametrize(
    ("records", "stamps", "headers", "error"),
    [
        ([], None, None, ValueError),
        ([(b"k", b"v")] * 2, [1], None, ValueError),
        ([(b"k", b"v")] * 2, None, [[]], ValueError),
        ([(b"k", b"v")], [1.5], None, TypeError),
        ("not records", None, None, TypeError),
    ],
)
def test_encode_refuses_bad_arguments(impl: Any, records: Any, stamps: Any, headers: Any, error: type) -> None:
    with pytest.raises(error):
        impl[0](records, 0, stamps, headers)


def test_encode_routed_writes_one_batch_per_partition_in_first_seen_order(impl: Any) -> None:
    _, routed, results = impl
    records = [("a", b"1"), (b"b", b"2"), (None, b"3"), ("a", b"4"), (None, b"5")]
    routes = {"a": 2, b"b": 0, None: 3}
    batches, slots = routed(records, routes, 4, TIMESTAMP_MS)
    assert [pid for pid, _, _ in batches] == [2, 0, 3]
    decoded = {pid: [(r.key, r.value) for r in decode_batch(bytes(E.finish(b)), "t", pid)] for pid, b, _ in batches}
    assert decoded == {2: [(b"a", b"1"), (b"a", b"4")], 0: [(b"b", b"2")], 3: [(None, b"3"), (None, b"5")]}
    assert bytes(E.finish(batches[0][1])) == aiokafka_batch([(b"a", b"1"), (b"a", b"4")], TIMESTAMP_MS)
    assert results(slots, [2, 0, 3], [10, 20, 30]) == [(2, 10), (0, 20), (3, 30), (2, 11), (3, 31)]


@pytest.mark.parametrize(
    ("records", "routes", "error"),
    [
        ([("a", b"1")], {}, KeyError),  # a key without a route
        ([("a", b"1")], {"a": 4}, ValueError),  # a route past the partitions
        ([("a", b"1")], {"a": -1}, ValueError),
        ([(1, b"1")], {1: 0}, TypeError),  # only str, bytes and None keys are looked up
        ([("a", b"1", [("h", b"x")])], {"a": 0}, TypeError),  # headers take the general path
        ([], {}, ValueError),
    ],
)
def test_encode_routed_refuses(impl: Any, records: Any, routes: dict[Any, int], error: type) -> None:
    with pytest.raises(error):
        impl[1](records, routes, 4, 0)


def test_results_refuses_slots_that_name_no_batch(impl: Any) -> None:
    with pytest.raises(ValueError, match="one base offset per batch"):
        impl[2](b"\x00\x00\x00\x00", [0], [])


def test_the_c_and_python_encoders_agree_on_a_large_call() -> None:
    if not E.NATIVE:
        pytest.fail("lkstream.format._encode is not built")
    records = [(f"T{i % 50}" if i % 7 else None, bytes([i % 251]) * (i % 300)) for i in range(3000)]
    assert E._NATIVE.encode(records, 5, None, None) == E.encode_py(records, 5, None, None)
    routes = {key: len(key or "") % 8 for key, _ in records}
    assert E._NATIVE.encode_routed(records, routes, 8, 5) == E.encode_routed_py(records, routes, 8, 5)


def test_decoding_with_aiokafka_gives_back_every_field() -> None:
    records = [(b"key", b"value"), (None, b"")]
    batch = E.encode(records, TIMESTAMP_MS, headers=[[("a", b"b")], []])[0]
    decoded = list(DefaultRecordBatch(bytes(batch)))
    assert [(r.key, r.value, r.timestamp, list(r.headers)) for r in decoded] == [
        (b"key", b"value", TIMESTAMP_MS, [("a", b"b")]),
        (None, b"", TIMESTAMP_MS, []),
    ]


def test_offsets_and_results_give_pairs_the_gc_does_not_track() -> None:
    """Thousands of results per call, alive until the caller drops them: they must not fill generation 0."""
    if not E.NATIVE:
        pytest.fail("lkstream.format._encode is not built")
    pairs = E.offsets(3, 10, 4)
    assert pairs == E.offsets_py(3, 10, 4) == [(3, 10), (3, 11), (3, 12), (3, 13)]
    routed = E.results(b"\x00\x00\x00\x00\x01\x00\x00\x00", [5, 6], [7, 8])
    assert routed == [(5, 7), (6, 8)]
    assert not any(gc.is_tracked(pair) for pair in [*pairs, *routed])
    assert E.offsets(0, 0, 0) == []
    with pytest.raises(ValueError, match="negative"):
        E.offsets(0, 0, -1)
