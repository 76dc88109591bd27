"""Kafka's classic group protocol (JoinGroup / SyncGroup / Heartbeat / LeaveGroup) for Kafka clients.

Kafka clients assign partitions themselves: the coordinator elects a leader,
hands it every member's subscription, and distributes the assignment the
leader sends back. This module is that coordinator, beside the LKSTREAM
coordinator (:mod:`lkstream.broker.groups.coordinator`, server-side
assignment); a group name belongs to one of them at a time. Committed offsets
of both go to the same offsets journal.

State machine (Kafka's names)::

    Empty --join--> PreparingRebalance --all known members rejoined, or the
    rebalance timeout--> CompletingRebalance --leader's SyncGroup--> Stable
    Stable --join of a new member / changed protocols, leave, expiry--> PreparingRebalance

* JoinGroup v4+ without a member id is answered MEMBER_ID_REQUIRED with a
  fresh id; the client joins again with it (KIP-394). The id is pending until
  then, and forgotten after the session timeout.
* A rebalance completes when every member has sent its JoinGroup, or when the
  longest rebalance timeout passed (members that did not rejoin are removed).
  There is no initial-rebalance delay: the first member is answered at once,
  which is why a Kafka consumer reads its first record within a second.
* Static membership (``group.instance.id``, KIP-345): a known instance joining
  with a new member id takes over the old one (fenced: FENCED_INSTANCE_ID);
  in a Stable group with unchanged protocols there is no rebalance and the
  member gets its previous assignment from SyncGroup.
* Sessions: a member not heard from (any request) within its session timeout
  is removed and the group rebalances. Waiting JoinGroup/SyncGroup calls
  count as being heard from.
* Ownership: a join records its ``owner`` (the authenticated principal's name,
  None for a trusted caller). Only that owner may rejoin, sync, heartbeat, leave
  or commit with the member id (or take over its static instance), whatever else
  it learned from DescribeGroups; anyone else gets :class:`MemberOwnerError`.
  ``owner=None`` (authentication off, the embedded API) is trusted.

Calls never block: :meth:`ClassicGroups.join` and :meth:`ClassicGroups.sync`
return a :class:`concurrent.futures.Future` that completes when the answer is
known (the Kafka surface awaits it). Time comes from the injected clock;
:meth:`tick` (the broker's group thread) completes timed-out rebalances and
expires members. Thread-safe: one lock, never held while a future's callbacks run.
"""

from __future__ import annotations

import enum
import functools
import struct
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from lkstream.errors import (
    FencedInstanceError,
    GroupError,
    GroupNotEmptyError,
    InconsistentGroupProtocolError,
    InvalidArgumentError,
    MemberOwnerError,
    RebalanceInProgressError,
    StaleGenerationError,
    UnknownMemberError,
)
from lkstream.storage.clock import Clock, SystemClock
from lkstream.storage.names import validate_group


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


@dataclass
class ClassicGroup:
    name: str
    state: ClassicState = ClassicState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, ClassicMember] = field(default_factory=dict)
    # member ids handed out by MEMBER_ID_REQUIRED: deadline, and the owner the join was for
    pending: dict[str, tuple[float, str | None]] = field(default_factory=dict)
    instances: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    fenced: set[str] = field(default_factory=set)
    rebalance_deadline: float = 0.0


_Completion = Callable[[], None]


class ClassicGroups:
    """The classic-protocol groups of one broker (see the module docstring). Thread-safe."""

    def __init__(self, clock: Clock | None = None, *, in_other_coordinator: Callable[[str], bool] = lambda _: False):
        self._clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._groups: dict[str, ClassicGroup] = {}
        self._in_other = in_other_coordinator

    # -- membership ------------------------------------------------------------------------------

    def join(
        self,
        group: str,
        *,
        member_id: str,
        instance_id: str | None,
        protocol_type: str,
        protocols: Iterable[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        client_id: str = "",
        client_host: str = "",
        require_known_member_id: bool = True,
        owner: str | None = None,
    ) -> Future[JoinAnswer]:
        """Join (or rejoin); the future completes when the rebalance does (see the module docstring).

        ``owner``: the principal joining (None: a trusted caller); see "Ownership" above.
        """
        validate_group(group)
        offered = tuple(protocols)
        if not offered or not protocol_type:
            raise InvalidArgumentError("JoinGroup needs a protocol type and at least one protocol")
        if session_timeout_ms < 1 or rebalance_timeout_ms < 1:
            raise InvalidArgumentError("session and rebalance timeouts must be positive")
        done: list[_Completion] = []
        with self._lock:
            now = self._clock.monotonic_ms()
            self._expire_locked(now, done)
            if self._in_other(group):
                raise InconsistentGroupProtocolError(group, protocol_type, "lkstream (server-side assignment)")
            g = self._groups.setdefault(group, ClassicGroup(group))
            self._check_protocols_locked(g, member_id, instance_id, protocol_type, offered)
            member = self._admit_locked(
                g,
                member_id,
                instance_id,
                now,
                require_known=require_known_member_id,
                session_timeout_ms=session_timeout_ms,
                client_id=client_id,
                owner=owner,
            )
            future: Future[JoinAnswer] = Future()
            if member is None:  # static takeover in a stable group: answered at once, no rebalance
                future.set_result(self._static_answer_locked(g, instance_id))
                return future
            changed = member.protocols != offered or member.protocol_type != protocol_type
            member.protocols, member.protocol_type = offered, protocol_type
            member.session_timeout_ms, member.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
            member.client_id, member.client_host = client_id or member.client_id, client_host or member.client_host
            member.last_seen = now
            member.join = future
            # Kafka answers an unchanged follower at once in some states; a rebalance is always correct.
            del changed
            if g.state is not ClassicState.PREPARING_REBALANCE:
                self._prepare_rebalance_locked(g, now, done)
            self._maybe_complete_join_locked(g, done)
        _run(done)
        return future

    def _check_protocols_locked(
        self,
        g: ClassicGroup,
        member_id: str,
        instance_id: str | None,
        protocol_type: str,
        offered: tuple[tuple[str, bytes], ...],
    ) -> None:
        others = [
            m
            for m in g.members.values()
            if m.member_id != member_id and (instance_id is None or m.instance_id != instance_id)
        ]
        if not others:
            return
        if g.protocol_type is not None and protocol_type != g.protocol_type:
            raise InconsistentGroupProtocolError(g.name, protocol_type, g.protocol_type)
        common = set.intersection(*({name for name, _ in m.protocols} for m in others))
        if not common & {name for name, _ in offered}:
            raise InconsistentGroupProtocolError(g.name, ",".join(n for n, _ in offered), ",".join(sorted(common)))

    def _admit_locked(
        self,
        g: ClassicGroup,
        member_id: str,
        instance_id: str | None,
        now: float,
        *,
        require_known: bool,
        session_timeout_ms: int,
        client_id: str,
        owner: str | None,
    ) -> ClassicMember | None:
        """The member a join is for (new, known, or a static takeover); None: static rejoin without rebalance."""
        if member_id in g.fenced:
            raise FencedInstanceError(g.name, member_id, instance_id or "")
        if instance_id is not None and instance_id in g.instances:
            old = g.members[g.instances[instance_id]]
            _check_owner(g.name, member_id or old.member_id, old.owner, owner)
            if member_id == old.member_id:
                return old
            if member_id and member_id != old.member_id:
                raise FencedInstanceError(g.name, member_id, instance_id)
            return self._take_over_locked(g, old, client_id)
        if member_id:
            if member_id in g.members:
                _check_owner(g.name, member_id, g.members[member_id].owner, owner)
                return g.members[member_id]
            if member_id in g.pending:
                _check_owner(g.name, member_id, g.pending[member_id][1], owner)
                del g.pending[member_id]
                return self._add_member_locked(g, member_id, instance_id, now, owner)
            raise UnknownMemberError(g.name, member_id)
        new_id = f"{client_id[:64] or 'member'}-{uuid.uuid4()}"
        if require_known and instance_id is None:
            g.pending[new_id] = (now + session_timeout_ms, owner)
            raise MemberIdRequiredError(g.name, new_id)
        return self._add_member_locked(g, new_id, instance_id, now, owner)

    def _add_member_locked(
        self, g: ClassicGroup, member_id: str, instance_id: str | None, now: float, owner: str | None
    ) -> ClassicMember:
        member = ClassicMember(member_id, instance_id, "", "", 10_000, 30_000, "", (), now, owner=owner)
        g.members[member_id] = member
        if instance_id is not None:
            g.instances[instance_id] = member_id
        return member

    def _take_over_locked(self, g: ClassicGroup, old: ClassicMember, client_id: str) -> ClassicMember | None:
        assert old.instance_id is not None
        new = ClassicMember(**{**old.__dict__, "member_id": f"{client_id[:64] or 'member'}-{uuid.uuid4()}"})
        new.join, new.sync = None, None
        del g.members[old.member_id]
        g.members[new.member_id] = new
        g.instances[old.instance_id] = new.member_id
        g.fenced.add(old.member_id)
        if g.leader == old.member_id:
            g.leader = new.member_id
        for waiter in (old.join, old.sync):
            if waiter is not None and not waiter.done():
                waiter.set_exception(FencedInstanceError(g.name, old.member_id, old.instance_id))
        if g.state is ClassicState.STABLE and g.leader != new.member_id:
            return None
        return new

    def _static_answer_locked(self, g: ClassicGroup, instance_id: str | None) -> JoinAnswer:
        assert instance_id is not None
        member_id = g.instances[instance_id]
        return JoinAnswer(g.generation, g.protocol_type, g.protocol, g.leader or "", member_id, ())

    def _prepare_rebalance_locked(self, g: ClassicGroup, now: float, done: list[_Completion]) -> None:
        for member in g.members.values():
            if member.sync is not None and not member.sync.done():
                self._fail_later(done, member.sync, RebalanceInProgressError(g.name, member.member_id, g.generation))
            member.sync = None
        g.state = ClassicState.PREPARING_REBALANCE
        timeout = max((m.rebalance_timeout_ms for m in g.members.values()), default=0)
        g.rebalance_deadline = now + timeout

    def _maybe_complete_join_locked(self, g: ClassicGroup, done: list[_Completion], *, force: bool = False) -> None:
        if g.state is not ClassicState.PREPARING_REBALANCE:
            return
        waiting = [m for m in g.members.values() if m.join is not None]
        if len(waiting) < len(g.members) and not force:
            return
        for member in [m for m in g.members.values() if m.join is None]:
            self._remove_locked(g, member)
        g.generation += 1
        if not g.members:
            g.state, g.protocol, g.protocol_type, g.leader = ClassicState.EMPTY, None, None, None
            return
        g.protocol_type = next(iter(g.members.values())).protocol_type
        g.protocol = _select_protocol(list(g.members.values()))
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        g.state = ClassicState.COMPLETING_REBALANCE
        everyone = tuple((m.member_id, m.instance_id, m.metadata(g.protocol)) for m in g.members.values())
        for member in g.members.values():
            member.assignment = b""
            answer = JoinAnswer(
                g.generation,
                g.protocol_type,
                g.protocol,
                g.leader,
                member.member_id,
                everyone if member.member_id == g.leader else (),
            )
            future, member.join = member.join, None
            assert future is not None
            done.append(functools.partial(_resolve, future, answer))

    def sync(
        self,
        group: str,
        member_id: str,
        generation: int,
        assignments: Mapping[str, bytes],
        instance_id: str | None = None,
        *,
        owner: str | None = None,
    ) -> Future[bytes]:
        """The member's assignment; the leader's call carries everyone's. Completes when the leader synced."""
        done: list[_Completion] = []
        future: Future[bytes] = Future()
        with self._lock:
            now = self._clock.monotonic_ms()
            self._expire_locked(now, done)
            g, member = self._member_locked(group, member_id, instance_id, now, owner)
            if generation != g.generation:
                raise StaleGenerationError(group, member_id, generation, g.generation)
            if g.state is ClassicState.PREPARING_REBALANCE:
                raise RebalanceInProgressError(group, member_id, g.generation)
            if g.state is ClassicState.STABLE:
                future.set_result(member.assignment)
                return future
            member.sync = future
            if member_id == g.leader:
                for m in g.members.values():
                    m.assignment = bytes(assignments.get(m.member_id, b""))
                g.state = ClassicState.STABLE
                for m in g.members.values():
                    waiter, m.sync = m.sync, None
                    if waiter is not None:
                        done.append(functools.partial(_resolve, waiter, m.assignment))
        _run(done)
        return future

    def heartbeat(
        self, group: str, member_id: str, generation: int, instance_id: str | None = None, *, owner: str | None = None
    ) -> None:
        """Keep the member alive; REBALANCE_IN_PROGRESS tells it to rejoin."""
        done: list[_Completion] = []
        try:
            with self._lock:
                now = self._clock.monotonic_ms()
                self._expire_locked(now, done)
                g, _member = self._member_locked(group, member_id, instance_id, now, owner)
                if generation != g.generation:
                    raise StaleGenerationError(group, member_id, generation, g.generation)
                if g.state is ClassicState.PREPARING_REBALANCE:
                    raise RebalanceInProgressError(group, member_id, g.generation)
        finally:
            _run(done)

    def leave(
        self, group: str, members: Iterable[tuple[str, str | None]], *, owner: str | None = None
    ) -> list[GroupError | MemberOwnerError | None]:
        """Remove members ``(member id, instance id)``; per member None or the error it got."""
        done: list[_Completion] = []
        results: list[GroupError | MemberOwnerError | None] = []
        with self._lock:
            now = self._clock.monotonic_ms()
            self._expire_locked(now, done)
            g = self._groups.get(group)
            for given_id, instance_id in members:
                if g is None:
                    results.append(UnknownMemberError(group, given_id))
                    continue
                member_id = given_id
                if instance_id is not None and instance_id in g.instances:
                    member_id = given_id or g.instances[instance_id]
                    if g.instances[instance_id] != member_id:
                        results.append(FencedInstanceError(group, member_id, instance_id))
                        continue
                member = g.members.get(member_id)
                if member is None:
                    results.append(UnknownMemberError(group, member_id))
                    continue
                if owner is not None and member.owner != owner:
                    results.append(MemberOwnerError(group, member_id, owner))
                    continue
                self._remove_locked(g, member)
                self._member_left_locked(g, now, done)
                results.append(None)
        _run(done)
        return results

    def tick(self) -> None:
        """Complete rebalances whose timeout passed and expire silent members (the broker calls it)."""
        done: list[_Completion] = []
        with self._lock:
            self._expire_locked(self._clock.monotonic_ms(), done)
        _run(done)

    # -- offsets fencing and inspection ----------------------------------------------------------

    def check_commit(
        self, group: str, member_id: str, generation: int, instance_id: str | None = None, *, owner: str | None = None
    ) -> bool:
        """Whether a commit may proceed: True for a member of the current generation (and of ``owner``),
        False for a standalone commit (generation < 0) into a group without members; raises otherwise."""
        with self._lock:
            now = self._clock.monotonic_ms()
            g = self._groups.get(group)
            if generation < 0 and not member_id:
                if g is not None and g.members:
                    raise GroupNotEmptyError(group, len(g.members), "commit without a member id and generation")
                return False
            g, _member = self._member_locked(group, member_id, instance_id, now, owner)
            if g.state is ClassicState.COMPLETING_REBALANCE:
                raise RebalanceInProgressError(group, member_id, g.generation)
            if generation != g.generation:
                raise StaleGenerationError(group, member_id, generation, g.generation)
            return True

    def has_members(self, group: str) -> bool:
        with self._lock:
            g = self._groups.get(group)
            return g is not None and bool(g.members)

    def snapshot(self, group: str) -> ClassicGroup | None:
        """A copy of the group's state for describe (members copied, futures dropped)."""
        with self._lock:
            g = self._groups.get(group)
            if g is None:
                return None
            members = {k: ClassicMember(**{**m.__dict__, "join": None, "sync": None}) for k, m in g.members.items()}
            return ClassicGroup(g.name, g.state, g.generation, g.protocol_type, g.protocol, g.leader, members)

    def groups(self) -> list[str]:
        with self._lock:
            return sorted(name for name, g in self._groups.items() if g.members or g.generation)

    def forget(self, group: str) -> None:
        """Drop an empty group (DeleteGroups); GroupNotEmptyError while it has members."""
        with self._lock:
            g = self._groups.get(group)
            if g is not None and g.members:
                raise GroupNotEmptyError(group, len(g.members), "delete the group")
            self._groups.pop(group, None)

    # -- internals (under the lock) ----------------------------------------------------------------

    def _member_locked(
        self, group: str, member_id: str, instance_id: str | None, now: float, owner: str | None = None
    ) -> tuple[ClassicGroup, ClassicMember]:
        g = self._groups.get(group)
        if g is not None and member_id in g.fenced:
            raise FencedInstanceError(group, member_id, instance_id or "")
        if g is None or member_id not in g.members:
            raise UnknownMemberError(group, member_id)
        member = g.members[member_id]
        if instance_id is not None and member.instance_id != instance_id:
            raise FencedInstanceError(group, member_id, instance_id)
        _check_owner(group, member_id, member.owner, owner)
        member.last_seen = now
        return g, member

    def _remove_locked(self, g: ClassicGroup, member: ClassicMember) -> None:
        del g.members[member.member_id]
        if member.instance_id is not None and g.instances.get(member.instance_id) == member.member_id:
            del g.instances[member.instance_id]
        for waiter in (member.join, member.sync):
            if waiter is not None and not waiter.done():
                waiter.set_exception(UnknownMemberError(g.name, member.member_id))
        if g.leader == member.member_id:
            g.leader = None

    def _member_left_locked(self, g: ClassicGroup, now: float, done: list[_Completion]) -> None:
        if not g.members:
            g.state, g.leader = ClassicState.EMPTY, None
            g.generation += 1
            return
        if g.state is ClassicState.PREPARING_REBALANCE:
            self._maybe_complete_join_locked(g, done)
        else:
            self._prepare_rebalance_locked(g, now, done)

    def _expire_locked(self, now: float, done: list[_Completion]) -> None:
        for g in self._groups.values():
            g.pending = {k: pending for k, pending in g.pending.items() if pending[0] > now}
            expired = [
                m
                for m in g.members.values()
                if m.join is None and m.sync is None and now - m.last_seen > m.session_timeout_ms
            ]
            for member in expired:
                self._remove_locked(g, member)
            if expired:
                self._member_left_locked(g, now, done)
            if g.state is ClassicState.PREPARING_REBALANCE and now >= g.rebalance_deadline:
                self._maybe_complete_join_locked(g, done, force=True)

    @staticmethod
    def _fail_later(done: list[_Completion], future: Future[bytes], error: Exception) -> None:
        done.append(functools.partial(_reject, future, error))


def _check_owner(group: str, member_id: str, member_owner: str | None, owner: str | None) -> None:
    """Refuse ``owner`` acting as a member another principal joined with (None: a trusted caller)."""
    if owner is not None and owner != member_owner:
        raise MemberOwnerError(group, member_id, owner)


def _select_protocol(members: list[ClassicMember]) -> str:
    """Kafka's vote: among the protocols every member supports, each member votes for its first choice."""
    common = set.intersection(*({name for name, _ in m.protocols} for m in members))
    votes: dict[str, int] = {}
    for member in members:
        choice = next(name for name, _ in member.protocols if name in common)
        votes[choice] = votes.get(choice, 0) + 1
    first = [name for name, _ in members[0].protocols if name in common]
    return max(first, key=lambda name: (votes.get(name, 0), -first.index(name)))


def _resolve(future: Future[Any], value: object) -> None:
    if not future.done():
        future.set_result(value)


def _reject(future: Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


def _run(done: list[_Completion]) -> None:
    for complete in done:
        complete()


# -- Kafka's consumer protocol payloads (what "consumer" groups carry as metadata and assignment) ----------


def decode_subscription(metadata: bytes) -> frozenset[str]:
    """Topics of a ConsumerProtocolSubscription (int16 version, [string topic], ...); empty if unreadable."""
    try:
        pos = 2
        (count,) = struct.unpack_from(">i", metadata, pos)
        pos += 4
        topics = set()
        for _ in range(max(0, count)):
            (size,) = struct.unpack_from(">h", metadata, pos)
            topics.add(metadata[pos + 2 : pos + 2 + size].decode())
            pos += 2 + size
        return frozenset(topics)
    except (struct.error, UnicodeDecodeError):
        return frozenset()


def decode_assignment(assignment: bytes) -> frozenset[tuple[str, int]]:
    """Partitions of a ConsumerProtocolAssignment (int16 version, [string topic, [int32]]); empty if unreadable."""
    try:
        pos = 2
        (count,) = struct.unpack_from(">i", assignment, pos)
        pos += 4
        owned = set()
        for _ in range(max(0, count)):
            (size,) = struct.unpack_from(">h", assignment, pos)
            topic = assignment[pos + 2 : pos + 2 + size].decode()
            pos += 2 + size
            (n,) = struct.unpack_from(">i", assignment, pos)
            pos += 4
            for pid in struct.unpack_from(f">{max(0, n)}i", assignment, pos):
                owned.add((topic, pid))
            pos += 4 * max(0, n)
        return frozenset(owned)
    except (struct.error, UnicodeDecodeError):
        return frozenset()
