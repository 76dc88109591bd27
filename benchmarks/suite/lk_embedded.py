"""LKSTREAM embedded: ``lkstream.Broker`` in the runner's process, ``Producer`` and ``Consumer`` on it.

The same code drives the daemon (:mod:`benchmarks.suite.lk_daemon`) through
``lkstream.connect``: both expose the one public surface (``produce_many``, ``create_topic``,
``Producer(target)``, ``Consumer(target)``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import lkstream
from benchmarks.suite.base import WARMUP_FRACTION, AckRun, Consumed, Produced, System, own_pid
from benchmarks.suite.core import BenchError, Schedule, run_open_async, run_open_sequential, stamped, unstamp
from lkstream import BackpressureError, Broker, Consumer, Delivery, Producer

BATCH = 1000  # records per produce_many call, as in benchmarks/e2e/bench_producer.py
THROUGHPUT_LINGER_MS = 5.0  # the Producer's default
LATENCY_LINGER_MS = 1.0  # latency phases: at most 1 ms of client batching, as for the peers
GROUP_DURABILITY = (
    "fsync_mode=group: ack after write(2), fdatasync within 100 ms or 128 KiB (whichever first); "
    "acked data lost on OS crash: < 100 ms"
)


class LkSystem(System):
    """Shared driver over a Broker or a RemoteBroker (``self.target``)."""

    target: Any = None

    def version(self) -> str:
        return f"lkstream {lkstream.__version__}"

    # -- closed loop -------------------------------------------------------------------------------

    def _create(self, topic: str, partitions: int) -> None:
        self.target.create_topic(topic, partitions)

    def produce(self, topic: str, partitions: int, values: list[bytes], max_msgs: int, max_seconds: float) -> Produced:
        self._create(topic, partitions)

        async def go() -> Produced:
            producer = Producer(self.target, linger_ms=THROUGHPUT_LINGER_MS)
            n_values = len(values)
            started = time.perf_counter()
            deadline = started + max_seconds
            sent = 0
            while sent < max_msgs:
                try:
                    producer.send(topic, values[sent % n_values])
                except BackpressureError:
                    await asyncio.sleep(0.0005)  # the buffer is full: let the sends drain
                    continue
                sent += 1
                if sent % 1000 == 0:
                    await asyncio.sleep(0)  # let lingering sends start
                    if time.perf_counter() > deadline:
                        break
            await producer.flush()
            seconds = time.perf_counter() - started
            await producer.close()
            return Produced(sent, seconds)

        return asyncio.run(go())

    def produce_many(
        self, topic: str, partitions: int, values: list[bytes], max_msgs: int, max_seconds: float
    ) -> Produced | None:
        self._create(topic, partitions)
        calls = [[(None, values[(i + j) % len(values)]) for j in range(BATCH)] for i in range(8)]
        return self._produce_calls(topic, calls, max_msgs, max_seconds)

    def produce_keyed(
        self, topic: str, partitions: int, records: list[tuple[str, bytes]], max_msgs: int, max_seconds: float
    ) -> Produced | None:
        """The seed's pattern: ``produce_many`` of 1,000 ``str``-keyed records, routed by key."""
        self._create(topic, partitions)
        calls = [[records[(i * BATCH + j) % len(records)] for j in range(BATCH)] for i in range(16)]
        return self._produce_calls(topic, calls, max_msgs, max_seconds)

    def _produce_calls(self, topic: str, calls: list[list[Any]], max_msgs: int, max_seconds: float) -> Produced:
        """``produce_many`` of each call in turn, until ``max_msgs`` or ``max_seconds``."""

        async def go() -> Produced:
            started = time.perf_counter()
            deadline = started + max_seconds
            sent = i = 0
            while sent < max_msgs and time.perf_counter() < deadline:
                await self.target.produce_many(topic, calls[i % len(calls)])
                sent += BATCH
                i += 1
            return Produced(sent, time.perf_counter() - started)

        return asyncio.run(go())

    def consume(self, topic: str, partitions: int, expected: int, timeout: float) -> Consumed:
        consumer = Consumer(self.target, auto_offset_reset="earliest", auto_commit=False)
        consumer.subscribe(topic, from_committed=False)
        nbytes = 0

        def handler(pid: int, offset: int, record: Any) -> None:
            nonlocal nbytes
            nbytes += len(record.value)

        started = time.perf_counter()
        count = asyncio.run(consumer.consume(topic, handler, max_records=expected, idle_timeout=timeout))
        seconds = time.perf_counter() - started
        if count < expected:
            raise BenchError(f"{self.name}: consumed {count} of {expected} from {topic}")
        return Consumed(count, nbytes, seconds)

    # -- open model --------------------------------------------------------------------------------

    def ack_latency(self, topic: str, schedule: Schedule, value_size: int) -> AckRun:
        return self._ack_latency(topic, schedule, value_size, LATENCY_LINGER_MS)

    def ack_latency_unbatched(self, topic: str, schedule: Schedule, value_size: int) -> AckRun | None:
        return self._ack_latency(topic, schedule, value_size, 0.0)

    def ack_latency_one_call(self, topic: str, schedule: Schedule, value_size: int) -> AckRun | None:
        """``await produce_many(topic, [(None, value)])`` per message, one call in flight at a time."""
        self._create(topic, 1)
        pad = bytes(value_size - 16)
        warm = int(schedule.total * WARMUP_FRACTION)

        async def go() -> AckRun:
            lat: list[float] = []
            acked = 0
            last = 0.0

            async def send(scheduled: float, first: int, count: int) -> None:
                nonlocal acked, last
                for seq in range(first, first + count):
                    await self.target.produce_many(topic, [(None, stamped(scheduled, seq, pad))])
                    last = time.perf_counter()
                    acked += 1
                    if seq >= warm:
                        lat.append(last - scheduled)

            start, _sent = await run_open_sequential(schedule, send)
            return AckRun(lat, acked, last - start)

        return asyncio.run(go())

    def _ack_latency(self, topic: str, schedule: Schedule, value_size: int, linger_ms: float) -> AckRun:
        self._create(topic, 1)
        pad = bytes(value_size - 16)
        warm = int(schedule.total * WARMUP_FRACTION)

        async def go() -> AckRun:
            lat: list[float] = []
            acked = 0
            last = 0.0
            producer = Producer(self.target, linger_ms=linger_ms)

            def send(scheduled: float, first: int, count: int) -> Awaitable[None] | None:
                for seq in range(first, first + count):
                    try:
                        fut = producer.send(topic, stamped(scheduled, seq, pad))
                    except BackpressureError:
                        # The Producer's buffer is full (the sender is past what the broker
                        # absorbs): finish this tick in a task that waits for room, as a user would.
                        return finish(scheduled, first, count, seq)
                watch(fut, scheduled, first, count)
                return None

            async def finish(scheduled: float, first: int, count: int, seq: int) -> None:
                while seq < first + count:
                    try:
                        fut = producer.send(topic, stamped(scheduled, seq, pad))
                    except BackpressureError:
                        await asyncio.sleep(0.001)
                        continue
                    seq += 1
                watch(fut, scheduled, first, count)

            def watch(fut: Delivery, scheduled: float, first: int, count: int) -> None:
                # One callback per tick, on its last record: a Producer sends one topic's records
                # in order, one call at a time, so when the last is acked every earlier one is.
                # Each record of the tick gets that (upper-bound) latency.
                fut.add_done_callback(functools.partial(done, scheduled=scheduled, first=first, count=count))

            def done(fut: Delivery, scheduled: float, first: int, count: int) -> None:
                nonlocal acked, last
                if fut.cancelled() or fut.exception() is not None:
                    return
                last = time.perf_counter()
                acked += count
                lat.extend([last - scheduled] * max(0, first + count - max(first, warm)))

            start, _sent = await run_open_async(schedule, send)
            await producer.flush()
            await producer.close()
            return AckRun(lat, acked, last - start)

        return asyncio.run(go())

    def e2e(self, topic: str, schedule: Schedule, value_size: int) -> AckRun:
        self._create(topic, 1)
        pad = bytes(value_size - 16)
        total = schedule.total
        warm = int(total * WARMUP_FRACTION)

        async def go() -> AckRun:
            lat: list[float] = []
            received = 0
            last = 0.0
            consumer = Consumer(self.target, auto_offset_reset="earliest", auto_commit=False)
            consumer.subscribe(topic, from_committed=False)

            def handler(pid: int, offset: int, record: Any) -> None:
                nonlocal received, last
                now = last = time.perf_counter()
                scheduled, seq = unstamp(record.value)
                received += 1
                if seq >= warm:
                    lat.append(now - scheduled)

            reader = asyncio.create_task(consumer.consume(topic, handler, max_records=total, idle_timeout=30))
            await asyncio.sleep(0.2)  # the consumer is waiting for data
            producer = Producer(self.target, linger_ms=LATENCY_LINGER_MS)

            def send(scheduled: float, first: int, count: int) -> Awaitable[None] | None:
                for seq in range(first, first + count):
                    try:
                        producer.send(topic, stamped(scheduled, seq, pad))
                    except BackpressureError:
                        return finish(scheduled, seq, first + count)
                return None

            async def finish(scheduled: float, seq: int, end: int) -> None:
                while seq < end:
                    try:
                        producer.send(topic, stamped(scheduled, seq, pad))
                        seq += 1
                    except BackpressureError:
                        await asyncio.sleep(0.001)

            start, sent = await run_open_async(schedule, send)
            await producer.flush()
            await producer.close()
            deadline = time.perf_counter() + 30
            while received < sent and time.perf_counter() < deadline:
                await asyncio.sleep(0.01)
            consumer.stop()  # only needed when the sender gave up early (fewer than max_records)
            done, _ = await asyncio.wait({reader}, timeout=1.0)
            if not done:  # stop() takes effect after the consumer's current wait for data
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader
            if received < sent:
                raise BenchError(f"{self.name}: e2e received {received} of {sent}")
            return AckRun(lat, received, last - start)

        return asyncio.run(go())


class LkEmbedded(LkSystem):
    name = "lkstream-embedded"
    label = "LKSTREAM embedded"
    kind = "embedded"
    durability = GROUP_DURABILITY
    client = (
        "in-process lkstream.Broker + Producer (linger 5 ms; 1 ms in latency phases, 0 in the unbatched one) "
        "+ Consumer; produce_many of 1,000 for the keyed phase"
    )

    def start(self, root: Path) -> None:
        self.target = Broker(persist_dir=str(root / "data"), fsync_mode="group", fsync_interval_ms=100)

    def stop(self) -> None:
        if self.target is not None:
            self.target.close()
            self.target = None

    def server_pid(self) -> int:
        return own_pid()


class LkEmbeddedNoFsync(LkEmbedded):
    """The embedded broker with ``fsync_mode=none``: the durability closest to NATS's and Tansu's."""

    name = "lkstream-embedded-none"
    label = "LKSTREAM embedded, fsync none"
    durability = (
        "fsync_mode=none: ack after write(2), the OS writes back when it likes; acked data lost on "
        "OS crash: up to the kernel's dirty-page expiry (30 s by default)"
    )

    def start(self, root: Path) -> None:
        self.target = Broker(persist_dir=str(root / "data"), fsync_mode="none")
