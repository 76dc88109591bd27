"""lkstream.client.producer: linger batching, the bounded buffer, flush, delivery handles (embedded Broker)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lkstream import BackpressureError, Broker, InvalidArgumentError, Producer
from lkstream.format.codec import iter_batches
from lkstream.format.produce import RECORD_OVERHEAD


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(persist_dir=str(tmp_path / "data"), partitions=2)
    yield b
    b.close()


def _batch_count(broker: Broker, topic: str, pid: int) -> int:
    return sum(1 for _ in iter_batches(broker.fetch(topic, pid, 0).data))


async def test_linger_batches_many_sends_into_one_batch(broker: Broker) -> None:
    producer = Producer(broker, linger_ms=50)
    futures = [producer.send("t", f"v{i}", partition=1) for i in range(100)]
    results = await asyncio.gather(*futures)
    assert results == [(1, i) for i in range(100)]
    assert _batch_count(broker, "t", 1) == 1
    assert [r.value for r in broker.read_from("t", 1, 0)] == [f"v{i}".encode() for i in range(100)]
    await producer.close()


async def test_batch_bytes_sends_before_linger(broker: Broker) -> None:
    producer = Producer(broker, linger_ms=60_000, batch_bytes=1000)
    futures = [producer.send("t", b"x" * 100, partition=0) for _ in range(30)]
    done, _ = await asyncio.wait(futures[:5], timeout=5)
    assert len(done) == 5  # the first batch went without waiting a minute
    await producer.flush()
    assert [f.result() for f in futures] == [(0, i) for i in range(30)]
    assert 1 < _batch_count(broker, "t", 0) < 30
    assert producer.buffered_bytes == 0


async def test_buffer_overflow_raises_backpressure_naming_the_limit(broker: Broker) -> None:
    producer = Producer(broker, linger_ms=60_000, buffer_bytes=1000)
    accepted = []
    with pytest.raises(BackpressureError, match="1000") as info:
        for _ in range(100):
            accepted.append(producer.send("t", b"y" * 100, partition=0))
    assert info.value.limit == 1000
    assert 0 < len(accepted) < 10
    assert producer.buffered_bytes <= 1000
    await producer.flush()
    assert producer.buffered_bytes == 0
    producer.send("t", b"y" * 100, partition=0)  # room again after the flush
    await producer.close()
    assert broker.describe_topic("t").partitions[0].next_offset == len(accepted) + 1


async def test_flush_delivers_everything_and_futures_carry_partition_and_offset(broker: Broker) -> None:
    producer = Producer(broker, linger_ms=60_000)
    keyed = [producer.send("k", f"v{i}", key=f"key{i}") for i in range(50)]
    explicit = [producer.send("e", b"v", partition=1, headers=[("h", b"1")]) for _ in range(5)]
    await producer.flush()
    assert all(f.done() for f in keyed + explicit)
    assert [f.result() for f in explicit] == [(1, i) for i in range(5)]
    for i, future in enumerate(keyed):
        pid, offset = future.result()
        record = broker.read_from("k", pid, offset, max_msgs=1)[0]
        assert record.value == f"v{i}".encode() and record.key == f"key{i}".encode()
    assert list(broker.read_from("e", 1, 0)[0].headers) == [("h", b"1")]


async def test_failed_produce_fails_the_futures(broker: Broker) -> None:
    producer = Producer(broker, linger_ms=1)
    future = producer.send("t", b"v", partition=7)  # no such partition
    with pytest.raises(Exception, match="partition"):
        await future
    assert producer.buffered_bytes == 0


def test_sync_face_lingers_and_flushes(broker: Broker) -> None:
    with Producer(broker, linger_ms=20) as producer:
        futures = [producer.send_sync("s", f"v{i}", partition=0) for i in range(20)]
        assert [f.result(timeout=10) for f in futures] == [(0, i) for i in range(20)]
        more = [producer.send_sync("s", b"w", partition=0) for _ in range(3)]
        producer.flush_sync()
        assert [f.result(timeout=0) for f in more] == [(0, 20), (0, 21), (0, 22)]
    assert _batch_count(broker, "s", 0) == 2


async def test_linger_zero_sends_on_the_next_loop_turn_without_waiting_for_more(broker: Broker) -> None:
    producer = Producer(broker, linger_ms=0)
    first = producer.send("t", b"a", partition=0)
    assert await asyncio.wait_for(first, timeout=5) == (0, 0)
    second = producer.send("t", b"b", key="k", partition=0)
    assert await asyncio.wait_for(second, timeout=5) == (0, 1)
    assert [(r.key, r.value) for r in broker.read_from("t", 0, 0)] == [(None, b"a"), (b"k", b"b")]
    await producer.close()


async def test_records_with_and_without_headers_share_a_call_in_order(broker: Broker) -> None:
    producer = Producer(broker, linger_ms=60_000)
    futures = [
        producer.send("t", b"plain", partition=0),
        producer.send("t", b"tagged", headers=[("h", b"1")], partition=0),
        producer.send("t", "text", key="k", partition=0),
    ]
    await producer.flush()
    assert [f.result() for f in futures] == [(0, 0), (0, 1), (0, 2)]
    records = broker.read_from("t", 0, 0)
    assert [(r.key, r.value, tuple(r.headers)) for r in records] == [
        (None, b"plain", ()),
        (None, b"tagged", (("h", b"1"),)),
        (b"k", b"text", ()),
    ]
    await producer.close()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ((7, b"v", None, None), "topic"),
        (("t", b"v", None, True), "partition"),  # True == 1: must not slip into partition 1's buffer
        (("t", b"v", None, "1"), "partition"),
        (("t", 3.5, None, None), "value"),
        (("t", b"v", 3.5, None), "key"),
    ],
)
async def test_send_rejects_bad_arguments_even_when_a_buffer_is_filling(
    broker: Broker, call: tuple[object, object, object, object], message: str
) -> None:
    producer = Producer(broker, linger_ms=60_000)
    pending = producer.send("t", b"ok", partition=1)
    topic, value, key, partition = call
    with pytest.raises(InvalidArgumentError, match=message):
        producer.send(topic, value, key, partition=partition)  # type: ignore[arg-type]
    assert producer.buffered_bytes == len(b"ok") + RECORD_OVERHEAD
    await producer.flush()
    assert pending.result() == (1, 0)
    await producer.close()


# -- delivery handles (issue 14: no future per record) ---------------------------------------------


async def test_a_dropped_handle_still_delivers_its_record(broker: Broker) -> None:
    producer = Producer(broker, linger_ms=1)
    for i in range(300):
        producer.send("t", b"v%d" % i, partition=0)  # handles dropped at once
    await producer.flush()
    assert [r.value for r in broker.read_from("t", 0, 0)] == [b"v%d" % i for i in range(300)]
    assert producer.buffered_bytes == 0


async def test_a_pending_handle_refuses_result_and_reports_its_state(broker: Broker) -> None:
    producer = Producer(broker, linger_ms=60_000)
    handle = producer.send("t", b"v", partition=0)
    assert not handle.done() and not handle.cancelled() and not handle.cancel()
    with pytest.raises(asyncio.InvalidStateError):
        handle.result()
    with pytest.raises(asyncio.InvalidStateError):
        handle.exception()
    assert "pending" in repr(handle)
    await producer.flush()
    assert handle.done() and handle.exception() is None and "acknowledged" in repr(handle)
    assert await handle == (0, 0)  # awaiting a finished handle returns at once


async def test_done_callbacks_run_on_the_loop_after_the_ack_and_when_added_late(broker: Broker) -> None:
    producer = Producer(broker, linger_ms=1)
    seen: list[tuple[str, tuple[int, int]]] = []
    early = producer.send("t", b"a", partition=0)
    early.add_done_callback(lambda h: seen.append(("early", h.result())))
    removed = producer.send("t", b"b", partition=0)

    def never(h: object) -> None:
        raise AssertionError("removed callbacks must not run")

    removed.add_done_callback(never)
    assert removed.remove_done_callback(never) == 1
    assert seen == []  # not called inside send
    await early
    await asyncio.sleep(0)  # callbacks are scheduled with call_soon, as for asyncio futures
    early.add_done_callback(lambda h: seen.append(("late", h.result())))
    await asyncio.sleep(0)
    assert seen == [("early", (0, 0)), ("late", (0, 0))]
    await producer.close()


async def test_a_failed_call_fails_every_handle_of_its_batch(broker: Broker) -> None:
    producer = Producer(broker, linger_ms=60_000)
    handles = [producer.send("t", b"v", partition=9) for _ in range(5)]  # no such partition
    await producer.flush()
    for handle in handles:
        assert isinstance(handle.exception(), InvalidArgumentError)
        with pytest.raises(InvalidArgumentError):
            await handle
    assert "failed" in repr(handles[0])


async def test_handles_work_with_gather_wait_for_and_wait(broker: Broker) -> None:
    producer = Producer(broker, linger_ms=2)
    handles = [producer.send("t", b"v", partition=1) for _ in range(3)]
    assert await asyncio.gather(*handles) == [(1, 0), (1, 1), (1, 2)]
    more = producer.send("t", b"w", partition=1)
    done, pending = await asyncio.wait([asyncio.ensure_future(more)], timeout=5)
    assert len(done) == 1 and not pending
    assert await asyncio.wait_for(producer.send("t", b"x", partition=1), timeout=5) == (1, 4)
    await producer.close()


async def test_pending_records_hold_no_gc_tracked_object_per_record(broker: Broker) -> None:
    """A future per pending record kept ~5,000 tracked objects alive per linger: 24-26% of send's time in GC."""
    producer = Producer(broker, linger_ms=60_000)
    producer.send("t", b"warm", partition=0)
    gc.collect()
    before = len(gc.get_objects())
    for _ in range(10_000):
        producer.send("t", b"v" * 20, partition=0)
    gc.collect()  # untracks the (key, value) tuples: they hold only bytes and None
    assert len(gc.get_objects()) - before < 50
    await producer.close()


def test_sync_handles_time_out_block_and_call_back_from_the_completing_thread(broker: Broker) -> None:
    producer = Producer(broker, linger_ms=60_000)
    handle = producer.send_sync("s", b"v", partition=0)
    with pytest.raises(concurrent.futures.TimeoutError):
        handle.result(timeout=0.01)
    threads: list[str] = []
    handle.add_done_callback(lambda h: threads.append(threading.current_thread().name))
    flusher = threading.Thread(target=producer.flush_sync, name="flusher")
    flusher.start()
    assert handle.result(timeout=10) == (0, 0)
    flusher.join()
    assert threads == ["flusher"]
    handle.add_done_callback(lambda h: threads.append("now"))  # already done: runs at once
    assert threads == ["flusher", "now"]
    assert handle.exception(timeout=0) is None
    producer.close_sync()


def test_sync_handles_carry_the_error_of_their_batch(broker: Broker) -> None:
    with Producer(broker, linger_ms=60_000) as producer:
        handle = producer.send_sync("s", b"v", partition=5)
        producer.flush_sync()
        assert isinstance(handle.exception(timeout=1), InvalidArgumentError)
        with pytest.raises(InvalidArgumentError):
            handle.result(timeout=1)


async def test_both_faces_share_the_bound_and_give_every_byte_back(broker: Broker) -> None:
    size = RECORD_OVERHEAD + 100
    producer = Producer(broker, linger_ms=60_000, buffer_bytes=3 * size)
    blocking = await asyncio.to_thread(producer.send_sync, "s", b"b" * 100, partition=0)
    producer.send("a", b"a" * 100, partition=0)
    producer.send("a", b"a" * 100, partition=0)
    assert producer.buffered_bytes == 3 * size
    with pytest.raises(BackpressureError):
        producer.send("a", b"a" * 100, partition=0)
    with pytest.raises(BackpressureError):
        producer.send_sync("s", b"b" * 100, partition=0)
    await producer.flush()
    assert producer.buffered_bytes == size  # the blocking face's record is still lingering
    await asyncio.to_thread(producer.flush_sync)
    assert blocking.result(timeout=5) == (0, 0)
    assert producer.buffered_bytes == 0


class HeldCalls:
    """A real broker behind a gate: each produce call waits until the test opens the gate, and is counted."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.calls: list[int] = []  # records per call, in call order
        self.gate = asyncio.Event()
        self.sync_gate = threading.Event()

    async def produce_many(self, topic: str, records: Any, **kwargs: Any) -> list[tuple[int, int]]:
        raise AssertionError("the Producer uses produce_many_view when the target has it")

    async def produce_many_view(self, topic: str, records: Any, **kwargs: Any) -> Any:
        """The embedded broker's answer as a view (offsets computed when read), as the Producer gets it."""
        self.calls.append(len(records))
        await self.gate.wait()
        return await self.broker.produce_many_view(topic, records, **kwargs)

    def produce_many_sync(self, topic: str, records: Any, **kwargs: Any) -> list[tuple[int, int]]:
        self.calls.append(len(records))
        assert self.sync_gate.wait(10), "the test never opened the gate"
        return self.broker.produce_many_sync(topic, records, **kwargs)


async def _wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.001)


async def _ticks_behind_a_held_call(producer: Producer, held: HeldCalls, ticks: int, partition: int = 0) -> list[Any]:
    """Send ``ticks`` batches of 10 records (linger 0: each tick's sends are sealed on the next loop turn)
    while the first tick's call is held; return every handle in send order."""
    handles = [producer.send("t", f"0.{i}".encode(), partition=partition) for i in range(10)]
    await _wait_for(lambda: held.calls, "the first call")
    for tick in range(1, ticks):
        handles += [producer.send("t", f"{tick}.{i}".encode(), partition=partition) for i in range(10)]
        await asyncio.sleep(0)  # the tick's batch is sealed and queued behind the held call
    return handles


async def test_batches_sealed_while_a_call_is_out_go_together_in_the_next_call(broker: Broker) -> None:
    held = HeldCalls(broker)
    producer = Producer(held, linger_ms=0)
    handles = await _ticks_behind_a_held_call(producer, held, ticks=6)
    assert held.calls == [10]
    held.gate.set()
    await producer.flush()
    assert held.calls == [10, 50]  # not five calls of 10 queued one behind the other
    assert [await h for h in handles] == [(0, i) for i in range(60)]
    assert [r.value for r in broker.read_from("t", 0, 0)] == [f"{t}.{i}".encode() for t in range(6) for i in range(10)]
    assert producer.buffered_bytes == 0


async def test_a_call_carries_waiting_batches_only_up_to_batch_bytes(broker: Broker) -> None:
    held = HeldCalls(broker)
    producer = Producer(held, linger_ms=0, batch_bytes=25 * (RECORD_OVERHEAD + 3))  # values are 3 bytes
    handles = await _ticks_behind_a_held_call(producer, held, ticks=6)
    held.gate.set()
    await producer.flush()
    assert held.calls == [10, 20, 20, 10]  # two waiting batches of 10 fit in 25 records' bytes, three do not
    assert [await h for h in handles] == [(0, i) for i in range(60)]


async def test_a_failed_call_fails_every_batch_it_carried(broker: Broker) -> None:
    held = HeldCalls(broker)
    producer = Producer(held, linger_ms=0)
    handles = await _ticks_behind_a_held_call(producer, held, ticks=3, partition=9)  # no such partition
    held.gate.set()
    await producer.flush()
    assert held.calls == [10, 20]
    for handle in handles:
        assert isinstance(handle.exception(), InvalidArgumentError)
    assert producer.buffered_bytes == 0
    assert await producer.send("t", b"after", partition=0) == (0, 0)  # the slot's lock was given back
    await producer.close()


def test_the_sync_face_sends_batches_sealed_meanwhile_in_one_call(broker: Broker) -> None:
    held = HeldCalls(broker)
    producer = Producer(held, linger_ms=60_000)

    def three(value: bytes) -> list[Any]:
        """Three records, then sealed and sent by this thread (flush_sync), as a linger timer would."""
        handles = [producer.send_sync("s", value, partition=0) for _ in range(3)]
        producer.flush_sync()
        return handles

    def wait_until(condition: Any) -> None:
        deadline = time.monotonic() + 10
        while not condition():
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.001)

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        first = pool.submit(three, b"a")
        wait_until(lambda: held.calls)  # the first call is out, held
        second = pool.submit(three, b"b")
        wait_until(lambda: producer.buffered_bytes == 6 * (RECORD_OVERHEAD + 1) and not producer._sfilling)
        third = pool.submit(three, b"c")
        wait_until(lambda: producer.buffered_bytes == 9 * (RECORD_OVERHEAD + 1) and not producer._sfilling)
        held.sync_gate.set()
        handles = first.result(10) + second.result(10) + third.result(10)
    assert held.calls == [3, 6]
    assert [h.result(timeout=5) for h in handles] == [(0, i) for i in range(9)]
    assert producer.buffered_bytes == 0
    producer.close_sync()
