"""Cluster and admin APIs: ApiVersions, Metadata, CreateTopics, DeleteTopics, CreatePartitions, DescribeCluster,
ListPartitionReassignments (the config APIs are :mod:`lkstream.kafka.handlers.configs`).

This is a single-node cluster: one broker (node 0, the advertised host and
port) leads every partition, with itself as the only replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from lkstream.errors import LkstreamError
from lkstream.kafka import kio_codec
from lkstream.kafka.context import CLUSTER_ID, NODE_ID, RequestContext
from lkstream.kafka.errors import error_code
from lkstream.kafka.protocol import ApiKey, RequestHeader
from lkstream.kafka.security import CLUSTER_RESOURCE
from lkstream.kafka.topic_ids import NIL
from lkstream.security.principal import requester_of

_UNKNOWN_OPERATIONS = -(2**31)  # Kafka's "authorized operations not requested"


async def api_versions(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    keys = sorted(ctx.server.versions.items())
    if header.api_version > ctx.server.versions[ApiKey.API_VERSIONS][1]:
        # KIP-511: a version we do not know is answered in the v0 layout, so the client can read
        # UNSUPPORTED_VERSION and the list, then retry with a version from it.
        body = [struct.pack(">hi", ErrorCode.unsupported_version.value, len(keys))]
        body += [struct.pack(">hhh", key, low, high) for key, (low, high) in keys]
        return b"".join(body)
    response_cls = kio_codec.response_type(ApiKey.API_VERSIONS, header.api_version)
    version_cls = kio_codec.item_type(response_cls, "api_keys")
    return kio_codec.encode(
        kio_codec.make(
            response_cls,
            error_code=0,
            api_keys=tuple(
                kio_codec.make(version_cls, api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in keys
            ),
            finalized_features_epoch=-1,
        )
    )


async def metadata(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    version = header.api_version
    request = kio_codec.decode_request(ApiKey.METADATA, version, frame, header.body_offset)
    unknown_ids: tuple[uuid.UUID, ...] = ()
    if request.topics is None or (version == 0 and not request.topics):
        names: tuple[str, ...] | None = None  # all topics
    else:
        # v10+ may name a topic by id instead (name null): resolved here, unknown ids answered apart.
        resolved = [t.name if t.name is not None else ctx.server.topic_ids.name_of(t.topic_id) for t in request.topics]
        names = tuple(name for name in resolved if name is not None)
        unknown_ids = tuple(t.topic_id for t, name in zip(request.topics, resolved, strict=True) if name is None)
    auto_create = bool(getattr(request, "allow_auto_topic_creation", True))
    if auto_create and names:
        missing = [name for name in names if not _exists(ctx, name)]
        if missing and ctx.broker.config.auto_create_topics:  # admin work: off the event loop (issue 12, finding 9)
            await asyncio.to_thread(_auto_create, ctx, missing)
    # Answers hold only what the principal may describe: the key names it and the ACLs in force.
    key = (version, names, unknown_ids, auto_create, str(ctx.principal), ctx.server.settings.acl_version())
    return ctx.server.metadata.get(key, lambda: _build_metadata(ctx, version, names, auto_create, unknown_ids))


def _build_metadata(
    ctx: RequestContext,
    version: int,
    names: tuple[str, ...] | None,
    auto_create: bool,
    unknown_ids: tuple[uuid.UUID, ...] = (),
) -> bytes:
    broker = ctx.broker
    response_cls = kio_codec.response_type(ApiKey.METADATA, version)
    broker_cls = kio_codec.item_type(response_cls, "brokers")
    topic_cls = kio_codec.item_type(response_cls, "topics")
    partition_cls = kio_codec.item_type(topic_cls, "partitions")
    listed = (
        names if names is not None else tuple(t for t in broker.list_topics() if ctx.allowed("describe", "topic", t))
    )
    topics = []
    for name in listed:
        code, count = _topic_partitions(ctx, name, auto_create and names is not None)
        partitions = tuple(
            kio_codec.make(
                partition_cls,
                error_code=0,
                partition_index=pid,
                leader_id=NODE_ID,
                leader_epoch=0,
                replica_nodes=(NODE_ID,),
                isr_nodes=(NODE_ID,),
                offline_replicas=(),
            )
            for pid in range(count)
        )
        topics.append(
            kio_codec.make(
                topic_cls,
                error_code=code,
                name=name,
                topic_id=ctx.server.topic_ids.id_of(name) if code == 0 else NIL,
                is_internal=False,
                partitions=partitions,
                topic_authorized_operations=_UNKNOWN_OPERATIONS,
            )
        )
    for topic_id in unknown_ids:
        topics.append(
            kio_codec.make(
                topic_cls,
                error_code=ErrorCode.unknown_topic_id,
                name=None,
                topic_id=topic_id,
                is_internal=False,
                partitions=(),
                topic_authorized_operations=_UNKNOWN_OPERATIONS,
            )
        )
    node = kio_codec.make(
        broker_cls, node_id=NODE_ID, host=ctx.server.advertised_host, port=ctx.server.advertised_port, rack=None
    )
    return kio_codec.encode(
        kio_codec.make(
            response_cls,
            brokers=(node,),
            cluster_id=CLUSTER_ID,
            controller_id=NODE_ID,
            topics=tuple(topics),
            cluster_authorized_operations=_UNKNOWN_OPERATIONS,
        )
    )


def _topic_partitions(ctx: RequestContext, name: str, auto_create: bool) -> tuple[int, int]:
    """``(error_code, partition count)`` of a topic a client asked for by name."""
    if not ctx.allowed("describe", "topic", name):
        return ErrorCode.topic_authorization_failed, 0
    broker = ctx.broker
    try:
        return 0, broker.partitions_for(name)
    except KeyError:
        pass
    except LkstreamError as exc:
        return _topic_error(exc), 0
    if not (auto_create and broker.config.auto_create_topics and ctx.allowed("create", "topic", name)):
        return ErrorCode.unknown_topic_or_partition, 0
    try:
        broker.auto_create_topic(name, requester=requester_of(ctx.principal, ctx.client_host))
    except LkstreamError as exc:  # throttled (THROTTLING_QUOTA_EXCEEDED), max_partitions (POLICY_VIOLATION), ...
        return _topic_error(exc), 0
    # Kafka answers LEADER_NOT_AVAILABLE right after an auto-create; here the topic is ready at once.
    return 0, broker.partitions_for(name)


def _exists(ctx: RequestContext, name: str) -> bool:
    try:
        ctx.broker.partitions_for(name)
    except LkstreamError:
        return False
    return True


def _auto_create(ctx: RequestContext, names: list[str]) -> None:
    """Create the topics a Metadata request may auto-create; failures are reported by the answer built next.

    As Kafka: only a topic the principal may describe (else the answer is TOPIC_AUTHORIZATION_FAILED
    and nothing may change) and create.
    """
    for name in names:
        if ctx.allowed("describe", "topic", name) and ctx.allowed("create", "topic", name):
            with contextlib.suppress(LkstreamError):  # per caller's budget (issue 28, finding 6)
                ctx.broker.auto_create_topic(name, requester=requester_of(ctx.principal, ctx.client_host))


def _topic_error(error: LkstreamError) -> ErrorCode:
    code = error_code(error)
    return ErrorCode.invalid_topic_exception if code == ErrorCode.invalid_request else code


async def create_topics(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    version = header.api_version
    request = kio_codec.decode_request(ApiKey.CREATE_TOPICS, version, frame, header.body_offset)
    response_cls = kio_codec.response_type(ApiKey.CREATE_TOPICS, version)
    result_cls = kio_codec.item_type(response_cls, "topics")
    results = []
    for topic in request.topics:
        code, message, partitions = await _create_topic(ctx, topic, bool(request.validate_only))
        results.append(
            kio_codec.make(
                result_cls,
                name=topic.name,
                error_code=code,
                error_message=message,
                topic_config_error_code=0,
                num_partitions=partitions,
                replication_factor=1,
                configs=None if code else (),
            )
        )
    return kio_codec.encode(kio_codec.make(response_cls, topics=tuple(results)))


async def _create_topic(ctx: RequestContext, topic: Any, validate_only: bool) -> tuple[int, str | None, int]:
    if not ctx.allowed("create", "topic", topic.name):
        return ErrorCode.topic_authorization_failed, None, -1
    if topic.replication_factor not in (-1, 1):
        return ErrorCode.invalid_replication_factor, "a single-node LKSTREAM has replication factor 1", -1
    if topic.assignments:
        return ErrorCode.invalid_request, "manual replica assignment is not supported", -1
    partitions = ctx.broker.config.partitions if topic.num_partitions == -1 else topic.num_partitions
    if partitions < 1:
        return ErrorCode.invalid_partitions, f"num_partitions must be >= 1, got {partitions}", -1
    configs: dict[str, str | None] = {}
    for config in topic.configs:
        if config.name in configs:
            return ErrorCode.invalid_config, f"topic config {config.name!r} is given twice", -1
        configs[config.name] = config.value
    try:
        # Everything a create checks (configs, name, existence, the partition limit), creating nothing.
        ctx.broker.validate_topic_creation(topic.name, partitions, configs=configs)
        if not validate_only:  # creating directories and fsyncing them: off the event loop
            await asyncio.to_thread(ctx.broker.create_topic, topic.name, partitions, configs=configs)
    except LkstreamError as exc:
        return _topic_error(exc), str(exc), -1
    return 0, None, partitions


async def delete_topics(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    version = header.api_version
    request = kio_codec.decode_request(ApiKey.DELETE_TOPICS, version, frame, header.body_offset)
    response_cls = kio_codec.response_type(ApiKey.DELETE_TOPICS, version)
    result_cls = kio_codec.item_type(response_cls, "responses")
    results = []
    for name in request.topic_names:
        code, message = 0, None
        if not ctx.allowed("delete", "topic", name):
            code = ErrorCode.topic_authorization_failed
        else:
            try:
                await asyncio.to_thread(ctx.broker.delete_topic, name)
            except (LkstreamError, KeyError) as exc:
                code, message = (
                    ErrorCode.unknown_topic_or_partition if isinstance(exc, KeyError) else _topic_error(exc),
                    str(exc),
                )
        results.append(kio_codec.make(result_cls, name=name, error_code=code, error_message=message))
    return kio_codec.encode(kio_codec.make(response_cls, responses=tuple(results)))


async def create_partitions(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    version = header.api_version
    request = kio_codec.decode_request(ApiKey.CREATE_PARTITIONS, version, frame, header.body_offset)
    response_cls = kio_codec.response_type(ApiKey.CREATE_PARTITIONS, version)
    result_cls = kio_codec.item_type(response_cls, "results")
    results = []
    for topic in request.topics:
        code, message = await _create_partitions(ctx, topic.name, topic.count, bool(request.validate_only))
        results.append(kio_codec.make(result_cls, name=topic.name, error_code=code, error_message=message))
    return kio_codec.encode(kio_codec.make(response_cls, results=tuple(results)))


async def _create_partitions(ctx: RequestContext, name: str, count: int, validate_only: bool) -> tuple[int, str | None]:
    # Kafka asks ALTER on the topic; LKSTREAM's ACLs have no alter: growing a topic is creating partitions.
    if not ctx.allowed("create", "topic", name):
        return ErrorCode.topic_authorization_failed, None
    try:
        current = ctx.broker.partitions_for(name)
    except (LkstreamError, KeyError) as exc:
        return ErrorCode.unknown_topic_or_partition, str(exc)
    if count <= current:
        return ErrorCode.invalid_partitions, f"topic {name!r} has {current} partitions; the new count must be larger"
    if validate_only:
        return 0, None
    try:
        await asyncio.to_thread(ctx.broker.create_partitions, name, count)
    except LkstreamError as exc:
        return error_code(exc), str(exc)
    return 0, None


async def describe_cluster(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    """DescribeCluster (60): this one node, as Metadata reports it (Kafka's admin clients ask it first)."""
    version = header.api_version
    request = kio_codec.decode_request(ApiKey.DESCRIBE_CLUSTER, version, frame, header.body_offset)
    response_cls = kio_codec.response_type(ApiKey.DESCRIBE_CLUSTER, version)
    if int(getattr(request, "endpoint_type", 1)) != 1:  # 2: controllers, which KRaft clients reach apart
        return kio_codec.encode(
            kio_codec.make(
                response_cls,
                error_code=ErrorCode.unsupported_endpoint_type,
                error_message="only the brokers endpoint is served",
                cluster_id=CLUSTER_ID,
                brokers=(),
            )
        )
    broker_cls = kio_codec.item_type(response_cls, "brokers")
    node = kio_codec.make(
        broker_cls, broker_id=NODE_ID, host=ctx.server.advertised_host, port=ctx.server.advertised_port, rack=None
    )
    return kio_codec.encode(
        kio_codec.make(
            response_cls,
            error_code=0,
            error_message=None,
            endpoint_type=1,
            cluster_id=CLUSTER_ID,
            controller_id=NODE_ID,
            brokers=(node,),
            cluster_authorized_operations=_UNKNOWN_OPERATIONS,
        )
    )


async def list_partition_reassignments(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    """ListPartitionReassignments (46): none are ever under way on a single node."""
    version = header.api_version
    kio_codec.decode_request(ApiKey.LIST_PARTITION_REASSIGNMENTS, version, frame, header.body_offset)
    response_cls = kio_codec.response_type(ApiKey.LIST_PARTITION_REASSIGNMENTS, version)
    if not ctx.allowed("describe", "cluster", CLUSTER_RESOURCE):
        return kio_codec.encode(
            kio_codec.make(
                response_cls, error_code=ErrorCode.cluster_authorization_failed, error_message=None, topics=()
            )
        )
    return kio_codec.encode(kio_codec.make(response_cls, error_code=0, error_message=None, topics=()))
