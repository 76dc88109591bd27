"""bench_daemon's open-model phases: ack latency and produce-to-consume latency at 10,000 msg/s in 1 ms ticks.

The schedule is the peer suite's (``benchmarks/suite``): 10 records every 1 ms, each
tick's records sent at the tick's scheduled time, never earlier, and every latency runs
from that scheduled time (no coordinated omission). The first 10% of samples are dropped.

The pacer waits with :func:`_common.wait_until`, as :mod:`bench_latency`'s does (``--pacer``):
``precise`` by default, a ``select()`` loop with microsecond timers that yields to the loop
only for the last 0.2 ms before a tick; ``spin``, the epoll loop (timers up to 1 ms late)
that yields from 1.5 ms before each tick, which with 1 ms ticks keeps one of the machine's
two cores busy. The loop keeps running the acks meanwhile, and a loop held up by the code
under test delays the next tick, which counts as latency. The ``pacer`` variant measures
the harness alone.

Ack variants (issue 14, row 6):

``pacer``      no produce: how late the pacer itself starts a tick (the floor)
``linger0``    ``Producer(rb, linger_ms=0).send(topic, v)`` per record; latency to its ack
``one_call``   ``await rb.produce_many(topic, [(None, v)])`` per record, a tick's records one
               after the other
``linger1``    ``Producer(rb, linger_ms=1)``: the peer suite's ``ack_10k`` row

Produce-to-consume: the same schedule, one ``produce_many`` per tick; the reader is another
process (``e2e_reader.py``: ``subscribe()``, the daemon pushing batches, or the public
``Consumer``); each record carries its sequence number and scheduled time, and
``perf_counter`` is one system-wide monotonic clock.
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
import struct
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from benchmarks._common import percentile, run_paced, wait_until
from lkstream import Producer

RATE = 10_000
TICK_S = 0.001
PER_TICK = int(RATE * TICK_S)
WARMUP_FRACTION = 0.1
ACK_VARIANTS = ("pacer", "linger0", "one_call", "linger1")
STAMP = struct.Struct(">qd")  # sequence number, scheduled perf_counter time

Send = Callable[[float, int, int], Awaitable[None] | None]


async def paced(seconds: float, send: Send) -> tuple[int, list[float]]:
    """Call ``send(scheduled, first_seq, count)`` at each tick; return (records sent, the pacer's lags in s)."""
    start = time.perf_counter() + 0.02
    pending: set[asyncio.Future[None]] = set()  # only unfinished ones: the harness must not feed the GC
    lags: list[float] = []
    ticks = int(seconds / TICK_S)
    for tick in range(ticks):
        scheduled = start + tick * TICK_S
        lags.append(await wait_until(scheduled) - scheduled)
        result = send(scheduled, tick * PER_TICK, PER_TICK)
        if result is not None:
            task = asyncio.ensure_future(result)
            pending.add(task)
            task.add_done_callback(pending.discard)
    while pending:
        await asyncio.gather(*list(pending))
    return ticks * PER_TICK, lags


def stats(samples_s: list[float], prefix: str = "") -> dict[str, float]:
    """p50/p99/p99.9/max in ms of the samples after the warm-up."""
    lat = sorted(samples_s[int(len(samples_s) * WARMUP_FRACTION) :])
    if not lat:
        return {f"{prefix}samples": 0.0}
    return {
        f"{prefix}p50_ms": 1000 * percentile(lat, 50),
        f"{prefix}p99_ms": 1000 * percentile(lat, 99),
        f"{prefix}p999_ms": 1000 * percentile(lat, 99.9),
        f"{prefix}max_ms": 1000 * lat[-1],
        f"{prefix}samples": float(len(lat)),
    }


def ack_10k(rb: Any, topic: str, variant: str, seconds: float, value_size: int) -> dict[str, float]:
    """Ack latency of one variant (see the module docstring) on a fresh one-partition topic."""
    rb.create_topic(topic, 1)
    value = bytes(value_size)
    runner = {"pacer": _pacer, "linger0": _producer, "one_call": _one_call, "linger1": _producer}[variant]
    lat, sent, lags = run_paced(runner(rb, topic, value, seconds, 1.0 if variant == "linger1" else 0.0))
    if len(lat) != sent:
        raise SystemExit(f"ack_10k {variant}: {len(lat)} acks for {sent} sends")
    return {"rate_msg_per_s": float(RATE), **stats(lat), **stats(lags, "pacer_lag_")}


async def _pacer(
    rb: Any, topic: str, value: bytes, seconds: float, _linger: float
) -> tuple[list[float], int, list[float]]:
    lat: list[float] = []

    def send(scheduled: float, _first: int, count: int) -> None:
        lat.extend([time.perf_counter() - scheduled] * count)

    sent, lags = await paced(seconds, send)
    return lat, sent, lags


async def _producer(
    rb: Any, topic: str, value: bytes, seconds: float, linger_ms: float
) -> tuple[list[float], int, list[float]]:
    producer = Producer(rb, linger_ms=linger_ms)
    await producer.send(topic, value)  # warms the path
    lat: list[float] = []

    def done(scheduled: float, delivery: Any) -> None:
        if not delivery.cancelled() and delivery.exception() is None:
            lat.append(time.perf_counter() - scheduled)

    def send(scheduled: float, _first: int, count: int) -> None:
        for _ in range(count):
            producer.send(topic, value).add_done_callback(functools.partial(done, scheduled))

    sent, lags = await paced(seconds, send)
    await producer.close()
    return lat, sent, lags


async def _one_call(
    rb: Any, topic: str, value: bytes, seconds: float, _linger: float
) -> tuple[list[float], int, list[float]]:
    await rb.produce_many(topic, [(None, value)])
    lat: list[float] = []

    async def tick(scheduled: float, _first: int, count: int) -> None:
        for _ in range(count):
            await rb.produce_many(topic, [(None, value)])
            lat.append(time.perf_counter() - scheduled)

    sent, lags = await paced(seconds, tick)
    return lat, sent, lags


def e2e(rb: Any, topic: str, seconds: float, value_size: int, *, reader: str, seed: int) -> dict[str, float]:
    """Produce-to-consume latency with the reader (``subscribe`` or ``consumer``) in its own process."""
    ticks = int(seconds / TICK_S)
    total = ticks * PER_TICK
    pad = random.Random(seed).randbytes(value_size - STAMP.size)
    rb.create_topic(topic, 1)
    cmd = [sys.executable, str(Path(__file__).with_name("e2e_reader.py")), rb.address, topic, str(total),
           str(int(total * WARMUP_FRACTION)), reader]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise SystemExit("e2e reader did not start")

        def send(scheduled: float, first: int, count: int) -> Awaitable[Any]:
            records = [(None, STAMP.pack(first + i, scheduled) + pad) for i in range(count)]
            return rb.produce_many(topic, records)  # type: ignore[no-any-return]

        run_paced(paced(seconds, send))
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lat = json.loads(out)
    if len(lat) != total - int(total * WARMUP_FRACTION):
        raise SystemExit(f"e2e {reader}: {len(lat)} samples for {total} records")
    # The reader dropped the warm-up records already: no second cut here.
    lat.sort()
    return {
        "rate_msg_per_s": float(RATE),
        "p50_ms": 1000 * percentile(lat, 50),
        "p99_ms": 1000 * percentile(lat, 99),
        "p999_ms": 1000 * percentile(lat, 99.9),
        "max_ms": 1000 * lat[-1],
        "samples": float(len(lat)),
    }
