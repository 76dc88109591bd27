"""lkstream.client.consumer: subscribe, consume, commit, resume."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lkstream import Broker, Consumer, InvalidArgumentError, OffsetOutOfRangeError, OffsetStore, Record

from .support import DEADLINE_S

MakeBroker = Callable[..., Broker]


@pytest.fixture
def data_path(tmp_path: Path) -> str:
    return str(tmp_path / "data")


@pytest.fixture
def make_broker(data_path: str) -> Iterator[MakeBroker]:
    made: list[Broker] = []

    def make(**settings: object) -> Broker:
        settings.setdefault("persist_dir", data_path)
        b = Broker(**settings)
        made.append(b)
        return b

    yield make
    for b in made:
        b.close()


@pytest.fixture
def broker(make_broker: MakeBroker) -> Broker:
    return make_broker()


def _produce(broker: Broker, count: int, topic: str = "t", partition: int = 0, start: int = 0) -> None:
    broker.produce_many_sync(
        topic, [(None, f"v{i}".encode()) for i in range(start, start + count)], partition=partition
    )


class Collector:
    """A handler recording (partition, offset, value)."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int, bytes | None]] = []

    def __call__(self, pid: int, offset: int, record: Record) -> None:
        assert (record.partition, record.offset) == (pid, offset)
        self.seen.append((pid, offset, record.value))

    @property
    def offsets(self) -> list[int]:
        return [offset for _, offset, _ in self.seen]


# -- subscribe and positions -----------------------------------------------------------------------


def test_subscribe_without_a_commit_starts_at_earliest(broker: Broker) -> None:
    _produce(broker, 5)
    consumer = Consumer(broker, group="g")
    consumer.subscribe("t")
    assert consumer.position("t", 0) == 0
    assert consumer.assignment() == [("t", 0)]


def test_subscribe_with_latest_reset_starts_at_the_end(broker: Broker) -> None:
    _produce(broker, 5)
    consumer = Consumer(broker, group="g", auto_offset_reset="latest")
    consumer.subscribe("t")
    assert consumer.position("t", 0) == 5


def test_subscribe_from_committed_starts_at_the_committed_offset(broker: Broker) -> None:
    _produce(broker, 10)
    broker.offset_store.commit("g", "t", 0, 6)
    consumer = Consumer(broker, group="g")
    consumer.subscribe("t", from_committed=True)
    assert consumer.position("t", 0) == 6
    assert [r.offset for r in consumer.poll()] == [6, 7, 8, 9]


def test_subscribe_not_from_committed_ignores_the_commit(broker: Broker) -> None:
    _produce(broker, 10)
    broker.offset_store.commit("g", "t", 0, 6)
    consumer = Consumer(broker, group="g")
    consumer.subscribe("t", from_committed=False)
    assert consumer.position("t", 0) == 0


def test_subscribe_takes_every_partition(make_broker: MakeBroker) -> None:
    broker = make_broker(partitions=3)
    broker.create_topic("t")
    consumer = Consumer(broker, group="g")
    consumer.subscribe("t")
    assert consumer.assignment() == [("t", 0), ("t", 1), ("t", 2)]


def test_a_separate_offset_store_directory_is_used_when_given(broker: Broker, tmp_path: Path) -> None:
    _produce(broker, 4)
    store = OffsetStore(str(tmp_path / "app-offsets"))
    store.commit("g", "t", 0, 3)
    consumer = Consumer(broker, group="g", offset_store=store)
    consumer.subscribe("t")
    assert consumer.position("t", 0) == 3
    assert broker.offset_store.read_committed("g", "t", 0) is None


@pytest.mark.parametrize(("reset", "expected"), [("earliest", 0), ("latest", 10)])
def test_committed_offset_beyond_the_end_resets_per_auto_offset_reset(
    broker: Broker, reset: str, expected: int
) -> None:
    _produce(broker, 10)
    broker.offset_store.commit("g", "t", 0, 1000)
    consumer = Consumer(broker, group="g", auto_offset_reset=reset)  # type: ignore[arg-type]
    consumer.subscribe("t")
    assert consumer.position("t", 0) == expected


def test_committed_offset_out_of_range_with_reset_error_raises(broker: Broker) -> None:
    _produce(broker, 10)
    broker.offset_store.commit("g", "t", 0, 1000)
    consumer = Consumer(broker, group="g", auto_offset_reset="error")
    with pytest.raises(OffsetOutOfRangeError) as info:
        consumer.subscribe("t")
    assert (info.value.offset, info.value.earliest, info.value.latest) == (1000, 0, 10)


def test_committed_offset_below_log_start_after_retention_resets_to_earliest(make_broker: MakeBroker) -> None:
    broker = make_broker(segment_max_bytes=4096)
    broker.create_topic("t", 1, retention_bytes=4096)
    for _ in range(10):
        broker.produce_many_sync("t", [(None, b"x" * 1500)])
    broker.offset_store.commit("g", "t", 0, 1)
    broker.enforce_retention()
    start = broker.partition("t", 0).log_start_offset
    assert start > 1
    consumer = Consumer(broker, group="g")
    consumer.subscribe("t")
    assert consumer.position("t", 0) == start


def test_a_position_overtaken_by_retention_resets_during_consumption(make_broker: MakeBroker) -> None:
    broker = make_broker(segment_max_bytes=4096)
    broker.create_topic("t", 1, retention_bytes=4096)
    consumer = Consumer(broker, group="g")
    consumer.subscribe("t")
    for _ in range(10):
        broker.produce_many_sync("t", [(None, b"x" * 1500)])
    broker.enforce_retention()
    start = broker.partition("t", 0).log_start_offset
    assert consumer.poll() == []  # the fetch found the position gone and reset it
    assert consumer.position("t", 0) == start
    assert consumer.poll()[0].offset == start


def test_seek_moves_the_position_and_rejects_out_of_range(broker: Broker) -> None:
    _produce(broker, 5)
    consumer = Consumer(broker, group="g")
    consumer.subscribe("t")
    consumer.seek("t", 0, 3)
    assert [r.offset for r in consumer.poll()] == [3, 4]
    with pytest.raises(OffsetOutOfRangeError):
        consumer.seek("t", 0, 6)
    with pytest.raises(InvalidArgumentError, match="not assigned"):
        consumer.seek("other", 0, 0)


@pytest.mark.parametrize("kwargs", [{"group": ""}, {"group": "\ud800"}, {"auto_offset_reset": "middle"}])
def test_bad_consumer_arguments_are_rejected(broker: Broker, kwargs: dict[str, str]) -> None:
    with pytest.raises(InvalidArgumentError):
        Consumer(broker, **kwargs)  # type: ignore[arg-type]


# -- consume ---------------------------------------------------------------------------------------


async def test_consume_calls_a_sync_handler_for_each_record_in_order(broker: Broker) -> None:
    _produce(broker, 7)
    consumer = Consumer(broker, group="g")
    consumer.subscribe("t")
    handler = Collector()
    handled = await consumer.consume("t", handler, idle_timeout=0.01)
    assert handled == 7
    assert handler.seen == [(0, i, f"v{i}".encode()) for i in range(7)]


async def test_consume_awaits_an_async_handler(broker: Broker) -> None:
    _produce(broker, 4)
    consumer = Consumer(broker, group="g")
    consumer.subscribe("t")
    order: list[str] = []

    async def handler(pid: int, offset: int, record: Record) -> None:
        order.append(f"start {offset}")
        await asyncio.sleep(0)
        order.append(f"end {offset}")

    assert await consumer.consume("t", handler, idle_timeout=0.01) == 4
    assert order == [f"{step} {i}" for i in range(4) for step in ("start", "end")]


async def test_consume_subscribes_to_the_topic_when_needed(broker: Broker) -> None:
    _produce(broker, 2)
    consumer = Consumer(broker, group="g")
    handler = Collector()
    assert await consumer.consume("t", handler, idle_timeout=0.01) == 2
    assert consumer.assignment() == [("t", 0)]


async def test_consume_stops_after_max_records(broker: Broker) -> None:
    _produce(broker, 10)
    consumer = Consumer(broker, group="g")
    consumer.subscribe("t")
    handler = Collector()
    assert await consumer.consume("t", handler, max_records=4, idle_timeout=DEADLINE_S) == 4
    assert handler.offsets == [0, 1, 2, 3]
    assert consumer.position("t", 0) == 4
    assert consumer.committed("t", 0) == 4


async def test_consume_returns_after_idle_timeout_with_no_data(broker: Broker) -> None:
    broker.create_topic("t", 1)
    consumer = Consumer(broker, group="g")
    consumer.subscribe("t")
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await consumer.consume("t", Collector(), idle_timeout=0.05) == 0
    elapsed = loop.time() - started
    assert 0.04 <= elapsed < DEADLINE_S


async def test_consume_wakes_for_records_produced_while_it_waits(broker: Broker) -> None:
    broker.create_topic("t", 1)
    consumer = Consumer(broker, group="g")
    consumer.subscribe("t")
    handler = Collector()
    consuming = asyncio.ensure_future(consumer.consume("t", handler, max_records=3, idle_timeout=DEADLINE_S))
    await asyncio.sleep(0)
    await asyncio.to_thread(_produce, broker, 3)
    assert await asyncio.wait_for(consuming, DEADLINE_S) == 3
    assert handler.offsets == [0, 1, 2]


async def test_consume_reads_every_partition_in_offset_order(make_broker: MakeBroker) -> None:
    broker = make_broker(partitions=3)
    broker.create_topic("t")
    for pid in range(3):
        _produce(broker, 4, partition=pid)
    consumer = Consumer(broker, group="g")
    consumer.subscribe("t")
    handler = Collector()
    assert await consumer.consume("t", handler, idle_timeout=0.01) == 12
    for pid in range(3):
        assert [o for p, o, _ in handler.seen if p == pid] == [0, 1, 2, 3]


async def test_consume_of_one_topic_leaves_other_subscriptions_untouched(broker: Broker) -> None:
    _produce(broker, 3, topic="a")
    _produce(broker, 3, topic="b")
    consumer = Consumer(broker, group="g")
    consumer.subscribe("a")
    consumer.subscribe("b")
    handler = Collector()
    assert await consumer.consume("a", handler, idle_timeout=0.01) == 3
    assert consumer.position("b", 0) == 0
    assert [r.topic for r in consumer.poll()] == ["b", "b", "b"]


async def test_stop_from_the_handler_ends_consume(broker: Broker) -> None:
    _produce(broker, 1)
    consumer = Consumer(broker, group="g")
    consumer.subscribe("t")

    def handler(pid: int, offset: int, record: Record) -> None:
        consumer.stop()

    # Without stop() this would wait DEADLINE_S for more records and time out the wait_for.
    assert await asyncio.wait_for(consumer.consume("t", handler, idle_timeout=2 * DEADLINE_S), DEADLINE_S) == 1
    assert consumer.committed("t", 0) == 1


async def test_stop_from_the_handler_returns_after_the_record_being_handled(broker: Broker) -> None:
    _produce(broker, 5)  # one batch: one fetch returns all five
    consumer = Consumer(broker, group="g")
    consumer.subscribe("t")
    seen: list[int] = []

    def handler(pid: int, offset: int, record: Record) -> None:
        seen.append(offset)
        if offset == 1:
            consumer.stop()

    assert await consumer.consume("t", handler, idle_timeout=0.01) == 2
    assert seen == [0, 1]


async def test_a_failing_handler_does_not_commit_the_failed_or_later_records(broker: Broker) -> None:
    _produce(broker, 5)
    consumer = Consumer(broker, group="g")
    consumer.subscribe("t")

    def handler(pid: int, offset: int, record: Record) -> None:
        if offset == 2:
            raise RuntimeError("handler failed")

    with pytest.raises(RuntimeError, match="handler failed"):
        await consumer.consume("t", handler, idle_timeout=0.01)
    committed = consumer.committed("t", 0)
    assert committed is not None and committed <= 2, f"committed {committed}: record 2 would never be redelivered"


# -- commits ---------------------------------------------------------------------------------------


async def test_manual_commit_persists_the_position(broker: Broker) -> None:
    _produce(broker, 6)
    consumer = Consumer(broker, group="g", auto_commit=False)
    consumer.subscribe("t")
    assert await consumer.consume("t", Collector(), max_records=4) == 4
    assert consumer.committed("t", 0) is None  # nothing until commit()
    consumer.commit()
    assert consumer.committed("t", 0) == 4
    assert broker.offset_store.read_committed("g", "t", 0) == 4


def test_commit_of_explicit_offsets(broker: Broker) -> None:
    _produce(broker, 6)
    consumer = Consumer(broker, group="g", auto_commit=False)
    consumer.subscribe("t")
    consumer.commit({("t", 0): 2})
    assert consumer.committed("t", 0) == 2
    assert consumer.position("t", 0) == 0


def test_commit_without_a_group_is_rejected(broker: Broker) -> None:
    _produce(broker, 1)
    consumer = Consumer(broker)
    consumer.subscribe("t")
    assert consumer.auto_commit is False
    with pytest.raises(InvalidArgumentError, match="group"):
        consumer.commit()
    assert consumer.committed("t", 0) is None


async def _consume_while_producing_more(broker: Broker, consumer: Consumer) -> list[int | None]:
    """Consume 3 records; the third handler produces 3 more. Returns the committed offset seen by each."""
    _produce(broker, 3)
    committed_seen: list[int | None] = []

    def handler(pid: int, offset: int, record: Record) -> None:
        committed_seen.append(broker.offset_store.read_committed("g", "t", 0))
        if offset == 2:
            _produce(broker, 3, start=3)

    assert await consumer.consume("t", handler, max_records=6, idle_timeout=DEADLINE_S) == 6
    return committed_seen


async def test_auto_commit_commits_between_fetches_once_the_interval_passed(broker: Broker) -> None:
    broker.create_topic("t", 1)
    consumer = Consumer(broker, group="g", auto_commit_interval_ms=0)
    consumer.subscribe("t")
    committed_seen = await _consume_while_producing_more(broker, consumer)
    assert committed_seen[:3] == [None, None, None]
    assert committed_seen[3:] == [3, 3, 3]  # committed after the first fetch was handled
    assert consumer.committed("t", 0) == 6


async def test_auto_commit_waits_for_the_interval(broker: Broker) -> None:
    broker.create_topic("t", 1)
    consumer = Consumer(broker, group="g", auto_commit_interval_ms=3_600_000)
    consumer.subscribe("t")
    committed_seen = await _consume_while_producing_more(broker, consumer)
    assert committed_seen == [None] * 6  # the interval never passed during consumption
    assert consumer.committed("t", 0) == 6  # consume() commits on the way out


async def test_no_auto_commit_leaves_nothing_committed(broker: Broker) -> None:
    _produce(broker, 3)
    consumer = Consumer(broker, group="g", auto_commit=False)
    consumer.subscribe("t")
    assert await consumer.consume("t", Collector(), idle_timeout=0.01) == 3
    consumer.close()
    assert broker.offset_store.read_committed("g", "t", 0) is None


async def test_resume_after_restart_from_the_committed_offset(make_broker: MakeBroker) -> None:
    broker = make_broker()
    _produce(broker, 10)
    first = Consumer(broker, group="g")
    first.subscribe("t")
    assert await first.consume("t", Collector(), max_records=6) == 6
    first.close()
    broker.close()

    restarted = make_broker()
    _produce(restarted, 2, start=10)
    second = Consumer(restarted, group="g", offset_store=OffsetStore(restarted.persist_dir))
    second.subscribe("t", from_committed=True)
    handler = Collector()
    assert await second.consume("t", handler, idle_timeout=0.01) == 6
    assert handler.offsets == list(range(6, 12))
    assert [v for _, _, v in handler.seen] == [f"v{i}".encode() for i in range(6, 12)]


async def test_another_group_reads_from_the_start(broker: Broker) -> None:
    _produce(broker, 3)
    one = Consumer(broker, group="one")
    one.subscribe("t")
    await one.consume("t", Collector(), idle_timeout=0.01)
    two = Consumer(broker, group="two")
    two.subscribe("t")
    assert two.position("t", 0) == 0


# -- blocking poll ---------------------------------------------------------------------------------


def test_poll_returns_available_records_and_advances(broker: Broker) -> None:
    _produce(broker, 5)
    consumer = Consumer(broker, group="g", auto_commit=False)
    consumer.subscribe("t")
    assert [r.offset for r in consumer.poll(max_records=2)] == [0, 1]
    assert [r.offset for r in consumer.poll()] == [2, 3, 4]
    assert consumer.poll() == []


def test_poll_with_timeout_wakes_on_append(broker: Broker) -> None:
    broker.create_topic("t", 1)
    consumer = Consumer(broker, group="g", auto_commit=False)
    consumer.subscribe("t")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        polled = pool.submit(consumer.poll, DEADLINE_S)
        _produce(broker, 2)
        records = polled.result(DEADLINE_S)
    assert [r.offset for r in records] == [0, 1]


def test_poll_times_out_with_no_records(broker: Broker) -> None:
    broker.create_topic("t", 1)
    consumer = Consumer(broker, group="g", auto_commit=False)
    consumer.subscribe("t")
    assert consumer.poll(timeout=0.02) == []


def test_poll_without_assignment_is_rejected(broker: Broker) -> None:
    with pytest.raises(InvalidArgumentError, match="subscribe"):
        Consumer(broker, group="g").poll()


def test_poll_auto_commit_does_not_commit_the_records_it_is_returning(broker: Broker) -> None:
    _produce(broker, 3)
    consumer = Consumer(broker, group="g", auto_commit_interval_ms=0)
    consumer.subscribe("t")
    records = consumer.poll()
    assert len(records) == 3
    assert consumer.committed("t", 0) in (None, 0), "a crash now would skip three unprocessed records"


def test_poll_auto_commit_commits_what_earlier_polls_returned(broker: Broker) -> None:
    _produce(broker, 3)
    consumer = Consumer(broker, group="g", auto_commit_interval_ms=0)
    consumer.subscribe("t")
    consumer.poll()
    consumer.poll()
    assert consumer.committed("t", 0) == 3


async def test_a_seek_from_the_handler_takes_effect_after_the_current_record(broker: Broker) -> None:
    _produce(broker, 10)
    consumer = Consumer(broker, group="g", auto_commit=False)
    consumer.subscribe("t")
    seen: list[int] = []

    def handler(_pid: int, offset: int, _record: Record) -> None:
        seen.append(offset)
        if offset == 6 and len(seen) == 7:
            consumer.seek("t", 0, 2)

    assert await consumer.consume("t", handler, max_records=15) == 15
    assert seen == [0, 1, 2, 3, 4, 5, 6, 2, 3, 4, 5, 6, 7, 8, 9]
    assert consumer.position("t", 0) == 10


# -- the handler loop (issue 14: positions per partition and read, one flag per record) -------------


async def test_a_failing_handler_leaves_the_position_at_the_failed_record(broker: Broker) -> None:
    _produce(broker, 5)
    consumer = Consumer(broker, group="g", auto_commit=False)
    consumer.subscribe("t")

    def handler(pid: int, offset: int, record: Record) -> None:
        if offset == 3:
            raise RuntimeError("handler failed")

    with pytest.raises(RuntimeError):
        await consumer.consume("t", handler, idle_timeout=0.01)
    assert consumer.position("t", 0) == 3
    again = Collector()
    assert await consumer.consume("t", again, idle_timeout=0.01) == 2
    assert again.offsets == [3, 4]


async def test_handler_results_that_are_not_awaitable_are_ignored_and_awaitables_awaited(broker: Broker) -> None:
    _produce(broker, 4)
    consumer = Consumer(broker, group="g")
    consumer.subscribe("t")
    awaited: list[int] = []

    async def later(offset: int) -> None:
        awaited.append(offset)

    def handler(pid: int, offset: int, record: Record) -> object:
        return later(offset) if offset % 2 else True  # a plain function returning a coroutine, or a value

    assert await consumer.consume("t", handler, idle_timeout=0.01) == 4
    assert awaited == [1, 3]
    assert consumer.position("t", 0) == 4


async def test_a_seek_of_another_partition_skips_its_records_of_the_current_read(make_broker: MakeBroker) -> None:
    broker = make_broker(partitions=2)
    broker.create_topic("t", 2)
    _produce(broker, 3, partition=0)
    _produce(broker, 3, partition=1)
    consumer = Consumer(broker, group="g", auto_commit=False)
    consumer.subscribe("t")
    seen = Collector()

    def handler(pid: int, offset: int, record: Record) -> None:
        seen(pid, offset, record)
        if (pid, offset) == (0, 0):
            consumer.seek("t", 1, 2)

    assert await consumer.consume("t", handler, max_records=4) == 4
    assert [(p, o) for p, o, _ in seen.seen] == [(0, 0), (0, 1), (0, 2), (1, 2)]
    assert (consumer.position("t", 0), consumer.position("t", 1)) == (3, 3)


async def test_a_wake_up_that_asks_for_nothing_does_not_cut_the_read_short(broker: Broker) -> None:
    _produce(broker, 6)
    consumer = Consumer(broker, group="g", auto_commit=False)
    consumer.subscribe("t")
    seen = Collector()

    def handler(pid: int, offset: int, record: Record) -> None:
        seen(pid, offset, record)
        consumer.resume([("t", 0)])  # wakes the consumer: the loop checks why, and goes on

    assert await consumer.consume("t", handler, idle_timeout=0.01) == 6
    assert seen.offsets == list(range(6))
