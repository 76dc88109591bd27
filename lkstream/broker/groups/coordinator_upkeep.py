"""The upkeep of the consumer-group coordinator: expiry, the bounds, forgetting empty groups.

A mixin of :class:`~lkstream.broker.groups.coordinator.GroupCoordinator` (issue 28, finding 5):
every member's next check (its session deadline, or its revocation deadline) sits in one
:class:`~lkstream.broker.groups.deadlines.Deadlines` heap keyed ``(group, member id)``, so a call
pays for the deadlines that are due, never for a walk over every group; a group whose last
member went is forgotten at once (its offsets stay in the offset store); the members of one
group (``max_group_size``) and of all groups together (``max_members``) are bounded.
"""

from __future__ import annotations

import threading
from abc import abstractmethod

from lkstream.broker.groups.coordinator_state import GroupEntry, Member, deadline_of
from lkstream.broker.groups.deadlines import Deadlines
from lkstream.broker.groups.limits import GroupLimits
from lkstream.broker.groups.notify import GroupChanged
from lkstream.errors import GroupMaxSizeReachedError
from lkstream.storage.clock import Clock


class CoordinatorUpkeep:
    """Expiry, bounds and the coordinator's O(1) queries (a mixin; see the module docstring)."""

    _lock: threading.Lock
    _groups: dict[str, GroupEntry]
    _clock: Clock
    _deadlines: Deadlines[tuple[str, str]]
    _member_count: int
    limits: GroupLimits
    changed: GroupChanged

    def has_members(self, group: str) -> bool:
        """Whether ``group`` has a live member here (O(1): asked by the other coordinator on every join)."""
        with self._lock:
            g = self._groups.get(group)
            return g is not None and bool(g.members)

    def member_topics(self, group: str, member_id: str) -> frozenset[str] | None:
        """The subscription of a live member, or None if ``member_id`` is not one."""
        with self._lock:
            g = self._groups.get(group)
            member = None if g is None else g.members.get(member_id)
            return None if member is None else member.topics

    def stats(self) -> tuple[int, int, int]:
        """(groups, members, scheduled deadlines) held: bounded by ``limits`` (issue 28, finding 5)."""
        with self._lock:
            return len(self._groups), self._member_count, len(self._deadlines)

    def _check_room_locked(self, g: GroupEntry) -> None:
        """Kafka's ``group.max.size`` for the group, and LKSTREAM's bound on all groups together."""
        if len(g.members) >= self.limits.max_group_size:
            raise GroupMaxSizeReachedError(g.name, self.limits.max_group_size, "the group")
        if self._member_count >= self.limits.max_members:
            raise GroupMaxSizeReachedError(g.name, self.limits.max_members, "all groups together")

    def _drop_if_empty_locked(self, g: GroupEntry) -> None:
        """Forget a group without members: nothing of it is needed (its offsets are in the store)."""
        if not g.members and self._groups.get(g.name) is g:
            del self._groups[g.name]
            self.changed.forget(g.name)

    def _expire_locked(self) -> float:
        now = self._clock.monotonic_ms()
        self._expire_due_locked(now)
        return now

    def _expire_due_locked(self, now: float) -> int:
        """Remove the members whose session or revocation deadline passed; O(log n) per due deadline."""
        removed = 0
        for name, member_id in self._deadlines.pop_due(now):
            g = self._groups.get(name)
            member = None if g is None else g.members.get(member_id)
            if g is None or member is None:
                continue
            if now - member.last_seen > member.session_timeout_ms or (
                member.revoke_since is not None and now - member.revoke_since > member.rebalance_timeout_ms
            ):
                self._remove_locked(g, member, now)
                removed += 1
            else:
                self._deadlines.schedule((name, member_id), deadline_of(member))
        return removed

    @abstractmethod
    def _remove_locked(self, g: GroupEntry, member: Member, now: float) -> None: ...
