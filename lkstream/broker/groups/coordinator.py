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
``commit(group, member_id, generation, offsets)`` is applied iff the member is
live, ``generation`` is the one it last received, and it owns every partition
(partitions it is revoking still count: "commit before revoke"), and every
offset is at most its partition's high watermark (:class:`OffsetOutOfRangeError`
otherwise: an offset past the log would wedge the group). Commits
without a member id are the standalone consumer's (manual ``assign``): allowed
only while the group has no live member. A commit never moves an offset
backward (:class:`OffsetRegressionError`); equal offsets are accepted
(idempotent retries). A stored offset above the high watermark (written before
that check existed) may be replaced by any valid commit. ``reset_offsets`` is the operator's way to rewind and is
refused while the group has live members.

Commits of one group are serialised by a per-group lock held across the check
and the durable write (lock order: group commit lock, then the coordinator
lock, which is released before the write). So an old owner's commit that
passed its check before losing the partition lands before the new owner's
first commit is checked, and the never-backward check sees it. Commits of
different groups write concurrently, which lets the offset store batch their
fsyncs. Each partition's offset file is atomic; a multi-partition commit is
applied partition by partition (all checks pass before the first write).

Thread-safety and lock order: ``_GroupState.commit_lock`` ->
``GroupCoordinator._lock`` -> ``GroupChanged._cond`` (leaf);
the offset store's journal lock is taken only without the coordinator lock held.
"""

from __future__ import annotations

import math
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from lkstream.broker.groups.assignors import EAGER_ASSIGNORS, get_assignor
from lkstream.broker.groups.errors import (
    FencedInstanceError,
    GroupNotEmptyError,
    InconsistentGroupProtocolError,
    NotPartitionOwnerError,
    OffsetRegressionError,
    RebalanceInProgressError,
    StaleGenerationError,
    UnknownMemberError,
)
from lkstream.broker.groups.notify import GroupChanged
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
from lkstream.errors import InvalidArgumentError, MemberOwnerError, OffsetOutOfRangeError, UnknownTopicError
from lkstream.storage.clock import Clock, SystemClock
from lkstream.storage.names import (
    validate_client_id,
    validate_group,
    validate_instance_id,
    validate_member_id,
    validate_topic,
)
from lkstream.storage.offsets import OffsetStore

DEFAULT_SESSION_TIMEOUT_MS = 10_000
DEFAULT_REBALANCE_TIMEOUT_MS = 30_000
DEFAULT_ASSIGNOR = "range"
_MAX_FENCED_IDS = 1024  # remembered per group, so a zombie hears "fenced" rather than "unknown"


@dataclass
class _Member:
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

    @property
    def sort_key(self) -> str:
        # Static members are ordered by instance id, so a restart keeps their place in range/roundrobin.
        return f"i:{self.instance_id}" if self.instance_id is not None else f"m:{self.member_id}"


@dataclass
class _GroupState:
    name: str
    generation: int = 0
    assignor: str | None = None
    members: dict[str, _Member] = field(default_factory=dict)
    instances: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    owners: dict[TopicPartition, str] = field(default_factory=dict)  # partition -> owning member id
    fenced: dict[str, str] = field(default_factory=dict)  # fenced member id -> instance id
    partition_counts: dict[str, int] = field(default_factory=dict)
    barrier: bool = False  # eager rebalance: nothing is granted until every member released everything
    commit_lock: threading.Lock = field(default_factory=threading.Lock)


def _check_int(name: str, value: object, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidArgumentError(f"invalid {name} {value!r}: must be an integer >= {minimum}")
    return value


def _check_offsets(offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    if not isinstance(offsets, Mapping) or not offsets:
        raise InvalidArgumentError("no offsets given: pass {(topic, partition): offset}")
    checked: dict[TopicPartition, int] = {}
    for tp, offset in offsets.items():
        if not isinstance(tp, tuple) or len(tp) != 2:
            raise InvalidArgumentError(f"invalid partition key {tp!r}: use (topic, partition)")
        topic, pid = tp
        validate_topic(topic)
        _check_int("partition", pid, 0)
        _check_int("offset", offset, 0)
        checked[(topic, pid)] = offset
    return checked


def _check_subscription(topics: Iterable[str]) -> frozenset[str]:
    if isinstance(topics, str):
        raise InvalidArgumentError("topics must be a collection of topic names, not one string")
    subscribed = frozenset(validate_topic(t) for t in topics)
    if not subscribed:
        raise InvalidArgumentError("a group member must subscribe to at least one topic")
    return subscribed


def _check_released(released: Iterable[TopicPartition]) -> list[TopicPartition]:
    out = []
    for tp in released:
        if not isinstance(tp, tuple) or len(tp) != 2:
            raise InvalidArgumentError(f"invalid released partition {tp!r}: use (topic, partition)")
        out.append((tp[0], tp[1]))
    return out


class GroupCoordinator:
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
    ) -> None:
        self._store = offset_store
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
        self._groups: dict[str, _GroupState] = {}
        self._next_deadline = math.inf  # no member can expire before this (monotonic ms); a lower bound
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
        subscribed = _check_subscription(topics)
        get_assignor(assignor)
        _check_int("session_timeout_ms", session_timeout_ms, 1)
        _check_int("rebalance_timeout_ms", rebalance_timeout_ms, 1)
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
            g = self._groups.setdefault(group, _GroupState(group))
            if g.assignor is not None and assignor != g.assignor:
                others = [
                    m
                    for m in g.members.values()
                    if m.member_id != member_id and (instance_id is None or m.instance_id != instance_id)
                ]
                if others:
                    raise InconsistentGroupProtocolError(group, assignor, g.assignor)
            member = self._find_joining_locked(g, member_id, instance_id, owner)
            if member is None:
                if new_member_id is not None and (new_member_id in g.members or new_member_id in g.fenced):
                    raise InvalidArgumentError(f"member id {new_member_id!r} is taken in group {group!r}")
                member = _Member(
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
            self._next_deadline = min(self._next_deadline, now + session_timeout_ms)
            if rebalance:
                self._rebalance_locked(g, now)
            member.generation = g.generation
            return JoinResult(member.member_id, g.generation, assignor, rebalance)

    def _find_joining_locked(
        self, g: _GroupState, member_id: str | None, instance_id: str | None, owner: str | None
    ) -> _Member | None:
        """The member a join continues (a known id, or a static takeover); None for a new member."""
        if member_id is not None and member_id in g.members:
            return _owned_by(g, g.members[member_id], owner)
        if member_id is not None and member_id in g.fenced:
            # A zombie of a restarted static member must not fence its successor in turn.
            self._raise_unknown(g, member_id)
        if instance_id is not None and instance_id in g.instances:
            return self._take_over_locked(g, _owned_by(g, g.members[g.instances[instance_id]], owner))
        if member_id is not None:
            self._raise_unknown(g, member_id)
        return None

    def _take_over_locked(self, g: _GroupState, old: _Member) -> _Member:
        """A static member restarted: a new member id inherits the old one's identity; the old id is fenced."""
        new = _Member(
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
        )
        del g.members[old.member_id]
        g.members[new.member_id] = new
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
        freed = _check_released(released)
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
        freed = _check_released(released)
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

    def tick(self) -> int:
        """Expire dead members and pick up partition-count changes; returns how many members were removed.

        The broker calls this periodically (every few hundred ms is plenty).
        """
        with self._lock:
            removed = self._expire_count_locked(force=True)
            now = self._clock.monotonic_ms()
            for g in self._groups.values():
                if g.members and self._counts_locked(g) != g.partition_counts:
                    self._rebalance_locked(g, now)
            return removed

    def topics_changed(self) -> None:
        """Recompute assignments whose partition counts changed (call after creating or deleting a topic)."""
        self.tick()

    # -- offsets -----------------------------------------------------------------------------------

    def commit(
        self,
        group: str,
        member_id: str | None,
        generation: int | None,
        offsets: Mapping[TopicPartition, int],
        *,
        owner: str | None = None,
    ) -> None:
        """Durably commit ``offsets`` (next offset to read) for ``group``, fenced (see the module docstring)."""
        validate_group(group)
        checked = _check_offsets(offsets)
        with self._commit_lock(group):
            with self._lock:
                self._expire_locked()
                g = self._groups.get(group)
                live = len(g.members) if g is not None else 0
                if member_id is None:
                    if live:
                        # Not an unknown member: a standalone commit must not overwrite a running group.
                        raise GroupNotEmptyError(group, live, "commit without a member id and generation")
                    self._check_partitions_exist(checked)
                else:
                    g, member = self._live_member_locked(group, member_id, owner)
                    if generation != member.generation:
                        raise StaleGenerationError(
                            group, member_id, -1 if generation is None else generation, member.generation
                        )
                    not_owned = sorted(tp for tp in checked if tp not in member.owned)
                    if not_owned:
                        raise NotPartitionOwnerError(group, member_id, not_owned)
            # Outside the coordinator lock (fsyncs take milliseconds), inside the group's commit lock.
            highs = self._check_below_high_watermarks(checked)
            ids = self._ids()
            for (topic, pid), offset in checked.items():
                committed = self._store.read_committed(group, topic, pid, topic_id=_id_of(ids, topic))
                # An offset above the log's end (written before this check existed) is impossible:
                # the next valid commit may replace it, so such a group is never wedged.
                if committed is not None and offset < committed <= highs.get((topic, pid), committed):
                    raise OffsetRegressionError(group, topic, pid, offset, committed)
            self._store_offsets(group, checked, ids)

    def commit_unfenced(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit for a group this coordinator does not fence (Kafka clients' classic groups, fenced by
        :mod:`~lkstream.broker.groups.classic`): the same checks and journal, but offsets may move
        backward (a Kafka consumer may seek back and commit). Refused while LKSTREAM members live in it."""
        self._store_without_members(group, offsets, "commit from a Kafka client")

    def _ids(self) -> Mapping[str, uuid.UUID] | None:
        return None if self._topic_ids is None else self._topic_ids()

    def _check_below_high_watermarks(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Refuse offsets above a partition's high watermark; return the high watermarks.

        A committed offset is the next offset the group reads, so the high watermark itself
        is the largest valid one. Every commit that enters the broker (embedded consumer,
        gRPC, HTTP, the Kafka protocol) passes here, so none can wedge a group.
        """
        if self._bounds is None:
            return {}
        highs = {}
        for (topic, pid), offset in offsets.items():
            start, high = self._bounds(topic, pid)
            if offset > high:
                raise OffsetOutOfRangeError(topic, pid, offset, start, high)
            highs[(topic, pid)] = high
        return highs

    def _store_offsets(
        self, group: str, offsets: Mapping[TopicPartition, int], ids: Mapping[str, uuid.UUID] | None
    ) -> None:
        # One journal record: the partitions of one commit land together, with a shared fsync.
        self._store.commit_many(group, dict(offsets), topic_ids=ids)

    def fetch_committed(
        self, group: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, int]:
        """Committed offsets of ``group`` (all of them, or those of ``partitions`` that have one)."""
        validate_group(group)
        ids = self._ids()
        if partitions is None:
            return {(t, p): o for (gr, t, p), o in self._store.list_committed(topic_ids=ids).items() if gr == group}
        found = {}
        for topic, pid in partitions:
            offset = self._store.read_committed(group, topic, pid, topic_id=_id_of(ids, topic))
            if offset is not None:
                found[(topic, pid)] = offset
        return found

    def reset_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Operator reset: set offsets (any direction); refused while the group has live members.

        Resolving ``earliest``/``latest``/a timestamp to offsets is the
        caller's job (the broker has the partition bounds and
        ``offset_for_timestamp``).
        """
        self._store_without_members(group, offsets, "reset offsets")

    def forget(self, group: str) -> bool:
        """Drop what this coordinator knows of ``group`` (a delete); whether it knew anything.

        :class:`GroupNotEmptyError` while the group has live members. Committed offsets are
        the offset store's (the broker forgets them too).
        """
        validate_group(group)
        with self._lock:
            self._expire_locked()
            g = self._groups.get(group)
            if g is not None and g.members:
                raise GroupNotEmptyError(group, len(g.members), "delete the group")
            return self._groups.pop(group, None) is not None

    def _store_without_members(self, group: str, offsets: Mapping[TopicPartition, int], action: str) -> None:
        """Write offsets (any direction) to a group with no live member of this coordinator."""
        validate_group(group)
        checked = _check_offsets(offsets)
        with self._commit_lock(group):
            with self._lock:
                self._expire_locked()
                g = self._groups.get(group)
                if g is not None and g.members:
                    raise GroupNotEmptyError(group, len(g.members), action)
                self._check_partitions_exist(checked)
            self._check_below_high_watermarks(checked)
            self._store_offsets(group, checked, self._ids())

    def _commit_lock(self, group: str) -> threading.Lock:
        with self._lock:
            return self._groups.setdefault(group, _GroupState(group)).commit_lock

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

    def _raise_unknown(self, g: _GroupState | None, member_id: str) -> None:
        if g is not None and member_id in g.fenced:
            raise FencedInstanceError(g.name, member_id, g.fenced[member_id])
        raise UnknownMemberError(g.name if g is not None else "?", member_id)

    def _live_member_locked(self, group: str, member_id: str, owner: str | None = None) -> tuple[_GroupState, _Member]:
        validate_group(group)
        validate_member_id(member_id)
        g = self._groups.get(group)
        if g is None or member_id not in g.members:
            if g is None:
                raise UnknownMemberError(group, member_id)
            self._raise_unknown(g, member_id)
        assert g is not None
        member = _owned_by(g, g.members[member_id], owner)
        member.last_seen = self._clock.monotonic_ms()
        return g, member

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

    def _counts_locked(self, g: _GroupState) -> dict[str, int]:
        return {t: self._count(t) for t in sorted({t for m in g.members.values() for t in m.topics})}

    def _rebalance_locked(self, g: _GroupState, now: float) -> None:
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

    def _to_revoke(self, g: _GroupState, member: _Member) -> set[TopicPartition]:
        return set(member.owned) if g.barrier else member.owned - member.target

    def _stable_for(self, g: _GroupState, member: _Member) -> bool:
        return not g.barrier and member.owned == member.target

    def _update_revoke_clock(self, g: _GroupState, member: _Member, now: float) -> None:
        if not self._to_revoke(g, member):
            member.revoke_since = None
        elif member.revoke_since is None:
            member.revoke_since = now
            self._next_deadline = min(self._next_deadline, now + member.rebalance_timeout_ms)

    def _reconcile_locked(
        self, g: _GroupState, member: _Member, released: list[TopicPartition], now: float
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

    def _remove_locked(self, g: _GroupState, member: _Member, now: float) -> None:
        for tp in member.owned:
            del g.owners[tp]
        del g.members[member.member_id]
        if member.instance_id is not None and g.instances.get(member.instance_id) == member.member_id:
            del g.instances[member.instance_id]
        self._rebalance_locked(g, now)

    def _state_locked(self, g: _GroupState) -> GroupState:
        if not g.members:
            return GroupState.EMPTY
        if g.barrier or any(m.owned != m.target for m in g.members.values()):
            return GroupState.REBALANCING
        return GroupState.STABLE

    def _expire_locked(self) -> float:
        self._expire_count_locked(force=False)
        return self._clock.monotonic_ms()

    def _expire_count_locked(self, *, force: bool) -> int:
        now = self._clock.monotonic_ms()
        if not force and now < self._next_deadline:
            return 0
        removed = 0
        # Removing a member can rebalance and start new revocation clocks: loop until nothing expires.
        while True:
            expired = [
                (g, m)
                for g in self._groups.values()
                for m in g.members.values()
                if now - m.last_seen > m.session_timeout_ms
                or (m.revoke_since is not None and now - m.revoke_since > m.rebalance_timeout_ms)
            ]
            if not expired:
                break
            for g, m in expired:
                if m.member_id in g.members:
                    self._remove_locked(g, m, now)
                    removed += 1
        self._next_deadline = min(
            (
                min(
                    m.last_seen + m.session_timeout_ms,
                    math.inf if m.revoke_since is None else m.revoke_since + m.rebalance_timeout_ms,
                )
                for g in self._groups.values()
                for m in g.members.values()
            ),
            default=math.inf,
        )
        return removed


def _owned_by(g: _GroupState, member: _Member, owner: str | None) -> _Member:
    """``member``, unless ``owner`` is a principal other than the one that joined with it."""
    if owner is not None and owner != member.owner:
        raise MemberOwnerError(g.name, member.member_id, owner)
    return member


def _id_of(ids: Mapping[str, uuid.UUID] | None, topic: str) -> uuid.UUID | None:
    """The topic's current id; a topic that is gone gets the nil id, which no stored offset has."""
    if ids is None:
        return None
    return ids.get(topic, uuid.UUID(int=0))
