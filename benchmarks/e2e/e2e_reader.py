"""The reading side of bench_daemon's e2e phases, in its own process (as a real consumer is).

    python e2e_reader.py ADDRESS TOPIC TOTAL WARM_RECORDS [subscribe|consumer]

Reads partition 0 from offset 0, through ``subscribe()`` (the daemon pushes batches as they
are appended; the default) or through the public ``Consumer`` (fetches, and long polls
while caught up). For each record it takes ``time.perf_counter() - scheduled`` where the
producer wrote ``scheduled`` (its own ``perf_counter`` at the record's scheduled send
time) into the value: on Linux ``perf_counter`` is CLOCK_MONOTONIC, one clock for every
process. Prints "ready" once reading, then one JSON list of latencies (seconds) at the end.
"""

from __future__ import annotations

import asyncio
import json
import struct
import sys
import time
from typing import Any

import lkstream

STAMP = struct.Struct(">qd")


async def by_subscribe(broker: Any, topic: str, total: int, warm: int) -> list[float]:
    latencies: list[float] = []
    received = 0
    stream = broker.subscribe(topic, 0, 0)
    first = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0.2)  # the Subscribe call is in flight before the producer starts
    print("ready", flush=True)
    record = await first
    while True:
        now = time.perf_counter()
        seq, scheduled = STAMP.unpack_from(record.value or b"")
        if seq >= warm:
            latencies.append(now - scheduled)
        received += 1
        if received >= total:
            break
        record = await anext(stream)
    await stream.aclose()
    return latencies


async def by_consumer(broker: Any, topic: str, total: int, warm: int) -> list[float]:
    latencies: list[float] = []
    consumer = lkstream.Consumer(broker, auto_commit=False)
    consumer.assign([(topic, 0)])

    def handler(_pid: int, _offset: int, record: Any) -> None:
        now = time.perf_counter()
        seq, scheduled = STAMP.unpack_from(record.value or b"")
        if seq >= warm:
            latencies.append(now - scheduled)

    reading = asyncio.ensure_future(consumer.consume(topic, handler, max_records=total, idle_timeout=30))
    await asyncio.sleep(0.2)  # the consumer is waiting for data
    print("ready", flush=True)
    await reading
    return latencies


async def main(address: str, topic: str, total: int, warm: int, mode: str) -> None:
    with lkstream.connect(address) as broker:
        read = by_consumer if mode == "consumer" else by_subscribe
        latencies = await read(broker, topic, total, warm)
    print(json.dumps(latencies), flush=True)


if __name__ == "__main__":
    address, topic, total, warm = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    asyncio.run(main(address, topic, total, warm, sys.argv[5] if len(sys.argv) > 5 else "subscribe"))
