"""Produce synthetic market ticks into `market.ticks` with the embedded broker (seed section 7).

    python examples/producer_example.py                      # 100,000 ticks into ./example-data
    python examples/producer_example.py --persist-dir DIR    # anywhere else

The embedded broker owns its data directory (a LOCK file) while it runs, so the
examples keep their own, ./example-data, apart from the daemon's ./data (`make run`):
both can run at once. A directory already in use is reported in one line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time

from lkstream import Broker, DataDirLockedError

SYMBOLS = ["AAPL", "TSLA", "MSFT", "NVDA", "AMZN", "GOOG", "META", "NFLX"]
TOPIC = "market.ticks"
PARTITIONS = 4


async def main(persist_dir: str, count: int, batch: int) -> None:
    rng = random.Random(42)
    prices = {s: 100.0 + 10 * i for i, s in enumerate(SYMBOLS)}
    with Broker(persist_dir=persist_dir, fsync_mode="group", partitions=PARTITIONS) as broker:
        if TOPIC not in broker.list_topics():
            broker.create_topic(TOPIC, PARTITIONS)
        elif (existing := broker.partitions_for(TOPIC)) != PARTITIONS:
            print(f"note: {TOPIC} already exists in {persist_dir} with {existing} partitions; producing into those")
        started = time.perf_counter()
        sent = 0
        while sent < count:
            records = []
            for _ in range(min(batch, count - sent)):
                symbol = rng.choice(SYMBOLS)
                prices[symbol] *= 1 + rng.gauss(0, 0.001)
                tick = {"s": symbol, "p": round(prices[symbol], 4), "q": rng.randint(1, 500)}
                records.append((symbol, json.dumps(tick).encode()))
            res = await broker.produce_many(TOPIC, records)
            sent += len(res)
        elapsed = time.perf_counter() - started
        print(f"produced {sent} ticks in {elapsed:.3f}s ({sent / elapsed:,.0f} msg/s); last: {res[-1]}")
        for pid, p in enumerate(broker.describe_topic(TOPIC).partitions):
            print(f"  partition {pid}: log_start={p.log_start_offset} next_offset={p.next_offset} bytes={p.size_bytes}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--persist-dir", default="./example-data")
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000)
    args = parser.parse_args()
    try:
        asyncio.run(main(args.persist_dir, args.count, args.batch))
    except DataDirLockedError:
        sys.exit(
            f"producer_example.py: {args.persist_dir} is in use by another process (a running example or daemon); "
            "wait for it, stop it, or choose another directory with --persist-dir"
        )
