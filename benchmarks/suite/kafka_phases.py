"""Phases only Kafka-protocol systems run (issue 11's targets), shared by Tansu and LKSTREAM's Kafka listener.

Both are driven by the same confluent-kafka code and settings (``peer_tansu``), so the ratios
compare brokers, not clients:

``produce_idempotent``  ``enable.idempotence=true`` with 20 KB batches (``batch.size`` 20,000): many
                        small batches, each checked for its producer sequence by the broker.
``consume_idempotent``  the same topic read back from the start (small batches per fetch).
``group_join``          a fresh consumer group subscribes to a topic holding data: seconds from
                        ``subscribe()`` to the first record (librdkafka's defaults otherwise).
``ack_10k_unbatched``   produce ack latency at 10,000 msg/s with ``linger.ms=0`` (compared with the
                        gRPC path's ``ack_10k`` in the same run).
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, Producer

from benchmarks.suite.base import AckRun, Produced
from benchmarks.suite.core import BenchError, Schedule

IDEMPOTENT_BATCH_BYTES = 20_000
GROUP_JOIN_TIMEOUT_S = 60.0


class KafkaClientPhases:
    """Mixin for a :class:`~benchmarks.suite.peer_tansu.Tansu`-style system (``bootstrap``, ``_create``)."""

    bootstrap: str

    # Provided by the system class this is mixed into (peer_tansu.Tansu).
    def _create(self, topic: str, partitions: int) -> None:
        raise NotImplementedError

    def _produce_with(
        self,
        config: dict[str, Any],
        topic: str,
        records: list[tuple[str | None, bytes]],
        max_msgs: int,
        max_seconds: float,
    ) -> Produced:
        raise NotImplementedError

    def _ack_latency_with(self, config: dict[str, Any], topic: str, schedule: Schedule, value_size: int) -> AckRun:
        raise NotImplementedError

    throughput_config: dict[str, Any]
    latency_config: dict[str, Any]

    def produce_idempotent(self, topic: str, values: list[bytes], max_msgs: int, max_seconds: float) -> Produced:
        self._create(topic, 1)
        config = {**self.throughput_config, "enable.idempotence": True, "batch.size": IDEMPOTENT_BATCH_BYTES}
        return self._produce_with(config, topic, [(None, value) for value in values], max_msgs, max_seconds)

    def ack_latency_unbatched(self, topic: str, schedule: Schedule, value_size: int) -> AckRun:
        return self._ack_latency_with({**self.latency_config, "linger.ms": 0}, topic, schedule, value_size)

    def group_join(self, topic: str) -> float:
        """Seconds from a new group's ``subscribe()`` to its first record (``topic`` must hold data)."""
        producer = Producer({"bootstrap.servers": self.bootstrap})
        producer.produce(topic, b"first")
        if producer.flush(30):
            raise BenchError("group_join: the seed record was not delivered")
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"join-{topic}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        try:
            started = time.perf_counter()
            consumer.subscribe([topic])
            deadline = started + GROUP_JOIN_TIMEOUT_S
            while time.perf_counter() < deadline:
                message = consumer.poll(0.05)
                if message is None:
                    continue
                if message.error():
                    raise BenchError(f"group_join: {message.error()}")
                return time.perf_counter() - started
        finally:
            consumer.close()
        raise BenchError(f"group_join: no record within {GROUP_JOIN_TIMEOUT_S} s")
