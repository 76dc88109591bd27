"""A group member that polls and commits after every poll (issue 12, finding 12), run as a script.

It joins ``--group`` on ``--topic`` with ``auto_commit=False`` and loops: ``poll()``,
handle the records (one line ``H <pid> <offset>`` each, written with a single
unbuffered ``write``), then ``commit()``. It stops when ``--stop`` exists, closing
the consumer (which leaves the group) and exiting 0. Any error ends it with exit 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import lkstream
from lkstream import Consumer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--stop", required=True)
    parser.add_argument("--max-records", type=int, default=25)
    parser.add_argument("--delay-ms", type=float, default=3.0)
    args = parser.parse_args()
    fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    with lkstream.connect(args.address) as broker:
        consumer = Consumer(
            broker,
            group=args.group,
            auto_commit=False,
            session_timeout_ms=10_000,
            heartbeat_interval_ms=200,
            fetch_max_bytes=2048,  # small reads: many polls, so rebalances land between them
        )
        consumer.subscribe(args.topic)
        while not os.path.exists(args.stop):
            records = consumer.poll(timeout=0.1, max_records=args.max_records)
            for record in records:
                time.sleep(args.delay_ms / 1000.0)  # handling takes time, as in an application
                os.write(fd, f"H {record.partition} {record.offset}\n".encode())
            if records:
                consumer.commit()  # right after handling: nothing handled may be delivered again
        consumer.close()


if __name__ == "__main__":
    main()
