"""Kafka clients of the classic protocol inside a consumer-protocol group (KIP-848's mixed groups).

A mixin of :class:`~lkstream.broker.groups.coordinator.GroupCoordinator`. Kafka 4 lets a group
hold members of both protocols while it is upgraded from classic to consumer (or downgraded
back): the coordinator computes every member's assignment, and a classic member learns its
own from JoinGroup/SyncGroup and is told to rejoin (REBALANCE_IN_PROGRESS on its heartbeat)
whenever it must give partitions back or may take more. Kafka's rules
(``GroupMetadataManager.classicGroupJoinToConsumerGroup`` and its sync, heartbeat and leave
twins), in this coordinator's terms:

* JoinGroup: the member joins (or rejoins) with the subscription its protocol metadata
  carries; the partitions it was told to revoke and no longer lists as owned (a v1+
  subscription's ``owned_partitions``; an eager client lists none) are released; the answer
  is immediate: generation = the group's, no leader, no member list (the client is a
  follower and sends an empty SyncGroup), protocol = its first protocol;
* SyncGroup: the assignment computed at its join (owned minus what it must revoke), as a
  ConsumerProtocolAssignment; REBALANCE_IN_PROGRESS once the group moved past its generation;
* Heartbeat: ILLEGAL_GENERATION for another generation; REBALANCE_IN_PROGRESS when the group
  moved on, when it must revoke, or when it was granted more than it knows of;
* commits are fenced with the generation of its last JoinGroup;
* LeaveGroup, expiry: as for any member. When the last consumer-protocol member goes and
  classic members remain, the group is handed back to the classic coordinator
  (:mod:`lkstream.broker.groups.conversion`).
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from lkstream.broker.groups.consumer_protocol import (
    decode_owned,
    decode_subscription,
    encode_assignment,
    protocol_version,
)
from lkstream.broker.groups.coordinator_state import ClassicInfo, GroupEntry, Member
from lkstream.broker.groups.deadlines import Deadlines
from lkstream.broker.groups.limits import GroupLimits
from lkstream.broker.groups.notify import GroupChanged
from lkstream.broker.groups.types import JoinResult, TopicPartition
from lkstream.errors import (
    InconsistentGroupProtocolError,
    RebalanceInProgressError,
    StaleGenerationError,
    UnknownMemberError,
)
from lkstream.storage.clock import Clock

CONSUMER_PROTOCOL = "consumer"


class NotAConsumerGroupError(UnknownMemberError):
    """The group has no consumer-protocol members here (any more): the classic coordinator answers."""


@dataclass(frozen=True)
class ClassicJoined:
    """A classic member's JoinGroup answer in a consumer-protocol group."""

    member_id: str
    generation: int
    protocol: str


@dataclass(frozen=True)
class Handover:
    """A group moving between the coordinators: its members and generation."""

    members: tuple[Member, ...]
    generation: int


class ClassicMemberCalls:
    """The classic protocol's calls on consumer-protocol groups (a mixin; see the module docstring)."""

    _lock: threading.Lock
    _groups: dict[str, GroupEntry]
    _clock: Clock
    _deadlines: Deadlines[tuple[str, str]]
    _member_count: int
    limits: GroupLimits
    changed: GroupChanged

    def join_classic(
        self,
        group: str,
        *,
        member_id: str,
        instance_id: str | None,
        protocol_type: str,
        protocols: tuple[tuple[str, bytes], ...],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        client_id: str,
        client_host: str,
        owner: str | None,
    ) -> ClassicJoined:
        """A classic JoinGroup into a group with consumer-protocol members (see the module docstring).

        ``member_id`` is the client's, or a new one the caller chose (MEMBER_ID_REQUIRED is the
        caller's business). Raises :class:`NotAConsumerGroupError` when the group has no members here.
        """
        self.limits.check_session_timeout(group, session_timeout_ms)
        metadata = protocols[0][1] if protocols else b""
        topics = decode_subscription(metadata)
        reported = decode_owned(metadata)
        with self._lock:
            now = self._expire_locked()
            g = self._groups.get(group)
            if g is None or not g.members:
                raise NotAConsumerGroupError(group, member_id, "no consumer-protocol member holds the group")
            _check_classic_protocols(g, member_id, protocol_type, protocols)
            known = member_id in g.members
            joined = self._join_locked(
                g,
                topics,
                member_id=member_id if known else None,
                instance_id=instance_id,
                assignor=g.assignor or "cooperative-sticky",
                session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms,
                client_id=client_id,
                client_host=client_host,
                new_member_id=None if known else member_id,
                owner=owner,
                now=now,
            )
            member = g.members[joined.member_id]
            released = [tp for tp in self._to_revoke(g, member) if tp not in reported]
            self._reconcile_locked(g, member, released, now)
            member.classic = ClassicInfo(
                protocol_type=protocol_type,
                protocols=protocols,
                session_timeout_ms=session_timeout_ms,
                generation=g.generation,
                assignment=frozenset(member.owned - self._to_revoke(g, member)),
            )
            member.generation = g.generation
            return ClassicJoined(joined.member_id, g.generation, protocols[0][0])

    def sync_classic(
        self, group: str, member_id: str, generation: int, instance_id: str | None = None, *, owner: str | None = None
    ) -> bytes:
        """A classic member's SyncGroup: its assignment as a ConsumerProtocolAssignment."""
        with self._lock:
            self._expire_locked()
            g, _member, info = self._classic_member_locked(group, member_id, instance_id, generation, owner)
            if g.generation > info.generation:
                raise RebalanceInProgressError(group, member_id, g.generation)
            return encode_assignment(info.assignment, protocol_version(info.protocols[0][1]))

    def heartbeat_classic(
        self, group: str, member_id: str, generation: int, instance_id: str | None = None, *, owner: str | None = None
    ) -> None:
        """A classic member's Heartbeat: :class:`RebalanceInProgressError` when it must rejoin."""
        with self._lock:
            now = self._expire_locked()
            g, member, info = self._classic_member_locked(group, member_id, instance_id, generation, owner)
            self._reconcile_locked(g, member, [], now)  # grants what became free: it learns it by rejoining
            current = frozenset(member.owned - self._to_revoke(g, member))
            if g.generation > info.generation or current != info.assignment:
                raise RebalanceInProgressError(group, member_id, g.generation)

    def is_classic_member(self, group: str, member_id: str) -> bool:
        with self._lock:
            g = self._groups.get(group)
            member = None if g is None else g.members.get(member_id)
            return member is not None and member.classic is not None

    def _classic_member_locked(
        self, group: str, member_id: str, instance_id: str | None, generation: int, owner: str | None
    ) -> tuple[GroupEntry, Member, ClassicInfo]:
        g, member = self._live_member_locked(group, member_id, owner)
        info = member.classic
        if info is None:
            raise UnknownMemberError(group, member_id, "it uses the consumer protocol, not the classic one")
        if instance_id is not None and member.instance_id != instance_id:
            raise UnknownMemberError(group, member_id, f"it is not the static member {instance_id!r}")
        if generation != info.generation:
            raise StaleGenerationError(group, member_id, generation, info.generation)
        return g, member, info

    def commit_generation(self, member: Member) -> int:
        """The generation a member's commits must carry (a classic member's is its last JoinGroup's)."""
        return member.classic.generation if member.classic is not None else member.generation

    # -- handing a group over between the coordinators (conversion) --------------------------------

    def adopt(self, group: str, handover: Handover, assignor: str) -> None:
        """Take a classic group's members (an online upgrade): each keeps its current assignment."""
        with self._lock:
            now = self._expire_locked()
            if group in self._groups:
                raise InconsistentGroupProtocolError(group, assignor, "a group already held here")
            g = GroupEntry(group, generation=handover.generation, assignor=assignor)
            for handed in handover.members:
                member = replace(handed, assignor=assignor, last_seen=now)
                member.owned = {tp for tp in member.owned if tp not in g.owners}  # never one partition twice
                member.target = set(member.owned)
                g.owners.update(dict.fromkeys(member.owned, member.member_id))
                g.members[member.member_id] = member
                if member.instance_id is not None:
                    g.instances[member.instance_id] = member.member_id
                self._member_count += 1
                self._deadlines.schedule((group, member.member_id), now + member.session_timeout_ms)
            g.partition_counts = self._counts_locked(g)
            self._groups[group] = g

    def release_classic_group(self, group: str) -> Handover | None:
        """Give up a group whose members all speak the classic protocol (an online downgrade); None if
        it has none, or a consumer-protocol member."""
        with self._lock:
            self._expire_locked()
            g = self._groups.get(group)
            if g is None or not g.members or any(m.classic is None for m in g.members.values()):
                return None
            members = tuple(g.members.values())
            for member in members:
                self._deadlines.cancel((group, member.member_id))
            self._member_count -= len(members)
            del self._groups[group]
            self.changed.notify(group)
            self.changed.forget(group)
            return Handover(members, g.generation)

    def take_downgradable(self) -> list[str]:
        """Groups where the last consumer-protocol member went and classic members remain (drained)."""
        with self._lock:
            names, self._downgradable = sorted(self._downgradable), set()
            return names

    def _note_removed_locked(self, g: GroupEntry, member: Member) -> None:
        if member.classic is None and g.members and all(m.classic is not None for m in g.members.values()):
            self._downgradable.add(g.name)

    _downgradable: set[str]

    # What the mixin needs from the coordinator.
    @abstractmethod
    def _expire_locked(self) -> float: ...

    @abstractmethod
    def _live_member_locked(
        self, group: str, member_id: str, owner: str | None = None
    ) -> tuple[GroupEntry, Member]: ...

    @abstractmethod
    def _to_revoke(self, g: GroupEntry, member: Member) -> set[TopicPartition]: ...

    @abstractmethod
    def _reconcile_locked(
        self, g: GroupEntry, member: Member, released: list[TopicPartition], now: float
    ) -> set[TopicPartition]: ...

    @abstractmethod
    def _counts_locked(self, g: GroupEntry) -> dict[str, int]: ...

    _join_locked: Callable[..., JoinResult]


def _check_classic_protocols(
    g: GroupEntry, member_id: str, protocol_type: str, protocols: Iterable[tuple[str, bytes]]
) -> None:
    """Kafka's ``supportsClassicProtocols``: the consumer protocol type, and a protocol every other
    classic member supports."""
    offered = {name for name, _ in protocols}
    if protocol_type != CONSUMER_PROTOCOL or not offered:
        raise InconsistentGroupProtocolError(g.name, protocol_type, CONSUMER_PROTOCOL)
    for other in g.members.values():
        if other.member_id != member_id and other.classic is not None:
            theirs = {name for name, _ in other.classic.protocols}
            if not offered & theirs:
                raise InconsistentGroupProtocolError(g.name, ",".join(sorted(offered)), ",".join(sorted(theirs)))
