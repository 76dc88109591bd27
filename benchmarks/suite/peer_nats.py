"""NATS JetStream with file storage (Debian ``nats-server``), driven by nats-py.

A "topic" with N partitions is N streams (``<topic>_<i>``, subject ``<topic>.<i>``), published to
round-robin: a stream is JetStream's unit of order, as a partition is Kafka's. Produce uses
``publish_async`` (acks are futures, at most ``MAX_PENDING`` outstanding); consume and e2e use an
ordered push consumer (no acks, flow control), JetStream's fastest way to read a stream in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
from nats.js.api import StorageType

from benchmarks.suite.base import WARMUP_FRACTION, AckRun, Consumed, Produced, System
from benchmarks.suite.core import (
    BenchError,
    Schedule,
    ServerProcess,
    command_version,
    free_port,
    run_open_async,
    stamped,
    unstamp,
    wait_port,
)

MAX_PENDING = 4000  # outstanding publish_async acks (nats-py's default is 4000)


def _stream(topic: str, i: int) -> str:
    return f"{topic.replace('.', '_')}_{i}"


class NatsJetStream(System):
    name = "nats-jetstream"
    label = "NATS JetStream (file)"
    kind = "server"
    durability = (
        "file storage, default sync: ack after the write reaches the OS, fsync by the filestore's "
        "periodic sync (NATS documents a 2 min default; v2.9 has no sync_interval option); "
        "acked data lost on OS crash: up to ~2 min"
    )
    client = (
        f"nats-py {importlib.metadata.version('nats-py')}: publish_async (<= {MAX_PENDING} pending), "
        "ordered push consumer"
    )

    def __init__(self) -> None:
        self.server: ServerProcess | None = None
        self.url = ""

    def version(self) -> str:
        return command_version(["nats-server", "--version"])

    def start(self, root: Path) -> None:
        port = free_port()
        store = root / "jetstream"
        conf = root / "nats.conf"
        conf.write_text(
            f"listen: 127.0.0.1:{port}\n"
            "max_payload: 8MB\n"
            f'jetstream {{\n  store_dir: "{store}"\n  max_file_store: 20GB\n  max_memory_store: 256MB\n}}\n'
        )
        self.server = ServerProcess("nats-server", ["nats-server", "-c", str(conf)], root)
        self.server.start()
        wait_port(port, self.server.proc, what="nats-server")
        self.url = f"nats://127.0.0.1:{port}"

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def server_pid(self) -> int:
        if self.server is None:
            raise BenchError("nats-server not started")
        return self.server.pid

    async def _connect(self) -> Any:
        nc = await nats.connect(self.url, pending_size=256 * 1024 * 1024)
        return nc

    async def _streams(self, js: Any, topic: str, partitions: int) -> list[str]:
        subjects = []
        for i in range(partitions):
            await js.add_stream(name=_stream(topic, i), subjects=[f"{topic}.{i}"], storage=StorageType.FILE)
            subjects.append(f"{topic}.{i}")
        return subjects

    def produce(self, topic: str, partitions: int, values: list[bytes], max_msgs: int, max_seconds: float) -> Produced:
        # Message j goes to stream j % partitions with value j % len(values), no headers.
        return self._publish(
            topic,
            partitions,
            lambda subjects: [
                (subjects[j % partitions], values[j % len(values)], None) for j in range(partitions * len(values))
            ],
            max_msgs,
            max_seconds,
        )

    def produce_keyed(
        self, topic: str, partitions: int, records: list[tuple[str, bytes]], max_msgs: int, max_seconds: float
    ) -> Produced | None:
        """``publish_async`` to the stream ``crc32(key) % partitions`` picks, the key in a header."""
        return self._publish(
            topic,
            partitions,
            lambda subjects: [
                (subjects[zlib.crc32(key.encode()) % partitions], value, {"k": key}) for key, value in records
            ],
            max_msgs,
            max_seconds,
        )

    def _publish(
        self,
        topic: str,
        partitions: int,
        messages: Callable[[list[str]], list[tuple[str, bytes, dict[str, str] | None]]],
        max_msgs: int,
        max_seconds: float,
    ) -> Produced:
        """``publish_async`` the ``(subject, payload, headers)`` that ``messages(subjects)`` gives, in turn."""

        async def go() -> Produced:
            nc = await self._connect()
            try:
                js = nc.jetstream(publish_async_max_pending=MAX_PENDING)
                batch = messages(await self._streams(js, topic, partitions))
                acked = failed = 0

                def done(fut: asyncio.Future[Any]) -> None:
                    nonlocal acked, failed
                    if fut.cancelled() or fut.exception() is not None:
                        failed += 1
                    else:
                        acked += 1

                n_batch = len(batch)
                started = time.perf_counter()
                deadline = started + max_seconds
                sent = 0
                while sent < max_msgs:
                    subject, payload, headers = batch[sent % n_batch]
                    fut = await js.publish_async(subject, payload, headers=headers)
                    fut.add_done_callback(done)
                    sent += 1
                    if sent % 1000 == 0 and time.perf_counter() > deadline:
                        break
                await asyncio.wait_for(js.publish_async_completed(), 60)
                seconds = time.perf_counter() - started
                if failed:
                    raise BenchError(f"nats: {failed} of {sent} publishes failed")
                return Produced(acked, seconds)
            finally:
                await nc.close()

        return asyncio.run(go())

    async def _read(
        self, js: Any, topic: str, partitions: int, *, expected: list[int], timeout: float, on_msg: Any
    ) -> int:
        """Read until ``expected[0]`` messages arrived (the caller may lower it while this runs)."""
        count = 0
        done = asyncio.Event()

        async def cb(msg: Any) -> None:
            nonlocal count
            on_msg(msg)
            count += 1
            if count >= expected[0]:
                done.set()

        subs = []
        for i in range(partitions):
            subs.append(
                await js.subscribe(
                    f"{topic}.{i}",
                    stream=_stream(topic, i),
                    cb=cb,
                    ordered_consumer=True,
                    pending_msgs_limit=1_000_000,
                    pending_bytes_limit=512 * 1024 * 1024,
                )
            )
        deadline = time.perf_counter() + timeout
        while not done.is_set() and count < expected[0] and time.perf_counter() < deadline:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), 0.01)
        for sub in subs:
            await sub.unsubscribe()
        return count

    def consume(self, topic: str, partitions: int, expected: int, timeout: float) -> Consumed:
        async def go() -> Consumed:
            nc = await self._connect()
            try:
                js = nc.jetstream()
                nbytes = 0

                def on_msg(msg: Any) -> None:
                    nonlocal nbytes
                    nbytes += len(msg.data)

                started = time.perf_counter()
                count = await self._read(js, topic, partitions, expected=[expected], timeout=timeout, on_msg=on_msg)
                seconds = time.perf_counter() - started
                if count < expected:
                    raise BenchError(f"nats: consumed {count} of {expected}")
                return Consumed(count, nbytes, seconds)
            finally:
                await nc.close()

        return asyncio.run(go())

    def ack_latency(self, topic: str, schedule: Schedule, value_size: int) -> AckRun:
        pad = bytes(value_size - 16)
        warm = int(schedule.total * WARMUP_FRACTION)

        async def go() -> AckRun:
            nc = await self._connect()
            try:
                js = nc.jetstream(publish_async_max_pending=MAX_PENDING)
                (subject,) = await self._streams(js, topic, 1)
                lat: list[float] = []
                acked = 0
                last = 0.0

                def done(fut: asyncio.Future[Any], scheduled: float, seq: int) -> None:
                    nonlocal acked, last
                    if fut.cancelled() or fut.exception() is not None:
                        return
                    last = time.perf_counter()
                    acked += 1
                    if seq >= warm:
                        lat.append(last - scheduled)

                async def send(scheduled: float, first: int, count: int) -> None:
                    for seq in range(first, first + count):
                        fut = await js.publish_async(subject, stamped(scheduled, seq, pad))
                        fut.add_done_callback(lambda f, s=scheduled, q=seq: done(f, s, q))

                start, _sent = await run_open_async(schedule, send)
                await asyncio.wait_for(js.publish_async_completed(), 60)
                return AckRun(lat, acked, last - start)
            finally:
                await nc.close()

        return asyncio.run(go())

    def ack_latency_unbatched(self, topic: str, schedule: Schedule, value_size: int) -> AckRun | None:
        """nats-py does not linger: the same phase as :meth:`ack_latency` (``publish_async`` per message)."""
        return self.ack_latency(topic + ".unbatched", schedule, value_size)

    def e2e(self, topic: str, schedule: Schedule, value_size: int) -> AckRun:
        pad = bytes(value_size - 16)
        total = schedule.total
        warm = int(total * WARMUP_FRACTION)

        async def go() -> AckRun:
            nc = await self._connect()
            try:
                js = nc.jetstream(publish_async_max_pending=MAX_PENDING)
                (subject,) = await self._streams(js, topic, 1)
                lat: list[float] = []
                last = 0.0

                def on_msg(msg: Any) -> None:
                    nonlocal last
                    now = last = time.perf_counter()
                    scheduled, seq = unstamp(msg.data)
                    if seq >= warm:
                        lat.append(now - scheduled)

                target = [total]
                reader = asyncio.create_task(
                    self._read(js, topic, 1, expected=target, timeout=3 * schedule.seconds + 30, on_msg=on_msg)
                )
                await asyncio.sleep(0.2)

                async def send(scheduled: float, first: int, count: int) -> None:
                    for seq in range(first, first + count):
                        await js.publish_async(subject, stamped(scheduled, seq, pad))

                start, sent = await run_open_async(schedule, send)
                target[0] = sent
                got = await reader
                if got < sent:
                    raise BenchError(f"nats: e2e received {got} of {sent}")
                return AckRun(lat, got, last - start)
            finally:
                await nc.close()

        return asyncio.run(go())
