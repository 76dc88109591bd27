"""The upkeep of Kafka's classic groups: deadlines, expiry, pending member ids, and the bounds.

A mixin of :class:`~lkstream.broker.groups.classic.ClassicGroups` (issue 28, finding 5): every
deadline (a member's session, a pending member id, a group's rebalance timeout) sits in one
:class:`~lkstream.broker.groups.deadlines.Deadlines` heap keyed ``(kind, group, member id)``, so
a call pays for the deadlines that are due and never walks every group; a group with no member
and no pending id is forgotten; the members of one group (``max_group_size``) and of all groups
together (``max_members``, pending ids counted, the oldest forgotten first) are bounded.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections import OrderedDict
from dataclasses import dataclass

from lkstream.broker.groups.classic_state import ClassicGroup, ClassicMember, ClassicState, Completion
from lkstream.broker.groups.deadlines import Deadlines
from lkstream.broker.groups.limits import GroupLimits
from lkstream.errors import GroupMaxSizeReachedError

# Deadline keys: (kind, group, member id); kinds: a member's session, a pending id, a group's rebalance.
SESSION, PENDING, REBALANCE = "session", "pending", "rebalance"
Due = tuple[str, str, str]


@dataclass(frozen=True)
class ClassicStats:
    """What the classic coordinator holds (bounded: see :class:`~lkstream.broker.groups.limits.GroupLimits`)."""

    groups: int
    members: int
    pending: int
    deadlines: int


class ClassicUpkeep:
    """Expiry and bounds of the classic groups (a mixin; see the module docstring)."""

    _lock: threading.Lock
    _groups: dict[str, ClassicGroup]
    _deadlines: Deadlines[Due]
    _pending_order: OrderedDict[tuple[str, str], None]  # oldest first
    _member_count: int
    limits: GroupLimits

    def stats(self) -> ClassicStats:
        with self._lock:
            return ClassicStats(len(self._groups), self._member_count, len(self._pending_order), len(self._deadlines))

    def _check_size_locked(self, g: ClassicGroup, member_id: str, now: float, done: list[Completion]) -> None:
        """Kafka's ``acceptJoiningMember``: a full group refuses new members (and one that shrank, the last ones)."""
        limit = self.limits.max_group_size
        known = g.members.get(member_id) if member_id else None
        if g.state in (ClassicState.EMPTY, ClassicState.DEAD):
            return
        if g.state is ClassicState.PREPARING_REBALANCE:
            accepted = (known is not None and known.join is not None) or g.awaiting_join() < limit
        else:
            accepted = known is not None or len(g.members) < limit
        if not accepted:
            if known is not None:
                self._remove_locked(g, known)
                self._member_left_locked(g, now, done)
            raise GroupMaxSizeReachedError(g.name, limit, "the group")

    def _make_room_locked(self, g: ClassicGroup) -> None:
        """Keep all groups together under ``limits.max_members``: forget the oldest pending ids, else refuse."""
        limit = self.limits.max_members
        while self._member_count + len(self._pending_order) >= limit and self._pending_order:
            (name, oldest), _ = self._pending_order.popitem(last=False)
            holder = self._groups.get(name)
            if holder is not None:
                self._forget_pending_locked(holder, oldest)
                if holder is not g:
                    self._drop_if_idle_locked(holder)
        if self._member_count + len(self._pending_order) >= limit:
            raise GroupMaxSizeReachedError(g.name, limit, "all groups together")

    def _forget_pending_locked(self, g: ClassicGroup, member_id: str) -> None:
        g.pending.pop(member_id, None)
        self._pending_order.pop((g.name, member_id), None)
        self._deadlines.cancel((PENDING, g.name, member_id))

    def _drop_if_idle_locked(self, g: ClassicGroup) -> None:
        if g.idle and self._groups.get(g.name) is g:
            del self._groups[g.name]
            self._deadlines.cancel((REBALANCE, g.name, ""))

    def _expire_locked(self, now: float, done: list[Completion]) -> None:
        """Act on the deadlines that are due: O(log n) each, never a walk over all groups."""
        for kind, name, member_id in self._deadlines.pop_due(now):
            g = self._groups.get(name)
            if g is None:
                continue
            if kind == PENDING:
                pending = g.pending.get(member_id)
                if pending is not None and pending.deadline <= now:
                    self._forget_pending_locked(g, member_id)
                elif pending is not None:
                    self._deadlines.schedule((kind, name, member_id), pending.deadline)
            elif kind == SESSION:
                self._check_session_locked(g, member_id, now, done)
            elif g.state is ClassicState.PREPARING_REBALANCE:
                if now >= g.rebalance_deadline:
                    self._maybe_complete_join_locked(g, now, done, force=True)
                else:
                    self._deadlines.schedule((kind, name, ""), g.rebalance_deadline)
            self._drop_if_idle_locked(g)

    def _check_session_locked(self, g: ClassicGroup, member_id: str, now: float, done: list[Completion]) -> None:
        member = g.members.get(member_id)
        if member is None:
            return
        deadline = member.last_seen + member.session_timeout_ms
        if member.waiting:
            self._deadlines.schedule((SESSION, g.name, member_id), now + member.session_timeout_ms)
        elif now > deadline:
            self._remove_locked(g, member)
            self._member_left_locked(g, now, done)
        else:
            self._deadlines.schedule((SESSION, g.name, member_id), deadline)

    # What the mixin needs from ClassicGroups.
    @abstractmethod
    def _remove_locked(self, g: ClassicGroup, member: ClassicMember) -> None: ...

    @abstractmethod
    def _member_left_locked(self, g: ClassicGroup, now: float, done: list[Completion]) -> None: ...

    @abstractmethod
    def _maybe_complete_join_locked(
        self, g: ClassicGroup, now: float, done: list[Completion], *, force: bool = False
    ) -> None: ...
