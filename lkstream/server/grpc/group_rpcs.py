"""The consumer-group RPCs of the ``lkstream.Broker`` service (a mixin of BrokerService).

Each RPC is one call of the broker's group surface (:mod:`lkstream.broker.groups.facade`);
this module only converts messages. Coordinator calls take microseconds and run
on the event loop; commits wait for an fsync and run in a worker thread; a
Heartbeat long poll waits on the group's change signal without blocking the loop.

Every member call passes the calling principal as the member's ``owner``: only the
principal that joined may use a member id (docs/security.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc

from lkstream.broker.broker import Broker
from lkstream.broker.groups.coordinator import (
    DEFAULT_ASSIGNOR,
    DEFAULT_REBALANCE_TIMEOUT_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
)
from lkstream.broker.groups.types import TopicPartition
from lkstream.broker.metrics import BrokerMetrics
from lkstream.errors import InvalidArgumentError, UnknownGroupError
from lkstream.security.acl import ResourceType
from lkstream.server.grpc.guard import guard
from lkstream.wire._proto import messaging_pb2 as pb
from lkstream.wire.messages import from_topic_partitions, to_topic_partitions

Context = grpc.aio.ServicerContext[Any, Any]


class GroupRpcs:
    """JoinGroup, SyncGroup, Heartbeat, LeaveGroup, CommitOffsets, DescribeGroup, ListGroups, ResetOffsets,
    DeleteGroup."""

    broker: Broker
    metrics: BrokerMetrics
    #: The names the calling principal may describe (BrokerService.visible).
    visible: Callable[[ResourceType, list[str]], list[str]]
    #: The calling principal's name as group members' owner; None without authentication (BrokerService.owner).
    owner: Callable[[], str | None]

    async def JoinGroup(self, request: pb.JoinGroupRequest, context: Context) -> pb.JoinGroupResponse:
        async with guard(context, self.metrics):
            result = self.broker.join_group(
                request.group,
                list(request.topics),
                member_id=request.member_id or None,
                instance_id=request.instance_id or None,
                assignor=request.assignor or DEFAULT_ASSIGNOR,
                session_timeout_ms=request.session_timeout_ms or DEFAULT_SESSION_TIMEOUT_MS,
                rebalance_timeout_ms=request.rebalance_timeout_ms or DEFAULT_REBALANCE_TIMEOUT_MS,
                client_id=request.client_id,
                client_host=context.peer() or "",
                owner=self.owner(),
            )
            return pb.JoinGroupResponse(
                member_id=result.member_id,
                generation=result.generation,
                assignor=result.assignor,
                rebalanced=result.rebalanced,
            )
        raise AssertionError("unreachable")  # pragma: no cover

    async def Heartbeat(self, request: pb.HeartbeatRequest, context: Context) -> pb.HeartbeatResponse:
        async with guard(context, self.metrics):
            result = await self.broker.heartbeat_async(
                request.group,
                request.member_id,
                request.generation,
                from_topic_partitions(request.released),
                request.max_wait_ms,
                owner=self.owner(),
            )
            return pb.HeartbeatResponse(
                generation=result.generation,
                owned=to_topic_partitions(result.owned),
                revoke=to_topic_partitions(result.revoke),
                assigned=to_topic_partitions(result.assigned),
                stable=result.stable,
            )
        raise AssertionError("unreachable")  # pragma: no cover

    async def SyncGroup(self, request: pb.SyncGroupRequest, context: Context) -> pb.SyncGroupResponse:
        async with guard(context, self.metrics):
            result = self.broker.sync_group(
                request.group,
                request.member_id,
                request.generation,
                from_topic_partitions(request.released),
                owner=self.owner(),
            )
            return pb.SyncGroupResponse(generation=result.generation, assignment=to_topic_partitions(result.assignment))
        raise AssertionError("unreachable")  # pragma: no cover

    async def LeaveGroup(self, request: pb.LeaveGroupRequest, context: Context) -> pb.LeaveGroupResponse:
        async with guard(context, self.metrics):
            self.broker.leave_group(request.group, request.member_id, owner=self.owner())
            return pb.LeaveGroupResponse()
        raise AssertionError("unreachable")  # pragma: no cover

    async def CommitOffsets(self, request: pb.CommitOffsetsRequest, context: Context) -> pb.CommitOffsetsResponse:
        async with guard(context, self.metrics):
            offsets = {(o.topic, int(o.partition)): int(o.offset) for o in request.offsets}
            if not offsets:
                raise InvalidArgumentError("CommitOffsets needs at least one partition offset")
            await self.commit(request.group, offsets, request.member_id or None, request.generation)
            return pb.CommitOffsetsResponse()
        raise AssertionError("unreachable")  # pragma: no cover

    async def commit(
        self, group: str, offsets: dict[TopicPartition, int], member_id: str | None, generation: int | None
    ) -> None:
        """Fenced, durable commit (shared by CommitOffset and CommitOffsets); counted in the metrics."""
        for topic, pid in offsets:
            self.broker.partition(topic, pid)  # NOT_FOUND / INVALID_ARGUMENT before anything is written
        # Durable: waits for the offsets journal's fsync, so off the loop.
        await asyncio.to_thread(
            self.broker.commit_offsets,
            group,
            offsets,
            member_id=member_id,
            generation=generation if member_id else None,
            owner=self.owner(),
        )
        for (topic, pid), offset in offsets.items():
            self.metrics.record_committed(topic, group, pid, offset)

    async def DescribeGroup(self, request: pb.DescribeGroupRequest, context: Context) -> pb.DescribeGroupResponse:
        async with guard(context, self.metrics):
            group = self.broker.describe_group(request.group)
            # The lag reads one record per partition behind: off the loop.
            lags = await asyncio.to_thread(self.broker.group_lag, request.group)
            return pb.DescribeGroupResponse(
                group=group.group,
                state=str(group.state),
                generation=group.generation,
                assignor=group.assignor or "",
                members=[
                    pb.GroupMember(
                        member_id=m.member_id,
                        instance_id=m.instance_id or "",
                        client_id=m.client_id,
                        client_host=m.client_host,
                        topics=sorted(m.topics),
                        owned=to_topic_partitions(m.owned),
                        target=to_topic_partitions(m.target),
                        generation=m.generation,
                    )
                    for m in group.members
                ],
                partitions=[
                    pb.PartitionLag(
                        topic=lag.topic,
                        partition=lag.partition,
                        has_committed=lag.committed is not None,
                        committed=lag.committed or 0,
                        high_watermark=lag.high_watermark,
                        lag_messages=lag.lag_messages,
                        lag_seconds=lag.lag_seconds,
                        owner=lag.owner or "",
                    )
                    for lag in lags
                ],
            )
        raise AssertionError("unreachable")  # pragma: no cover

    async def ListGroups(self, request: pb.ListGroupsRequest, context: Context) -> pb.ListGroupsResponse:
        async with guard(context, self.metrics):
            every = self.broker.list_groups()
            allowed = set(self.visible(ResourceType.GROUP, [g.group for g in every]))
            listings = [g for g in every if g.group in allowed]
            return pb.ListGroupsResponse(
                groups=[pb.GroupListing(group=g.group, state=str(g.state), members=g.members) for g in listings]
            )
        raise AssertionError("unreachable")  # pragma: no cover

    async def ResetOffsets(self, request: pb.ResetOffsetsRequest, context: Context) -> pb.ResetOffsetsResponse:
        async with guard(context, self.metrics):
            which = request.WhichOneof("to")
            if which is None:
                raise InvalidArgumentError("ResetOffsets needs a target: earliest, latest, offset or timestamp_ms")
            to: Any = {"earliest": "earliest", "latest": "latest", "offset": request.offset}.get(which)
            timestamp = request.timestamp_ms if which == "timestamp_ms" else None
            offsets = await asyncio.to_thread(
                self.broker.reset_offsets,
                request.group,
                request.topic,
                list(request.partitions) or None,
                to=to,
                timestamp_ms=timestamp,
            )
            for pid, offset in offsets.items():
                self.metrics.record_committed(request.topic, request.group, pid, offset)
            return pb.ResetOffsetsResponse(offsets=offsets)
        raise AssertionError("unreachable")  # pragma: no cover

    async def DeleteGroup(self, request: pb.DeleteGroupRequest, context: Context) -> pb.DeleteGroupResponse:
        async with guard(context, self.metrics):
            removed = await asyncio.to_thread(self.broker.delete_group, request.group)  # offsets are fsynced
            if removed is None:
                raise UnknownGroupError(request.group)
            return pb.DeleteGroupResponse(offsets_removed=removed)
        raise AssertionError("unreachable")  # pragma: no cover
