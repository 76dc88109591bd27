"""OffsetCommit and OffsetFetch: committed offsets as Kafka's clients expect them (issue 24).

Kafka's rules, which its clients' own integration suites check:

* any offset is accepted, above the high watermark or below the committed one (the
  consumer's ``auto.offset.reset`` handles an offset past the log on fetch);
* a commit's metadata string is stored and returned by OffsetFetch; one longer than
  ``offset_metadata_max_bytes`` (Kafka's ``offset.metadata.max.bytes``, 4096) is refused for
  that partition alone (OFFSET_METADATA_TOO_LARGE), the others are committed;
* a commit with a negative generation (member epoch) into a group with no live member is a
  consumer outside any membership (``assign()``, the admin client) and is accepted whatever
  member id it names (Kafka's ``validateOffsetCommit``, both group types);
* otherwise the member and its generation are checked by the coordinator that holds the
  group: the classic one (Kafka clients' JoinGroup) or LKSTREAM's (KIP-848 members).

Access (docs/kafka.md, "Security"): OffsetCommit needs ``read`` on the group and on each
topic (TOPIC_AUTHORIZATION_FAILED for the others), and a standalone commit that moves an
offset back is an offset reset: ``admin`` on the cluster; OffsetFetch needs ``describe`` on
the group and answers only topics the principal may describe.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from lkstream.broker.groups.offset_commits import Committed
from lkstream.broker.groups.types import TopicPartition
from lkstream.errors import (
    InvalidArgumentError,
    LkstreamError,
    OffsetMetadataTooLargeError,
    StaleGenerationError,
    UnknownMemberError,
)
from lkstream.kafka import kio_codec
from lkstream.kafka.context import RequestContext
from lkstream.kafka.errors import error_code
from lkstream.kafka.protocol import ApiKey, RequestHeader
from lkstream.kafka.security import CLUSTER_RESOURCE

__all__ = ["group_error", "offset_commit", "offset_fetch", "partition_codes"]


def group_error(error: LkstreamError) -> ErrorCode:
    """The Kafka code of a group call's refusal (a group id no Kafka client may use: INVALID_GROUP_ID)."""
    if isinstance(error, InvalidArgumentError) and str(error).startswith("invalid group id"):
        return ErrorCode.invalid_group_id
    return error_code(error)


async def offset_commit(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    request = kio_codec.decode_request(ApiKey.OFFSET_COMMIT, header.api_version, frame, header.body_offset)
    response_cls = kio_codec.response_type(ApiKey.OFFSET_COMMIT, header.api_version)
    generation = getattr(request, "generation_id_or_member_epoch", getattr(request, "generation_id", -1))
    codes = _refusals(ctx, request)
    offsets: dict[TopicPartition, int] = {}
    notes: dict[TopicPartition, str] = {}
    for t in request.topics:
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if tp in codes:
                continue
            note = p.committed_metadata or ""
            try:
                ctx.broker.groups.limits.check_metadata(request.group_id, t.name, p.partition_index, note)
            except OffsetMetadataTooLargeError:
                codes[tp] = ErrorCode.offset_metadata_too_large
                continue
            offsets[tp] = p.committed_offset
            if note:
                notes[tp] = note
    code = await _commit(ctx, request, generation, offsets, notes) if offsets else 0
    topics = partition_codes(response_cls, request.topics, lambda tp: codes.get(tp, code))
    return kio_codec.encode(kio_codec.make(response_cls, topics=topics))


def partition_codes(
    response_cls: Any, asked: Iterable[Any], code_of: Callable[[TopicPartition], int]
) -> tuple[Any, ...]:
    """The ``topics`` of an answer with one error code per partition the request ``asked`` for, in its
    order (OffsetCommit, OffsetDelete)."""
    topic_cls = kio_codec.item_type(response_cls, "topics")
    partition_cls = kio_codec.item_type(topic_cls, "partitions")
    return tuple(
        kio_codec.make(
            topic_cls,
            name=t.name,
            partitions=tuple(
                kio_codec.make(
                    partition_cls, partition_index=p.partition_index, error_code=code_of((t.name, p.partition_index))
                )
                for p in t.partitions
            ),
        )
        for t in asked
    )


def _refusals(ctx: RequestContext, request: Any) -> dict[TopicPartition, int]:
    """Per partition, the error code of those the principal may not commit (``read`` on group and topic)."""
    group_allowed = ctx.allowed("read", "group", request.group_id)
    refused: dict[TopicPartition, int] = {}
    for t in request.topics:
        if not group_allowed:
            code = ErrorCode.group_authorization_failed
        elif not ctx.allowed("read", "topic", t.name):
            code = ErrorCode.topic_authorization_failed
        else:
            continue
        refused.update({(t.name, p.partition_index): code for p in t.partitions})
    return refused


async def _commit(
    ctx: RequestContext,
    request: Any,
    generation: int,
    offsets: dict[TopicPartition, int],
    notes: dict[TopicPartition, str],
) -> int:
    """One error code for the whole commit (but refused partitions): Kafka's clients treat a commit as a unit too."""
    group, member_id = request.group_id, request.member_id
    coordinator = ctx.broker.groups
    in_lkstream = bool(member_id) and coordinator.member_topics(group, member_id) is not None
    try:
        if generation < 0 and not ctx.server.groups.has_members(group) and not coordinator.has_members(group):
            # A consumer outside any membership (assign(), the admin client): Kafka accepts it into an
            # empty group, whatever member id it names (a KIP-848 consumer names its own).
            if not _may_rewind(ctx, group, offsets):
                return ErrorCode.cluster_authorization_failed
            await asyncio.to_thread(coordinator.commit_unfenced, group, offsets, metadata=notes, any_offset=True)
        elif in_lkstream:
            # A member of LKSTREAM's coordinator (KIP-848): fenced there by owner, generation and ownership.
            # The journal write fsyncs: off the event loop.
            await asyncio.to_thread(
                coordinator.commit,
                group,
                member_id,
                generation,
                offsets,
                owner=ctx.owner,
                metadata=notes,
                any_offset=True,
            )
        else:
            instance_id = getattr(request, "group_instance_id", None)
            ctx.server.groups.check_commit(group, member_id, generation, instance_id, owner=ctx.owner)
            await asyncio.to_thread(coordinator.commit_unfenced, group, offsets, metadata=notes, any_offset=True)
    except StaleGenerationError:
        return ErrorCode.stale_member_epoch if in_lkstream else ErrorCode.illegal_generation
    except UnknownMemberError as exc:
        return group_error(exc)
    except (LkstreamError, KeyError) as exc:
        if isinstance(exc, InvalidArgumentError) and "partition" in str(exc):
            return ErrorCode.unknown_topic_or_partition
        return group_error(exc) if isinstance(exc, LkstreamError) else ErrorCode.unknown_topic_or_partition
    return 0


def _may_rewind(ctx: RequestContext, group: str, offsets: dict[TopicPartition, int]) -> bool:
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
        committed = ctx.broker.groups.fetch_committed_metadata(group)
    except LkstreamError as exc:
        return kio_codec.encode(kio_codec.make(response_cls, topics=(), error_code=group_error(exc)))
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


def _fetched_partition(
    ctx: RequestContext, partition_cls: Any, committed: dict[TopicPartition, Committed], topic: str, pid: int
) -> Any:
    allowed = ctx.allowed("describe", "topic", topic)
    found = committed.get((topic, pid)) if allowed else None
    return kio_codec.make(
        partition_cls,
        partition_index=pid,
        committed_offset=-1 if found is None else found.offset,
        committed_leader_epoch=-1,
        metadata="" if found is None else found.metadata,
        error_code=0 if allowed else ErrorCode.topic_authorization_failed,
    )
