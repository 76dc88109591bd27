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
                        (``linger_ms`` 1, acks=all) and consumer (``fetch_max_wait_ms`` 10) in one loop.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from confluent_kafka import Consumer, Producer

from benchmarks.suite.base import WARMUP_FRACTION, AckRun, Consumed, Produced, steady_consumed
from benchmarks.suite.core import BenchError, Schedule, run_open_async, stamped, unstamp

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
        return asyncio.run(self._e2e_aiokafka(topic, schedule, value_size))

    async def _e2e_aiokafka(self, topic: str, schedule: Schedule, value_size: int) -> AckRun:
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=1, acks="all")
        # a short fetch wait, as the confluent-kafka e2e reader: latency-sensitive, not throughput-bound
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False, fetch_max_wait_ms=10)
        await producer.start()
        await consumer.start()
        pad = bytes(value_size - 16)
        warm = int(schedule.total * WARMUP_FRACTION)
        lat: list[float] = []
        got = 0
        last = 0.0
        target = [schedule.total]

        async def reader() -> None:
            nonlocal got, last
            while got < target[0]:
                batches = await consumer.getmany(timeout_ms=50)
                now = last = time.perf_counter()
                for records in batches.values():
                    for record in records:
                        scheduled, seq = unstamp(record.value or bytes(16))
                        if seq >= warm:
                            lat.append(now - scheduled)
                        got += 1

        try:
            partition = TopicPartition(topic, 0)
            consumer.assign([partition])
            await consumer.seek_to_beginning(partition)
            reading = asyncio.ensure_future(reader())
            await asyncio.sleep(0.3)

            async def send(scheduled: float, first: int, count: int) -> None:
                for seq in range(first, first + count):
                    await producer.send(topic, stamped(scheduled, seq, pad), partition=0)

            start, sent = await run_open_async(schedule, send)
            target[0] = sent
            await producer.flush()
            try:
                await asyncio.wait_for(reading, 3 * schedule.seconds + 30)
            except TimeoutError:
                raise BenchError(f"{self.name}: aiokafka e2e received {got} of {sent}") from None
        finally:
            await consumer.stop()
            await producer.stop()
        return AckRun(lat, got, last - start)
