"""The consumer-group coordinator: membership, assignment, fenced offset commits.

Design
======

A synchronous, thread-safe state machine (one lock, no threads, no asyncio)
driven by its callers and by an injected :class:`~lkstream.storage.clock.Clock`,
so tests replay schedules exactly. The broker creates one coordinator, calls
:meth:`GroupCoordinator.tick` periodically, and the gRPC servicer and the
embedded consumer call the other methods. Every public call first expires
members whose deadline passed, so correctness never depends on the tick; the
tick only makes expiry (and the rebalance it causes) prompt, and picks up
partition-count changes.

Server-side assignment with heartbeat reconciliation
----------------------------------------------------
This is Kafka's KIP-848 consumer protocol expressed with the classic RPC names.

* ``join`` adds a member (or re-joins a known one) with its subscribed
  topics and assignor and returns its member id and the group generation.
  Whenever membership, a subscription or a partition count changes, the
  coordinator computes a new *target* assignment with the group's assignor and
  bumps the generation.
* Every member has an ``owned`` set: what the coordinator granted and has not
  seen released. A partition of a member's target is granted to it **only when
  no other member owns it**, so no partition is ever owned by two members, in
  any generation, at any instant.
* ``heartbeat`` keeps the member alive, takes the partitions it *released*
  (it stopped consuming them and committed first), grants what became free,
  and tells it what to revoke. ``owned`` in the answer is authoritative.
* Eager assignors (``range``, ``roundrobin``): a new target revokes
  everything from everybody and nothing is granted until every member released
  all it owned (or was removed after its ``rebalance_timeout_ms``): Kafka's
  stop-the-world rebalance. ``cooperative-sticky``: only partitions whose
  target owner changed are revoked; the others are consumed with no pause.
* ``sync`` answers the member's assignment once it is stable for that member
  (owned == target, no eager barrier), else raises
  :class:`RebalanceInProgressError` (heartbeat again).
* Session timeout: a member not heard from (join, heartbeat, sync, commit) for
  ``session_timeout_ms`` is removed; its partitions become free.
  Rebalance timeout: a member told to revoke that has not released within
  ``rebalance_timeout_ms`` is removed too, so one stuck member cannot stall
  the group forever.
* Static membership: a join carrying the ``instance_id`` of a live member
  takes over that member's identity (target, owned partitions) under a new
  member id, with no rebalance when its subscription is unchanged. The old
  member id is fenced (:class:`FencedInstanceError`).
* ``leave`` removes the member at once and rebalances.
* Ownership: ``join`` records its ``owner`` (the authenticated principal's name;
  None for a trusted caller: the embedded API, a daemon without authentication).
  Only that owner may rejoin, heartbeat, sync, leave or commit with the member id,
  or take over its static instance; anyone else gets
  :class:`~lkstream.errors.MemberOwnerError`, though DescribeGroup shows member ids.

Fenced, monotonic commits
-------------------------
``commit(group, member_id, generation, offsets)`` (:mod:`~lkstream.broker.groups.offset_commits`)
is applied iff the member is live, ``generation`` is the one it last received, and it owns every
partition (partitions it is revoking still count: "commit before revoke"), and every offset is
at most its partition's high watermark (:class:`OffsetOutOfRangeError` otherwise: an offset past
the log would wedge the group). Commits without a member id are the standalone consumer's
(manual ``assign``): allowed only while the group has no live member. A commit never moves an
offset backward (:class:`OffsetRegressionError`); equal offsets are accepted (idempotent
retries). The Kafka listener commits with ``any_offset=True`` (Kafka's rule: any offset, either
direction). ``reset_offsets`` is the operator's way to rewind and is refused while the group
has live members.

Bounds and cost (issue 28, finding 5)
-------------------------------------
A join's session timeout must lie within ``limits`` (:class:`InvalidSessionTimeoutError`); a
group takes at most ``limits.max_group_size`` members and all groups together
``limits.max_members`` (:class:`GroupMaxSizeReachedError`). Deadlines (sessions, rebalance
timeouts) sit in one :class:`~lkstream.broker.groups.deadlines.Deadlines` heap, so a call pays
for the deadlines that are due and the members of its own group, never for a walk over every
group. A group whose last member left is forgotten at once (its committed offsets stay in the
offset store, which lists it as ``Empty``).

Thread-safety and lock order: the group's commit lock ->
``GroupCoordinator._lock`` -> ``GroupChanged._cond`` (leaf);
the offset store's journal lock is taken only without the coordinator lock held.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Mapping

from lkstream.broker.groups.assignors import EAGER_ASSIGNORS, get_assignor
from lkstream.broker.groups.classic_members import ClassicMemberCalls
from lkstream.broker.groups.coordinator_state import (
    GroupEntry,
    Member,
    check_released,
    check_subscription,
    deadline_of,
    owned_by,
)
from lkstream.broker.groups.coordinator_upkeep import CoordinatorUpkeep
from lkstream.broker.groups.deadlines import Deadlines
from lkstream.broker.groups.errors import (
    FencedInstanceError,
    InconsistentGroupProtocolError,
    RebalanceInProgressError,
    StaleGenerationError,
    UnknownMemberError,
)
from lkstream.broker.groups.limits import GroupLimits
from lkstream.broker.groups.notify import GroupChanged
from lkstream.broker.groups.offset_commits import OffsetCalls, check_int, check_owns, check_stale
from lkstream.broker.groups.types import (
    GroupDescription,
    GroupListing,
    GroupState,
    HeartbeatResult,
    JoinResult,
    MemberDescription,
    SyncResult,
    TopicPartition,
)
from lkstream.errors import InvalidArgumentError, UnknownTopicError
from lkstream.storage.clock import Clock, SystemClock
from lkstream.storage.names import (
    validate_client_id,
    validate_group,
    validate_instance_id,
    validate_member_id,
)
from lkstream.storage.offsets import OffsetStore

DEFAULT_SESSION_TIMEOUT_MS = 10_000
DEFAULT_REBALANCE_TIMEOUT_MS = 30_000
DEFAULT_ASSIGNOR = "range"
_MAX_FENCED_IDS = 1024  # remembered per group, so a zombie hears "fenced" rather than "unknown"


class GroupCoordinator(CoordinatorUpkeep, OffsetCalls, ClassicMemberCalls):
    """Consumer groups of one broker (see the module docstring for the protocol). Thread-safe.

    ``partitions_for(topic)`` returns a topic's partition count and raises
    :class:`~lkstream.errors.UnknownTopicError` for a missing topic (a
    subscription to it then contributes no partitions until it exists).
    """

    def __init__(
        self,
        offset_store: OffsetStore,
        partitions_for: Callable[[str], int],
        clock: Clock | None = None,
        *,
        member_id_factory: Callable[[str], str] | None = None,
        bounds: Callable[[str, int], tuple[int, int]] | None = None,
        topic_ids: Callable[[], Mapping[str, uuid.UUID]] | None = None,
        in_other_coordinator: Callable[[str], bool] = lambda _group: False,
        limits: GroupLimits | None = None,
    ) -> None:
        self._store = offset_store
        self.limits = limits or GroupLimits()
        # Whether a group has live members in the Kafka clients' classic coordinator: a group name
        # belongs to one coordinator at a time (the classic one refuses the other direction).
        self._in_other = in_other_coordinator
        self._partitions_for = partitions_for
        # The current incarnation of every topic: offsets are stored with it and read back only for it,
        # so a topic created again under a deleted one's name never inherits its offsets.
        self._topic_ids = topic_ids
        # (log start, high watermark) of a partition; None skips the check (a coordinator without a log).
        self._bounds = bounds
        self._clock = clock or SystemClock()
        self._new_member_id = member_id_factory or (
            lambda client_id: f"{client_id[:64] or 'member'}-{uuid.uuid4().hex}"
        )
        self._lock = threading.Lock()
        self._groups: dict[str, GroupEntry] = {}
        # When to look at each member (group, member id) next: its session or revocation deadline.
        self._deadlines: Deadlines[tuple[str, str]] = Deadlines()
        self._member_count = 0
        self._downgradable: set[str] = set()
        self._init_commit_locks()
        self.changed = GroupChanged()
        """Notified (per group) on every change a member could act on; long-polls wait on it."""

    # -- membership --------------------------------------------------------------------------------

    def join(
        self,
        group: str,
        topics: Iterable[str],
        *,
        member_id: str | None = None,
        instance_id: str | None = None,
        assignor: str = DEFAULT_ASSIGNOR,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        rebalance_timeout_ms: int = DEFAULT_REBALANCE_TIMEOUT_MS,
        client_id: str = "",
        client_host: str = "",
        new_member_id: str | None = None,
        owner: str | None = None,
    ) -> JoinResult:
        """Join ``group`` (or update a known member's subscription); returns its member id and generation.

        ``new_member_id``: the id a new member takes instead of a generated one (Kafka's KIP-848
        clients choose their own); refused if a live or fenced member of the group has it.
        ``owner``: the principal joining (None: a trusted caller); see "Ownership" above.
        """
        validate_group(group)
        subscribed = check_subscription(topics)
        get_assignor(assignor)
        check_int("session_timeout_ms", session_timeout_ms, 1)
        self.limits.check_session_timeout(group, session_timeout_ms)
        check_int("rebalance_timeout_ms", rebalance_timeout_ms, 1)
        if instance_id is not None:
            validate_instance_id(instance_id)
        if member_id is not None:
            validate_member_id(member_id)
        if new_member_id is not None:
            validate_member_id(new_member_id)
        validate_client_id(client_id)
        validate_client_id(client_host)
        if member_id is None and self._in_other(group):
            # Asked before taking our lock: the classic coordinator calls us under its own lock.
            raise InconsistentGroupProtocolError(group, assignor, "a Kafka client group (classic protocol)")
        with self._lock:
            now = self._expire_locked()
            g = self._groups.setdefault(group, GroupEntry(group))
            try:
                return self._join_locked(
                    g,
                    subscribed,
                    member_id=member_id,
                    instance_id=instance_id,
                    assignor=assignor,
                    session_timeout_ms=session_timeout_ms,
                    rebalance_timeout_ms=rebalance_timeout_ms,
                    client_id=client_id,
                    client_host=client_host,
                    new_member_id=new_member_id,
                    owner=owner,
                    now=now,
                )
            finally:
                self._drop_if_empty_locked(g)

    def _join_locked(
        self,
        g: GroupEntry,
        subscribed: frozenset[str],
        *,
        member_id: str | None,
        instance_id: str | None,
        assignor: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        client_id: str,
        client_host: str,
        new_member_id: str | None,
        owner: str | None,
        now: float,
    ) -> JoinResult:
        if g.assignor is not None and assignor != g.assignor:
            others = [
                m
                for m in g.members.values()
                if m.member_id != member_id and (instance_id is None or m.instance_id != instance_id)
            ]
            if others:
                raise InconsistentGroupProtocolError(g.name, assignor, g.assignor)
        member = self._find_joining_locked(g, member_id, instance_id, owner)
        if member is None:
            if new_member_id is not None and (new_member_id in g.members or new_member_id in g.fenced):
                raise InvalidArgumentError(f"member id {new_member_id!r} is taken in group {g.name!r}")
            self._check_room_locked(g)
            member = Member(
                member_id=new_member_id or self._new_member_id(client_id),
                instance_id=instance_id,
                client_id=client_id,
                client_host=client_host,
                topics=subscribed,
                assignor=assignor,
                session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms,
                last_seen=now,
                owner=owner,
            )
            g.members[member.member_id] = member
            self._member_count += 1
            if instance_id is not None:
                g.instances[instance_id] = member.member_id
            rebalance = True
        else:
            rebalance = member.topics != subscribed or member.assignor != assignor
            member.topics = subscribed
            member.assignor = assignor
            member.session_timeout_ms = session_timeout_ms
            member.rebalance_timeout_ms = rebalance_timeout_ms
            member.client_id = client_id or member.client_id
            member.client_host = client_host or member.client_host
            member.last_seen = now
        g.assignor = assignor
        self._deadlines.schedule((g.name, member.member_id), now + session_timeout_ms)
        if rebalance:
            self._rebalance_locked(g, now)
        member.generation = g.generation
        return JoinResult(member.member_id, g.generation, assignor, rebalance)

    def _find_joining_locked(
        self, g: GroupEntry, member_id: str | None, instance_id: str | None, owner: str | None
    ) -> Member | None:
        """The member a join continues (a known id, or a static takeover); None for a new member."""
        if member_id is not None and member_id in g.members:
            return owned_by(g, g.members[member_id], owner)
        if member_id is not None and member_id in g.fenced:
            # A zombie of a restarted static member must not fence its successor in turn.
            self._raise_unknown(g, member_id)
        if instance_id is not None and instance_id in g.instances:
            return self._take_over_locked(g, owned_by(g, g.members[g.instances[instance_id]], owner))
        if member_id is not None:
            self._raise_unknown(g, member_id)
        return None

    def _take_over_locked(self, g: GroupEntry, old: Member) -> Member:
        """A static member restarted: a new member id inherits the old one's identity; the old id is fenced."""
        new = Member(
            member_id=self._new_member_id(old.client_id),
            instance_id=old.instance_id,
            client_id=old.client_id,
            client_host=old.client_host,
            topics=old.topics,
            assignor=old.assignor,
            session_timeout_ms=old.session_timeout_ms,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            last_seen=old.last_seen,
            generation=old.generation,
            owned=old.owned,
            target=old.target,
            revoke_since=old.revoke_since,
            owner=old.owner,
            classic=old.classic,
        )
        del g.members[old.member_id]
        g.members[new.member_id] = new
        self._deadlines.cancel((g.name, old.member_id))
        self._deadlines.schedule((g.name, new.member_id), deadline_of(new))
        assert old.instance_id is not None
        g.instances[old.instance_id] = new.member_id
        for tp in new.owned:
            g.owners[tp] = new.member_id
        g.fenced[old.member_id] = old.instance_id
        if len(g.fenced) > _MAX_FENCED_IDS:
            del g.fenced[next(iter(g.fenced))]
        self.changed.notify(g.name)
        return new

    def heartbeat(
        self,
        group: str,
        member_id: str,
        generation: int | None = None,
        released: Iterable[TopicPartition] = (),
        *,
        owner: str | None = None,
    ) -> HeartbeatResult:
        """Keep ``member_id`` alive, take its released partitions, grant free ones, say what to revoke.

        ``generation`` (if given) must not be newer than the group's. The
        member's generation becomes the group's current one.
        """
        freed = check_released(released)
        with self._lock:
            now = self._expire_locked()
            g, member = self._live_member_locked(group, member_id, owner)
            if generation is not None and generation > g.generation:
                raise StaleGenerationError(group, member_id, generation, member.generation)
            assigned = self._reconcile_locked(g, member, freed, now)
            member.generation = g.generation
            return HeartbeatResult(
                generation=g.generation,
                assigned=frozenset(assigned),
                revoke=frozenset(self._to_revoke(g, member)),
                owned=frozenset(member.owned),
                target=frozenset(member.target),
                stable=self._stable_for(g, member),
            )

    def sync(
        self,
        group: str,
        member_id: str,
        generation: int,
        released: Iterable[TopicPartition] = (),
        *,
        owner: str | None = None,
    ) -> SyncResult:
        """The member's assignment, once it is stable for that member; else :class:`RebalanceInProgressError`."""
        freed = check_released(released)
        with self._lock:
            now = self._expire_locked()
            g, member = self._live_member_locked(group, member_id, owner)
            self._reconcile_locked(g, member, freed, now)
            if generation != g.generation or not self._stable_for(g, member):
                member.generation = g.generation
                raise RebalanceInProgressError(group, member_id, g.generation)
            member.generation = g.generation
            return SyncResult(g.generation, frozenset(member.owned))

    def leave(self, group: str, member_id: str, *, owner: str | None = None) -> None:
        """Remove the member now (its partitions become free) and rebalance the rest."""
        with self._lock:
            now = self._expire_locked()
            g, member = self._live_member_locked(group, member_id, owner)
            self._remove_locked(g, member, now)

    def tick(self, *, partitions: bool = True) -> int:
        """Expire dead members and, with ``partitions``, pick up partition-count changes; returns how many
        members were removed.

        The broker calls this periodically (every few hundred ms is plenty), with ``partitions`` only
        when a topic appeared, went or grew since the last look: that check visits every group.
        """
        with self._lock:
            now = self._clock.monotonic_ms()
            removed = self._expire_due_locked(now)
            if partitions:
                for g in self._groups.values():
                    if g.members and self._counts_locked(g) != g.partition_counts:
                        self._rebalance_locked(g, now)
            return removed

    def topics_changed(self) -> None:
        """Recompute assignments whose partition counts changed (call after creating or deleting a topic)."""
        self.tick()

    # -- inspection --------------------------------------------------------------------------------

    def describe(self, group: str) -> GroupDescription:
        """State, generation, assignor and members of ``group`` (``Dead`` when nothing is known of it)."""
        validate_group(group)
        with self._lock:
            self._expire_locked()
            g = self._groups.get(group)
            if g is not None and g.members:
                members = tuple(
                    MemberDescription(
                        member_id=m.member_id,
                        instance_id=m.instance_id,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        topics=m.topics,
                        owned=frozenset(m.owned),
                        target=frozenset(m.target),
                        generation=m.generation,
                    )
                    for m in sorted(g.members.values(), key=lambda m: m.sort_key)
                )
                return GroupDescription(group, self._state_locked(g), g.generation, g.assignor, members)
            generation = g.generation if g is not None else 0
            known = g is not None and g.generation > 0
        if known or any(gr == group for gr, _, _ in self._store.list_committed(topic_ids=self._ids())):
            return GroupDescription(group, GroupState.EMPTY, generation, None, ())
        return GroupDescription(group, GroupState.DEAD, generation, None, ())

    def list_groups(self) -> list[GroupListing]:
        """Every group with members, a past generation, or committed offsets, sorted by name."""
        with self._lock:
            self._expire_locked()
            listed = {
                g.name: GroupListing(g.name, self._state_locked(g), len(g.members))
                for g in self._groups.values()
                if g.members or g.generation > 0
            }
        for group, _, _ in self._store.list_committed(topic_ids=self._ids()):
            listed.setdefault(group, GroupListing(group, GroupState.EMPTY, 0))
        return [listed[name] for name in sorted(listed)]

    # -- internals (all under self._lock) ------------------------------------------------------------

    def _raise_unknown(self, g: GroupEntry | None, member_id: str) -> None:
        if g is not None and member_id in g.fenced:
            raise FencedInstanceError(g.name, member_id, g.fenced[member_id])
        raise UnknownMemberError(g.name if g is not None else "?", member_id)

    def _live_member_locked(self, group: str, member_id: str, owner: str | None = None) -> tuple[GroupEntry, Member]:
        validate_group(group)
        validate_member_id(member_id)
        g = self._groups.get(group)
        if g is None or member_id not in g.members:
            if g is None:
                raise UnknownMemberError(group, member_id)
            self._raise_unknown(g, member_id)
        assert g is not None
        member = owned_by(g, g.members[member_id], owner)
        member.last_seen = self._clock.monotonic_ms()
        return g, member

    def _live_members_locked(self, group: str) -> int:
        g = self._groups.get(group)
        return 0 if g is None else len(g.members)

    def _check_member_commit_locked(
        self,
        group: str,
        member_id: str,
        generation: int | None,
        partitions: Iterable[TopicPartition],
        owner: str | None,
    ) -> None:
        _group, member = self._live_member_locked(group, member_id, owner)
        check_stale(group, member_id, generation, self.commit_generation(member))
        check_owns(group, member_id, member.owned, partitions)

    def _count(self, topic: str) -> int:
        try:
            return self._partitions_for(topic)
        except UnknownTopicError:
            return 0

    def _check_partitions_exist(self, partitions: Iterable[TopicPartition]) -> None:
        for topic, pid in partitions:
            count = self._count(topic)
            if pid >= count:
                raise InvalidArgumentError(f"invalid partition {pid} for topic {topic!r}: it has {count} partition(s)")

    def _counts_locked(self, g: GroupEntry) -> dict[str, int]:
        return {t: self._count(t) for t in sorted({t for m in g.members.values() for t in m.topics})}

    def _rebalance_locked(self, g: GroupEntry, now: float) -> None:
        """Compute a new target with the group's assignor and start a new generation."""
        g.generation += 1
        g.partition_counts = self._counts_locked(g)
        if g.members:
            assert g.assignor is not None
            by_key = {m.sort_key: m for m in g.members.values()}
            assignment = get_assignor(g.assignor)(
                {k: m.topics for k, m in by_key.items()},
                g.partition_counts,
                {k: m.target for k, m in by_key.items()},
            )
            for key, member in by_key.items():
                member.target = assignment.get(key, set())
            # Eager: whatever anyone owns must be released before anything is granted.
            g.barrier = g.assignor in EAGER_ASSIGNORS and bool(g.owners)
        else:
            g.assignor = None
            g.barrier = False
        for member in g.members.values():
            self._update_revoke_clock(g, member, now)
        self.changed.notify(g.name)

    def _to_revoke(self, g: GroupEntry, member: Member) -> set[TopicPartition]:
        return set(member.owned) if g.barrier else member.owned - member.target

    def _stable_for(self, g: GroupEntry, member: Member) -> bool:
        return not g.barrier and member.owned == member.target

    def _update_revoke_clock(self, g: GroupEntry, member: Member, now: float) -> None:
        if not self._to_revoke(g, member):
            member.revoke_since = None
        elif member.revoke_since is None:
            member.revoke_since = now
            self._deadlines.schedule((g.name, member.member_id), now + member.rebalance_timeout_ms)

    def _reconcile_locked(
        self, g: GroupEntry, member: Member, released: list[TopicPartition], now: float
    ) -> set[TopicPartition]:
        changed = False
        for tp in released:
            if tp in member.owned:  # anything else: a retried release, already done
                member.owned.discard(tp)
                del g.owners[tp]
                changed = True
        if g.barrier and not g.owners:
            g.barrier = False
            changed = True
        assigned: set[TopicPartition] = set()
        if not g.barrier:
            for tp in sorted(member.target - member.owned):
                if tp not in g.owners:
                    g.owners[tp] = member.member_id
                    member.owned.add(tp)
                    assigned.add(tp)
        self._update_revoke_clock(g, member, now)
        if changed:
            self.changed.notify(g.name)  # others may now be granted what was freed
        return assigned

    def _remove_locked(self, g: GroupEntry, member: Member, now: float) -> None:
        for tp in member.owned:
            del g.owners[tp]
        del g.members[member.member_id]
        self._member_count -= 1
        self._deadlines.cancel((g.name, member.member_id))
        if member.instance_id is not None and g.instances.get(member.instance_id) == member.member_id:
            del g.instances[member.instance_id]
        self._note_removed_locked(g, member)
        self._rebalance_locked(g, now)
        self._drop_if_empty_locked(g)

    def _state_locked(self, g: GroupEntry) -> GroupState:
        if not g.members:
            return GroupState.EMPTY
        if g.barrier or any(m.owned != m.target for m in g.members.values()):
            return GroupState.REBALANCING
        return GroupState.STABLE
