"""The Producer over a real daemon: batches that wait for a call in flight ride the next one, in order."""

from __future__ import annotations

import asyncio

import lkstream
from lkstream import Producer
from lkstream.format.codec import iter_batches

from .conftest import DaemonProcess

TICKS = 300
PER_TICK = 10


async def test_ticks_faster_than_a_round_trip_share_calls_and_keep_their_order(daemon: DaemonProcess) -> None:
    client = lkstream.connect(daemon.address)
    try:
        client.create_topic("ticks", 1)
        producer = Producer(client, linger_ms=0)
        handles = []
        for tick in range(TICKS):  # a tick of sends each loop turn: far faster than a gRPC round trip
            handles += [producer.send("ticks", f"{tick}.{i}".encode(), partition=0) for i in range(PER_TICK)]
            await asyncio.sleep(0)
        await producer.close()
        assert [await handle for handle in handles] == [(0, i) for i in range(TICKS * PER_TICK)]
        records = client.read_from("ticks", 0, 0, max_msgs=TICKS * PER_TICK)
        assert [r.value for r in records] == [f"{t}.{i}".encode() for t in range(TICKS) for i in range(PER_TICK)]
        # One record batch per call: the ticks sealed while a call was out went in the next call together.
        calls = sum(1 for _ in iter_batches(client.fetch("ticks", 0, 0, max_bytes=16 * 1024 * 1024).data))
        assert calls < TICKS
    finally:
        client.close()
