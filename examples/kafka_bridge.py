"""Copy LKSTREAM topics from a running daemon into Kafka, at least once (seed sections 5 and 13).

    python examples/kafka_bridge.py --topics market.ticks --kafka-bootstrap kafka:9092

The same as ``lkstream bridge``. Stops cleanly (flushes, commits) on SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import logging

from lkstream.bridge import BridgeSettings
from lkstream.bridge.process import run_bridge

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", required=True, help="comma-separated LKSTREAM topics")
    parser.add_argument("--kafka-bootstrap", required=True, help="HOST:PORT of a Kafka broker")
    parser.add_argument("--bootstrap", default="127.0.0.1:9090", help="the LKSTREAM daemon's gRPC address")
    parser.add_argument("--group", default="lkstream-bridge", help="LKSTREAM consumer group of the bridge")
    parser.add_argument("--target-topic", default="{topic}", help="Kafka topic name; {topic} is the source topic")
    parser.add_argument("--partitioning", choices=["same", "key-hash"], default="same")
    parser.add_argument("--idempotence", choices=["auto", "on", "off"], default="auto")
    parser.add_argument("--commit-every", type=int, default=5000, help="records between acks-then-commit")
    parser.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port (127.0.0.1)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = BridgeSettings(
        topics=[t for t in args.topics.split(",") if t],
        kafka_bootstrap=args.kafka_bootstrap,
        group=args.group,
        target_topic=args.target_topic,
        partitioning=args.partitioning,
        idempotence=args.idempotence,
        commit_every=args.commit_every,
    )
    asyncio.run(run_bridge(settings, args.bootstrap, metrics_port=args.metrics_port))
