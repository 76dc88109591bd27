"""Redis Streams with ``appendonly yes`` + ``appendfsync everysec`` (Debian ``redis-server``), redis-py + hiredis.

A topic with N partitions is N stream keys (``<topic>:<i>``) written round-robin. Produce pipelines
``XADD`` commands (no MULTI) in groups of ``PIPELINE``; consume walks each key with ``XRANGE``
(``COUNT`` per call); the latency phases send each tick's messages as one pipeline on
``redis.asyncio`` (Redis has no client-side linger: a pipeline per tick is its batching) and read
with a blocking ``XREAD`` on a second connection.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import time
import zlib
from pathlib import Path
from typing import Any

import redis
import redis.asyncio as aredis

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

PIPELINE = 1000
READ_COUNT = 2000


def _key(topic: str, i: int) -> str:
    return f"{topic}:{i}"


class RedisStreams(System):
    name = "redis-streams"
    label = "Redis Streams (AOF everysec)"
    kind = "server"
    durability = (
        "appendonly yes, appendfsync everysec: ack after the AOF write(2), fsync once per second "
        "(by a background thread); acked data lost on OS crash: ~1-2 s; RDB snapshots off"
    )
    client = f"redis-py {importlib.metadata.version('redis')} + hiredis: pipelined XADD ({PIPELINE}/round trip), XRANGE"

    def __init__(self) -> None:
        self.server: ServerProcess | None = None
        self.port = 0

    def version(self) -> str:
        return command_version(["redis-server", "--version"])

    def start(self, root: Path) -> None:
        self.port = free_port()
        cmd = [
            "redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(root),
            "--appendonly", "yes", "--appendfsync", "everysec", "--save", "", "--protected-mode", "no",
            "--daemonize", "no", "--logfile", "",
        ]  # fmt: skip
        self.server = ServerProcess("redis-server", cmd, root)
        self.server.start()
        wait_port(self.port, self.server.proc, what="redis-server")

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def server_pid(self) -> int:
        if self.server is None:
            raise BenchError("redis-server not started")
        return self.server.pid

    def _client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port)

    def produce(self, topic: str, partitions: int, values: list[bytes], max_msgs: int, max_seconds: float) -> Produced:
        keys = [_key(topic, i) for i in range(partitions)]
        # Message j goes to stream j % partitions with value j % len(values): the cycle repeats every product.
        entries = [(keys[j % partitions], {"v": values[j % len(values)]}) for j in range(partitions * len(values))]
        return self._pipelined(entries, max_msgs, max_seconds)

    def produce_keyed(
        self, topic: str, partitions: int, records: list[tuple[str, bytes]], max_msgs: int, max_seconds: float
    ) -> Produced | None:
        """Pipelined ``XADD`` of ``{k: key, v: value}`` to the stream ``crc32(key) % partitions`` picks."""
        keys = [_key(topic, i) for i in range(partitions)]
        entries = [(keys[zlib.crc32(key.encode()) % partitions], {"k": key, "v": value}) for key, value in records]
        return self._pipelined(entries, max_msgs, max_seconds)

    def _pipelined(self, entries: list[tuple[str, dict[str, Any]]], max_msgs: int, max_seconds: float) -> Produced:
        """``XADD`` the ``(stream, fields)`` entries in turn, ``PIPELINE`` per round trip."""
        r = self._client()
        try:
            n_entries = len(entries)
            started = time.perf_counter()
            deadline = started + max_seconds
            sent = 0
            while sent < max_msgs and time.perf_counter() < deadline:
                pipe = r.pipeline(transaction=False)
                n = min(PIPELINE, max_msgs - sent)
                for j in range(sent, sent + n):
                    pipe.xadd(*entries[j % n_entries])
                pipe.execute()
                sent += n
            return Produced(sent, time.perf_counter() - started)
        finally:
            r.close()

    def consume(self, topic: str, partitions: int, expected: int, timeout: float) -> Consumed:
        r = self._client()
        try:
            count = nbytes = 0
            started = time.perf_counter()
            for i in range(partitions):
                key = _key(topic, i)
                low: bytes | str = "-"
                while True:
                    entries: Any = r.xrange(key, min=low, max="+", count=READ_COUNT)
                    if not entries:
                        break
                    for _id, fields in entries:
                        nbytes += len(fields[b"v"])
                    count += len(entries)
                    low = b"(" + entries[-1][0]
            seconds = time.perf_counter() - started
            if count < expected:
                raise BenchError(f"redis: consumed {count} of {expected}")
            return Consumed(count, nbytes, seconds)
        finally:
            r.close()

    def ack_latency(self, topic: str, schedule: Schedule, value_size: int) -> AckRun:
        pad = bytes(value_size - 16)
        warm = int(schedule.total * WARMUP_FRACTION)
        key = _key(topic, 0)

        async def go() -> AckRun:
            # at most 32 pipelines in flight; a tick waiting for a connection waits on the clock
            pool = aredis.BlockingConnectionPool(host="127.0.0.1", port=self.port, max_connections=32, timeout=None)
            r = aredis.Redis(connection_pool=pool)
            lat: list[float] = []
            acked = 0
            last = 0.0

            async def send(scheduled: float, first: int, count: int) -> None:
                nonlocal acked, last
                async with r.pipeline(transaction=False) as pipe:
                    for seq in range(first, first + count):
                        pipe.xadd(key, {"v": stamped(scheduled, seq, pad)})
                    await pipe.execute()
                last = time.perf_counter()
                acked += count
                lat.extend([last - scheduled] * max(0, first + count - max(first, warm)))

            try:
                start, _sent = await run_open_async(schedule, send)
            finally:
                await r.aclose()
            return AckRun(lat, acked, last - start)

        return asyncio.run(go())

    def ack_latency_unbatched(self, topic: str, schedule: Schedule, value_size: int) -> AckRun | None:
        """Redis has no client-side linger: the same phase as :meth:`ack_latency` (a pipeline per tick)."""
        return self.ack_latency(topic + ".unbatched", schedule, value_size)

    def e2e(self, topic: str, schedule: Schedule, value_size: int) -> AckRun:
        pad = bytes(value_size - 16)
        total = schedule.total
        warm = int(total * WARMUP_FRACTION)
        key = _key(topic, 0)

        async def go() -> AckRun:
            pool = aredis.BlockingConnectionPool(host="127.0.0.1", port=self.port, max_connections=32, timeout=None)
            w = aredis.Redis(connection_pool=pool)
            rd = aredis.Redis(host="127.0.0.1", port=self.port)
            lat: list[float] = []
            target = [total]  # lowered to what was sent if the sender gave up early
            last = 0.0

            async def reader() -> int:
                nonlocal last
                got = 0
                last_id: Any = "0-0"
                deadline = time.perf_counter() + 3 * schedule.seconds + 30
                while got < target[0] and time.perf_counter() < deadline:
                    res: Any = await rd.xread({key: last_id}, count=READ_COUNT, block=1000)
                    now = time.perf_counter()
                    if res:
                        last = now
                    for _key_name, entries in res or []:
                        for entry_id, fields in entries:
                            scheduled, seq = unstamp(fields[b"v"])
                            if seq >= warm:
                                lat.append(now - scheduled)
                            last_id = entry_id
                            got += 1
                return got

            async def send(scheduled: float, first: int, count: int) -> None:
                async with w.pipeline(transaction=False) as pipe:
                    for seq in range(first, first + count):
                        pipe.xadd(key, {"v": stamped(scheduled, seq, pad)})
                    await pipe.execute()

            try:
                task = asyncio.create_task(reader())
                await asyncio.sleep(0.2)
                start, sent = await run_open_async(schedule, send)
                target[0] = sent
                got = await task
            finally:
                await w.aclose()
                await rd.aclose()
            if got < sent:
                raise BenchError(f"redis: e2e received {got} of {sent}")
            return AckRun(lat, got, last - start)

        return asyncio.run(go())
