"""LKSTREAM daemon through its HTTP JSON API (docs/http.md), driven by one aiohttp client.

The daemon is the one :mod:`benchmarks.suite.lk_daemon` starts (:class:`bench_daemon.DaemonProcess`:
fsync_mode group, free ports on 127.0.0.1, stopped by PID); its HTTP address comes from the ready
line (:func:`bench_http.http_address`). What a user of the API would write:

* the suite's payloads are random bytes (not UTF-8), so every value travels as
  ``{"base64": ...}`` both ways (consumes ask for ``"encoding": "base64"`` and decode each value);
  bodies are built and parsed with ``json`` inside the timed loops, as a client must;
* produce (closed loop): ``POST /produce`` of :data:`BATCH` records per request, spread
  round-robin over the topic's partitions (one ``topic_partitions`` entry each), one request in
  flight on one keep-alive connection: records of a partition stay in order, as with the Producer;
* consume from the start: ``POST /consume`` of every partition with its own ``fetch_offset`` and
  byte budgets (:data:`CONSUME_MAX_BYTES` over all, an equal share each) until all arrived;
* ack latency (open model): each tick's records join a queue; one sender posts whatever is
  queued (at most :data:`BATCH` records) as soon as the previous request is answered. This is the
  HTTP twin of the Producer's one-call-at-a-time sending with linger: under load the requests
  grow, at low rates they carry one tick each. A record's latency runs from its tick's scheduled
  time to the answer of the request that carried it;
* produce-to-consume: the same sender, plus a reader on its own connection long-polling
  ``POST /consume`` (``max_wait_ms``), which the broker wakes on append.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import aiohttp

import lkstream
from benchmarks.e2e.bench_daemon import DaemonProcess
from benchmarks.e2e.bench_http import http_address
from benchmarks.suite.base import WARMUP_FRACTION, AckRun, Consumed, Produced, System
from benchmarks.suite.core import BenchError, Schedule, run_open_async, stamped, unstamp
from benchmarks.suite.lk_embedded import GROUP_DURABILITY

BATCH = 1000  # records per produce request, as benchmarks/e2e/bench_http.py and the embedded produce_many
CONSUME_MAX_BYTES = 8 * 1024 * 1024  # batch bytes per consume response (all partitions)
LONG_POLL_MS = 1000  # e2e reader: how long one consume may wait for data
RETRY_S = (
    0.005  # a 429 (backpressure) or 503 is retried after this (the server says 1 s; a benchmark can't idle that long)
)
JSON_HEADERS = {"Content-Type": "application/json"}


def b64(value: bytes) -> dict[str, str]:
    return {"base64": base64.b64encode(value).decode("ascii")}


def produce_body(topic: str, per_partition: list[list[bytes]]) -> str:
    """A ``POST /produce`` body: one entry per non-empty partition, values base64-encoded."""
    entries = [
        {"topic": topic, "partition": p, "records": [b64(v) for v in values]}
        for p, values in enumerate(per_partition)
        if values
    ]
    return json.dumps({"topic_partitions": entries})


def record_values(partition: dict[str, Any]) -> list[bytes]:
    """The decoded values of one partition of a ``POST /consume`` answer (``encoding: base64``)."""
    return [base64.b64decode(r["value"]["base64"]) for r in partition["records"]]


class LkHttp(System):
    name = "lkstream-http"
    label = "LKSTREAM daemon (HTTP JSON)"
    kind = "server"
    durability = GROUP_DURABILITY + " (the same daemon as the gRPC row)"
    client = (
        f"aiohttp {aiohttp.__version__}, one keep-alive connection, one request in flight: POST /produce "
        f"({BATCH} base64 records per request; latency phases: whatever is queued, at most {BATCH}), "
        f"POST /consume (base64, {CONSUME_MAX_BYTES // 1024**2} MiB per response; e2e: long poll "
        f"max_wait_ms={LONG_POLL_MS})"
    )

    def __init__(self) -> None:
        self.daemon: DaemonProcess | None = None
        self.url = ""

    def version(self) -> str:
        return f"lkstream {lkstream.__version__}"

    def start(self, root: Path) -> None:
        self.daemon = DaemonProcess(root)
        try:
            self.daemon.wait_ready()
            self.url = "http://" + http_address(self.daemon)
        except SystemExit as exc:  # bench_daemon / bench_http report start failures as SystemExit
            self.daemon.stop()
            self.daemon = None
            raise BenchError(str(exc)) from None

    def stop(self) -> None:
        if self.daemon is not None:
            self.daemon.stop()
            self.daemon = None

    def server_pid(self) -> int:
        if self.daemon is None:
            raise BenchError("daemon not started")
        return int(self.daemon.pid)

    # -- requests ----------------------------------------------------------------------------------

    async def _post(self, session: aiohttp.ClientSession, route: str, body: str) -> Any:
        """POST ``body``; the decoded answer. 429 and 503 are retried; any other error raises."""
        while True:
            async with session.post(self.url + route, data=body, headers=JSON_HEADERS) as response:
                payload = await response.read()
                if response.status in (429, 503):
                    await asyncio.sleep(RETRY_S)
                    continue
                if response.status not in (200, 201):
                    raise BenchError(f"{self.name}: {route} answered {response.status}: {payload[:300]!r}")
                return json.loads(payload)

    async def _create(self, session: aiohttp.ClientSession, topic: str, partitions: int) -> None:
        async with session.post(
            self.url + "/topics", data=json.dumps({"name": topic, "partitions": partitions}), headers=JSON_HEADERS
        ) as response:
            payload = await response.read()
            if response.status not in (201, 409):  # 409: it exists already
                raise BenchError(f"{self.name}: POST /topics answered {response.status}: {payload[:300]!r}")

    async def _produce(self, session: aiohttp.ClientSession, topic: str, per_partition: list[list[bytes]]) -> int:
        """One ``POST /produce``; the number of records acknowledged (a failed entry raises)."""
        answer = await self._post(session, "/produce", produce_body(topic, per_partition))
        acked = 0
        for result in answer["results"]:
            if "error" in result:
                raise BenchError(f"{self.name}: produce to {topic}[{result['partition']}]: {result['error']}")
            acked += len(result["offsets"])
        return acked

    # -- closed loop -------------------------------------------------------------------------------

    def produce(self, topic: str, partitions: int, values: list[bytes], max_msgs: int, max_seconds: float) -> Produced:
        async def go() -> Produced:
            async with aiohttp.ClientSession() as session:
                await self._create(session, topic, partitions)
                n_values = len(values)
                started = time.perf_counter()
                deadline = started + max_seconds
                sent = acked = 0
                while sent < max_msgs and time.perf_counter() < deadline:
                    count = min(BATCH, max_msgs - sent)
                    per_partition: list[list[bytes]] = [[] for _ in range(partitions)]
                    for seq in range(sent, sent + count):  # round-robin, as the other systems
                        per_partition[seq % partitions].append(values[seq % n_values])
                    acked += await self._produce(session, topic, per_partition)
                    sent += count
                return Produced(acked, time.perf_counter() - started)

        return asyncio.run(go())

    def consume(self, topic: str, partitions: int, expected: int, timeout: float) -> Consumed:
        async def go() -> Consumed:
            offsets = [0] * partitions
            share = max(1, CONSUME_MAX_BYTES // partitions)
            count = nbytes = 0
            async with aiohttp.ClientSession() as session:
                started = time.perf_counter()
                deadline = started + timeout
                while count < expected and time.perf_counter() < deadline:
                    body = {
                        "partitions": [
                            {"topic": topic, "partition": p, "fetch_offset": o, "partition_max_bytes": share}
                            for p, o in enumerate(offsets)
                        ],
                        "max_bytes": CONSUME_MAX_BYTES,
                        "encoding": "base64",
                        "max_wait_ms": 100,  # only waits if everything was read already (then we stop)
                    }
                    answer = await self._post(session, "/consume", json.dumps(body))
                    for part in answer["partitions"]:
                        got = record_values(part)
                        count += len(got)
                        nbytes += sum(len(v) for v in got)
                        offsets[part["partition"]] = part["next_fetch_offset"]
                seconds = time.perf_counter() - started
            if count < expected:
                raise BenchError(f"{self.name}: consumed {count} of {expected} from {topic}")
            return Consumed(count, nbytes, seconds)

        return asyncio.run(go())

    # -- open model --------------------------------------------------------------------------------

    def ack_latency(self, topic: str, schedule: Schedule, value_size: int) -> AckRun:
        async def go() -> AckRun:
            async with aiohttp.ClientSession() as session:
                await self._create(session, topic, 1)
                sender = _Sender(self, session, topic, value_size, warm=int(schedule.total * WARMUP_FRACTION))
                start, _sent = await run_open_async(schedule, sender.enqueue)
                await sender.close()
                return AckRun(sender.latencies, sender.acked, sender.last - start)

        return asyncio.run(go())

    def e2e(self, topic: str, schedule: Schedule, value_size: int) -> AckRun:
        total = schedule.total
        warm = int(total * WARMUP_FRACTION)

        async def go() -> AckRun:
            lat: list[float] = []
            received = 0
            last = 0.0
            target = [total]  # lowered to what was sent if the sender gave up early

            async def read(session: aiohttp.ClientSession) -> None:
                nonlocal received, last
                offset = 0
                deadline = time.perf_counter() + 3 * schedule.seconds + 30
                while received < target[0] and time.perf_counter() < deadline:
                    body = {
                        "partitions": [{"topic": topic, "partition": 0, "fetch_offset": offset}],
                        "max_wait_ms": LONG_POLL_MS,
                        "encoding": "base64",
                    }
                    answer = await self._post(session, "/consume", json.dumps(body))
                    (part,) = answer["partitions"]
                    values = record_values(part)
                    if values:
                        now = last = time.perf_counter()
                        for value in values:
                            scheduled, seq = unstamp(value)
                            if seq >= warm:
                                lat.append(now - scheduled)
                        received += len(values)
                    offset = part["next_fetch_offset"]

            # Two sessions: two connections, so the long poll never queues behind a produce.
            async with aiohttp.ClientSession() as producer_session, aiohttp.ClientSession() as reader_session:
                await self._create(producer_session, topic, 1)
                reader = asyncio.create_task(read(reader_session))
                await asyncio.sleep(0.2)  # the reader is waiting in its long poll
                sender = _Sender(self, producer_session, topic, value_size, warm=total)  # no ack latencies kept
                start, sent = await run_open_async(schedule, sender.enqueue)
                await sender.close()
                target[0] = sent
                await reader
            if received < sent:
                raise BenchError(f"{self.name}: e2e received {received} of {sent}")
            return AckRun(lat, received, last - start)

        return asyncio.run(go())


class _Sender:
    """Posts queued latency probes, one request at a time, each carrying all that is queued (<= BATCH).

    ``enqueue`` is :func:`run_open_async`'s ``send``: it only queues (never blocks the schedule).
    Acked records get ``answer time - scheduled time`` as latency (from sequence ``warm`` on).
    """

    def __init__(self, owner: LkHttp, session: aiohttp.ClientSession, topic: str, value_size: int, warm: int) -> None:
        self.owner = owner
        self.session = session
        self.topic = topic
        self.pad = bytes(value_size - 16)
        self.warm = warm
        self.queue: list[tuple[float, int]] = []  # (scheduled, seq) per record
        self.latencies: list[float] = []
        self.acked = 0
        self.last = 0.0
        self.closing = False
        self.ready = asyncio.Event()
        self.task = asyncio.create_task(self._run())

    def enqueue(self, scheduled: float, first: int, count: int) -> Awaitable[None] | None:
        self.queue.extend((scheduled, seq) for seq in range(first, first + count))
        self.ready.set()
        return None

    async def _run(self) -> None:
        while True:
            if not self.queue:
                if self.closing:
                    return
                self.ready.clear()
                await self.ready.wait()
                continue
            batch, self.queue = self.queue[:BATCH], self.queue[BATCH:]
            values = [stamped(scheduled, seq, self.pad) for scheduled, seq in batch]
            acked = await self.owner._produce(self.session, self.topic, [values])
            if acked != len(batch):
                raise BenchError(f"{self.owner.name}: {acked} of {len(batch)} records acknowledged")
            now = self.last = time.perf_counter()
            self.acked += acked
            self.latencies.extend(now - scheduled for scheduled, seq in batch if seq >= self.warm)

    async def close(self) -> None:
        """Send what is still queued, then stop."""
        self.closing = True
        self.ready.set()
        await self.task
