"""The data path: Produce, Fetch, ListOffsets and InitProducerId.

Produce appends each partition's batch through
:meth:`~lkstream.broker.Broker.begin_produce_batch` (the broker validates the
batch and the log checks idempotent-producer sequences), all before the
handler first awaits, so pipelined requests append in order; it then awaits
the acknowledgements (the fsync in ``sync`` mode). Fetch reads raw batches and
long-polls with :meth:`~lkstream.broker.Broker.wait_for_data`, woken by the
append, until ``min_bytes`` arrived or ``max_wait_ms`` passed.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kio.schema.errors import ErrorCode

from lkstream.broker.acks import Acknowledgement
from lkstream.errors import InvalidArgumentError, LkstreamError
from lkstream.kafka import kio_codec
from lkstream.kafka.context import RequestContext
from lkstream.kafka.errors import error_code
from lkstream.kafka.hot import (
    FetchPartitionResult,
    ProducePartition,
    ProducePartitionResult,
    encode_fetch_response,
    encode_produce_response,
    parse_produce_request,
)
from lkstream.kafka.protocol import ApiKey, RequestHeader

#: ListOffsets timestamps with a special meaning (Kafka's ListOffsetsRequest constants).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
#: A long poll never waits longer than this, whatever the client asks.
MAX_FETCH_WAIT_S = 30.0


def _partition_error(error: Exception) -> ErrorCode:
    # A partition index the topic does not have is Kafka's UNKNOWN_TOPIC_OR_PARTITION, not a bad request.
    if isinstance(error, InvalidArgumentError) and "does not exist" in str(error):
        return ErrorCode.unknown_topic_or_partition
    return error_code(error)


async def produce(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes | None:
    request = parse_produce_request(frame, header.body_offset)
    broker = ctx.broker
    results: list[tuple[str, list[ProducePartitionResult]]] = []
    pending: list[tuple[ProducePartitionResult, Acknowledgement]] = []
    for topic, partitions in request.topics:
        refused = _write_refused(ctx, topic)
        answers = [ProducePartitionResult(part.partition, 0, -1, -1) for part in partitions]
        for part, answer in zip(partitions, answers, strict=True):
            ack = _append(ctx, topic, part, answer, transactional_id=request.transactional_id, refused=refused)
            if ack is not None:
                pending.append((answer, ack))
        results.append((topic, answers))
    for answer, ack in pending:
        try:
            await ack.wait()
        except LkstreamError as exc:  # the fsync failed: the records are not acknowledged
            answer.error_code, answer.error_message, answer.base_offset = error_code(exc), str(exc)[:500], -1
    if request.acks == 0:
        return None
    for topic, answers in results:
        for answer in answers:
            if answer.error_code == 0:
                answer.log_start_offset = broker.partition(topic, answer.partition).log_start_offset
    return encode_produce_response(header.api_version, results)


def _write_refused(ctx: RequestContext, topic: str) -> int:
    """The error code of a Produce to ``topic`` the principal may not make (0 when it may).

    Write on the topic, and a topic that is missing is not auto-created without create on it
    (UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers a produce to a topic it did not create).
    """
    if not ctx.allowed("write", "topic", topic):
        return ErrorCode.topic_authorization_failed
    if ctx.broker.config.auto_create_topics and not ctx.allowed("create", "topic", topic):
        try:
            ctx.broker.partitions_for(topic)
        except LkstreamError:
            return ErrorCode.unknown_topic_or_partition
    return 0


def _append(
    ctx: RequestContext,
    topic: str,
    part: ProducePartition,
    answer: ProducePartitionResult,
    *,
    transactional_id: str | None,
    refused: int,
) -> Acknowledgement | None:
    """Append one partition's batch now; the acknowledgement to await, or None (``answer`` holds the error)."""
    if transactional_id is not None:
        answer.error_code, answer.error_message = ErrorCode.invalid_request, "transactions are not supported"
    elif refused:
        answer.error_code = refused
    elif part.records is None:
        answer.error_code, answer.error_message = ErrorCode.invalid_record, "no records"
    else:
        try:
            (answer.base_offset, _last), ack = ctx.broker.begin_produce_batch(topic, part.partition, part.records)
            return ack
        except LkstreamError as exc:
            answer.error_code, answer.error_message = _produce_error(exc), str(exc)[:500]
    return None


def _produce_error(error: LkstreamError) -> ErrorCode:
    if isinstance(error, InvalidArgumentError) and "rejected producer batch" in str(error):
        return ErrorCode.invalid_record  # the broker's batch validation refused it
    return _partition_error(error)


async def fetch(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    request = kio_codec.decode_request(ApiKey.FETCH, header.api_version, frame, header.body_offset)
    wanted = [
        (t.topic, p.partition, p.fetch_offset, p.partition_max_bytes, ctx.allowed("read", "topic", t.topic))
        for t in request.topics
        for p in t.partitions
    ]
    deadline = time.monotonic() + min(request.max_wait.total_seconds(), MAX_FETCH_WAIT_S)
    while True:
        answers, total, idle = _read_all(ctx, wanted, request.max_bytes)
        remaining = deadline - time.monotonic()
        if total >= request.min_bytes or remaining <= 0 or not idle:
            break
        if not await ctx.broker.wait_for_data(idle, timeout=remaining):
            answers, total, idle = _read_all(ctx, wanted, request.max_bytes)
            break
    grouped: dict[str, list[FetchPartitionResult]] = {}
    for topic, answer in answers:
        grouped.setdefault(topic, []).append(answer)
    return encode_fetch_response(header.api_version, list(grouped.items()))


def _read_all(
    ctx: RequestContext, wanted: list[tuple[str, int, int, int, bool]], max_bytes: int
) -> tuple[list[tuple[str, FetchPartitionResult]], int, dict[tuple[str, int], int]]:
    """Read every partition once: the answers, the bytes read, and the partitions worth waiting on."""
    broker = ctx.broker
    answers = []
    total = 0
    idle: dict[tuple[str, int], int] = {}
    for topic, pid, offset, partition_max, allowed in wanted:
        answer = FetchPartitionResult(pid, 0, -1, -1, None)
        answers.append((topic, answer))
        if not allowed:
            answer.error_code = ErrorCode.topic_authorization_failed
            continue
        try:
            budget = min(partition_max, max_bytes - total)
            if budget <= 0:
                partition = broker.partition(topic, pid)
                answer.high_watermark, answer.log_start_offset = partition.high_watermark, partition.log_start_offset
                answer.records = b""
                continue
            read = broker.fetch(topic, pid, offset, budget)
        except (LkstreamError, KeyError) as exc:
            answer.error_code = _partition_error(exc)
            continue
        answer.high_watermark, answer.log_start_offset, answer.records = (
            read.high_watermark,
            read.log_start_offset,
            read.data,
        )
        total += len(read.data)
        if not read.data:
            idle[(topic, pid)] = offset
    return answers, total, idle


async def list_offsets(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    version = header.api_version
    request = kio_codec.decode_request(ApiKey.LIST_OFFSETS, version, frame, header.body_offset)
    response_cls = kio_codec.response_type(ApiKey.LIST_OFFSETS, version)
    topic_cls = kio_codec.item_type(response_cls, "topics")
    partition_cls = kio_codec.item_type(topic_cls, "partitions")
    topics = []
    for topic in request.topics:
        allowed = ctx.allowed("describe", "topic", topic.name)
        partitions = []
        for p in topic.partitions:
            code, timestamp, offset = _list_offset(ctx, topic.name, p.partition_index, p.timestamp, allowed)
            partitions.append(
                kio_codec.make(
                    partition_cls,
                    partition_index=p.partition_index,
                    error_code=code,
                    timestamp=timestamp,
                    offset=offset,
                    leader_epoch=0,
                )
            )
        topics.append(kio_codec.make(topic_cls, name=topic.name, partitions=tuple(partitions)))
    return kio_codec.encode(kio_codec.make(response_cls, topics=tuple(topics)))


def _list_offset(ctx: RequestContext, topic: str, pid: int, timestamp: Any, allowed: bool) -> tuple[int, int, int]:
    """``(error_code, timestamp, offset)`` for one partition; -1/-1 when no record is at or after ``timestamp``."""
    if not allowed:
        return ErrorCode.topic_authorization_failed, -1, -1
    broker = ctx.broker
    try:
        partition = broker.partition(topic, pid)
        ts = int(timestamp.timestamp() * 1000) if hasattr(timestamp, "timestamp") else int(timestamp)
        if ts == LATEST_TIMESTAMP:
            return 0, -1, partition.high_watermark
        if ts == EARLIEST_TIMESTAMP:
            return 0, -1, partition.log_start_offset
        if ts == MAX_TIMESTAMP:
            ts = 0  # no per-log max-timestamp tracking across segments here: the last record stands in
            high = partition.high_watermark
            if high == partition.log_start_offset:
                return 0, -1, -1
            record = broker.read_from(topic, pid, high - 1, max_msgs=1)
            return 0, record[0].timestamp, high - 1
        if ts < 0:
            return ErrorCode.invalid_request, -1, -1
        offset = broker.offset_for_timestamp(topic, pid, ts)
        if offset >= partition.high_watermark:
            return 0, -1, -1
        found = broker.read_from(topic, pid, offset, max_msgs=1)
        return 0, (found[0].timestamp if found else -1), offset
    except (LkstreamError, KeyError) as exc:
        return _partition_error(exc), -1, -1


async def init_producer_id(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    request = kio_codec.decode_request(ApiKey.INIT_PRODUCER_ID, header.api_version, frame, header.body_offset)
    response_cls = kio_codec.response_type(ApiKey.INIT_PRODUCER_ID, header.api_version)
    code: int
    if request.transactional_id is not None:
        # Transactions are out of scope (single node, no transaction coordinator): say so clearly.
        code, producer_id, epoch = ErrorCode.transactional_id_authorization_failed, -1, -1
    elif not ctx.allowed_any("write", "topic"):
        # An idempotent producer needs write on some topic (Kafka 3.0+, KIP-679), not a cluster permission.
        code, producer_id, epoch = ErrorCode.cluster_authorization_failed, -1, -1
    else:
        producer_id, epoch = await asyncio.to_thread(ctx.broker.init_producer_id)  # may fsync a block
        code = 0
    return kio_codec.encode(
        kio_codec.make(response_cls, error_code=code, producer_id=producer_id, producer_epoch=epoch)
    )
