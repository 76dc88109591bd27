"""One member of a consumer group, against a daemon: start two and they split the topic's partitions.

    python examples/group_member.py orders --group billing --seconds 15 &
    python examples/group_member.py orders --group billing --seconds 15 &

Each joins the group, prints the partitions the group coordinator gives it (again
after every rebalance), reads what arrives for ``--seconds``, commits, leaves, and
prints how many records it read from which partitions. docs/groups.md has the contract.
"""

from __future__ import annotations

import argparse
import os
import time

import lkstream
from lkstream import Consumer


def main(topic: str, group: str, bootstrap: str, seconds: float) -> None:
    name = f"member-{os.getpid()}"
    read: dict[int, int] = {}

    def assigned(partitions: list[tuple[str, int]]) -> None:
        print(f"{name}: assigned {sorted(p for _, p in partitions)}", flush=True)

    with lkstream.connect(bootstrap) as broker:
        consumer = Consumer(broker, group=group, on_assigned=assigned)
        consumer.subscribe(topic, from_committed=True)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for record in consumer.poll(timeout=0.5):
                read[record.partition] = read.get(record.partition, 0) + 1
        consumer.close()
    partitions = ",".join(str(p) for p in sorted(read)) or "none"
    print(f"{name}: read {sum(read.values())} records from {topic}[{partitions}]", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("topic")
    parser.add_argument("--group", default="billing")
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("LKSTREAM_BOOTSTRAP", "127.0.0.1:9090"),
        help="the daemon's gRPC address (default: $LKSTREAM_BOOTSTRAP, else 127.0.0.1:9090)",
    )
    parser.add_argument("--seconds", type=float, default=15.0, help="how long to read")
    args = parser.parse_args()
    main(args.topic, args.group, args.bootstrap, args.seconds)
