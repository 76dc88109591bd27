"""Group APIs: FindCoordinator, Join/Sync/Heartbeat/LeaveGroup, OffsetCommit/Fetch, List/Describe/DeleteGroups.

Membership is :class:`~lkstream.broker.groups.classic.ClassicGroups` (Kafka's
client-side assignment); committed offsets go through the broker's group
coordinator into the offsets journal, so ``lkstream groups`` and LKSTREAM
consumers see them. This node coordinates every group.

Access (docs/kafka.md, "Security"): FindCoordinator and DescribeGroups need
``describe`` on the group, the member APIs ``read`` on it, and only the principal
that joined may use a member id (``owner``); OffsetCommit needs ``read`` on the
group and on each topic (TOPIC_AUTHORIZATION_FAILED for the others), and a
standalone commit that moves an offset back is an offset reset: ``admin`` on the
cluster; OffsetFetch needs ``describe`` on the group and answers only topics the
principal may describe; ListGroups lists only groups it may describe.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from lkstream.broker.groups.classic import MemberIdRequiredError
from lkstream.errors import InvalidArgumentError, LkstreamError, StaleGenerationError
from lkstream.kafka import kio_codec
from lkstream.kafka.context import NODE_ID, RequestContext
from lkstream.kafka.errors import error_code
from lkstream.kafka.protocol import ApiKey, RequestHeader
from lkstream.kafka.security import CLUSTER_RESOURCE

_COORDINATOR_GROUP = 0  # FindCoordinator key_type: group (1 is transaction)


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000) if isinstance(value, datetime.timedelta) else int(value)


def _group_error(error: LkstreamError) -> ErrorCode:
    if isinstance(error, InvalidArgumentError) and "group" in str(error).lower():
        return ErrorCode.invalid_group_id
    return error_code(error)


async def find_coordinator(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    request = kio_codec.decode_request(ApiKey.FIND_COORDINATOR, header.api_version, frame, header.body_offset)
    response_cls = kio_codec.response_type(ApiKey.FIND_COORDINATOR, header.api_version)
    key_type = getattr(request, "key_type", _COORDINATOR_GROUP)
    if key_type == _COORDINATOR_GROUP and not ctx.allowed("describe", "group", request.key):
        return kio_codec.encode(
            kio_codec.make(
                response_cls,
                error_code=ErrorCode.group_authorization_failed,
                error_message=None,
                node_id=-1,
                host="",
                port=-1,
            )
        )
    if key_type != _COORDINATOR_GROUP:
        return kio_codec.encode(
            kio_codec.make(
                response_cls,
                error_code=ErrorCode.coordinator_not_available,
                error_message="transactions are not supported",
                node_id=-1,
                host="",
                port=-1,
            )
        )
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
        future = ctx.server.groups.join(
            request.group_id,
            member_id=request.member_id,
            instance_id=getattr(request, "group_instance_id", None),
            protocol_type=request.protocol_type,
            protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=_ms(getattr(request, "rebalance_timeout", session_ms)),
            client_id=header.client_id,
            client_host=ctx.client_host,
            require_known_member_id=version >= 4,
            owner=ctx.owner,
        )
        joined = await asyncio.wrap_future(future)
    except MemberIdRequiredError as exc:
        return answer(ErrorCode.member_id_required, member_id=exc.member_id)
    except LkstreamError as exc:
        return answer(_group_error(exc), member_id=request.member_id)
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
    protocol_type = group.protocol_type if group else None
    protocol = group.protocol if group else None
    code: int
    if not ctx.allowed("read", "group", request.group_id):
        code, assignment = ErrorCode.group_authorization_failed, b""
    else:
        try:
            future = ctx.server.groups.sync(
                request.group_id,
                request.member_id,
                request.generation_id,
                {a.member_id: bytes(a.assignment) for a in request.assignments},
                getattr(request, "group_instance_id", None),
                owner=ctx.owner,
            )
            code, assignment = 0, await asyncio.wrap_future(future)
        except LkstreamError as exc:
            code, assignment = _group_error(exc), b""
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
            ctx.server.groups.heartbeat(
                request.group_id,
                request.member_id,
                request.generation_id,
                getattr(request, "group_instance_id", None),
                owner=ctx.owner,
            )
        except LkstreamError as exc:
            code = _group_error(exc)
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
    results = ctx.server.groups.leave(request.group_id, leaving, owner=ctx.owner)
    codes = [0 if r is None else _group_error(r) for r in results]
    if header.api_version < 3:
        return kio_codec.encode(kio_codec.make(response_cls, error_code=codes[0]))
    member_cls = kio_codec.item_type(response_cls, "members")
    members = tuple(
        kio_codec.make(member_cls, member_id=mid, group_instance_id=iid, error_code=code)
        for (mid, iid), code in zip(leaving, codes, strict=True)
    )
    return kio_codec.encode(kio_codec.make(response_cls, error_code=0, members=members))


async def offset_commit(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    request = kio_codec.decode_request(ApiKey.OFFSET_COMMIT, header.api_version, frame, header.body_offset)
    response_cls = kio_codec.response_type(ApiKey.OFFSET_COMMIT, header.api_version)
    topic_cls = kio_codec.item_type(response_cls, "topics")
    partition_cls = kio_codec.item_type(topic_cls, "partitions")
    generation = getattr(request, "generation_id_or_member_epoch", getattr(request, "generation_id", -1))
    refused = _commit_refusals(ctx, request)
    code = await _commit(ctx, request, generation, refused)
    topics = tuple(
        kio_codec.make(
            topic_cls,
            name=t.name,
            partitions=tuple(
                kio_codec.make(partition_cls, partition_index=p.partition_index, error_code=refused.get(t.name, code))
                for p in t.partitions
            ),
        )
        for t in request.topics
    )
    return kio_codec.encode(kio_codec.make(response_cls, topics=topics))


def _commit_refusals(ctx: RequestContext, request: Any) -> dict[str, int]:
    """Per topic, the error code of partitions the principal may not commit (``read`` on group and topic)."""
    if not ctx.allowed("read", "group", request.group_id):
        return {t.name: ErrorCode.group_authorization_failed for t in request.topics}
    return {
        t.name: ErrorCode.topic_authorization_failed for t in request.topics if not ctx.allowed("read", "topic", t.name)
    }


async def _commit(ctx: RequestContext, request: Any, generation: int, refused: dict[str, int]) -> int:
    """One error code for the whole commit (but ``refused`` topics): Kafka's clients treat a commit as a unit too."""
    group = request.group_id
    offsets = {
        (t.name, p.partition_index): p.committed_offset
        for t in request.topics
        if t.name not in refused
        for p in t.partitions
    }
    if not offsets:
        return 0
    try:
        if _in_lkstream_coordinator(ctx, group, request.member_id):
            # A KIP-848 member (ConsumerGroupHeartbeat): fenced by LKSTREAM's coordinator, which
            # checks that the member owns the partitions and commits with its current epoch.
            # The journal write fsyncs: off the event loop.
            await asyncio.to_thread(
                ctx.broker.groups.commit, group, request.member_id, generation, offsets, owner=ctx.owner
            )
            return 0
        member = ctx.server.groups.check_commit(
            group, request.member_id, generation, getattr(request, "group_instance_id", None), owner=ctx.owner
        )
        if not member and not _may_rewind(ctx, group, offsets):
            return ErrorCode.cluster_authorization_failed
        # The journal write fsyncs: off the event loop.
        await asyncio.to_thread(ctx.broker.groups.commit_unfenced, group, offsets)
    except StaleGenerationError:
        return (
            ErrorCode.stale_member_epoch
            if _in_lkstream_coordinator(ctx, group, request.member_id)
            else ErrorCode.illegal_generation
        )
    except (LkstreamError, KeyError) as exc:
        if isinstance(exc, InvalidArgumentError) and "partition" in str(exc):
            return ErrorCode.unknown_topic_or_partition
        return _group_error(exc) if isinstance(exc, LkstreamError) else ErrorCode.unknown_topic_or_partition
    return 0


def _in_lkstream_coordinator(ctx: RequestContext, group: str, member_id: str) -> bool:
    """Whether ``member_id`` is a live member of ``group`` in LKSTREAM's coordinator (a KIP-848 client)."""
    if not member_id or ctx.server.groups.has_members(group):
        return False
    try:
        return any(m.member_id == member_id for m in ctx.broker.groups.describe(group).members)
    except LkstreamError:
        return False


def _may_rewind(ctx: RequestContext, group: str, offsets: dict[tuple[str, int], int]) -> bool:
    """A standalone commit below a committed offset is an offset reset: it needs ``admin`` on the cluster."""
    if ctx.allowed("admin", "cluster", CLUSTER_RESOURCE):
        return True
    committed = ctx.broker.groups.fetch_committed(group, offsets)
    return all(offset >= committed.get(tp, offset) for tp, offset in offsets.items())


async def offset_fetch(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    request = kio_codec.decode_request(ApiKey.OFFSET_FETCH, header.api_version, frame, header.body_offset)
    response_cls = kio_codec.response_type(ApiKey.OFFSET_FETCH, header.api_version)
    topic_cls = kio_codec.item_type(response_cls, "topics")
    partition_cls = kio_codec.item_type(topic_cls, "partitions")
    group = request.group_id
    if not ctx.allowed("describe", "group", group):
        return kio_codec.encode(
            kio_codec.make(response_cls, topics=(), error_code=ErrorCode.group_authorization_failed)
        )
    try:
        committed = ctx.broker.groups.fetch_committed(group)
    except LkstreamError as exc:
        return kio_codec.encode(kio_codec.make(response_cls, topics=(), error_code=_group_error(exc)))
    if request.topics is None:
        wanted: dict[str, list[int]] = {}
        for topic, pid in sorted(committed):
            if ctx.allowed("describe", "topic", topic):  # all topics: those the principal may describe
                wanted.setdefault(topic, []).append(pid)
    else:
        wanted = {t.name: list(t.partition_indexes) for t in request.topics}
    topics = tuple(
        kio_codec.make(
            topic_cls,
            name=name,
            partitions=tuple(_fetched_partition(ctx, partition_cls, committed, name, pid) for pid in pids),
        )
        for name, pids in wanted.items()
    )
    return kio_codec.encode(kio_codec.make(response_cls, topics=topics, error_code=0))


def _fetched_partition(ctx: RequestContext, partition_cls: Any, committed: dict[Any, int], topic: str, pid: int) -> Any:
    allowed = ctx.allowed("describe", "topic", topic)
    return kio_codec.make(
        partition_cls,
        partition_index=pid,
        committed_offset=committed.get((topic, pid), -1) if allowed else -1,
        committed_leader_epoch=-1,
        metadata="",
        error_code=0 if allowed else ErrorCode.topic_authorization_failed,
    )


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
                    values["error_code"] = _group_error(exc)
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
                code = _group_error(exc)
        results.append(kio_codec.make(result_cls, group_id=name, error_code=code))
    return kio_codec.encode(kio_codec.make(response_cls, results=tuple(results)))


def _delete_group(ctx: RequestContext, name: str) -> int:
    return ErrorCode.group_id_not_found if ctx.broker.delete_group(name) is None else 0
