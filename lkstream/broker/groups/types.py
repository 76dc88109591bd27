"""Values the group coordinator hands out: join, heartbeat and sync results, group descriptions."""

from __future__ import annotations

import enum
from dataclasses import dataclass

TopicPartition = tuple[str, int]
"""``(topic, partition)``."""


class GroupState(enum.StrEnum):
    """Kafka's group states, as ``lkstream groups describe`` prints them."""

    EMPTY = "Empty"  # no live members (committed offsets may exist)
    REBALANCING = "Rebalancing"  # some member still has to release or receive partitions
    STABLE = "Stable"  # every member owns exactly its target
    DEAD = "Dead"  # the coordinator knows nothing of the group: no members, no offsets


@dataclass(frozen=True)
class JoinResult:
    member_id: str
    generation: int
    assignor: str
    rebalanced: bool  # False when a static member took over its old identity without a rebalance


@dataclass(frozen=True)
class HeartbeatResult:
    """What a member must do now.

    ``owned`` is authoritative: the member consumes ``owned - revoke``, and
    stops consuming ``revoke`` (committing first) and reports those partitions
    as released in its next heartbeat. ``assigned`` is only the part of
    ``owned`` that this call granted; a client that lost a response must
    reconcile from ``owned``, never from ``assigned``.
    """

    generation: int
    assigned: frozenset[TopicPartition]
    revoke: frozenset[TopicPartition]
    owned: frozenset[TopicPartition]
    target: frozenset[TopicPartition]
    stable: bool  # owned == target and nothing is pending for this member


@dataclass(frozen=True)
class SyncResult:
    generation: int
    assignment: frozenset[TopicPartition]


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    topics: frozenset[str]
    owned: frozenset[TopicPartition]
    target: frozenset[TopicPartition]
    generation: int  # the generation this member last received


@dataclass(frozen=True)
class GroupDescription:
    group: str
    state: GroupState
    generation: int
    assignor: str | None
    members: tuple[MemberDescription, ...]


@dataclass(frozen=True)
class GroupListing:
    group: str
    state: GroupState
    members: int


@dataclass(frozen=True)
class PartitionLag:
    """How far ``group`` is behind in one partition (``lkstream groups describe``)."""

    topic: str
    partition: int
    committed: int | None  # next offset the group will read; None: never committed
    high_watermark: int
    lag_messages: int  # high watermark - committed (- log start without a commit)
    lag_seconds: float  # age of the oldest unconsumed record; 0.0 when caught up
    owner: str | None  # member id owning the partition now
