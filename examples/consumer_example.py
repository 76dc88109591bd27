"""Consume `market.ticks` as group `strategy-v1`, resuming from committed offsets (seed section 7)."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import Counter

from lkstream import Broker, Consumer, OffsetStore, Record


async def main(persist_dir: str, idle_timeout: float) -> None:
    per_symbol: Counter[str] = Counter()
    last_price: dict[str, float] = {}

    def handler(pid: int, offset: int, record: Record) -> None:
        tick = json.loads(record.value or b"{}")
        per_symbol[tick["s"]] += 1
        last_price[tick["s"]] = tick["p"]

    with Broker(persist_dir=persist_dir, partitions=4) as broker:
        consumer = Consumer(broker, group="strategy-v1", offset_store=OffsetStore(persist_dir))
        consumer.subscribe("market.ticks", from_committed=True)
        handled = await consumer.consume("market.ticks", handler, idle_timeout=idle_timeout)
        print(f"consumed {handled} new ticks; committed positions:")
        for topic, pid in consumer.assignment():
            print(f"  {topic}[{pid}] -> {consumer.committed(topic, pid)}")
        for symbol, n in sorted(per_symbol.items()):
            print(f"  {symbol}: {n} ticks, last price {last_price[symbol]}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--persist-dir", default="./data")
    parser.add_argument("--idle-timeout", type=float, default=0.5, help="stop after this long without new ticks")
    args = parser.parse_args()
    asyncio.run(main(args.persist_dir, args.idle_timeout))
