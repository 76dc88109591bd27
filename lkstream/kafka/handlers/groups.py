"""Group APIs: FindCoordinator, Join/Sync/Heartbeat/LeaveGroup, OffsetCommit/Fetch/Delete, List/Describe/DeleteGroups.

Membership is :class:`~lkstream.broker.groups.classic.ClassicGroups` (Kafka's
client-side assignment); committed offsets go through the broker's group
coordinator into the offsets journal, so ``lkstream groups`` and LKSTREAM
consumers see them (OffsetCommit and OffsetFetch: :mod:`lkstream.kafka.handlers.offsets`).
This node coordinates every group; FindCoordinator for a transactional id is refused
at once (transactions are not supported yet).

Access (docs/kafka.md, "Security"): FindCoordinator and DescribeGroups need
``describe`` on the group, the member APIs ``read`` on it, and only the principal
that joined may use a member id (``owner``); ListGroups lists only groups it may describe.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from lkstream.broker.groups.classic import MemberIdRequiredError
from lkstream.errors import (
    GroupMaxSizeReachedError,
    LkstreamError,
)
from lkstream.kafka import kio_codec
from lkstream.kafka.context import NODE_ID, RequestContext
from lkstream.kafka.handlers import classic_routing
from lkstream.kafka.handlers.offsets import group_error, offset_commit, offset_fetch, partition_codes
from lkstream.kafka.protocol import ApiKey, RequestHeader

__all__ = [
    "delete_groups",
    "describe_groups",
    "find_coordinator",
    "heartbeat",
    "join_group",
    "leave_group",
    "list_groups",
    "offset_commit",  # lkstream.kafka.handlers.offsets
    "offset_delete",
    "offset_fetch",
    "sync_group",
]

_COORDINATOR_GROUP = 0  # FindCoordinator key_type: a consumer group
_COORDINATOR_TRANSACTION = 1  # FindCoordinator key_type: a transactional id


#: What a transactional producer's coordinator lookup hears: it fails at once, with this message where
#: the client shows the broker's (librdkafka), instead of retrying COORDINATOR_NOT_AVAILABLE forever.
TRANSACTIONS_UNSUPPORTED = (
    "transactions are not supported by LKSTREAM yet: use an idempotent producer (enable.idempotence) "
    "without transactional.id"
)


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000) if isinstance(value, datetime.timedelta) else int(value)


async def find_coordinator(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    request = kio_codec.decode_request(ApiKey.FIND_COORDINATOR, header.api_version, frame, header.body_offset)
    response_cls = kio_codec.response_type(ApiKey.FIND_COORDINATOR, header.api_version)
    key_type = getattr(request, "key_type", _COORDINATOR_GROUP)

    def refuse(code: int, message: str | None) -> bytes:
        return kio_codec.encode(
            kio_codec.make(response_cls, error_code=code, error_message=message, node_id=-1, host="", port=-1)
        )

    if key_type == _COORDINATOR_TRANSACTION:
        # Not COORDINATOR_NOT_AVAILABLE: every client retries that without end (issue 24). This code is
        # fatal for the Java client, librdkafka (which shows the message), kafka-python and aiokafka.
        return refuse(ErrorCode.transactional_id_authorization_failed, TRANSACTIONS_UNSUPPORTED)
    if key_type != _COORDINATOR_GROUP:
        return refuse(ErrorCode.invalid_request, f"unknown coordinator key type {key_type}")
    if not ctx.allowed("describe", "group", request.key):
        return refuse(ErrorCode.group_authorization_failed, None)
    return kio_codec.encode(
        kio_codec.make(
            response_cls,
            error_code=0,
            error_message=None,
            node_id=NODE_ID,
            host=ctx.server.advertised_host,
            port=ctx.server.advertised_port,
        )
    )


async def join_group(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    version = header.api_version
    request = kio_codec.decode_request(ApiKey.JOIN_GROUP, version, frame, header.body_offset)
    response_cls = kio_codec.response_type(ApiKey.JOIN_GROUP, version)
    member_cls = kio_codec.item_type(response_cls, "members")

    def answer(code: int, **values: Any) -> bytes:
        defaults = {"generation_id": -1, "protocol_name": "", "leader": "", "member_id": "", "members": ()}
        return kio_codec.encode(kio_codec.make(response_cls, error_code=code, **{**defaults, **values}))

    if not ctx.allowed("read", "group", request.group_id):
        return answer(ErrorCode.group_authorization_failed)
    session_ms = _ms(request.session_timeout)
    try:
        joined = await classic_routing.join(
            ctx,
            request.group_id,
            member_id=request.member_id,
            instance_id=getattr(request, "group_instance_id", None),
            protocol_type=request.protocol_type,
            protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=_ms(getattr(request, "rebalance_timeout", session_ms)),
            client_id=header.client_id,
            require_known_member_id=version >= 4,
        )
    except MemberIdRequiredError as exc:
        return answer(ErrorCode.member_id_required, member_id=exc.member_id)
    except GroupMaxSizeReachedError:
        return answer(ErrorCode.group_max_size_reached)  # Kafka answers no member id here
    except LkstreamError as exc:
        return answer(group_error(exc), member_id=request.member_id)
    members = tuple(
        kio_codec.make(member_cls, member_id=mid, group_instance_id=iid, metadata=meta)
        for mid, iid, meta in joined.members
    )
    return answer(
        0,
        generation_id=joined.generation,
        protocol_type=joined.protocol_type,
        protocol_name=joined.protocol or "",
        leader=joined.leader,
        member_id=joined.member_id,
        members=members,
    )


async def sync_group(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    request = kio_codec.decode_request(ApiKey.SYNC_GROUP, header.api_version, frame, header.body_offset)
    response_cls = kio_codec.response_type(ApiKey.SYNC_GROUP, header.api_version)
    group = ctx.server.groups.snapshot(request.group_id)
    protocol_type = group.protocol_type if group else getattr(request, "protocol_type", None)
    protocol = group.protocol if group else getattr(request, "protocol_name", None)
    code: int
    if not ctx.allowed("read", "group", request.group_id):
        code, assignment = ErrorCode.group_authorization_failed, b""
    else:
        try:
            assignment = await classic_routing.sync(
                ctx,
                request.group_id,
                request.member_id,
                request.generation_id,
                assignments={a.member_id: bytes(a.assignment) for a in request.assignments},
                instance_id=getattr(request, "group_instance_id", None),
            )
            code = 0
        except LkstreamError as exc:
            code, assignment = group_error(exc), b""
    return kio_codec.encode(
        kio_codec.make(
            response_cls, error_code=code, assignment=assignment, protocol_type=protocol_type, protocol_name=protocol
        )
    )


async def heartbeat(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    request = kio_codec.decode_request(ApiKey.HEARTBEAT, header.api_version, frame, header.body_offset)
    response_cls = kio_codec.response_type(ApiKey.HEARTBEAT, header.api_version)
    code: int = 0
    if not ctx.allowed("read", "group", request.group_id):
        code = ErrorCode.group_authorization_failed
    else:
        try:
            classic_routing.heartbeat(
                ctx,
                request.group_id,
                request.member_id,
                request.generation_id,
                getattr(request, "group_instance_id", None),
            )
        except LkstreamError as exc:
            code = group_error(exc)
    return kio_codec.encode(kio_codec.make(response_cls, error_code=code))


async def leave_group(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    request = kio_codec.decode_request(ApiKey.LEAVE_GROUP, header.api_version, frame, header.body_offset)
    response_cls = kio_codec.response_type(ApiKey.LEAVE_GROUP, header.api_version)
    if header.api_version >= 3:
        leaving = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        leaving = [(request.member_id, None)]
    if not ctx.allowed("read", "group", request.group_id):
        return kio_codec.encode(kio_codec.make(response_cls, error_code=ErrorCode.group_authorization_failed))
    results = classic_routing.leave(ctx, request.group_id, leaving)
    codes = [0 if r is None else group_error(r) for r in results]
    if header.api_version < 3:
        return kio_codec.encode(kio_codec.make(response_cls, error_code=codes[0]))
    member_cls = kio_codec.item_type(response_cls, "members")
    members = tuple(
        kio_codec.make(member_cls, member_id=mid, group_instance_id=iid, error_code=code)
        for (mid, iid), code in zip(leaving, codes, strict=True)
    )
    return kio_codec.encode(kio_codec.make(response_cls, error_code=0, members=members))


async def list_groups(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    request = kio_codec.decode_request(ApiKey.LIST_GROUPS, header.api_version, frame, header.body_offset)
    response_cls = kio_codec.response_type(ApiKey.LIST_GROUPS, header.api_version)
    group_cls = kio_codec.item_type(response_cls, "groups")
    states = set(getattr(request, "states_filter", ()) or ())
    listed = []
    for listing in ctx.broker.list_groups():
        if not ctx.allowed("describe", "group", listing.group):
            continue
        if states and str(listing.state) not in states:
            continue
        listed.append(
            kio_codec.make(group_cls, group_id=listing.group, protocol_type="consumer", group_state=str(listing.state))
        )
    return kio_codec.encode(kio_codec.make(response_cls, error_code=0, groups=tuple(listed)))


async def describe_groups(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    request = kio_codec.decode_request(ApiKey.DESCRIBE_GROUPS, header.api_version, frame, header.body_offset)
    response_cls = kio_codec.response_type(ApiKey.DESCRIBE_GROUPS, header.api_version)
    group_cls = kio_codec.item_type(response_cls, "groups")
    member_cls = kio_codec.item_type(group_cls, "members")
    described = []
    for name in request.groups:
        values: dict[str, Any] = {
            "group_id": name,
            "error_code": 0,
            "group_state": "Dead",
            "protocol_type": "",
            "protocol_data": "",
            "members": (),
            "authorized_operations": -(2**31),
        }
        if not ctx.allowed("describe", "group", name):
            values["error_code"] = ErrorCode.group_authorization_failed
        else:
            snapshot = ctx.server.groups.snapshot(name)
            if snapshot is not None and (snapshot.members or snapshot.generation):
                values.update(
                    group_state=str(snapshot.state),
                    protocol_type=snapshot.protocol_type or "",
                    protocol_data=snapshot.protocol or "",
                    members=tuple(
                        kio_codec.make(
                            member_cls,
                            member_id=m.member_id,
                            group_instance_id=m.instance_id,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            member_metadata=m.metadata(snapshot.protocol) if snapshot.protocol else b"",
                            member_assignment=m.assignment,
                        )
                        for m in snapshot.members.values()
                    ),
                )
            else:
                try:
                    values.update(group_state=str(ctx.broker.describe_group(name).state), protocol_type="consumer")
                except LkstreamError as exc:
                    values["error_code"] = group_error(exc)
        described.append(kio_codec.make(group_cls, **values))
    return kio_codec.encode(kio_codec.make(response_cls, groups=tuple(described)))


async def delete_groups(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    request = kio_codec.decode_request(ApiKey.DELETE_GROUPS, header.api_version, frame, header.body_offset)
    response_cls = kio_codec.response_type(ApiKey.DELETE_GROUPS, header.api_version)
    result_cls = kio_codec.item_type(response_cls, "results")
    results = []
    for name in request.groups_names:
        code: int = 0
        if not ctx.allowed("delete", "group", name):
            code = ErrorCode.group_authorization_failed
        else:
            try:
                code = await asyncio.to_thread(_delete_group, ctx, name)
            except LkstreamError as exc:
                code = group_error(exc)
        results.append(kio_codec.make(result_cls, group_id=name, error_code=code))
    return kio_codec.encode(kio_codec.make(response_cls, results=tuple(results)))


def _delete_group(ctx: RequestContext, name: str) -> int:
    return ErrorCode.group_id_not_found if ctx.broker.delete_group(name) is None else 0


async def offset_delete(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    """Kafka's OffsetDelete: forget a group's committed offsets of some partitions.

    Needs ``delete`` on the group (else GROUP_AUTHORIZATION_FAILED for the request) and ``read`` on each
    topic (else TOPIC_AUTHORIZATION_FAILED for its partitions), as Kafka; a partition the topic does not
    have is UNKNOWN_TOPIC_OR_PARTITION, one a live member subscribes to GROUP_SUBSCRIBED_TO_TOPIC, an
    unknown group GROUP_ID_NOT_FOUND.
    """
    request = kio_codec.decode_request(ApiKey.OFFSET_DELETE, header.api_version, frame, header.body_offset)
    response_cls = kio_codec.response_type(ApiKey.OFFSET_DELETE, header.api_version)
    if not ctx.allowed("delete", "group", request.group_id):
        return kio_codec.encode(kio_codec.make(response_cls, error_code=ErrorCode.group_authorization_failed))
    codes: dict[tuple[str, int], int] = {}
    asked: list[tuple[str, int]] = []
    for t in request.topics:
        readable = ctx.allowed("read", "topic", t.name)
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if not readable:
                codes[tp] = ErrorCode.topic_authorization_failed
            elif not _has_partition(ctx, *tp):
                codes[tp] = ErrorCode.unknown_topic_or_partition
            else:
                asked.append(tp)
    try:
        outcome = await asyncio.to_thread(ctx.broker.delete_offsets, request.group_id, asked)
    except LkstreamError as exc:
        return kio_codec.encode(kio_codec.make(response_cls, error_code=group_error(exc)))
    codes.update({tp: 0 if refused is None else group_error(refused) for tp, refused in outcome.items()})
    topics = partition_codes(response_cls, request.topics, codes.__getitem__)
    return kio_codec.encode(kio_codec.make(response_cls, error_code=0, topics=topics))


def _has_partition(ctx: RequestContext, topic: str, partition: int) -> bool:
    try:
        return 0 <= partition < ctx.broker.partitions_for(topic)
    except LkstreamError:  # an unknown topic, or a name no topic may have
        return False
