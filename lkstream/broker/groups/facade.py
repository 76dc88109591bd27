"""The consumer-group calls of :class:`~lkstream.broker.Broker` (a mixin over its coordinator).

The same names and signatures exist on :class:`~lkstream.client.remote.RemoteBroker`,
so a :class:`~lkstream.client.consumer.Consumer` joins a group the same way
embedded and through the daemon. What the broker adds to the coordinator:
heartbeat long polls (woken by the group's change signal), operator resets
resolved against the log (earliest, latest, an offset, a timestamp) and lag.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from lkstream.broker.groups.classic import (
    ClassicGroup,
    ClassicGroups,
    ClassicState,
    decode_assignment,
    decode_subscription,
)
from lkstream.broker.groups.conversion import run_downgrades
from lkstream.broker.groups.coordinator import (
    DEFAULT_ASSIGNOR,
    DEFAULT_REBALANCE_TIMEOUT_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
    GroupCoordinator,
)
from lkstream.broker.groups.types import (
    GroupDescription,
    GroupListing,
    GroupState,
    HeartbeatResult,
    JoinResult,
    MemberDescription,
    PartitionLag,
    SyncResult,
    TopicPartition,
)
from lkstream.errors import (
    GroupNotEmptyError,
    GroupSubscribedToTopicError,
    InvalidArgumentError,
    OffsetOutOfRangeError,
    UnknownGroupError,
)

if TYPE_CHECKING:
    from lkstream.broker.partition import Partition
    from lkstream.storage.offsets import OffsetStore

#: A heartbeat long poll never waits longer than this, whatever the caller asks.
MAX_HEARTBEAT_WAIT_MS = 30_000
ResetTarget = Literal["earliest", "latest"] | int


class GroupCalls:
    """Mixin of :class:`~lkstream.broker.Broker`: the group calls over its ``groups`` coordinator."""

    groups: GroupCoordinator
    classic_groups: ClassicGroups
    #: Bumped by the broker whenever a topic appears, disappears or changes its partition count.
    topics_version: int
    _ticked_topics_version: int = -1
    offset_store: OffsetStore

    # What the mixin needs from the broker (declared for the type checker; Broker defines them).
    @abstractmethod
    def partition(self, topic: str, pid: int) -> Partition: ...

    @abstractmethod
    def partitions_for(self, topic: str) -> int: ...

    @abstractmethod
    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int: ...

    # -- membership ------------------------------------------------------------------------------

    def join_group(
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
        owner: str | None = None,
    ) -> JoinResult:
        """Join ``group`` subscribed to ``topics`` (or update a member); see docs/groups.md.

        ``owner`` (every group call): the authenticated principal acting; only the one that
        joined may use the member id. None: a trusted caller (this process; auth off).
        """
        return self.groups.join(
            group,
            topics,
            member_id=member_id,
            instance_id=instance_id,
            assignor=assignor,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            client_id=client_id,
            client_host=client_host,
            owner=owner,
        )

    def heartbeat(
        self,
        group: str,
        member_id: str,
        generation: int | None = None,
        released: Iterable[TopicPartition] = (),
        max_wait_ms: int = 0,
        *,
        owner: str | None = None,
    ) -> HeartbeatResult:
        """Keep the member alive and learn what to consume; with ``max_wait_ms``, a long poll.

        When the answer holds nothing to do (no grant, no revoke), waits up to
        ``max_wait_ms`` for the group to change (woken by the change, not by
        polling) and answers again.
        """
        seen = self.groups.changed.version(group)
        result = self.groups.heartbeat(group, member_id, generation, released, owner=owner)
        wait_s = _wait_s(max_wait_ms)
        if wait_s and _idle(result) and self.groups.changed.wait(group, seen, wait_s):
            result = self.groups.heartbeat(group, member_id, generation, owner=owner)
        return result

    async def heartbeat_async(
        self,
        group: str,
        member_id: str,
        generation: int | None = None,
        released: Iterable[TopicPartition] = (),
        max_wait_ms: int = 0,
        *,
        owner: str | None = None,
    ) -> HeartbeatResult:
        """:meth:`heartbeat` for an event loop: the long poll does not block it."""
        seen = self.groups.changed.version(group)
        result = self.groups.heartbeat(group, member_id, generation, released, owner=owner)
        wait_s = _wait_s(max_wait_ms)
        if wait_s and _idle(result) and await self.groups.changed.wait_async(group, seen, wait_s):
            result = self.groups.heartbeat(group, member_id, generation, owner=owner)
        return result

    def sync_group(
        self,
        group: str,
        member_id: str,
        generation: int,
        released: Iterable[TopicPartition] = (),
        *,
        owner: str | None = None,
    ) -> SyncResult:
        """The member's settled assignment, or :class:`~lkstream.errors.RebalanceInProgressError`."""
        return self.groups.sync(group, member_id, generation, released, owner=owner)

    def leave_group(self, group: str, member_id: str, *, owner: str | None = None) -> None:
        """Leave now: the member's partitions move to the others at once."""
        self.groups.leave(group, member_id, owner=owner)

    # -- offsets ---------------------------------------------------------------------------------

    def commit_offsets(
        self,
        group: str,
        offsets: Mapping[TopicPartition, int],
        *,
        member_id: str | None = None,
        generation: int | None = None,
        owner: str | None = None,
    ) -> None:
        """Durably and atomically commit ``{(topic, partition): next offset}``; fenced for members."""
        self.groups.commit(group, member_id, generation, offsets, owner=owner)

    def reset_offsets(
        self,
        group: str,
        topic: str,
        partitions: Sequence[int] | None = None,
        *,
        to: ResetTarget | None = None,
        timestamp_ms: int | None = None,
    ) -> dict[int, int]:
        """Operator reset of ``group`` on ``topic`` (all partitions by default); returns what was committed.

        ``to`` is ``"earliest"``, ``"latest"`` or an offset; or give ``timestamp_ms``
        (first record at or after it). Refused while the group has live members.
        """
        check_reset_target(to, timestamp_ms)
        pids = list(range(self.partitions_for(topic))) if not partitions else list(partitions)
        offsets = {(topic, pid): self._reset_target(topic, pid, to, timestamp_ms) for pid in pids}
        self.groups.reset_offsets(group, offsets)
        return {pid: offset for (_, pid), offset in offsets.items()}

    def _reset_target(self, topic: str, pid: int, to: ResetTarget | None, timestamp_ms: int | None) -> int:
        partition = self.partition(topic, pid)
        start, end = partition.log_start_offset, partition.high_watermark
        if timestamp_ms is not None:
            return self.offset_for_timestamp(topic, pid, timestamp_ms)
        if to == "earliest":
            return start
        if to == "latest":
            return end
        assert isinstance(to, int)  # check_reset_target ran first
        if not start <= to <= end:
            raise OffsetOutOfRangeError(topic, pid, to, start, end)
        return to

    # -- upkeep ----------------------------------------------------------------------------------

    def tick_groups(self) -> None:
        """Expire silent members of both coordinators and hand back groups whose last consumer-protocol
        member went (KIP-848's online downgrade); the broker's group thread calls it.

        Partition counts are compared (a visit of every group) only when the topics changed since.
        """
        version = self.topics_version
        self.groups.tick(partitions=version != self._ticked_topics_version)
        self._ticked_topics_version = version
        self.classic_groups.tick()
        run_downgrades(self.classic_groups, self.groups, self.groups.limits.migration_policy)

    def delete_group(self, group: str) -> int | None:
        """Drop ``group``: its committed offsets and what the Kafka listener knows of it (Kafka's DeleteGroups).

        Returns how many committed offsets were forgotten, or None when the group is unknown to
        both coordinators (no members, no commits). :class:`GroupNotEmptyError` while it has
        live members in either.
        """
        classic = self.classic_groups.snapshot(group)
        if classic is not None and classic.members:
            raise GroupNotEmptyError(group, len(classic.members), "delete the group")
        known = self.groups.describe(group).state is not GroupState.DEAD or (classic is not None and classic.generation)
        self.groups.forget(group)  # refuses a member that joined meanwhile
        if not known:
            return None
        self.classic_groups.forget(group)
        return self.offset_store.forget_group(group)

    def delete_offsets(
        self, group: str, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, GroupSubscribedToTopicError | None]:
        """Forget ``group``'s committed offsets of ``partitions`` (Kafka's OffsetDelete).

        Each partition's outcome: None (forgotten, or there was nothing to forget), or a
        :class:`GroupSubscribedToTopicError` when a live member of the group subscribes to its topic
        (that offset is kept, as Kafka keeps it). The rest is durable when this returns.
        :class:`UnknownGroupError` when neither coordinator knows the group and it has no commits.
        """
        wanted = list(dict.fromkeys(partitions))
        description = self.describe_group(group)
        if description.state is GroupState.DEAD:
            raise UnknownGroupError(group)
        subscribed = frozenset().union(*(m.topics for m in description.members))
        outcome: dict[TopicPartition, GroupSubscribedToTopicError | None] = {
            tp: GroupSubscribedToTopicError(group, *tp) if tp[0] in subscribed else None for tp in wanted
        }
        # A member joining between the check and the delete finds no committed offset for these
        # partitions and starts from its reset policy, as after Kafka's OffsetDelete of an empty group.
        self.offset_store.forget_partitions(group, [tp for tp, refused in outcome.items() if refused is None])
        return outcome

    # -- inspection ------------------------------------------------------------------------------

    def describe_group(self, group: str) -> GroupDescription:
        """The group as either coordinator knows it (Kafka clients' groups live in ``classic_groups``)."""
        classic = self.classic_groups.snapshot(group)
        if classic is not None and classic.members:
            return describe_classic(classic)
        return self.groups.describe(group)

    def list_groups(self) -> list[GroupListing]:
        listed = {g.group: g for g in self.groups.list_groups()}
        for name in self.classic_groups.groups():
            classic = self.classic_groups.snapshot(name)
            if classic is not None and (classic.members or name not in listed):
                listed[name] = GroupListing(name, _CLASSIC_STATES[classic.state], len(classic.members))
        return [listed[name] for name in sorted(listed)]

    def group_lag(self, group: str) -> list[PartitionLag]:
        """Per partition of the group's topics (subscribed or committed): committed, lag, owner."""
        description = self.groups.describe(group)
        committed = self.groups.fetch_committed(group)
        owners = {tp: m.member_id for m in description.members for tp in m.owned}
        topics = {t for t, _ in committed} | {t for m in description.members for t in m.topics}
        now_ms = time.time() * 1000.0
        lags = []
        for topic in sorted(topics):
            try:
                count = self.partitions_for(topic)
            except LookupError:  # UnknownTopicError: a deleted topic keeps no lag
                continue
            for pid in range(count):
                lags.append(self._lag(topic, pid, committed.get((topic, pid)), owners.get((topic, pid)), now_ms))
        return lags

    def _lag(self, topic: str, pid: int, committed: int | None, owner: str | None, now_ms: float) -> PartitionLag:
        partition = self.partition(topic, pid)
        start, high = partition.log_start_offset, partition.high_watermark
        next_read = max(start, committed if committed is not None else start)
        lag_seconds = 0.0
        if next_read < high:
            try:
                oldest = partition.read_from(next_read, max_msgs=1)
            except OffsetOutOfRangeError:  # retention ran in between
                oldest = []
            if oldest:
                lag_seconds = max(0.0, (now_ms - oldest[0].timestamp) / 1000.0)
        return PartitionLag(topic, pid, committed, high, max(0, high - next_read), lag_seconds, owner)


def check_reset_target(to: ResetTarget | None, timestamp_ms: int | None) -> None:
    """A reset names exactly one target: ``to`` (earliest, latest, an offset) or ``timestamp_ms``."""
    if (to is None) == (timestamp_ms is None):
        raise InvalidArgumentError("reset needs exactly one of to=earliest|latest|OFFSET or timestamp_ms")
    if (
        to is not None
        and to not in ("earliest", "latest")
        and (not isinstance(to, int) or isinstance(to, bool) or to < 0)
    ):
        raise InvalidArgumentError(f"reset target must be earliest, latest or an offset, not {to!r}")


def _idle(result: HeartbeatResult) -> bool:
    return not result.assigned and not result.revoke


def _wait_s(max_wait_ms: int) -> float:
    if max_wait_ms < 0:
        raise InvalidArgumentError(f"max_wait_ms must be >= 0, got {max_wait_ms}")
    return min(max_wait_ms, MAX_HEARTBEAT_WAIT_MS) / 1000.0


_CLASSIC_STATES = {
    ClassicState.EMPTY: GroupState.EMPTY,
    ClassicState.PREPARING_REBALANCE: GroupState.REBALANCING,
    ClassicState.COMPLETING_REBALANCE: GroupState.REBALANCING,
    ClassicState.STABLE: GroupState.STABLE,
    ClassicState.DEAD: GroupState.DEAD,
}


def describe_classic(group: ClassicGroup) -> GroupDescription:
    """A Kafka client group in LKSTREAM's terms: owned partitions decoded from the consumer protocol."""
    members = []
    for m in group.members.values():
        owned = decode_assignment(m.assignment)
        topics = decode_subscription(m.metadata(group.protocol)) if group.protocol else frozenset()
        members.append(
            MemberDescription(
                member_id=m.member_id,
                instance_id=m.instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                topics=topics or frozenset(t for t, _ in owned),
                owned=owned,
                target=owned,
                generation=group.generation,
            )
        )
    return GroupDescription(group.name, _CLASSIC_STATES[group.state], group.generation, group.protocol, tuple(members))
