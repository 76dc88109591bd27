"""lkstream.broker.encoder: the produce fast path gives exactly what the general path gives, or steps aside."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lkstream import Broker, Compression, InvalidArgumentError, RecordTooLargeError
from lkstream.broker import encoder as encoder_module
from lkstream.broker.encoder import OffsetRange, encode_call
from lkstream.broker.partitioner import StickyPartitioner, partition_for_key
from lkstream.format.codec import decode_batch

TS = 1_700_000_000_000


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    with Broker(persist_dir=str(tmp_path / "data"), partitions=4) as b:
        yield b


def _encode(records: Any, partitions: int = 4, explicit: int | None = None) -> Any:
    return encode_call(
        records,
        partitions=partitions,
        explicit=explicit,
        sticky=StickyPartitioner(),
        codec=Compression.NONE,
        timestamp_ms=TS,
    )


def _decoded(encoded: Any) -> dict[int, list[tuple[bytes | None, bytes | None]]]:
    return {pid: [(r.key, r.value) for r in decode_batch(bytes(batch), "t", pid)] for pid, batch in encoded.batches}


def test_encode_call_routes_str_keys_like_their_utf8_bytes() -> None:
    records = [("AAPL", b"1"), ("MSFT", b"2"), ("AAPL", b"3"), ("Ünï", b"4")]
    encoded = _encode(records)
    assert encoded is not None
    results = encoded.results([0] * len(encoded.batches))
    assert [pid for pid, _ in results] == [partition_for_key(k.encode(), 4) for k, _ in records]
    assert _decoded(encoded)[partition_for_key(b"AAPL", 4)][:2] == [(b"AAPL", b"1"), (b"AAPL", b"3")]


def test_encode_call_converts_str_keys_and_values_for_a_single_target() -> None:
    encoded = _encode([("AAPL", b"1"), (None, "zwei")], partitions=1)
    assert encoded is not None
    assert encoded.slots is None
    assert _decoded(encoded) == {0: [(b"AAPL", b"1"), (None, b"zwei")]}


def test_encode_call_takes_headers_for_a_single_target() -> None:
    encoded = _encode([(b"k", b"v", [("h", b"x")]), (b"k", b"w")], explicit=2)
    assert encoded is not None
    ((batch_pid, batch),) = encoded.batches
    assert batch_pid == 2
    assert [r.headers for r in decode_batch(bytes(batch), "t", 2)] == [(("h", b"x"),), ()]


def test_encode_call_reports_the_largest_record_of_each_batch() -> None:
    assert partition_for_key(b"a", 4) != partition_for_key(b"c", 4)
    encoded = _encode([("a", bytes(10)), ("c", bytes(300)), ("a", bytes(20))])
    assert encoded is not None
    largest = dict(zip([pid for pid, _ in encoded.batches], encoded.largest, strict=True))
    assert largest[partition_for_key(b"a", 4)] == 21
    assert largest[partition_for_key(b"c", 4)] == 301


@pytest.mark.parametrize(
    "records",
    [
        [(b"k", b"v", [("h", b"x")]), (b"j", b"w")],  # headers on a routed call: the general path
        [(b"k", b"v", [("h", "not bytes")])],  # the general path names the bad header
        [(["unhashable"], b"v"), (b"k", b"v")],
        [(3, b"v"), (b"k", b"v")],
        [(b"k", 3)],
        "not a list",
        [],
    ],
)
def test_encode_call_steps_aside_for_what_the_general_path_handles(records: Any) -> None:
    assert _encode(records) is None


def test_encode_call_results_follow_call_order_with_contiguous_offsets_per_partition() -> None:
    records = [(f"k{i % 7}", bytes([i])) for i in range(50)]
    encoded = _encode(records)
    assert encoded is not None
    bases = [100 * (pid + 1) for pid, _ in encoded.batches]
    results = encoded.results(bases)
    assert [pid for pid, _ in results] == [partition_for_key(k.encode(), 4) for k, _ in records]
    for (pid, _), base in zip(encoded.batches, bases, strict=True):
        offsets = [offset for p, offset in results if p == pid]
        assert offsets == list(range(base, base + len(offsets)))


async def test_produce_many_with_str_keys_on_four_partitions_reads_back_in_order(broker: Broker) -> None:
    records = [(f"T{i % 5}", f"v{i}".encode()) for i in range(200)]
    results = await broker.produce_many("ticks", records)
    for (key, value), (pid, offset) in zip(records, results, strict=True):
        assert pid == partition_for_key(key.encode(), 4)
        (record,) = broker.read_from("ticks", pid, offset, max_msgs=1)
        assert (record.key, record.value) == (key.encode(), value)


async def test_produce_many_keyless_records_of_one_call_share_a_partition(broker: Broker) -> None:
    records = [(None if i % 3 else f"k{i}", bytes([i])) for i in range(30)]
    results = await broker.produce_many("ticks", records)
    keyless = [result for (key, _), result in zip(records, results, strict=True) if key is None]
    assert len({pid for pid, _ in keyless}) == 1
    assert [offset for _, offset in keyless] == sorted(offset for _, offset in keyless)


async def test_produce_many_rejects_a_bad_key_and_appends_nothing(broker: Broker) -> None:
    await broker.produce_many("ticks", [("k", b"first")])
    before = [broker.partition("ticks", pid).high_watermark for pid in range(4)]
    with pytest.raises(InvalidArgumentError, match="key"):
        await broker.produce_many("ticks", [("a", b"1"), ("b", b"2"), (3.5, b"3")])  # type: ignore[list-item]
    assert [broker.partition("ticks", pid).high_watermark for pid in range(4)] == before


async def test_produce_many_str_keys_still_enforce_max_message_bytes(tmp_path: Path) -> None:
    with Broker(persist_dir=str(tmp_path / "d"), partitions=4, max_message_bytes=1000) as b:
        with pytest.raises(RecordTooLargeError):
            await b.produce_many("ticks", [("a", b"x"), ("b", bytes(2000))])
        assert all(b.partition("ticks", pid).high_watermark == 0 for pid in range(4))


def test_offset_range_reads_like_the_list_it_replaces() -> None:
    view = OffsetRange(3, 100, 4)
    as_list = [(3, 100), (3, 101), (3, 102), (3, 103)]
    assert len(view) == 4 and list(view) == as_list
    assert view[0] == (3, 100) and view[-1] == (3, 103) and view[1:3] == as_list[1:3]
    for bad in (4, -5):
        with pytest.raises(IndexError):
            view[bad]
    assert "100..103" in repr(view)


async def test_produce_many_view_gives_the_same_results_as_produce_many(broker: Broker) -> None:
    one = [(None, b"%d" % i) for i in range(5)]
    keyed = [(f"k{i}", b"x") for i in range(6)]
    sticky = await broker.produce_many_view("v", one)  # keyless: one sticky partition, like produce_many
    assert len({pid for pid, _ in sticky}) == 1 and [off for _, off in sticky] == list(range(5))
    view = await broker.produce_many_view("e", one, partition=2)
    assert isinstance(view, OffsetRange) and list(view) == [(2, i) for i in range(5)]
    routed = await broker.produce_many_view("v", keyed)
    assert [pid for pid, _ in routed] == [partition_for_key(k.encode(), 4) for k, _ in keyed]


def _encode_cached(records: Any, cache: dict[Any, int], sticky: StickyPartitioner) -> Any:
    return encode_call(
        records, partitions=4, explicit=None, sticky=sticky, codec=Compression.NONE, timestamp_ms=TS, route_cache=cache
    )


def test_the_route_cache_routes_seen_keys_and_learns_new_ones() -> None:
    cache: dict[Any, int] = {}
    sticky = StickyPartitioner()
    first = _encode_cached([("a", b"1"), (b"c", b"2")], cache, sticky)
    assert cache == {"a": partition_for_key(b"a", 4), b"c": partition_for_key(b"c", 4)}
    again = _encode_cached([("a", b"3"), ("d", b"4"), (b"c", b"5")], cache, sticky)  # "d" is new
    assert set(cache) == {"a", b"c", "d"}
    for encoded, keys in ((first, ["a", b"c"]), (again, ["a", "d", b"c"])):
        routed = [pid for pid, _ in encoded.results([0] * len(encoded.batches))]
        assert routed == [partition_for_key(k if isinstance(k, bytes) else k.encode(), 4) for k in keys]


def test_keyless_records_stay_sticky_per_call_and_out_of_the_route_cache() -> None:
    cache: dict[Any, int] = {}
    sticky = StickyPartitioner()
    calls = [_encode_cached([(None, b"x"), ("a", b"y"), (None, b"z")], cache, sticky) for _ in range(4)]
    assert None not in cache
    keyless = [dict(zip(["n1", "a", "n2"], c.results([0] * len(c.batches)), strict=True)) for c in calls]
    assert all(k["n1"][0] == k["n2"][0] for k in keyless)  # one partition per call for the keyless records
    assert len({k["n1"][0] for k in keyless}) > 1  # and the next call takes the next one


def test_the_route_cache_starts_over_at_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(encoder_module, "ROUTE_CACHE_KEYS", 3)
    cache: dict[Any, int] = {}
    sticky = StickyPartitioner()
    _encode_cached([(f"k{i}", b"v") for i in range(3)], cache, sticky)
    assert len(cache) == 3
    _encode_cached([("new", b"v")], cache, sticky)
    assert set(cache) == {"new"}
