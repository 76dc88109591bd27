"""Properties of the C codec: byte-equal to aiokafka's builder, C equal to Python, decoding equal to aiokafka's.

Derandomized (same examples every run); a counterexample found once belongs in an ``@example``.
"""

from __future__ import annotations

import zlib
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lkstream.format import encode as E
from lkstream.format.batch import check_batch, parse_header
from lkstream.format.codec import _decode_with_aiokafka, decode_batch
from lkstream.format.validate import check_records

SETTINGS = settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])

keys = st.none() | st.binary(max_size=40) | st.text(max_size=8)
values = st.none() | st.binary(max_size=300) | st.text(max_size=30)
header_lists = st.lists(st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=20)), max_size=4)
items = st.lists(st.tuples(keys, values, header_lists), min_size=1, max_size=40)
stamps = st.integers(-(2**62), 2**62)


def _b(field: bytes | str | None) -> bytes | None:
    return field.encode() if isinstance(field, str) else field


def _aiokafka(records: list[Any], stamps: list[int], codec: int) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 2**31 - 1)
    for i, (key, value, headers) in enumerate(records):
        builder.append(i, stamps[i], _b(key), _b(value), list(headers))
    return bytes(builder.build())


def _both(records: list[Any], ts: int, stamps: list[int] | None, headers: list[Any] | None) -> bytes:
    native = E._NATIVE.encode(records, ts, stamps, headers)
    python = E.encode_py(records, ts, stamps, headers)
    assert native == python
    return bytes(E.finish(native[0]))


@SETTINGS
@given(records=items, base_ts=stamps, spread=st.lists(st.integers(-(2**30), 2**30), min_size=40, max_size=40))
@example(records=[(None, None, [])], base_ts=0, spread=[0] * 40)
@example(records=[("é", "", [("", None)])], base_ts=-1, spread=[2**30] * 40)
def test_encode_is_byte_equal_to_aiokafkas_builder(records: list[Any], base_ts: int, spread: list[int]) -> None:
    per_record = [base_ts + spread[i] for i in range(len(records))]
    pairs = [(k, v) for k, v, _ in records]
    headers = [h for _, _, h in records]
    assert _both(pairs, 0, per_record, headers) == _aiokafka(records, per_record, 0)
    assert _both(records, base_ts, None, None) == _aiokafka(records, [base_ts] * len(records), 0)


@settings(SETTINGS, max_examples=40)
@given(records=items, codec=st.sampled_from([2, 3, 4]))
def test_compressed_batches_are_byte_equal_to_aiokafkas(records: list[Any], codec: int) -> None:
    batch, _ = E.encode(records, 1_700_000_000_000, compression=codec)
    assert bytes(batch) == _aiokafka(records, [1_700_000_000_000] * len(records), codec)


@SETTINGS
@given(records=st.lists(st.tuples(keys, values), min_size=1, max_size=60), partitions=st.integers(1, 9))
def test_routed_batches_equal_one_batch_per_partition(records: list[Any], partitions: int) -> None:
    routes = {key: zlib.crc32(_b(key) or b"-") % partitions for key, _ in records}  # str hashes vary per run
    native = E._NATIVE.encode_routed(records, routes, partitions, 7)
    assert native == E.encode_routed_py(records, routes, partitions, 7)
    batches, slots = native
    for pid, batch, largest in batches:
        mine = [(k, v) for k, v in records if routes[k] == pid]
        assert bytes(E.finish(batch)) == bytes(E.encode(mine, 7)[0])
        assert largest == max(len(_b(k) or b"") + len(_b(v) or b"") for k, v in mine)
    bases = [1000 * n for n in range(len(batches))]
    pids = [pid for pid, _, _ in batches]
    results = E.results(slots, pids, bases)
    assert results == E.results_py(slots, pids, bases)
    assert [pid for pid, _ in results] == [routes[k] for k, _ in records]
    for pid, base in zip(pids, bases, strict=True):
        offsets = [offset for p, offset in results if p == pid]
        assert offsets == list(range(base, base + len(offsets)))


junk = st.one_of(st.integers(), st.floats(), st.lists(st.none(), max_size=2), st.dictionaries(st.text(), st.none()))


@SETTINGS
@given(
    records=st.lists(st.tuples(keys | junk, values | junk, header_lists | junk), min_size=1, max_size=6)
    | st.lists(junk, max_size=3)
)
def test_any_input_encodes_identically_or_raises_the_same_error(records: list[Any]) -> None:
    outcomes = []
    for encode in (E._NATIVE.encode, E.encode_py):
        try:
            outcomes.append(encode(records, 0, None, None))
        except (TypeError, ValueError) as exc:
            outcomes.append(type(exc))
    assert outcomes[0] == outcomes[1]
    if isinstance(outcomes[0], tuple):
        check_batch(E.finish(outcomes[0][0]))


@SETTINGS
@given(records=items, codec=st.sampled_from([0, 0, 1, 3, 4]), base=st.integers(0, 2**40), skip=st.integers(0, 45))
def test_the_c_decoder_gives_aiokafkas_records(records: list[Any], codec: int, base: int, skip: int) -> None:
    batch = bytearray(E.encode(records, 1_700_000_000_000, compression=codec)[0])
    batch[:8] = base.to_bytes(8, "big")
    header = parse_header(batch)
    section = check_records(batch, header, 1 << 26)
    reference = _decode_with_aiokafka(bytes(batch), header, section, topic="t", partition=1, min_offset=base + skip)
    assert decode_batch(bytes(batch), "t", 1, min_offset=base + skip) == reference
