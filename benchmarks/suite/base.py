"""The interface every system under test implements (one module per system)."""

from __future__ import annotations

import abc
import os
from dataclasses import dataclass
from pathlib import Path

from benchmarks.suite.core import Schedule

# Every latency phase drops its first tenth of samples: connection set-up, first segment, JIT-free
# but cache-cold code paths.
WARMUP_FRACTION = 0.1


@dataclass
class Produced:
    msgs: int
    seconds: float


@dataclass
class Consumed:
    msgs: int
    nbytes: int
    seconds: float
    #: From the first receipt on (the client's start-up, e.g. librdkafka's 0.5 s offset query, left
    #: out): messages after the first batch received, and the seconds after it. None: not measured.
    steady_msgs: int | None = None
    steady_seconds: float | None = None


def steady_consumed(count: int, nbytes: int, started: float, ended: float, first: tuple[int, float] | None) -> Consumed:
    """A :class:`Consumed` with its steady part: what came after the first batch (``(messages, time)``)."""
    if first is None or ended <= first[1]:
        return Consumed(count, nbytes, ended - started)
    return Consumed(count, nbytes, ended - started, count - first[0], ended - first[1])


@dataclass
class AckRun:
    latencies_s: list[float]
    acked: int
    seconds: float  # from the first scheduled send to the last ack (or receipt)


class System(abc.ABC):
    """One system under test. ``start`` and ``stop`` bracket every other call.

    Produce and consume are closed-loop (as fast as the client goes, capped by message count and
    time); ``ack_latency`` and ``e2e`` are open-model (:class:`Schedule`), values carry their
    scheduled send time (:func:`benchmarks.suite.core.stamped`).
    """

    name: str = ""
    label: str = ""
    kind: str = "server"  # "server" (own process) or "embedded" (in the runner's process)
    durability: str = ""
    client: str = ""

    @abc.abstractmethod
    def start(self, root: Path) -> None: ...

    @abc.abstractmethod
    def stop(self) -> None: ...

    @abc.abstractmethod
    def version(self) -> str: ...

    @abc.abstractmethod
    def server_pid(self) -> int: ...

    @abc.abstractmethod
    def produce(self, topic: str, partitions: int, values: list[bytes], max_msgs: int, max_seconds: float) -> Produced:
        """Create ``topic`` with ``partitions`` and produce values round-robin; acked msgs and time."""

    @abc.abstractmethod
    def consume(self, topic: str, partitions: int, expected: int, timeout: float) -> Consumed:
        """Read ``topic`` from its start until ``expected`` messages arrived."""

    @abc.abstractmethod
    def ack_latency(self, topic: str, schedule: Schedule, value_size: int) -> AckRun:
        """Per-message produce ack latency at the schedule's rate (fresh one-partition topic)."""

    @abc.abstractmethod
    def e2e(self, topic: str, schedule: Schedule, value_size: int) -> AckRun:
        """Produce-to-consume latency of each message (a consumer in the same process).

        ``acked`` counts messages received, ``seconds`` runs from the start to the last receipt.
        """

    def produce_many(
        self, topic: str, partitions: int, values: list[bytes], max_msgs: int, max_seconds: float
    ) -> Produced | None:
        """Optional: the system's explicit batch API, when it has one distinct from ``produce``."""
        return None

    # Optional phases of Kafka-protocol systems (benchmarks.suite.kafka_phases); None: not offered.

    def produce_idempotent(self, topic: str, values: list[bytes], max_msgs: int, max_seconds: float) -> Produced | None:
        """An idempotent producer with small (20 KB) batches into a new one-partition topic."""
        return None

    def group_join(self, topic: str) -> float | None:
        """Seconds from a new consumer group's subscribe to its first record."""
        return None

    def produce_keyed(
        self, topic: str, partitions: int, records: list[tuple[str, bytes]], max_msgs: int, max_seconds: float
    ) -> Produced | None:
        """Optional: produce ``(key, value)`` records (cycled) to ``partitions`` partitions, routed by key.

        Issue 14's "seed pattern": ``str`` ticker keys, the record stored with its key. Each
        system uses its own way to produce keyed records (LKSTREAM: ``produce_many`` of 1,000,
        the seed's API; Kafka clients: ``produce(key=...)``).
        """
        return None

    def ack_latency_unbatched(self, topic: str, schedule: Schedule, value_size: int) -> AckRun | None:
        """Optional: :meth:`ack_latency` without client-side lingering (LKSTREAM ``linger_ms=0``).

        Systems whose latency phase does not linger anyway run their ``ack_latency``.
        """
        return None

    def ack_latency_one_call(self, topic: str, schedule: Schedule, value_size: int) -> AckRun | None:
        """Optional: one produce call per message, awaited before the next (LKSTREAM ``produce_many`` of one)."""
        return None

    def consume_aiokafka(self, topic: str, partitions: int, expected: int, timeout: float) -> Consumed | None:
        """Optional (Kafka-protocol systems): :meth:`consume` with aiokafka (``getmany``)."""
        return None

    def e2e_aiokafka(self, topic: str, schedule: Schedule, value_size: int) -> AckRun | None:
        """Optional (Kafka-protocol systems): :meth:`e2e` with aiokafka's producer and consumer."""
        return None


def own_pid() -> int:
    return os.getpid()
