"""Produce synthetic market ticks into `market.ticks` with the embedded broker (seed section 7)."""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time

from lkstream import Broker

SYMBOLS = ["AAPL", "TSLA", "MSFT", "NVDA", "AMZN", "GOOG", "META", "NFLX"]


async def main(persist_dir: str, count: int, batch: int) -> None:
    rng = random.Random(42)
    prices = {s: 100.0 + 10 * i for i, s in enumerate(SYMBOLS)}
    with Broker(persist_dir=persist_dir, fsync_mode="group", partitions=4) as broker:
        started = time.perf_counter()
        sent = 0
        while sent < count:
            records = []
            for _ in range(min(batch, count - sent)):
                symbol = rng.choice(SYMBOLS)
                prices[symbol] *= 1 + rng.gauss(0, 0.001)
                tick = {"s": symbol, "p": round(prices[symbol], 4), "q": rng.randint(1, 500)}
                records.append((symbol, json.dumps(tick).encode()))
            res = await broker.produce_many("market.ticks", records)
            sent += len(res)
        elapsed = time.perf_counter() - started
        print(f"produced {sent} ticks in {elapsed:.3f}s ({sent / elapsed:,.0f} msg/s); last: {res[-1]}")
        for p in broker.describe_topic("market.ticks").partitions:
            print(f"  partition log_start={p.log_start_offset} next_offset={p.next_offset} bytes={p.size_bytes}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--persist-dir", default="./data")
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000)
    args = parser.parse_args()
    asyncio.run(main(args.persist_dir, args.count, args.batch))
