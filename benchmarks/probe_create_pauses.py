"""How late a thread wakes beside creates and deletes of 4,000-partition topics, in process (finding 9).

A thread sleeps 1 ms in a loop while the main thread creates, writes once beside, and deletes
three 4,000-partition topics; prints its lateness (p99, p99.9, worst), the creates' durations
and the full garbage collections (count, longest). Compare checkouts by ``PYTHONPATH``:

    PYTHONPATH=/path/to/other/checkout .venv/bin/python benchmarks/probe_create_pauses.py
    .venv/bin/python benchmarks/probe_create_pauses.py
"""

from __future__ import annotations

import gc
import json
import tempfile
import threading
import time
from typing import Any

from _common import DEFAULT_TMP_ROOT

from lkstream.broker.broker import Broker

TOPICS, PARTITIONS = 3, 4000


def main() -> None:
    full_collections: list[float] = []
    started: dict[str, float] = {}

    def collected(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started["t"] = time.perf_counter()
        elif info["generation"] == 2:
            full_collections.append((time.perf_counter() - started["t"]) * 1e3)

    lateness: list[float] = []
    stop = threading.Event()

    def tick() -> None:
        while not stop.is_set():
            before = time.perf_counter()
            time.sleep(0.001)
            lateness.append((time.perf_counter() - before - 0.001) * 1e3)

    DEFAULT_TMP_ROOT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=DEFAULT_TMP_ROOT) as data:
        broker = Broker(persist_dir=data, max_partitions=2 * PARTITIONS)
        broker.create_topic("normal", 1)
        gc.callbacks.append(collected)
        ticker = threading.Thread(target=tick)
        ticker.start()
        creates = []
        for i in range(TOPICS):
            begun = time.perf_counter()
            broker.create_topic(f"t{i}", PARTITIONS)
            creates.append(round(time.perf_counter() - begun, 2))
            broker.produce_many_sync("normal", [(None, b"x")])
            broker.delete_topic(f"t{i}")
            broker.settle_trash()
        stop.set()
        ticker.join()
        gc.callbacks.remove(collected)
        broker.close()
    lateness.sort()

    def quantile(q: float) -> float:
        return round(lateness[min(len(lateness) - 1, int(q * len(lateness)))], 1)

    print(
        json.dumps(
            {
                "create_s": creates,
                "tick_late_p99_ms": quantile(0.99),
                "tick_late_p999_ms": quantile(0.999),
                "tick_late_max_ms": round(lateness[-1], 1),
                "full_collections": len(full_collections),
                "longest_full_collection_ms": round(max(full_collections, default=0.0), 1),
            }
        )
    )


if __name__ == "__main__":
    main()
