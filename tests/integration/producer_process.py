"""One producer in its own OS process (run as a subprocess by test_concurrency.py).

Usage: ``producer_process.py ADDRESS TOPIC NAME COUNT SEED``. Produces ``COUNT``
keyed records ``(f"{NAME}-k{j}", f"{NAME}-{i}")`` (keys drawn from a small
seeded set, so several records share a key) in seeded random chunk sizes with
``produce_many_sync``, then prints one JSON line:
``{"acks": [[key, value, partition, offset], ...]}`` (one per acknowledged record, in order).
"""

from __future__ import annotations

import json
import random
import sys

import lkstream


def main(address: str, topic: str, name: str, count: int, seed: int) -> None:
    rng = random.Random(seed)
    acks: list[tuple[str, str, int, int]] = []
    with lkstream.connect(address) as client:
        i = 0
        while i < count:
            size = min(count - i, rng.randint(1, 25))
            records = [(f"{name}-k{rng.randrange(16)}", f"{name}-{j}") for j in range(i, i + size)]
            results = client.produce_many_sync(topic, records)
            acks.extend((k, v, pid, off) for (k, v), (pid, off) in zip(records, results, strict=True))
            i += size
    print(json.dumps({"acks": acks}), flush=True)


if __name__ == "__main__":
    address, topic, name, count, seed = sys.argv[1:6]
    main(address, topic, name, int(count), int(seed))
