"""The Kafka bridge: copy LKSTREAM topics into a Kafka cluster, at least once.

::

    bridge = KafkaBridge(lkstream.connect("127.0.0.1:9090"), BridgeSettings(
        topics=["market.ticks"], kafka_bootstrap="kafka:9092"))
    await bridge.run()            # until bridge.stop() (or SIGTERM in ``lkstream bridge``)

How a record travels, and why nothing acknowledged by Kafka is lost and nothing
unacknowledged is committed:

1. The bridge is a :class:`~lkstream.client.consumer.Consumer` of group
   ``settings.group`` (default ``lkstream-bridge``) with auto-commit off: several
   bridges of one group split the partitions, and a dead one's partitions move
   to the others after its session timeout. It starts at the group's committed
   offsets (earliest when there are none); before a partition is revoked, it
   waits for Kafka's acknowledgements and commits them.
2. Each record is handed to aiokafka's producer (``acks=all``; idempotent
   where the target supports it) with its key, value, timestamp and headers,
   to the target topic named by ``settings.target_topic`` and to the same
   partition number (``partitioning="same"``) or to the partition Kafka's
   default partitioner picks from the key (``"key-hash"``).
3. Every ``commit_every`` records, and whenever the source runs dry, the bridge
   waits for Kafka to acknowledge everything sent so far and only then commits,
   per partition, the offset after the last acknowledged record.

So after a crash (SIGKILL included) a restarted bridge resends what was sent
after the last commit: duplicates in Kafka are limited to those records, and
per partition the order of first appearances is the LKSTREAM order (aiokafka
keeps one request in flight per partition, so retries do not reorder). A send
that fails after aiokafka's own retries rewinds the consumer to the last commit
and sends again after a backoff, counted in ``lk_bridge_retries_total``.

Idempotence: ``"auto"`` (default) asks for an idempotent producer and, if the
target refuses to hand out a producer id when the producer starts (Tansu does),
falls back to a plain ``acks=all`` producer, logged once; nothing has been sent
at that point. ``"on"`` makes that refusal an error, ``"off"`` never asks.

Security: the LKSTREAM side is the ``lkstream.connect(address, token=..., tls=...)``
the bridge is given; the Kafka side is ``settings.kafka_security``
(:class:`~lkstream.bridge.target_security.KafkaSecurity`: TLS, SASL PLAIN or SCRAM),
used by the producer and the admin client alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    TopicAlreadyExistsError,
    UnknownError,
    UnsupportedVersionError,
)
from prometheus_client import CollectorRegistry, Counter, Gauge

from lkstream.bridge.target_security import KafkaSecurity
from lkstream.broker.broker import Broker
from lkstream.client.consumer import Consumer, ConsumerSource, TopicPartition
from lkstream.errors import BrokerUnavailableError, InvalidArgumentError, count_of
from lkstream.format.codec import Record

log = logging.getLogger("lkstream.bridge")

Partitioning = Literal["same", "key-hash"]
Idempotence = Literal["auto", "on", "off"]

#: Errors that, when an idempotent producer starts, mean "this target cannot do idempotent produce".
_NO_IDEMPOTENCE = (UnknownError, UnsupportedVersionError)


@dataclass
class BridgeSettings:
    """What to copy, where to, and how often to commit."""

    topics: Sequence[str]
    kafka_bootstrap: str
    group: str = "lkstream-bridge"
    #: Target topic name; ``{topic}`` is replaced by the LKSTREAM topic.
    target_topic: str = "{topic}"
    partitioning: Partitioning = "same"
    #: Create missing target topics (same partition count) where the target allows it.
    create_topics: bool = True
    replication_factor: int = 1
    idempotence: Idempotence = "auto"
    #: Wait for Kafka's acks and commit after this many records (and whenever the source is idle).
    commit_every: int = 5000
    #: ... and at least this often (seconds) while records keep trickling in.
    commit_interval_s: float = 1.0
    #: Seconds without new records before the bridge flushes and commits what it sent.
    idle_flush_s: float = 0.2
    retry_backoff_s: float = 1.0
    linger_ms: int = 5
    #: TLS and SASL towards the target cluster.
    kafka_security: KafkaSecurity = field(default_factory=KafkaSecurity)
    #: Further aiokafka producer options (they win over everything above).
    kafka_options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.topics:
            raise InvalidArgumentError("the bridge needs at least one topic")
        if self.partitioning not in ("same", "key-hash"):
            raise InvalidArgumentError(f"partitioning must be 'same' or 'key-hash', not {self.partitioning!r}")
        if self.idempotence not in ("auto", "on", "off"):
            raise InvalidArgumentError(f"idempotence must be auto, on or off, not {self.idempotence!r}")
        if "{topic}" not in self.target_topic and len(self.topics) > 1:
            raise InvalidArgumentError("with several topics, target_topic must contain {topic}")
        if self.commit_every < 1:
            raise InvalidArgumentError("commit_every must be at least 1")

    def target_for(self, topic: str) -> str:
        return self.target_topic.replace("{topic}", topic)


class BridgeMetrics:
    """Prometheus series of one bridge (its own registry, so several bridges can live in one process)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.bridged = Counter(
            "lk_bridge_records",
            "Records acknowledged by Kafka and committed in LKSTREAM",
            ["topic", "partition"],
            registry=self.registry,
        )
        self.lag = Gauge(
            "lk_bridge_lag_records",
            "Records in LKSTREAM not yet acknowledged by Kafka (high watermark - committed)",
            ["topic", "partition"],
            registry=self.registry,
        )
        self.errors = Counter(
            "lk_bridge_produce_errors",
            "Kafka sends that failed after the producer's own retries",
            registry=self.registry,
        )
        self.retries = Counter(
            "lk_bridge_retries", "Times the bridge rewound to the last commit and sent again", registry=self.registry
        )


class KafkaBridge:
    """One bridge: an LKSTREAM consumer feeding an aiokafka producer. See the module docstring."""

    def __init__(
        self,
        source: Broker | ConsumerSource,
        settings: BridgeSettings,
        *,
        metrics: BridgeMetrics | None = None,
    ) -> None:
        self.source = source
        self.settings = settings
        self.metrics = metrics or BridgeMetrics()
        self.consumer = Consumer(
            source,
            group=settings.group,
            auto_commit=False,
            auto_offset_reset="earliest",
            on_revoked=self._on_revoked,
        )
        self._producer: AIOKafkaProducer | None = None
        self._idempotent = settings.idempotence != "off"
        self._pending: list[asyncio.Future[Any]] = []
        self._sent_up_to: dict[TopicPartition, int] = {}
        self._sent_records: dict[TopicPartition, int] = {}  # sent since the last commit, per partition
        self._stopping = asyncio.Event()
        self._last_commit = time.monotonic()

    # -- lifecycle ---------------------------------------------------------------------------------

    async def run(self) -> None:
        """Copy records until :meth:`stop`; commit what Kafka acknowledged before returning."""
        for topic in self.settings.topics:
            self.consumer.subscribe(topic, from_committed=True)
        await self._ensure_target_topics()
        await self._start_producer()
        await self._check_partition_counts()
        try:
            while not self._stopping.is_set():
                try:
                    await self._copy_until_idle()
                    await self._flush_and_commit()
                except KafkaError as exc:
                    await self._rewind(exc)
                self._update_lag()
        finally:
            with contextlib.suppress(KafkaError):
                await self._flush_and_commit()
            await self._stop_producer()

    def stop(self) -> None:
        """Make :meth:`run` flush, commit and return (safe from a signal handler on the loop)."""
        self._stopping.set()
        self.consumer.stop()

    # -- the copy loop -----------------------------------------------------------------------------

    async def _copy_until_idle(self) -> None:
        async def send(_pid: int, _offset: int, record: Record) -> None:
            await self._send(record)
            if (
                len(self._pending) >= self.settings.commit_every
                or time.monotonic() - self._last_commit >= self.settings.commit_interval_s
            ):
                await self._flush_and_commit()

        await self.consumer.consume(None, send, idle_timeout=self.settings.idle_flush_s)

    async def _send(self, record: Record) -> None:
        assert self._producer is not None
        partition = record.partition if self.settings.partitioning == "same" else None
        headers = [(k, v if v is not None else b"") for k, v in record.headers or ()]
        future = await self._producer.send(
            self.settings.target_for(record.topic),
            record.value,
            key=record.key,
            partition=partition,
            timestamp_ms=record.timestamp,
            headers=headers or None,
        )
        self._pending.append(future)
        tp = (record.topic, record.partition)
        self._sent_up_to[tp] = record.offset + 1
        self._sent_records[tp] = self._sent_records.get(tp, 0) + 1

    async def _flush_and_commit(self) -> None:
        """Wait for Kafka to acknowledge every send, then commit the offsets after them.

        A partition whose position passed offsets that hold no record (a compacted topic's
        gaps, its removed last records) commits its position: everything below it was sent
        and acknowledged, or is not there to send, so its lag can reach 0.
        """
        self._last_commit = time.monotonic()
        pending, self._pending = self._pending, []
        await asyncio.gather(*pending)
        assigned = set(self.consumer.assignment())
        to_commit: dict[TopicPartition, int] = {}
        for tp in assigned | set(self._sent_up_to):
            target = max(self._sent_up_to.get(tp, 0), self.consumer.position(*tp) if tp in assigned else 0)
            if target > (self.consumer.committed(*tp) or 0):
                to_commit[tp] = target
        if not to_commit:
            return
        await asyncio.to_thread(self.consumer.commit, to_commit)
        counts, self._sent_records = self._sent_records, {}
        for (topic, pid), count in counts.items():
            self.metrics.bridged.labels(topic, str(pid)).inc(count)

    async def _on_revoked(self, partitions: list[TopicPartition]) -> None:
        """Another bridge of the group takes ``partitions``: commit what Kafka acknowledged first.

        Every send so far is awaited (Kafka acks are per request, not per partition) and
        committed while this member still owns the partitions, so the next owner starts
        after the last acknowledged record. What was sent for them is then forgotten.
        """
        if self._producer is not None:
            await self._flush_and_commit()
        for tp in partitions:
            self._sent_up_to.pop(tp, None)
            self._sent_records.pop(tp, None)

    async def _rewind(self, exc: KafkaError) -> None:
        """Kafka refused a send: forget unacknowledged sends, go back to the last commit, retry later."""
        self.metrics.errors.inc()
        log.warning(
            "Kafka send failed (%s); resending from the last commit in %.1f s", exc, self.settings.retry_backoff_s
        )
        for future in self._pending:
            future.cancel()
        self._pending.clear()
        self._sent_up_to.clear()
        self._sent_records.clear()
        for topic, pid in self.consumer.assignment():
            committed = self.consumer.committed(topic, pid)
            start, _ = self.source_bounds(topic, pid)
            self.consumer.seek(topic, pid, max(start, committed if committed is not None else start))
        self.metrics.retries.inc()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), self.settings.retry_backoff_s)

    def source_bounds(self, topic: str, pid: int) -> tuple[int, int]:
        return self.consumer.source.bounds(topic, pid)

    def _update_lag(self) -> None:
        for topic, pid in self.consumer.assignment():
            with contextlib.suppress(BrokerUnavailableError):
                _, high = self.source_bounds(topic, pid)
                committed = self.consumer.committed(topic, pid) or 0
                self.metrics.lag.labels(topic, str(pid)).set(max(0, high - committed))

    # -- Kafka side --------------------------------------------------------------------------------

    def _producer_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {
            "bootstrap_servers": self.settings.kafka_bootstrap,
            "acks": "all",
            "enable_idempotence": self._idempotent,
            "linger_ms": self.settings.linger_ms,
            "client_id": f"lkstream-bridge-{self.settings.group}",
            **self.settings.kafka_security.client_options(),
        }
        options.update(self.settings.kafka_options)
        return options

    async def _start_producer(self) -> None:
        producer = AIOKafkaProducer(**self._producer_options())
        try:
            await producer.start()
        except KafkaConnectionError as exc:
            await producer.stop()
            raise BrokerUnavailableError(f"cannot reach Kafka at {self.settings.kafka_bootstrap}: {exc}") from exc
        except _NO_IDEMPOTENCE as exc:
            # An idempotent producer asks for a producer id when it starts; a target
            # that cannot hand one out refuses here, before anything was sent.
            await producer.stop()
            if self.settings.idempotence != "auto":
                raise
            log.warning(
                "Kafka at %s cannot do idempotent produce (%r): using acks=all without idempotence",
                self.settings.kafka_bootstrap,
                exc,
            )
            self._idempotent = False
            await self._start_producer()
            return
        self._producer = producer

    async def _stop_producer(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    async def _check_partition_counts(self) -> None:
        """With ``partitioning="same"`` every source partition needs its twin in Kafka."""
        assert self._producer is not None
        if self.settings.partitioning != "same":
            return
        for topic in self.settings.topics:
            target = self.settings.target_for(topic)
            have = len(await self._producer.partitions_for(target))
            need = self.consumer.source.partitions_for(topic)
            if have < need:
                await self._stop_producer()
                raise InvalidArgumentError(
                    f"Kafka topic {target!r} has {count_of(have, 'partition')} but {topic!r} has {need}: "
                    "add partitions in Kafka or use partitioning='key-hash'"
                )

    async def _ensure_target_topics(self) -> None:
        """Create missing target topics with the source's partition count (when allowed)."""
        if not self.settings.create_topics:
            return
        admin = AIOKafkaAdminClient(
            bootstrap_servers=self.settings.kafka_bootstrap, **self.settings.kafka_security.client_options()
        )
        try:
            await admin.start()
        except KafkaConnectionError as exc:
            await admin.close()
            raise BrokerUnavailableError(f"cannot reach Kafka at {self.settings.kafka_bootstrap}: {exc}") from exc
        try:
            existing = set(await admin.list_topics())
            wanted = {
                self.settings.target_for(topic): self.consumer.source.partitions_for(topic)
                for topic in self.settings.topics
            }
            missing = [
                NewTopic(name, count, self.settings.replication_factor)
                for name, count in wanted.items()
                if name not in existing
            ]
            if missing:
                with contextlib.suppress(TopicAlreadyExistsError):
                    await admin.create_topics(missing)
                log.info("created Kafka topics %s", ", ".join(t.name for t in missing))
        finally:
            await admin.close()
