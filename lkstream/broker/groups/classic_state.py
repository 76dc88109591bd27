"""The state of Kafka's classic groups (:mod:`lkstream.broker.groups.classic`): groups, members, answers.

Plain data and small helpers; the state machine that changes them is
:class:`~lkstream.broker.groups.classic.ClassicGroups`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from lkstream.errors import GroupError, InconsistentGroupProtocolError, MemberOwnerError


class ClassicState(enum.StrEnum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class MemberIdRequiredError(GroupError):
    """JoinGroup v4+ without a member id: join again with :attr:`member_id` (Kafka's MEMBER_ID_REQUIRED)."""

    def __init__(self, group: str, member_id: str) -> None:
        super().__init__(group, f"group {group!r}: join again with member id {member_id!r}")
        self.member_id = member_id


class HeldByConsumerGroupError(InconsistentGroupProtocolError):
    """The group is held by consumer-protocol members (KIP-848): a classic member joins it there."""

    def __init__(self, group: str, protocol_type: str) -> None:
        super().__init__(group, protocol_type, "the consumer protocol (server-side assignment)")


@dataclass(frozen=True)
class JoinAnswer:
    generation: int
    protocol_type: str | None
    protocol: str | None
    leader: str
    member_id: str
    members: tuple[tuple[str, str | None, bytes], ...]  # (member id, instance id, metadata): for the leader only


@dataclass
class ClassicMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    last_seen: float
    assignment: bytes = b""
    join: Future[JoinAnswer] | None = None
    sync: Future[bytes] | None = None
    owner: str | None = None  # the principal that joined with this member id (None: a trusted caller)

    def metadata(self, protocol: str) -> bytes:
        return next(m for name, m in self.protocols if name == protocol)

    @property
    def waiting(self) -> bool:
        """A JoinGroup or SyncGroup of this member waits for the group: it counts as being heard from."""
        return self.join is not None or self.sync is not None


@dataclass
class PendingMember:
    """A member id handed out by MEMBER_ID_REQUIRED, until the client joins with it or it expires."""

    deadline: float
    owner: str | None  # the principal the id was handed to


@dataclass
class ClassicGroup:
    name: str
    state: ClassicState = ClassicState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, ClassicMember] = field(default_factory=dict)
    pending: dict[str, PendingMember] = field(default_factory=dict)
    instances: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    fenced: set[str] = field(default_factory=set)
    rebalance_deadline: float = 0.0

    @property
    def idle(self) -> bool:
        """Nothing to remember: no member and no member id handed out (its offsets live in the offset store)."""
        return not self.members and not self.pending

    def awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.join is not None)


Completion = Callable[[], None]


def check_owner(group: str, member_id: str, member_owner: str | None, owner: str | None) -> None:
    """Refuse ``owner`` acting as a member another principal joined with (None: a trusted caller)."""
    if owner is not None and owner != member_owner:
        raise MemberOwnerError(group, member_id, owner)


def select_protocol(members: list[ClassicMember]) -> str:
    """Kafka's vote: among the protocols every member supports, each member votes for its first choice."""
    common = set.intersection(*({name for name, _ in m.protocols} for m in members))
    votes: dict[str, int] = {}
    for member in members:
        choice = next(name for name, _ in member.protocols if name in common)
        votes[choice] = votes.get(choice, 0) + 1
    first = [name for name, _ in members[0].protocols if name in common]
    return max(first, key=lambda name: (votes.get(name, 0), -first.index(name)))


def resolve(future: Future[Any], value: object) -> None:
    if not future.done():
        future.set_result(value)


def reject(future: Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


def run(done: list[Completion]) -> None:
    for complete in done:
        complete()
