"""The classic coordinator's side of KIP-848's group conversion (:mod:`lkstream.broker.groups.conversion`).

A mixin of :class:`~lkstream.broker.groups.classic.ClassicGroups`: :meth:`ClassicHandover.hand_over`
gives a live classic group to the consumer coordinator (online upgrade), :meth:`ClassicHandover.take_over`
takes one back (online downgrade). Both run under this coordinator's lock and call the other
coordinator under it (lock order: classic, then consumer).
"""

from __future__ import annotations

import functools
import threading
from abc import abstractmethod
from collections import OrderedDict
from typing import TYPE_CHECKING

from lkstream.broker.groups.classic_members import CONSUMER_PROTOCOL, Handover
from lkstream.broker.groups.classic_state import (
    ClassicGroup,
    ClassicMember,
    ClassicState,
    Completion,
    reject,
    run,
    select_protocol,
)
from lkstream.broker.groups.classic_upkeep import SESSION
from lkstream.broker.groups.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    protocol_version,
)
from lkstream.broker.groups.coordinator_state import ClassicInfo, Member
from lkstream.broker.groups.deadlines import Deadlines
from lkstream.errors import InconsistentGroupProtocolError, RebalanceInProgressError
from lkstream.storage.clock import Clock

if TYPE_CHECKING:
    from lkstream.broker.groups.coordinator import GroupCoordinator


class ClassicHandover:
    """Conversions of whole groups (a mixin of ClassicGroups; see the module docstring)."""

    _lock: threading.Lock
    _groups: dict[str, ClassicGroup]
    _clock: Clock
    _deadlines: Deadlines[tuple[str, str, str]]
    _pending_order: OrderedDict[tuple[str, str], None]
    _member_count: int

    def hand_over(self, group: str, coordinator: GroupCoordinator, assignor: str) -> bool:
        """Give a live group whose members all speak the consumer protocol to ``coordinator``.

        False when the group has no member here; :class:`InconsistentGroupProtocolError` when a
        member speaks another protocol type (Kafka then refuses the upgrade).
        """
        done: list[Completion] = []
        try:
            with self._lock:
                now = self._clock.monotonic_ms()
                self._expire_locked(now, done)
                g = self._groups.get(group)
                if g is None or not g.members:
                    return False
                for member in g.members.values():
                    if member.protocol_type != CONSUMER_PROTOCOL:
                        raise InconsistentGroupProtocolError(group, CONSUMER_PROTOCOL, member.protocol_type)
                members = tuple(_as_member(m, g) for m in g.members.values())
                coordinator.adopt(group, Handover(members, g.generation), assignor)
                for member in list(g.members.values()):
                    for waiter in (member.join, member.sync):
                        if waiter is not None and not waiter.done():
                            error = RebalanceInProgressError(group, member.member_id, g.generation)
                            done.append(functools.partial(reject, waiter, error))
                    del g.members[member.member_id]
                    self._member_count -= 1
                    self._deadlines.cancel((SESSION, group, member.member_id))
                for member_id in list(g.pending):
                    self._forget_pending_locked(g, member_id)
                self._drop_if_idle_locked(g)
                return True
        finally:
            run(done)

    def take_over(self, group: str, coordinator: GroupCoordinator) -> bool:
        """Take back a group whose members all speak the classic protocol, and start a rebalance.

        False when this coordinator holds members of the group already, or ``coordinator`` has no
        such group (a consumer-protocol member joined meanwhile, or everybody left).
        """
        done: list[Completion] = []
        try:
            with self._lock:
                now = self._clock.monotonic_ms()
                self._expire_locked(now, done)
                existing = self._groups.get(group)
                if existing is not None and existing.members:
                    return False
                handover = coordinator.release_classic_group(group)
                if handover is None:
                    return False
                g = existing or ClassicGroup(group)
                g.state, g.generation, g.protocol_type = ClassicState.STABLE, handover.generation, CONSUMER_PROTOCOL
                for member in handover.members:
                    self._adopt_member_locked(g, member, now)
                g.protocol = select_protocol(list(g.members.values()))
                g.leader = next(iter(g.members))
                self._groups[group] = g
                self._prepare_rebalance_locked(g, now, done)
                return True
        finally:
            run(done)

    def _adopt_member_locked(self, g: ClassicGroup, member: Member, now: float) -> None:
        info = member.classic
        assert info is not None  # release_classic_group hands over classic members only
        adopted = ClassicMember(
            member.member_id,
            member.instance_id,
            member.client_id,
            member.client_host,
            info.session_timeout_ms,
            member.rebalance_timeout_ms,
            info.protocol_type,
            info.protocols,
            now,
            assignment=encode_assignment(frozenset(member.target), protocol_version(info.protocols[0][1])),
            owner=member.owner,
        )
        g.members[adopted.member_id] = adopted
        self._member_count += 1
        if adopted.instance_id is not None:
            g.instances[adopted.instance_id] = adopted.member_id
        self._deadlines.schedule((SESSION, g.name, adopted.member_id), now + adopted.session_timeout_ms)

    # What the mixin needs from ClassicGroups.
    @abstractmethod
    def _expire_locked(self, now: float, done: list[Completion]) -> None: ...

    @abstractmethod
    def _forget_pending_locked(self, g: ClassicGroup, member_id: str) -> None: ...

    @abstractmethod
    def _drop_if_idle_locked(self, g: ClassicGroup) -> None: ...

    @abstractmethod
    def _prepare_rebalance_locked(self, g: ClassicGroup, now: float, done: list[Completion]) -> None: ...


def _as_member(member: ClassicMember, g: ClassicGroup) -> Member:
    """A classic member as the consumer coordinator holds it: its subscription and current assignment."""
    metadata = member.metadata(g.protocol) if g.protocol and g.protocol in dict(member.protocols) else b""
    if not metadata and member.protocols:
        metadata = member.protocols[0][1]
    owned = decode_assignment(member.assignment)
    return Member(
        member_id=member.member_id,
        instance_id=member.instance_id,
        client_id=member.client_id,
        client_host=member.client_host,
        topics=decode_subscription(metadata),
        assignor="",  # the adopting group's
        session_timeout_ms=member.session_timeout_ms,
        rebalance_timeout_ms=member.rebalance_timeout_ms,
        last_seen=member.last_seen,
        generation=g.generation,
        owned=set(owned),
        target=set(owned),
        owner=member.owner,
        classic=ClassicInfo(
            protocol_type=member.protocol_type,
            protocols=member.protocols,
            session_timeout_ms=member.session_timeout_ms,
            generation=g.generation,
            assignment=owned,
        ),
    )
