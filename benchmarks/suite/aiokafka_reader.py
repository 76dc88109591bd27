"""The reader of the aiokafka produce-to-poll phase, in a process of its own (``kafka_phases.e2e_aiokafka``).

aiokafka's producer and consumer are Python on one event loop each; in one process at 10,000 msg/s
they starved each other on this 2-core machine (the producer's buffer timed out). This process
assigns partition 0 from the start, prints ``reading``, reads until the end marker (a message with
sequence number -1) arrived or ``deadline_s`` passed, and prints one JSON line: the latency of
every message past the warm-up (its receipt time minus the scheduled time it carries;
``time.perf_counter`` is CLOCK_MONOTONIC, the same clock in every process on Linux), how many
arrived and the time of the last receipt.

    python -m benchmarks.suite.aiokafka_reader BOOTSTRAP TOPIC WARM DEADLINE_S
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from aiokafka import AIOKafkaConsumer, TopicPartition

from benchmarks.suite.core import unstamp

READY = "reading"


END_SEQ = -1


async def read(bootstrap: str, topic: str, warm: int, deadline_s: float) -> dict[str, object]:
    # a short fetch wait, as the confluent-kafka e2e reader: latency-sensitive, not throughput-bound
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=10)
    await consumer.start()
    latencies: list[float] = []
    got = 0
    last = 0.0
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        await consumer.seek_to_beginning(partition)
        print(READY, flush=True)
        deadline = time.perf_counter() + deadline_s
        ended = False
        while not ended and time.perf_counter() < deadline:
            batches = await consumer.getmany(timeout_ms=50)
            now = time.perf_counter()
            for records in batches.values():
                for record in records:
                    scheduled, seq = unstamp(record.value or bytes(16))
                    if seq == END_SEQ:
                        ended = True
                        continue
                    if seq >= warm:
                        latencies.append(now - scheduled)
                    got += 1
                    last = now
    finally:
        await consumer.stop()
    return {"received": got, "last": last, "latencies_s": latencies}


def main() -> None:
    bootstrap, topic, warm, deadline_s = sys.argv[1:5]
    result = asyncio.run(read(bootstrap, topic, int(warm), float(deadline_s)))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
