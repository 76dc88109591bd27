"""lkstream.broker.broker (and partition): the embedded broker's produce, fetch, topics, waiting."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lkstream import (
    BackpressureError,
    Broker,
    BrokerClosedError,
    Compression,
    InvalidArgumentError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    StorageError,
    TopicExistsError,
    UnknownTopicError,
)
from lkstream.broker.partition import Partition
from lkstream.broker.partitioner import partition_for_key
from lkstream.format.batch import check_batch
from lkstream.format.codec import decode_batches, encode_batch

from .support import DEADLINE_S, make_batch

MakeBroker = Callable[..., Broker]


@pytest.fixture
def make_broker(tmp_path: Path) -> Iterator[MakeBroker]:
    made: list[Broker] = []

    def make(**settings: object) -> Broker:
        settings.setdefault("persist_dir", str(tmp_path / "data"))
        b = Broker(**settings)
        made.append(b)
        return b

    yield make
    for b in made:
        b.close()


def _values(broker: Broker, topic: str, pid: int, offset: int = 0) -> list[bytes | None]:
    return [r.value for r in broker.read_from(topic, pid, offset)]


# -- produce and route ---------------------------------------------------------------------------


async def test_produce_many_returns_partition_and_offset_in_input_order(make_broker: MakeBroker) -> None:
    broker = make_broker(partitions=4)
    keys = [f"k{i}".encode() for i in range(40)]
    results = await broker.produce_many("t", [(k, b"v" + k) for k in keys])
    assert len(results) == 40
    assert [pid for pid, _ in results] == [partition_for_key(k, 4) for k in keys]
    for pid in range(4):
        offsets = [off for p, off in results if p == pid]
        assert offsets == list(range(len(offsets)))  # contiguous per partition, in input order
    for (pid, offset), key in zip(results, keys, strict=True):
        record = broker.read_from("t", pid, offset, max_msgs=1)[0]
        assert (record.key, record.value, record.offset, record.partition) == (key, b"v" + key, offset, pid)


async def test_keyed_routing_is_stable_across_calls_and_restarts(make_broker: MakeBroker, tmp_path: Path) -> None:
    broker = make_broker(partitions=5)
    records = [(f"acct-{i}".encode(), b"x") for i in range(30)]
    first = [pid for pid, _ in await broker.produce_many("t", records)]
    second = [pid for pid, _ in await broker.produce_many("t", records)]
    broker.close()
    again = make_broker(partitions=5)
    third = [pid for pid, _ in again.produce_many_sync("t", records)]
    assert first == second == third == [partition_for_key(k, 5) for k, _ in records]


def test_keyless_records_of_one_call_share_one_partition_and_calls_rotate(make_broker: MakeBroker) -> None:
    broker = make_broker(partitions=3)
    chosen = []
    for _ in range(6):
        results = broker.produce_many_sync("t", [(None, b"a"), (None, b"b"), (None, b"c")])
        assert len({pid for pid, _ in results}) == 1
        chosen.append(results[0][0])
    assert set(chosen) == {0, 1, 2}
    assert chosen[:3] != [chosen[0]] * 3


def test_keyless_records_mixed_with_keyed_ones_share_one_partition(make_broker: MakeBroker) -> None:
    broker = make_broker(partitions=4)
    records = [(None, b"1"), (b"key-a", b"2"), (None, b"3"), (b"key-b", b"4"), (None, b"5")]
    results = broker.produce_many_sync("t", records)
    keyless = {results[i][0] for i in (0, 2, 4)}
    assert len(keyless) == 1
    assert results[1][0] == partition_for_key(b"key-a", 4)
    assert results[3][0] == partition_for_key(b"key-b", 4)


def test_explicit_partition_overrides_the_key(make_broker: MakeBroker) -> None:
    broker = make_broker(partitions=4)
    key = b"some-key"
    target = (partition_for_key(key, 4) + 1) % 4
    results = broker.produce_many_sync("t", [(key, b"v"), (None, b"w")], partition=target)
    assert results == [(target, 0), (target, 1)]
    assert _values(broker, "t", target) == [b"v", b"w"]


def test_str_bytes_and_none_keys_are_accepted_and_str_routes_like_utf8(make_broker: MakeBroker) -> None:
    broker = make_broker(partitions=8)
    results = broker.produce_many_sync("t", [("AAPL", b"1"), (b"AAPL", b"2"), (None, b"3"), ("ünï", b"4")])
    assert results[0][0] == results[1][0] == partition_for_key(b"AAPL", 8)
    assert results[3][0] == partition_for_key("ünï".encode(), 8)
    record = broker.read_from("t", results[0][0], results[0][1], max_msgs=1)[0]
    assert record.key == b"AAPL"
    none_record = broker.read_from("t", results[2][0], results[2][1], max_msgs=1)[0]
    assert none_record.key is None


def test_str_and_none_values_are_accepted(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.produce_many_sync("t", [(b"k", "text"), (b"k", None), (b"k", bytearray(b"ba"))])
    assert _values(broker, "t", 0) == [b"text", None, b"ba"]


@pytest.mark.parametrize("bad", [(1, b"v"), (b"k", 2.5), (b"k", object())])
def test_keys_and_values_of_other_types_are_rejected(make_broker: MakeBroker, bad: tuple[object, object]) -> None:
    broker = make_broker(partitions=2)
    with pytest.raises(InvalidArgumentError):
        broker.produce_many_sync("t", [bad])  # type: ignore[list-item]


@pytest.mark.parametrize("records", [[b"not a tuple"], [(b"k",)], [(b"k", b"v", [], "extra")], b"kv"])
def test_malformed_record_items_are_rejected(make_broker: MakeBroker, records: object) -> None:
    broker = make_broker(partitions=2)
    with pytest.raises(InvalidArgumentError):
        broker.produce_many_sync("t", records)  # type: ignore[arg-type]


def test_headers_round_trip(make_broker: MakeBroker) -> None:
    broker = make_broker()
    headers = [("trace-id", b"abc"), ("flag", None)]
    broker.produce_many_sync("t", [(b"k", b"v", headers), (b"k2", b"v2")])
    first, second = broker.read_from("t", 0, 0)
    assert list(first.headers) == headers
    assert list(second.headers) == []


@pytest.mark.parametrize("bad", [[("k", "str-value")], [(b"k", b"v")], "h", [("k",)]])
def test_malformed_headers_are_rejected(make_broker: MakeBroker, bad: object) -> None:
    broker = make_broker()
    with pytest.raises(InvalidArgumentError, match="header"):
        broker.produce_many_sync("t", [(b"k", b"v", bad)])  # type: ignore[list-item]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd", Compression.NONE])
def test_compressed_produce_reads_back(make_broker: MakeBroker, codec: object) -> None:
    broker = make_broker()
    records = [(f"k{i}".encode(), b"value-" * 20) for i in range(50)]
    broker.produce_many_sync("t", records, compression=codec)  # type: ignore[arg-type]
    assert [(r.key, r.value) for r in broker.read_from("t", 0, 0)] == records


def test_empty_record_list_writes_nothing(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.create_topic("t", 1)
    assert broker.produce_many_sync("t", []) == []
    assert broker.partition("t", 0).high_watermark == 0


# -- limits and validation -------------------------------------------------------------------------


@pytest.mark.parametrize("partitions", [1, 3])
@pytest.mark.parametrize("keyed", [False, True])
def test_record_over_max_message_bytes_is_rejected_and_nothing_written(
    make_broker: MakeBroker, partitions: int, keyed: bool
) -> None:
    broker = make_broker(max_message_bytes=1000, max_batch_bytes=1 << 20, partitions=partitions)
    broker.create_topic("t")
    key = b"k" if keyed else None
    with pytest.raises(RecordTooLargeError) as info:
        broker.produce_many_sync("t", [(key, b"small"), (key, b"x" * 1001)])
    assert (info.value.size, info.value.limit) == (1001 + len(key or b""), 1000)
    assert "exceeds max_message_bytes (1000 bytes)" in str(info.value)
    assert all(broker.partition("t", p).log.next_offset == 0 for p in range(partitions))


def test_record_at_exactly_max_message_bytes_is_accepted(make_broker: MakeBroker) -> None:
    broker = make_broker(max_message_bytes=1000, max_batch_bytes=1 << 20)
    assert broker.produce_many_sync("t", [(b"kk", b"x" * 998)]) == [(0, 0)]


def test_record_over_max_message_bytes_is_rejected_even_when_compressed(make_broker: MakeBroker) -> None:
    broker = make_broker(max_message_bytes=1000, max_batch_bytes=1 << 20)
    with pytest.raises(RecordTooLargeError):
        broker.produce_many_sync("t", [(None, b"x" * 5000)], compression="zstd")


def test_large_produce_is_split_into_batches_below_max_batch_bytes(make_broker: MakeBroker) -> None:
    broker = make_broker(max_batch_bytes=4096, max_message_bytes=1000)
    records = [(b"k", bytes([i]) * 900) for i in range(20)]
    results = broker.produce_many_sync("t", records)
    assert [off for _, off in results] == list(range(20))
    raw = broker.fetch("t", 0, 0, 1 << 20).data
    sizes = []
    pos = 0
    while pos < len(raw):
        header = check_batch(raw, pos)
        sizes.append(header.size)
        pos += header.size
    assert len(sizes) > 1
    assert max(sizes) <= 4096
    assert _values(broker, "t", 0) == [v for _, v in records]


@pytest.mark.parametrize("name", ["..", ".", "a/b", "", "x" * 250, "bad name"])
def test_invalid_topic_names_are_rejected_before_anything_is_created(make_broker: MakeBroker, name: str) -> None:
    broker = make_broker()
    with pytest.raises(InvalidArgumentError, match="invalid topic name"):
        broker.produce_many_sync(name, [(None, b"v")])
    with pytest.raises(InvalidArgumentError, match="invalid topic name"):
        broker.create_topic(name)
    assert broker.list_topics() == []
    assert os.listdir(os.path.join(broker.persist_dir, "topics")) == []


@pytest.mark.parametrize("pid", [-1, 2, 99, True])
def test_unknown_partition_is_rejected_and_nothing_written(make_broker: MakeBroker, pid: object) -> None:
    broker = make_broker()
    broker.create_topic("t", 2)
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        broker.produce_many_sync("t", [(None, b"v")], partition=pid)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        broker.partition("t", pid)  # type: ignore[arg-type]
    assert [broker.partition("t", p).log.next_offset for p in (0, 1)] == [0, 0]


def test_produce_to_unknown_topic_with_auto_create_off_raises_unknown_topic(make_broker: MakeBroker) -> None:
    broker = make_broker(auto_create_topics=False)
    with pytest.raises(UnknownTopicError) as info:
        broker.produce_many_sync("nope", [(None, b"v")])
    assert info.value.topic == "nope"
    assert str(info.value) == "unknown topic 'nope'"
    assert broker.list_topics() == []


def test_auto_create_uses_the_default_partition_count(make_broker: MakeBroker) -> None:
    broker = make_broker(partitions=3)
    broker.produce_many_sync("auto", [(None, b"v")])
    assert broker.partitions_for("auto") == 3


def test_produce_batch_appends_a_pre_encoded_batch(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.create_topic("t", 1)
    assert broker.produce_batch_sync("t", 0, make_batch(3)) == (0, 2)
    assert broker.produce_batch_sync("t", 0, make_batch(2, base_offset=77)) == (3, 4)  # base re-stamped
    damaged = make_batch(1)
    damaged[-1] ^= 1
    with pytest.raises(InvalidArgumentError, match="CRC"):
        broker.produce_batch_sync("t", 0, damaged)
    assert broker.partition("t", 0).log.next_offset == 5


async def test_produce_batch_async(make_broker: MakeBroker) -> None:
    broker = make_broker()
    assert await broker.produce_batch("t", 0, make_batch(2)) == (0, 1)


# -- topics ----------------------------------------------------------------------------------------


def test_create_list_describe_and_delete_topics(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.create_topic("b-topic", 2, retention_ms=1000, retention_bytes=5000)
    broker.create_topic("a-topic", 1)
    assert broker.list_topics() == ["a-topic", "b-topic"]
    broker.produce_many_sync("b-topic", [(None, b"x")] * 3, partition=1)
    description = broker.describe_topic("b-topic")
    assert description.name == "b-topic"
    assert (description.settings.partitions, description.settings.retention_ms) == (2, 1000)
    assert description.settings.retention_bytes == 5000
    stats = description.partitions
    assert [(s.log_start_offset, s.next_offset, s.segment_count) for s in stats] == [(0, 0, 1), (0, 3, 1)]
    assert stats[0].size_bytes == 0 < stats[1].size_bytes
    topic_dir = os.path.join(broker.persist_dir, "topics", "b-topic")
    assert os.path.isdir(topic_dir)
    broker.delete_topic("b-topic")
    assert broker.list_topics() == ["a-topic"]
    assert not os.path.exists(topic_dir)
    with pytest.raises(UnknownTopicError):
        broker.describe_topic("b-topic")


def test_a_deleted_topic_recreated_starts_empty(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.produce_many_sync("t", [(None, b"old")] * 5)
    broker.delete_topic("t")
    assert broker.produce_many_sync("t", [(None, b"new")]) == [(0, 0)]
    assert _values(broker, "t", 0) == [b"new"]


def test_create_existing_topic_raises_topic_exists(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.create_topic("t", 1)
    with pytest.raises(TopicExistsError, match="already exists"):
        broker.create_topic("t", 2)
    assert broker.partitions_for("t") == 1


# retention.bytes takes any Java long, as in Kafka (a negative value is "no limit"), so it is not here.
@pytest.mark.parametrize("kw", [{"partitions": 0}, {"partitions": -1}, {"retention_ms": -2}, {"retention_ms": 2**63}])
def test_create_topic_rejects_bad_settings(make_broker: MakeBroker, kw: dict[str, int]) -> None:
    broker = make_broker()
    with pytest.raises(InvalidArgumentError):
        broker.create_topic("t", **kw)
    assert broker.list_topics() == []


def test_delete_unknown_topic_raises_unknown_topic(make_broker: MakeBroker) -> None:
    broker = make_broker()
    with pytest.raises(UnknownTopicError):
        broker.delete_topic("missing")


def test_topics_and_data_survive_a_restart(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.create_topic("t", 3, retention_bytes=10_000)
    broker.produce_many_sync("t", [(None, b"a"), (None, b"b")], partition=2)
    broker.close()
    again = make_broker()
    assert again.list_topics() == ["t"]
    assert again.describe_topic("t").settings.retention_bytes == 10_000
    assert again.partitions_for("t") == 3
    assert _values(again, "t", 2) == [b"a", b"b"]
    assert again.produce_many_sync("t", [(None, b"c")], partition=2) == [(2, 2)]


def test_retention_via_the_broker_moves_the_log_start(make_broker: MakeBroker) -> None:
    broker = make_broker(segment_max_bytes=4096)
    broker.create_topic("t", 1, retention_bytes=4096)
    for _ in range(10):
        broker.produce_many_sync("t", [(None, b"x" * 1500)])
    assert broker.enforce_retention() > 0
    start = broker.partition("t", 0).log_start_offset
    assert start > 0
    with pytest.raises(OffsetOutOfRangeError) as info:
        broker.read_from("t", 0, 0)
    assert info.value.earliest == start


# -- fetch -----------------------------------------------------------------------------------------


def test_fetch_returns_raw_batches_and_bounds(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.produce_many_sync("t", [(None, b"1"), (None, b"2")])
    broker.produce_many_sync("t", [(None, b"3")])
    result = broker.fetch("t", 0, 1)
    assert (result.log_start_offset, result.high_watermark) == (0, 3)
    assert [r.value for r in decode_batches(result.data, "t", 0, 1)] == [b"2", b"3"]


def test_hot_tail_serves_the_same_bytes_as_the_log(make_broker: MakeBroker) -> None:
    broker = make_broker()
    for i in range(5):
        broker.produce_many_sync("t", [(None, bytes([i]) * 10)] * 3)
    partition = broker.partition("t", 0)
    for offset in (0, 4, 14):
        assert partition.read_raw(offset, 1 << 20).data == partition.log.read(offset, 1 << 20).data


@pytest.mark.parametrize("offset", [-1, 3, 1000])
def test_fetch_out_of_range_names_earliest_and_latest(make_broker: MakeBroker, offset: int) -> None:
    broker = make_broker()
    broker.produce_many_sync("t", [(None, b"1"), (None, b"2")])
    with pytest.raises(OffsetOutOfRangeError) as info:
        broker.fetch("t", 0, offset)
    assert (info.value.earliest, info.value.latest) == (0, 2)


def test_fetch_rejects_non_integer_offsets(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.create_topic("t", 1)
    with pytest.raises(InvalidArgumentError, match="integer"):
        broker.fetch("t", 0, "0")  # type: ignore[arg-type]


def test_read_from_honours_max_msgs(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.produce_many_sync("t", [(None, bytes([i])) for i in range(10)])
    assert [r.offset for r in broker.read_from("t", 0, 3, max_msgs=4)] == [3, 4, 5, 6]


# -- durability modes and backpressure -------------------------------------------------------------


class HeldFsync:
    """Replaces a partition log's flush so the test decides when the fsync completes."""

    def __init__(self, partition: Partition) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self._real = partition.log.flush
        partition.log.flush = self  # type: ignore[method-assign]

    def __call__(self) -> int:
        self.entered.set()
        assert self.release.wait(DEADLINE_S), "the test never released the fsync"
        return self._real()


def test_sync_mode_acknowledges_only_after_fsync(make_broker: MakeBroker) -> None:
    broker = make_broker(fsync_mode="sync")
    broker.create_topic("t", 1)
    partition = broker.partition("t", 0)
    held = HeldFsync(partition)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        produce = pool.submit(broker.produce_many_sync, "t", [(None, b"v")])
        assert held.entered.wait(DEADLINE_S)
        assert not produce.done()
        assert partition.high_watermark == 0  # not visible before it is durable
        assert partition.read_raw(0).data == b""  # neither from the hot tail nor from the log
        held.release.set()
        assert produce.result(DEADLINE_S) == [(0, 0)]
    assert partition.log.durable_next_offset >= 1
    assert partition.high_watermark == 1


def test_backpressure_error_names_the_limit_and_nothing_is_written(make_broker: MakeBroker) -> None:
    broker = make_broker(fsync_mode="sync", max_inflight_bytes=1)
    broker.create_topic("t", 1)
    partition = broker.partition("t", 0)
    held = HeldFsync(partition)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        first = pool.submit(broker.produce_many_sync, "t", [(None, b"first")])
        assert held.entered.wait(DEADLINE_S)  # accepted, written, not yet acknowledged
        written = partition.log.next_offset
        with pytest.raises(BackpressureError) as info:
            broker.produce_many_sync("t", [(None, b"second")])
        assert info.value.limit == 1
        assert info.value.retriable is True
        assert "max_inflight_bytes=1" in str(info.value)
        with pytest.raises(BackpressureError):
            broker.produce_batch_sync("t", 0, make_batch(1))
        assert partition.log.next_offset == written == 1
        held.release.set()
        assert first.result(DEADLINE_S) == [(0, 0)]
    assert broker.inflight.value == 0
    assert broker.produce_many_sync("t", [(None, b"third")]) == [(0, 1)]
    assert _values(broker, "t", 0) == [b"first", b"third"]


async def test_backpressure_applies_to_async_produce(make_broker: MakeBroker) -> None:
    broker = make_broker(fsync_mode="sync", max_inflight_bytes=1)
    broker.create_topic("t", 1)
    held = HeldFsync(broker.partition("t", 0))
    first = asyncio.ensure_future(broker.produce_many("t", [(None, b"first")]))
    entered = await asyncio.to_thread(held.entered.wait, DEADLINE_S)
    assert entered
    with pytest.raises(BackpressureError):
        await broker.produce_many("t", [(None, b"second")])
    held.release.set()
    assert await asyncio.wait_for(first, DEADLINE_S) == [(0, 0)]


def test_group_mode_fsyncs_a_small_write_within_the_interval(make_broker: MakeBroker) -> None:
    broker = make_broker(fsync_mode="group", fsync_interval_ms=20, fsync_group_bytes=1 << 30)
    fsynced = threading.Event()
    broker.fsync_observers.append(lambda seconds: fsynced.set())
    broker.produce_many_sync("t", [(None, b"tiny")])
    assert fsynced.wait(DEADLINE_S), "a write below fsync_group_bytes was never fsynced"
    assert broker.partition("t", 0).log.durable_next_offset == 1


def test_produce_after_close_raises_broker_closed(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.produce_many_sync("t", [(None, b"v")])
    broker.close()
    assert broker.closed
    with pytest.raises(BrokerClosedError):
        broker.produce_many_sync("t", [(None, b"v")])
    with pytest.raises(BrokerClosedError):
        broker.fetch("t", 0, 0)
    broker.close()  # idempotent


def test_unknown_config_keys_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="segment_bytes"):
        Broker(persist_dir=str(tmp_path), segment_bytes=10)


# -- waiting for data ------------------------------------------------------------------------------


async def test_wait_for_offset_wakes_on_append(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.create_topic("t", 1)
    partition = broker.partition("t", 0)
    waiter = asyncio.ensure_future(partition.wait_for_offset(0, timeout=DEADLINE_S))
    await asyncio.sleep(0)  # one loop turn: the waiter registers, it does not poll
    assert len(partition._async_waiters) == 1
    assert not waiter.done()
    await asyncio.to_thread(broker.produce_many_sync, "t", [(None, b"v")])
    assert await asyncio.wait_for(waiter, DEADLINE_S) is True
    assert partition._async_waiters == []


async def test_wait_for_offset_returns_at_once_when_data_is_there(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.produce_many_sync("t", [(None, b"v")])
    assert await broker.partition("t", 0).wait_for_offset(0, timeout=0) is True


async def test_wait_for_offset_times_out_returning_false(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.produce_many_sync("t", [(None, b"v")])
    partition = broker.partition("t", 0)
    assert await partition.wait_for_offset(1, timeout=0.05) is False
    assert partition._async_waiters == []


async def test_wait_for_offset_in_sync_mode_wakes_when_the_append_is_durable(make_broker: MakeBroker) -> None:
    broker = make_broker(fsync_mode="sync")
    broker.create_topic("t", 1)
    partition = broker.partition("t", 0)
    waiter = asyncio.ensure_future(partition.wait_for_offset(0, timeout=DEADLINE_S))
    await asyncio.sleep(0)
    await broker.produce_many("t", [(None, b"v")])
    assert await asyncio.wait_for(waiter, DEADLINE_S) is True


class SignallingCondition(threading.Condition):
    """A Condition that tells the test when a thread starts waiting on it."""

    def __init__(self, lock: threading.Lock) -> None:
        super().__init__(lock)
        self.waiting = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.waiting.set()
        return super().wait(timeout)


def test_wait_for_offset_sync_wakes_on_append(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.create_topic("t", 1)
    partition = broker.partition("t", 0)
    partition._visible = condition = SignallingCondition(partition._lock)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waited = pool.submit(partition.wait_for_offset_sync, 0, DEADLINE_S)
        assert condition.waiting.wait(DEADLINE_S)
        assert not waited.done()
        broker.produce_many_sync("t", [(None, b"v")])
        assert waited.result(DEADLINE_S) is True


def test_wait_for_offset_sync_times_out_returning_false(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.create_topic("t", 1)
    assert broker.partition("t", 0).wait_for_offset_sync(0, timeout=0.05) is False


def test_wait_for_data_sync_wakes_for_any_partition(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.create_topic("t", 3)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waited = pool.submit(broker.wait_for_data_sync, {("t", 0): 0, ("t", 2): 0}, DEADLINE_S)
        broker.produce_many_sync("t", [(None, b"v")], partition=2)
        assert waited.result(DEADLINE_S) is True
    assert broker.wait_for_data_sync({("t", 0): 0}, timeout=0.02) is False


def test_recovery_truncations_are_counted_in_broker_stats(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.produce_many_sync("t", [(None, b"v")] * 3)
    seg_path = broker.partition("t", 0).log.segment_paths()[0]
    broker.close()
    with open(seg_path, "ab") as f:
        f.write(b"\xff" * 33)
    again = make_broker()
    stats = again.stats()
    assert (stats.recovery_truncations, stats.recovery_truncated_bytes) == (1, 33)
    assert _values(again, "t", 0) == [b"v"] * 3


def test_none_mode_makes_appends_visible_without_fsync(make_broker: MakeBroker) -> None:
    broker = make_broker(fsync_mode="none")
    assert broker.produce_many_sync("t", [(None, b"v")]) == [(0, 0)]
    partition = broker.partition("t", 0)
    assert partition.high_watermark == 1
    assert partition.log.durable_next_offset == 0
    assert broker.stats().fsyncs == 0


@pytest.mark.parametrize("mode", ["sync", "group"])
def test_concurrent_producers_get_unique_contiguous_offsets(make_broker: MakeBroker, mode: str) -> None:
    broker = make_broker(fsync_mode=mode)
    broker.create_topic("t", 1)
    threads, calls = 4, 25

    def produce(worker: int) -> list[int]:
        return [
            off
            for i in range(calls)
            for _, off in broker.produce_many_sync("t", [(None, f"{worker}-{i}-{j}".encode()) for j in range(3)])
        ]

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        per_worker = list(pool.map(produce, range(threads)))
    offsets = sorted(o for worker in per_worker for o in worker)
    assert offsets == list(range(threads * calls * 3))
    for worker, worker_offsets in enumerate(per_worker):
        assert worker_offsets == sorted(worker_offsets)  # each producer's records keep their order
        values = [broker.read_from("t", 0, o, max_msgs=1)[0].value for o in worker_offsets]
        assert values == [f"{worker}-{i}-{j}".encode() for i in range(calls) for j in range(3)]


# -- opening and closing robustly ------------------------------------------------------------------


def test_stray_directories_under_topics_do_not_stop_the_broker(tmp_path: Path, make_broker: MakeBroker) -> None:
    data = tmp_path / "data"
    broker = make_broker(persist_dir=str(data))
    broker.produce_many_sync("good", [(None, b"x")])
    broker.close()
    (data / "topics" / "lost+found").mkdir()
    (data / "topics" / "empty").mkdir()
    reopened = make_broker(persist_dir=str(data))
    assert reopened.list_topics() == ["good"]
    assert _values(reopened, "good", 0) == [b"x"]


def test_close_closes_every_partition_and_releases_the_lock_even_if_one_fails(
    tmp_path: Path, make_broker: MakeBroker
) -> None:
    data = str(tmp_path / "data")
    broker = make_broker(persist_dir=data, partitions=2)
    broker.produce_many_sync("t", [(None, b"a")], partition=0)
    broker.produce_many_sync("t", [(None, b"b")], partition=1)
    first = broker.partition("t", 0)
    real_close = first.log.close

    def failing_close() -> None:
        real_close()
        raise StorageError("cannot fsync (Input/output error)", path="x")

    first.log.close = failing_close  # type: ignore[method-assign]
    with pytest.raises(StorageError):
        broker.close()
    with pytest.raises(BrokerClosedError):
        broker.partition("t", 1).log.read(0, 100)
    reopened = make_broker(persist_dir=data)
    assert _values(reopened, "t", 0) == [b"a"]
    assert _values(reopened, "t", 1) == [b"b"]


def test_deleting_a_topic_forgets_its_committed_offsets(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.produce_many_sync("t", [(None, b"x")])
    broker.offset_store.commit("g", "t", 0, 1)
    broker.delete_topic("t")
    broker.create_topic("t")
    assert broker.offset_store.read_committed("g", "t", 0) is None


def test_offset_for_timestamp_returns_the_exact_record_or_the_high_watermark(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.create_topic("ts")
    batch = encode_batch([(None, b"a"), (None, b"b"), (None, b"c")], timestamps=[1000, 2000, 3000])
    broker.produce_batch_sync("ts", 0, batch)
    assert broker.offset_for_timestamp("ts", 0, 0) == 0
    assert broker.offset_for_timestamp("ts", 0, 2000) == 1
    assert broker.offset_for_timestamp("ts", 0, 2500) == 2
    assert broker.offset_for_timestamp("ts", 0, 3001) == 3


async def test_a_reader_waiting_on_a_deleted_topic_is_woken_with_an_error(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.create_topic("gone")
    waiting = asyncio.ensure_future(broker.partition("gone", 0).wait_for_offset(0))
    await asyncio.sleep(0)  # let the waiter register
    broker.delete_topic("gone")
    with pytest.raises(BrokerClosedError):
        await asyncio.wait_for(waiting, DEADLINE_S)


def test_a_blocking_wait_on_a_deleted_topic_returns(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.create_topic("gone")
    result: list[bool] = []
    waiter = threading.Thread(target=lambda: result.append(broker.wait_for_data_sync({("gone", 0): 0}, DEADLINE_S)))
    waiter.start()
    broker.delete_topic("gone")
    waiter.join(DEADLINE_S)
    assert result == [True], "the wait must end (the next fetch reports the unknown topic)"


def test_hot_tails_of_all_partitions_stay_within_hot_tail_total_bytes(make_broker: MakeBroker) -> None:
    broker = make_broker(hot_tail_total_bytes=64 * 1024)
    broker.create_topic("wide", 8)
    for pid in range(8):
        for _ in range(10):
            broker.produce_many_sync("wide", [(None, bytes(1000))] * 5, partition=pid)
    assert 0 < broker.tail_budget.bytes <= 64 * 1024
    newest, oldest = broker.partition("wide", 7), broker.partition("wide", 0)
    assert newest._tail.read(45, 1 << 20, 50) is not None  # the newest batches stay in memory
    assert oldest._tail.read(0, 1 << 20, 50) is None  # the oldest were dropped: the log serves them
    for partition, offset in ((newest, 45), (oldest, 0)):
        assert partition.read_raw(offset, 1 << 20).data == partition.log.read(offset, 1 << 20).data
    broker.delete_topic("wide")
    assert broker.tail_budget.bytes == 0


def test_appending_leaves_no_gc_tracked_object_per_batch(make_broker: MakeBroker) -> None:
    """Objects that outlive a produce call are promoted until full collections run (tail latency, issue 14)."""
    broker = make_broker()
    broker.produce_many_sync("t", [(None, b"warm")])
    gc.collect()
    before = len(gc.get_objects())
    for _ in range(3_000):
        broker.produce_many_sync("t", [(None, b"v")])  # 3,000 batches, all kept in the hot tail
    gc.collect()
    assert len(gc.get_objects()) - before < 100


def test_keys_route_by_the_new_count_after_create_partitions(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.create_topic("grow", 2)
    keys = [f"k{i}" for i in range(20)]
    before = broker.produce_many_sync("grow", [(k, b"v") for k in keys])
    assert [pid for pid, _ in before] == [partition_for_key(k.encode(), 2) for k in keys]
    broker.create_partitions("grow", 4)
    after = broker.produce_many_sync("grow", [(k, b"v") for k in keys])  # the route cache starts over
    assert [pid for pid, _ in after] == [partition_for_key(k.encode(), 4) for k in keys]
