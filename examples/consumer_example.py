"""Consume `market.ticks` as group `strategy-v1`, resuming from committed offsets (seed section 7).

    python examples/consumer_example.py                      # the ticks of ./example-data
    python examples/consumer_example.py --persist-dir DIR

Run it twice: the second run starts from the offsets the first one committed and
finds nothing new. Records that are not ticks (say, lines produced by hand into the
same topic) are counted and skipped, never a crash.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter

from lkstream import Broker, Consumer, DataDirLockedError, OffsetStore, Record


def parse_tick(record: Record) -> tuple[str, float] | None:
    """``(symbol, price)`` of a tick, None for anything else."""
    try:
        tick = json.loads(record.value or b"")
        return str(tick["s"]), float(tick["p"])
    except (ValueError, TypeError, KeyError):
        return None


async def main(persist_dir: str, idle_timeout: float) -> None:
    per_symbol: Counter[str] = Counter()
    last_price: dict[str, float] = {}
    skipped = 0

    def handler(pid: int, offset: int, record: Record) -> None:
        nonlocal skipped
        tick = parse_tick(record)
        if tick is None:
            skipped += 1
            return
        per_symbol[tick[0]] += 1
        last_price[tick[0]] = tick[1]

    with Broker(persist_dir=persist_dir, partitions=4) as broker:
        consumer = Consumer(broker, group="strategy-v1", offset_store=OffsetStore(persist_dir))
        consumer.subscribe("market.ticks", from_committed=True)
        handled = await consumer.consume("market.ticks", handler, idle_timeout=idle_timeout)
        print(f"consumed {handled} new records ({skipped} not ticks, skipped); committed positions:")
        for topic, pid in consumer.assignment():
            print(f"  {topic}[{pid}] -> {consumer.committed(topic, pid)}")
        for symbol, n in sorted(per_symbol.items()):
            print(f"  {symbol}: {n} ticks, last price {last_price[symbol]}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--persist-dir", default="./example-data")
    parser.add_argument("--idle-timeout", type=float, default=0.5, help="stop after this long without new ticks")
    args = parser.parse_args()
    try:
        asyncio.run(main(args.persist_dir, args.idle_timeout))
    except DataDirLockedError:
        sys.exit(
            f"consumer_example.py: {args.persist_dir} is in use by another process (a running example or daemon); "
            "wait for it, stop it, or choose another directory with --persist-dir"
        )
