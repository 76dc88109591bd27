"""The consumer-group calls of :class:`~lkstream.client.remote.broker.RemoteBroker` (a mixin).

Same names, signatures and results as the embedded broker's
(:mod:`lkstream.broker.groups.facade`), so a Consumer joins a group the same way
embedded and remote. All are blocking and thread-safe (a consumer's heartbeat
thread calls them); errors arrive as the same :mod:`lkstream.errors` classes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from lkstream.broker.groups.coordinator import (
    DEFAULT_ASSIGNOR,
    DEFAULT_REBALANCE_TIMEOUT_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
)
from lkstream.broker.groups.facade import MAX_HEARTBEAT_WAIT_MS, ResetTarget, check_reset_target
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
from lkstream.client.remote.calls import RemoteCalls
from lkstream.client.retry import Retry
from lkstream.errors import InvalidArgumentError
from lkstream.wire._proto import messaging_pb2 as pb
from lkstream.wire.messages import from_topic_partitions, to_topic_partitions

#: Extra seconds a heartbeat long poll's deadline allows beyond the wait it asks for.
_LONG_POLL_SLACK_S = 5.0


class RemoteGroupCalls(RemoteCalls):
    """Mixin of RemoteBroker: its ``_call`` plumbing (:class:`RemoteCalls`) and blocking stub."""

    _stub: Any

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
    ) -> JoinResult:
        """Join ``group`` subscribed to ``topics``; ``client_host`` is set by the daemon from the connection."""
        del client_host  # the daemon knows the peer address better than the client
        if isinstance(topics, str):
            raise InvalidArgumentError("topics must be a collection of topic names, not one string")
        request = pb.JoinGroupRequest(
            group=group,
            topics=list(topics),
            member_id=member_id or "",
            instance_id=instance_id or "",
            assignor=assignor,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            client_id=client_id,
        )
        response = self._call(self._stub.JoinGroup, request)
        return JoinResult(response.member_id, int(response.generation), response.assignor, response.rebalanced)

    def heartbeat(
        self,
        group: str,
        member_id: str,
        generation: int | None = None,
        released: Iterable[TopicPartition] = (),
        max_wait_ms: int = 0,
    ) -> HeartbeatResult:
        """Keep the member alive and learn what to consume; with ``max_wait_ms``, a long poll."""
        request = pb.HeartbeatRequest(
            group=group,
            member_id=member_id,
            generation=generation or 0,
            released=to_topic_partitions(released),
            max_wait_ms=max_wait_ms,
        )
        timeout = min(max_wait_ms, MAX_HEARTBEAT_WAIT_MS) / 1000.0 + _LONG_POLL_SLACK_S
        # Idempotent: heartbeats (and releases) can be repeated without harm.
        response = self._call(self._stub.Heartbeat, request, timeout=max(timeout, self.timeout), retry=Retry.SAFE)
        owned = from_topic_partitions(response.owned)
        return HeartbeatResult(
            generation=int(response.generation),
            assigned=from_topic_partitions(response.assigned),
            revoke=from_topic_partitions(response.revoke),
            owned=owned,
            target=owned,  # the daemon sends what to act on; the target is in DescribeGroup
            stable=response.stable,
        )

    def sync_group(
        self, group: str, member_id: str, generation: int, released: Iterable[TopicPartition] = ()
    ) -> SyncResult:
        request = pb.SyncGroupRequest(
            group=group, member_id=member_id, generation=generation, released=to_topic_partitions(released)
        )
        response = self._call(self._stub.SyncGroup, request, retry=Retry.SAFE)
        return SyncResult(int(response.generation), from_topic_partitions(response.assignment))

    def leave_group(self, group: str, member_id: str) -> None:
        self._call(self._stub.LeaveGroup, pb.LeaveGroupRequest(group=group, member_id=member_id), retry=Retry.SAFE)

    def commit_offsets(
        self,
        group: str,
        offsets: Mapping[TopicPartition, int],
        *,
        member_id: str | None = None,
        generation: int | None = None,
    ) -> None:
        """Durably and atomically commit ``{(topic, partition): next offset}``; fenced for members."""
        request = pb.CommitOffsetsRequest(
            group=group,
            member_id=member_id or "",
            generation=generation or 0,
            offsets=[pb.PartitionOffset(topic=t, partition=p, offset=o) for (t, p), o in offsets.items()],
        )
        # Idempotent: committing the same offsets twice is harmless (equal offsets are accepted).
        self._call(self._stub.CommitOffsets, request, retry=Retry.SAFE)

    def reset_offsets(
        self,
        group: str,
        topic: str,
        partitions: Sequence[int] | None = None,
        *,
        to: ResetTarget | None = None,
        timestamp_ms: int | None = None,
    ) -> dict[int, int]:
        """Operator reset (refused while the group has live members); returns what was committed."""
        check_reset_target(to, timestamp_ms)
        request = pb.ResetOffsetsRequest(group=group, topic=topic, partitions=list(partitions or ()))
        if timestamp_ms is not None:
            request.timestamp_ms = timestamp_ms
        elif to == "earliest":
            request.earliest = True
        elif to == "latest":
            request.latest = True
        else:
            assert isinstance(to, int)  # check_reset_target ran first
            request.offset = to
        response = self._call(self._stub.ResetOffsets, request)
        return {int(pid): int(offset) for pid, offset in response.offsets.items()}

    def delete_group(self, group: str) -> int | None:
        """Drop ``group`` (its committed offsets); refused while it has live members.

        Returns how many committed offsets were forgotten; an unknown group is
        :class:`~lkstream.errors.UnknownGroupError` (the embedded broker returns None).
        """
        response = self._call(self._stub.DeleteGroup, pb.DeleteGroupRequest(group=group))
        return int(response.offsets_removed)

    def _describe(self, group: str) -> pb.DescribeGroupResponse:
        response: pb.DescribeGroupResponse = self._call(
            self._stub.DescribeGroup, pb.DescribeGroupRequest(group=group), retry=Retry.SAFE
        )
        return response

    def describe_group(self, group: str) -> GroupDescription:
        response = self._describe(group)
        members = tuple(
            MemberDescription(
                member_id=m.member_id,
                instance_id=m.instance_id or None,
                client_id=m.client_id,
                client_host=m.client_host,
                topics=frozenset(m.topics),
                owned=from_topic_partitions(m.owned),
                target=from_topic_partitions(m.target),
                generation=int(m.generation),
            )
            for m in response.members
        )
        return GroupDescription(
            response.group, GroupState(response.state), int(response.generation), response.assignor or None, members
        )

    def group_lag(self, group: str) -> list[PartitionLag]:
        return [
            PartitionLag(
                topic=p.topic,
                partition=int(p.partition),
                committed=int(p.committed) if p.has_committed else None,
                high_watermark=int(p.high_watermark),
                lag_messages=int(p.lag_messages),
                lag_seconds=float(p.lag_seconds),
                owner=p.owner or None,
            )
            for p in self._describe(group).partitions
        ]

    def list_groups(self) -> list[GroupListing]:
        response = self._call(self._stub.ListGroups, pb.ListGroupsRequest(), retry=Retry.SAFE)
        return [GroupListing(g.group, GroupState(g.state), int(g.members)) for g in response.groups]
