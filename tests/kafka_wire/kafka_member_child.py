"""A confluent-kafka group member in its own process, for tests/kafka_wire/test_group_member_kill.py.

    python kafka_member_child.py BOOTSTRAP TOPIC GROUP SESSION_TIMEOUT_MS

Prints one JSON line per event on stdout (flushed): ``{"event": "assigned", "partitions": [...],
"t": wall-clock seconds}`` after each rebalance, ``{"event": "record", "partition": P, "seq": N}``
per record (committed synchronously before it is printed, so a SIGKILL never loses a printed
record's commit). Runs until killed.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from confluent_kafka import Consumer, TopicPartition


def say(**event: Any) -> None:
    print(json.dumps(event), flush=True)


def main() -> None:
    bootstrap, topic, group, session_ms = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": session_ms,
            "heartbeat.interval.ms": max(100, session_ms // 10),
        }
    )

    def assigned(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
        say(event="assigned", partitions=sorted(p.partition for p in partitions), t=time.time())

    consumer.subscribe([topic], on_assign=assigned)
    while True:
        message = consumer.poll(0.1)
        if message is None:
            continue
        if message.error():
            say(event="error", error=str(message.error()))
            continue
        consumer.commit(message=message, asynchronous=False)
        say(event="record", partition=message.partition(), seq=int(message.value()))


if __name__ == "__main__":
    main()
