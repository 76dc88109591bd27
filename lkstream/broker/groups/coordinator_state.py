"""The coordinator's state (:mod:`lkstream.broker.groups.coordinator`): members, groups, argument checks.

Plain data and pure helpers; every change to them happens under the coordinator's lock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from lkstream.broker.groups.types import TopicPartition
from lkstream.errors import InvalidArgumentError, MemberOwnerError
from lkstream.storage.names import validate_topic


@dataclass(frozen=True)
class ClassicInfo:
    """What a Kafka client of the classic protocol brought into a consumer-protocol group (KIP-848's
    mixed groups): its protocols, session timeout, and what its last JoinGroup answered."""

    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    generation: int  # the generation (member epoch) its last JoinGroup answered: it heartbeats and commits with it
    assignment: frozenset[TopicPartition]  # what its SyncGroup answers


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    topics: frozenset[str]
    assignor: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    last_seen: float
    generation: int = 0
    owned: set[TopicPartition] = field(default_factory=set)
    target: set[TopicPartition] = field(default_factory=set)
    revoke_since: float | None = None  # when it was first told to revoke something still owned
    owner: str | None = None  # the principal that joined with this member id (None: a trusted caller)
    classic: ClassicInfo | None = None  # a Kafka client of the classic protocol (KIP-848's mixed groups)

    @property
    def sort_key(self) -> str:
        # Static members are ordered by instance id, so a restart keeps their place in range/roundrobin.
        return f"i:{self.instance_id}" if self.instance_id is not None else f"m:{self.member_id}"


@dataclass
class GroupEntry:
    name: str
    generation: int = 0
    assignor: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    instances: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    owners: dict[TopicPartition, str] = field(default_factory=dict)  # partition -> owning member id
    fenced: dict[str, str] = field(default_factory=dict)  # fenced member id -> instance id
    partition_counts: dict[str, int] = field(default_factory=dict)
    barrier: bool = False  # eager rebalance: nothing is granted until every member released everything


def check_subscription(topics: Iterable[str]) -> frozenset[str]:
    if isinstance(topics, str):
        raise InvalidArgumentError("topics must be a collection of topic names, not one string")
    subscribed = frozenset(validate_topic(t) for t in topics)
    if not subscribed:
        raise InvalidArgumentError("a group member must subscribe to at least one topic")
    return subscribed


def check_released(released: Iterable[TopicPartition]) -> list[TopicPartition]:
    out = []
    for tp in released:
        if not isinstance(tp, tuple) or len(tp) != 2:
            raise InvalidArgumentError(f"invalid released partition {tp!r}: use (topic, partition)")
        out.append((tp[0], tp[1]))
    return out


def deadline_of(member: Member) -> float:
    """When ``member`` expires unless heard from (session) or it releases what it must (rebalance)."""
    session = member.last_seen + member.session_timeout_ms
    if member.revoke_since is None:
        return session
    return min(session, member.revoke_since + member.rebalance_timeout_ms)


def owned_by(g: GroupEntry, member: Member, owner: str | None) -> Member:
    """``member``, unless ``owner`` is a principal other than the one that joined with it."""
    if owner is not None and owner != member.owner:
        raise MemberOwnerError(g.name, member.member_id, owner)
    return member
