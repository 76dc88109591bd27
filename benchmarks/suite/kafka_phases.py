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
``consume_aiokafka``    issue 25: the ``consume`` phase's topic read again with aiokafka (``getmany`` of
                        up to 10,000, 8 MiB per partition as the confluent-kafka consumer).
``e2e_10k_aiokafka``    issue 25: produce-to-consume latency at 10,000 msg/s with aiokafka's producer
                        (``linger_ms`` 1, acks=all) and consumer (``fetch_max_wait_ms`` 10), the consumer
                        in a process of its own (``aiokafka_reader``).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from confluent_kafka import Consumer, Producer

from benchmarks._common import REPO
from benchmarks.suite import aiokafka_reader
from benchmarks.suite.base import WARMUP_FRACTION, AckRun, Consumed, Produced, steady_consumed
from benchmarks.suite.core import BenchError, Schedule, run_open_async, stamped

IDEMPOTENT_BATCH_BYTES = 20_000
GROUP_JOIN_TIMEOUT_S = 60.0
#: aiokafka's consumer with the confluent-kafka consumer's limits (peer_tansu._consumer).
AIOKAFKA_CONSUMER = {"fetch_max_bytes": 52_428_800, "max_partition_fetch_bytes": 8_388_608}


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

    def consume_aiokafka(self, topic: str, partitions: int, expected: int, timeout: float) -> Consumed:
        return asyncio.run(self._consume_aiokafka(topic, partitions, expected, timeout))

    async def _consume_aiokafka(self, topic: str, partitions: int, expected: int, timeout: float) -> Consumed:
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False, **AIOKAFKA_CONSUMER)
        await consumer.start()
        try:
            assigned = [TopicPartition(topic, p) for p in range(partitions)]
            consumer.assign(assigned)
            await consumer.seek_to_beginning(*assigned)
            count = nbytes = 0
            started = time.perf_counter()
            deadline = started + timeout
            first: tuple[int, float] | None = None
            while count < expected and time.perf_counter() < deadline:
                batches = await consumer.getmany(timeout_ms=500, max_records=min(10_000, expected - count))
                for records in batches.values():
                    count += len(records)
                    nbytes += sum(len(r.value or b"") for r in records)
                if first is None and count:
                    first = (count, time.perf_counter())
            ended = time.perf_counter()
        finally:
            await consumer.stop()
        if count < expected:
            raise BenchError(f"{self.name}: aiokafka consumed {count} of {expected}")
        return steady_consumed(count, nbytes, started, ended, first)

    def e2e_aiokafka(self, topic: str, schedule: Schedule, value_size: int) -> AckRun:
        self._create(topic, 1)
        warm = int(schedule.total * WARMUP_FRACTION)
        deadline_s = 3 * schedule.seconds + 30
        cmd = [
            sys.executable,
            "-m",
            "benchmarks.suite.aiokafka_reader",
            self.bootstrap,
            topic,
            str(warm),
            str(deadline_s),
        ]
        reader = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True)
        try:
            assert reader.stdout is not None
            if reader.stdout.readline().strip() != aiokafka_reader.READY:
                raise BenchError(f"{self.name}: the aiokafka reader did not start")
            start, sent = asyncio.run(self._send_aiokafka(topic, schedule, value_size))
            out, _ = reader.communicate(timeout=deadline_s + 30)
        finally:
            if reader.poll() is None:
                reader.kill()
                reader.wait()
        result = json.loads(out.strip().splitlines()[-1])
        if result["received"] < sent:
            raise BenchError(f"{self.name}: aiokafka e2e received {result['received']} of {sent}")
        return AckRun(result["latencies_s"], result["received"], result["last"] - start)

    async def _send_aiokafka(self, topic: str, schedule: Schedule, value_size: int) -> tuple[float, int]:
        """The open-model sends of the aiokafka e2e phase, then the reader's end marker; (start, sent)."""
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=1, acks="all")
        await producer.start()
        pad = bytes(value_size - 16)
        try:

            async def send(scheduled: float, first: int, count: int) -> None:
                for seq in range(first, first + count):
                    await producer.send(topic, stamped(scheduled, seq, pad), partition=0)

            start, sent = await run_open_async(schedule, send)
            await producer.send(topic, stamped(time.perf_counter(), aiokafka_reader.END_SEQ, pad), partition=0)
            await producer.flush()
        finally:
            await producer.stop()
        return start, sent
