"""The reading side of bench_daemon's e2e phase, in its own process (as a real consumer is).

    python e2e_reader.py ADDRESS TOPIC TOTAL WARM_RECORDS

Subscribes to partition 0 from offset 0, and for each record takes
``time.perf_counter() - scheduled`` where the producer wrote ``scheduled`` (its own
``perf_counter`` at the record's scheduled send time) into the value: on Linux
``perf_counter`` is CLOCK_MONOTONIC, one clock for every process. Prints "ready"
once the stream is open, then one JSON list of latencies (seconds) at the end.
"""

from __future__ import annotations

import asyncio
import json
import struct
import sys
import time

import lkstream


async def main(address: str, topic: str, total: int, warm: int) -> None:
    latencies: list[float] = []
    with lkstream.connect(address) as broker:
        received = 0
        stream = broker.subscribe(topic, 0, 0)
        first = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(0.2)  # the Subscribe call is in flight before the producer starts
        print("ready", flush=True)
        record = await first
        while True:
            now = time.perf_counter()
            seq, scheduled = struct.unpack_from(">qd", record.value or b"")
            if seq >= warm:
                latencies.append(now - scheduled)
            received += 1
            if received >= total:
                break
            record = await anext(stream)
        await stream.aclose()
    print(json.dumps(latencies), flush=True)


if __name__ == "__main__":
    address, topic, total, warm = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    asyncio.run(main(address, topic, total, warm))
