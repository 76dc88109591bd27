"""Which coordinator answers a classic group call (JoinGroup, SyncGroup, Heartbeat, LeaveGroup).

A group lives in the classic coordinator (Kafka clients assign partitions themselves) or, once
a KIP-848 member joined it, in LKSTREAM's consumer-protocol coordinator, where classic members
go on with their protocol (:mod:`lkstream.broker.groups.classic_members`). This module sends
each call where the group or the member is, and hands a group back to the classic coordinator
when its last consumer-protocol member left (:mod:`lkstream.broker.groups.conversion`).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping

from lkstream.broker.groups.classic import HeldByConsumerGroupError, JoinAnswer, MemberIdRequiredError
from lkstream.broker.groups.classic_members import CONSUMER_PROTOCOL, NotAConsumerGroupError
from lkstream.broker.groups.conversion import run_downgrades
from lkstream.errors import GroupError, MemberOwnerError, UnknownMemberError
from lkstream.kafka.context import RequestContext

__all__ = ["downgrade_groups", "heartbeat", "join", "leave", "sync"]

_ATTEMPTS = 3  # a group may change hands between the coordinators while a join is routed


async def join(
    ctx: RequestContext,
    group: str,
    *,
    member_id: str,
    instance_id: str | None,
    protocol_type: str,
    protocols: list[tuple[str, bytes]],
    session_timeout_ms: int,
    rebalance_timeout_ms: int,
    client_id: str,
    require_known_member_id: bool,
) -> JoinAnswer:
    """JoinGroup into whichever coordinator holds ``group`` (the classic one when nobody does)."""
    for _ in range(_ATTEMPTS - 1):
        try:
            future = ctx.server.groups.join(
                group,
                member_id=member_id,
                instance_id=instance_id,
                protocol_type=protocol_type,
                protocols=protocols,
                session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms,
                client_id=client_id,
                client_host=ctx.client_host,
                require_known_member_id=require_known_member_id,
                owner=ctx.owner,
            )
            return await asyncio.wrap_future(future)
        except HeldByConsumerGroupError:
            pass
        try:
            if not member_id:
                fresh = f"{client_id[:64] or 'member'}-{uuid.uuid4()}"
                if require_known_member_id and instance_id is None:
                    raise MemberIdRequiredError(group, fresh)  # Kafka keeps no pending id in a consumer group
                member_id = fresh
            joined = ctx.broker.groups.join_classic(
                group,
                member_id=member_id,
                instance_id=instance_id,
                protocol_type=protocol_type,
                protocols=tuple(protocols),
                session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms,
                client_id=client_id,
                client_host=ctx.client_host,
                owner=ctx.owner,
            )
            return JoinAnswer(joined.generation, CONSUMER_PROTOCOL, joined.protocol, "", joined.member_id, ())
        except NotAConsumerGroupError:
            continue  # handed back to the classic coordinator meanwhile: ask it again
    raise GroupError(group, f"group {group!r} keeps changing coordinators; join again")


async def sync(
    ctx: RequestContext,
    group: str,
    member_id: str,
    generation: int,
    *,
    assignments: Mapping[str, bytes],
    instance_id: str | None,
) -> bytes:
    """SyncGroup: a classic member of a consumer-protocol group gets the assignment computed for it."""
    if ctx.broker.groups.is_classic_member(group, member_id):
        return ctx.broker.groups.sync_classic(group, member_id, generation, instance_id, owner=ctx.owner)
    future = ctx.server.groups.sync(group, member_id, generation, assignments, instance_id, owner=ctx.owner)
    return await asyncio.wrap_future(future)


def heartbeat(ctx: RequestContext, group: str, member_id: str, generation: int, instance_id: str | None) -> None:
    if ctx.broker.groups.is_classic_member(group, member_id):
        ctx.broker.groups.heartbeat_classic(group, member_id, generation, instance_id, owner=ctx.owner)
    else:
        ctx.server.groups.heartbeat(group, member_id, generation, instance_id, owner=ctx.owner)


def leave(
    ctx: RequestContext, group: str, leaving: list[tuple[str, str | None]]
) -> list[GroupError | MemberOwnerError | None]:
    """LeaveGroup of each ``(member id, instance id)``; then a group left to classic members goes back."""
    coordinator = ctx.broker.groups
    results: list[GroupError | MemberOwnerError | None] = []
    for member_id, instance_id in leaving:
        if member_id and coordinator.member_topics(group, member_id) is not None:
            results.append(_leave_consumer_group(ctx, group, member_id))
        else:
            results.extend(ctx.server.groups.leave(group, [(member_id, instance_id)], owner=ctx.owner))
    downgrade_groups(ctx)
    return results


def _leave_consumer_group(ctx: RequestContext, group: str, member_id: str) -> GroupError | MemberOwnerError | None:
    coordinator = ctx.broker.groups
    if not coordinator.is_classic_member(group, member_id):
        return UnknownMemberError(group, member_id, "it uses the consumer protocol: it leaves by its heartbeat")
    try:
        coordinator.leave(group, member_id, owner=ctx.owner)
    except (GroupError, MemberOwnerError) as exc:
        return exc
    return None


def downgrade_groups(ctx: RequestContext) -> None:
    """Hand back to the classic coordinator every group whose last consumer-protocol member left."""
    run_downgrades(ctx.server.groups, ctx.broker.groups, ctx.broker.groups.limits.migration_policy)
