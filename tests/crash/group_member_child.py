"""A consumer-group member process for the SIGKILL group test (run as a script, killed by the test).

It connects to a daemon, joins ``--group`` on ``--topic`` and consumes forever,
appending one line per event to ``--out`` with a single unbuffered ``write``
(so a SIGKILL loses no line that was written, and never leaves half of one)::

    J <member id>                 joined (after subscribe returned)
    A <pid> <position> ...        on_assigned: each partition and where it starts
    R <pid> ...                   on_revoked
    H <pid> <offset>              a record handled (the handler returned)

Auto-commit runs every ``--commit-interval-ms``, so a kill lands after some
commits and before others. ``--delay-ms`` slows the handler so the stream is
still running when the test kills the process; ``--fetch-max-bytes`` keeps
reads small so every partition advances between commits.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import lkstream
from lkstream import Consumer, Record


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--session-timeout-ms", type=int, default=1500)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=300)
    parser.add_argument("--commit-interval-ms", type=int, default=100)
    parser.add_argument("--delay-ms", type=float, default=2.0)
    parser.add_argument("--fetch-max-bytes", type=int, default=1024)
    args = parser.parse_args()
    fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def emit(line: str) -> None:
        os.write(fd, (line + "\n").encode())

    broker = lkstream.connect(args.address)
    consumer: Consumer

    def assigned(parts: list[tuple[str, int]]) -> None:
        emit("A " + " ".join(f"{pid} {consumer.position(topic, pid)}" for topic, pid in parts))

    def revoked(parts: list[tuple[str, int]]) -> None:
        emit("R " + " ".join(str(pid) for _, pid in parts))

    consumer = Consumer(
        broker,
        group=args.group,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
        auto_commit_interval_ms=args.commit_interval_ms,
        fetch_max_bytes=args.fetch_max_bytes,  # small reads: the partitions advance together
        on_assigned=assigned,
        on_revoked=revoked,
    )
    consumer.subscribe(args.topic)
    assert consumer.membership is not None
    emit(f"J {consumer.membership.member_id}")
    delay_s = args.delay_ms / 1000.0

    async def handler(pid: int, offset: int, record: Record) -> None:
        await asyncio.sleep(delay_s)
        emit(f"H {pid} {offset}")

    asyncio.run(consumer.consume(args.topic, handler))


if __name__ == "__main__":
    main()
