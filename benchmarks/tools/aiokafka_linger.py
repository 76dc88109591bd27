"""What aiokafka's producer linger costs the peer suite's produce-to-poll phase (``e2e_10k_aiokafka``).

The suite runs every producer with a 1 ms linger in its latency phases. This tool runs the same
phase (10,000 msg/s of 1 KiB, aiokafka's producer, an aiokafka consumer in its own process) with
``linger_ms`` 1 and 0, alternating, against LKSTREAM's Kafka listener and Tansu: the difference is
what the client's batching adds to the median, whatever the broker.

    .venv/bin/python -m benchmarks.tools.aiokafka_linger --runs 3
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiokafka

from benchmarks._common import base_parser, emit, log, machine_facts, percentile, summary
from benchmarks.suite import kafka_phases
from benchmarks.suite.core import Schedule
from benchmarks.suite.lk_kafka import LkKafka
from benchmarks.suite.peer_tansu import Tansu

LINGERS_MS = (1, 0)
RATE, SECONDS, VALUE_BYTES = 10_000, 5.0, 1024


def _producer_with_linger(linger_ms: int) -> Callable[..., aiokafka.AIOKafkaProducer]:
    real = aiokafka.AIOKafkaProducer

    def make(**settings: Any) -> aiokafka.AIOKafkaProducer:
        return real(**{**settings, "linger_ms": linger_ms})

    return make


def one_run(system: Tansu, linger_ms: int, label: str) -> dict[str, Any]:
    """One ``e2e_aiokafka`` phase on a freshly started ``system``; latencies in ms."""
    with tempfile.TemporaryDirectory(prefix="aiokafka-linger-") as root:
        system.start(Path(root))
        original = kafka_phases.AIOKafkaProducer
        kafka_phases.AIOKafkaProducer = _producer_with_linger(linger_ms)  # type: ignore[misc]
        try:
            run = system.e2e_aiokafka(f"e2e-{label}", Schedule(RATE, SECONDS), VALUE_BYTES)
        finally:
            kafka_phases.AIOKafkaProducer = original  # type: ignore[misc]
            system.stop()
    latencies = sorted(run.latencies_s)
    return {
        "system": system.name,
        "linger_ms": linger_ms,
        "p50_ms": percentile(latencies, 50) * 1e3,
        "p99_ms": percentile(latencies, 99) * 1e3,
        "received": run.acked,
    }


def main() -> None:
    args = base_parser(__doc__.split("\n\n")[0]).parse_args()
    facts = machine_facts(tempfile.gettempdir())
    rows = []
    for system_cls in (LkKafka, Tansu):
        for run in range(args.runs):
            for linger_ms in LINGERS_MS:
                row = {"run": run, **one_run(system_cls(), linger_ms, f"{run}-{linger_ms}")}
                log(f"{row['system']} linger {linger_ms} ms: p50 {row['p50_ms']:.2f} ms, p99 {row['p99_ms']:.2f} ms")
                rows.append(row)
    medians = {
        f"{name} linger {linger_ms} ms": {
            "p50_ms": summary([r["p50_ms"] for r in rows if r["system"] == name and r["linger_ms"] == linger_ms]),
            "p99_ms": summary([r["p99_ms"] for r in rows if r["system"] == name and r["linger_ms"] == linger_ms]),
        }
        for name in (LkKafka.name, Tansu.name)
        for linger_ms in LINGERS_MS
    }
    emit("aiokafka_linger", args, {"rate": RATE, "seconds": SECONDS, "raw": rows, "summary": medians}, facts)


if __name__ == "__main__":
    main()
