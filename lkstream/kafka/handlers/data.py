"""The data path: Produce, Fetch, ListOffsets and InitProducerId.

Produce appends each partition's batch through
:meth:`~lkstream.broker.Broker.begin_produce_batch` (the broker validates the
batch and the log checks idempotent-producer sequences), all before the
handler first awaits, so pipelined requests append in order; it then awaits
the acknowledgements (the fsync in ``sync`` mode). A Produce to a topic that
must be auto-created first creates it in a worker thread (admin work stays off
the event loop) and appends after that: :class:`AfterTopicCreation` tells the
connection to start nothing after it until it finished. Fetch reads raw batches and
long-polls with :meth:`~lkstream.broker.Broker.wait_for_data`, woken by the
append, until ``min_bytes`` arrived or ``max_wait_ms`` passed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from lkstream.broker.acks import Acknowledgement
from lkstream.broker.admission import SMALL_REQUEST_BYTES, Admission
from lkstream.errors import (
    InvalidArgumentError,
    LkstreamError,
    OverloadedError,
    UnknownTopicError,
)
from lkstream.format.batch import holds_records
from lkstream.kafka import kio_codec
from lkstream.kafka.context import RequestContext
from lkstream.kafka.errors import error_code
from lkstream.kafka.handlers.produce_fields import invalid_acks_answer
from lkstream.kafka.hot import (
    FetchPartitionResult,
    HeldResponse,
    ProducePartition,
    ProducePartitionResult,
    ProduceRequestData,
    encode_fetch_response,
    encode_produce_response,
    fetch_response_chunks,
    parse_produce_request,
)
from lkstream.kafka.protocol import ApiKey, RequestHeader
from lkstream.security.principal import requester_of
from lkstream.storage.ranges import FileRange

if TYPE_CHECKING:
    from lkstream.broker.broker import Broker

#: ListOffsets timestamps with a special meaning (Kafka's ListOffsetsRequest constants).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
#: A long poll never waits longer than this, whatever the client asks.
MAX_FETCH_WAIT_S = 30.0
#: A Fetch waits at least this long for room in the admission budget before answering no records.
_MIN_ADMISSION_WAIT_S = 0.1
#: What a Fetch holds before it reads: the smallest request the budget counts as record data.
_ROOM_TO_READ = SMALL_REQUEST_BYTES + 1


def _partition_error(error: Exception) -> ErrorCode:
    # A partition index the topic does not have is Kafka's UNKNOWN_TOPIC_OR_PARTITION, not a bad request.
    if isinstance(error, InvalidArgumentError) and "does not exist" in str(error):
        return ErrorCode.unknown_topic_or_partition
    return error_code(error)


@dataclass(frozen=True, slots=True)
class AfterTopicCreation:
    """The answer of a Produce that first auto-creates topics, in a worker thread, then appends.

    Its appends come after the creation: the connection starts no later request (a pipelined
    Produce included) before this one finished, or that request would take effect first.
    """

    answer: Awaitable[bytes | None]


async def produce(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes | None:
    """Produce as a coroutine (what :data:`~lkstream.kafka.handlers.HANDLERS` holds)."""
    outcome = produce_start(ctx, header, frame)
    if isinstance(outcome, AfterTopicCreation):
        outcome = outcome.answer
    return await outcome if isinstance(outcome, Awaitable) else outcome


def produce_start(
    ctx: RequestContext, header: RequestHeader, frame: bytes
) -> bytes | Awaitable[bytes | None] | AfterTopicCreation | None:
    """Append every partition's batch now; the answer, or (``sync`` mode) an awaitable of it.

    In ``group`` and ``none`` modes an append is acknowledged once written, so the answer is
    known before this returns and the connection writes it without scheduling a task: that
    per-request saving is what a producer with ``linger.ms=0`` or small batches needs.
    A topic to auto-create is created first, off the event loop (:class:`AfterTopicCreation`).
    """
    request = parse_produce_request(frame, header.body_offset, flexible=header.flexible)
    refused = invalid_acks_answer(ctx, header, request)  # acks not -1, 0, 1: nothing handled, as Kafka
    if refused is not None:
        return refused
    missing = _topics_to_create(ctx, request)
    if missing:
        return AfterTopicCreation(_produce_after_creation(ctx, header, request, missing))
    return _produce_appended(ctx, header, request, {})


async def _produce_after_creation(
    ctx: RequestContext, header: RequestHeader, request: ProduceRequestData, missing: list[str]
) -> bytes | None:
    # Thousands of mkdir/open/fsync for a large topic: admin work, off the event loop (issue 12, finding 9).
    requester = requester_of(ctx.principal, ctx.client_host)  # whose auto-create budget (issue 28, finding 6)
    failed = await asyncio.to_thread(_create_topics, ctx.broker, missing, requester)
    outcome = _produce_appended(ctx, header, request, failed)
    return await outcome if isinstance(outcome, Awaitable) else outcome


def _topics_to_create(ctx: RequestContext, request: ProduceRequestData) -> list[str]:
    """The missing topics of ``request`` this principal may have auto-created (write and create on each)."""
    if not ctx.broker.config.auto_create_topics or request.transactional_id is not None:
        return []
    missing: list[str] = []
    for topic, _partitions in request.topics:
        try:
            ctx.broker.partitions_for(topic)  # first: the common case, a topic that exists, costs a lookup
            continue
        except UnknownTopicError:
            pass
        except LkstreamError:
            continue  # an invalid name, a closed broker: the append answers it
        if topic not in missing and ctx.allowed("write", "topic", topic) and ctx.allowed("create", "topic", topic):
            missing.append(topic)
    return missing


def _create_topics(broker: Broker, names: list[str], requester: str) -> dict[str, LkstreamError]:
    """Auto-create ``names`` (in a worker thread); what failed, by topic."""
    failed: dict[str, LkstreamError] = {}
    for name in names:
        try:
            broker.auto_create_topic(name, requester=requester)
        except LkstreamError as exc:
            failed[name] = exc
    return failed


def _produce_appended(
    ctx: RequestContext,
    header: RequestHeader,
    request: ProduceRequestData,
    failed_creations: dict[str, LkstreamError],
) -> bytes | Awaitable[bytes | None] | None:
    """Append every partition's batch now (see :func:`produce_start`)."""
    results: list[tuple[str, list[ProducePartitionResult]]] = []
    pending: list[tuple[ProducePartitionResult, Acknowledgement]] = []
    try:
        for topic, partitions in request.topics:
            refused = _write_refused(ctx, topic)
            if not refused and topic in failed_creations:
                refused = _produce_error(failed_creations[topic])
            answers = [ProducePartitionResult(part.partition, 0, -1, -1) for part in partitions]
            for part, answer in zip(partitions, answers, strict=True):
                ack = _append(ctx, topic, part, answer, transactional_id=request.transactional_id, refused=refused)
                if ack is not None:
                    pending.append((answer, ack))
            results.append((topic, answers))
    except BaseException:
        for _, ack in pending:  # appended before the failure, and never answered
            ack.release_when_done()
        raise
    if pending and ctx.broker.config.fsync_mode == "sync":
        return _produce_after_fsync(ctx, header, request.acks, results, pending)
    for answer, ack in pending:
        _acknowledged(answer, ack.wait_sync)  # returns at once: nothing waits outside sync mode
    return _produce_answer(ctx, header, request.acks, results)


async def _produce_after_fsync(
    ctx: RequestContext,
    header: RequestHeader,
    acks: int,
    results: list[tuple[str, list[ProducePartitionResult]]],
    pending: list[tuple[ProducePartitionResult, Acknowledgement]],
) -> bytes | None:
    try:
        for answer, ack in pending:
            try:
                await ack.wait()
            except LkstreamError as exc:  # the fsync failed: the records are not acknowledged
                _refuse(answer, exc)
    finally:
        # Cancelled (the connection closed) or failed: the acknowledgements not awaited yet still
        # hold in-flight bytes until their fsync; they give them back in the background.
        for _, ack in pending:
            ack.release_when_done()
    return _produce_answer(ctx, header, acks, results)


def _acknowledged(answer: ProducePartitionResult, wait: Callable[[], None]) -> None:
    try:
        wait()
    except LkstreamError as exc:
        _refuse(answer, exc)


def _refuse(answer: ProducePartitionResult, error: LkstreamError) -> None:
    answer.error_code, answer.error_message, answer.base_offset = error_code(error), str(error)[:500], -1


def _produce_answer(
    ctx: RequestContext, header: RequestHeader, acks: int, results: list[tuple[str, list[ProducePartitionResult]]]
) -> bytes | None:
    if acks == 0:
        return None
    broker = ctx.broker
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
            answer.log_append_time_ms = ack.log_append_time_ms
            return ack
        except LkstreamError as exc:
            answer.error_code, answer.error_message = _produce_error(exc), str(exc)[:500]
    return None


def _produce_error(error: LkstreamError) -> ErrorCode:
    if isinstance(error, InvalidArgumentError) and "rejected producer batch" in str(error):
        return ErrorCode.invalid_record  # the broker's batch validation refused it
    return _partition_error(error)


def produce_failure(header: RequestHeader, frame: bytes, code: int) -> bytes | None:
    """The answer to a Produce whose handler failed unexpectedly: ``code`` on every partition.

    Clients retry per partition on a retriable code; an idempotent producer's retry of a batch
    that did land is answered as a duplicate, so nothing is written twice.
    """
    request = parse_produce_request(frame, header.body_offset, flexible=header.flexible)
    if request.acks == 0:
        return None
    message = "the broker failed to handle this request (see its log)"
    return encode_produce_response(
        header.api_version,
        [
            (t, [ProducePartitionResult(p.partition, code, -1, -1, message) for p in parts])
            for t, parts in request.topics
        ],
    )


def fetch_failure(header: RequestHeader, frame: bytes, code: int) -> bytes:
    """The answer to a Fetch whose handler failed unexpectedly: ``code`` on every partition asked for."""
    request = kio_codec.decode_request(ApiKey.FETCH, header.api_version, frame, header.body_offset)
    return encode_fetch_response(
        header.api_version,
        [
            (t.topic, [FetchPartitionResult(p.partition, code, -1, -1, b"") for p in t.partitions])
            for t in request.topics
        ],
    )


#: One partition a Fetch asks for: topic, partition, offset, its byte limit, whether it may be read.
_Wanted = tuple[str, int, int, int, bool]


async def fetch(ctx: RequestContext, header: RequestHeader, frame: bytes) -> HeldResponse:
    """Read every partition asked for, long-polling until ``min_bytes`` arrived or ``max_wait`` passed.

    The answer holds at most ``fetch_max_bytes`` of records whatever the client asks (Kafka's
    ``fetch.max.bytes``): only the first partition that returns data may exceed a limit, by its first
    batch (KIP-74). A partition named twice is answered once, with its last fetch position (Kafka's
    request map). Records come as file ranges sent by sendfile(2) where the connection allows it,
    and the bytes the answer keeps in memory are held in the admission budget until it is written.
    """
    started = time.perf_counter()
    request = kio_codec.decode_request(ApiKey.FETCH, header.api_version, frame, header.body_offset)
    wanted = _wanted_partitions(ctx, request.topics)
    max_bytes = max(0, min(request.max_bytes, ctx.broker.config.fetch_max_bytes))
    deadline = time.monotonic() + min(request.max_wait.total_seconds(), MAX_FETCH_WAIT_S)
    waited_out = False
    while True:
        held = await _admit_read(ctx, deadline)
        try:
            answers, total, idle = _read_all(ctx, wanted, max_bytes if held is not None else 0)
        except BaseException:
            if held is not None:
                held.release()
            raise
        remaining = deadline - time.monotonic()
        if total >= request.min_bytes or remaining <= 0 or not idle or waited_out:
            break
        _release_records(answers)
        if held is not None:
            held.release()
        waited_out = not await ctx.broker.wait_for_data(idle, timeout=remaining)
    grouped: dict[str, list[FetchPartitionResult]] = {}
    for topic, answer in answers:
        grouped.setdefault(topic, []).append(answer)
    response = HeldResponse(fetch_response_chunks(header.api_version, list(grouped.items())), [])
    if held is not None:
        held.resize(sum(len(a.records) for _, a in answers if isinstance(a.records, bytes | bytearray)))
        response.on_release.append(held.release)
    observe = ctx.server.settings.observe_fetch
    if observe is not None:
        observe(time.perf_counter() - started)
    return response


def _wanted_partitions(ctx: RequestContext, topics: Any) -> list[_Wanted]:
    """The partitions of a request, each once: a repeated one keeps its first place and its last values.

    That is Kafka's reading of a request (its fetch data is an insertion-ordered map), so a request
    naming one partition 200 times is answered once, not 200 times over.
    """
    merged: dict[tuple[str, int], tuple[int, int]] = {}
    for t in topics:
        for p in t.partitions:
            merged[(t.topic, p.partition)] = (p.fetch_offset, p.partition_max_bytes)
    allowed = {topic: ctx.allowed("read", "topic", topic) for topic, _ in merged}
    return [(topic, pid, offset, limit, allowed[topic]) for (topic, pid), (offset, limit) in merged.items()]


async def _admit_read(ctx: RequestContext, deadline: float) -> Admission | None:
    r"""Room in the admission budget for a read that may bring record data into memory (None: none in time).

    What is held before the read is one record-data-sized slot, so a Fetch waits while the budget
    is full of data; the read then :meth:`Admission.resize`\ s it to the bytes it kept in memory
    (file ranges take none), which never refuses: the reads of a loop turn add at most one answer
    each beyond the budget, and what they hold is given back once written. Without room before the
    long poll's deadline the read answers no records, as a poll that found nothing: the client asks
    again.
    """
    budget = ctx.broker.admission
    held = budget.admit_now(_ROOM_TO_READ)
    if held is not None:
        return held
    try:
        return await budget.admit(_ROOM_TO_READ, "kafka", max(deadline - time.monotonic(), _MIN_ADMISSION_WAIT_S))
    except OverloadedError:
        return None


def _release_records(answers: list[tuple[str, FetchPartitionResult]]) -> None:
    for _, answer in answers:
        if isinstance(answer.records, FileRange):
            answer.records.release()


def _read_all(
    ctx: RequestContext, wanted: list[_Wanted], max_bytes: int
) -> tuple[list[tuple[str, FetchPartitionResult]], int, dict[tuple[str, int], int]]:
    """Read every partition once: the answers, the bytes read, and the partitions worth waiting on.

    Only the first partition that returns data may exceed its limit, by one batch (Kafka's
    ``minOneMessage``); every later one stays within what is left of ``max_bytes``.
    """
    broker = ctx.broker
    answers = []
    total = 0
    min_one = True
    idle: dict[tuple[str, int], int] = {}
    try:
        for topic, pid, offset, partition_max, allowed in wanted:
            # Empty records, not null, with an error too: Kafka answers MemoryRecords.EMPTY, and librdkafka
            # refuses a null records field of a flexible Fetch ("invalid MessageSetSize -1"), so it never
            # saw OFFSET_OUT_OF_RANGE and retried the same fetch forever.
            answer = FetchPartitionResult(pid, 0, -1, -1, b"")
            answers.append((topic, answer))
            if not allowed:
                answer.error_code = ErrorCode.topic_authorization_failed
                continue
            try:
                budget = min(partition_max, max_bytes - total)
                if budget <= 0:
                    partition = broker.partition(topic, pid)
                    answer.high_watermark = partition.high_watermark
                    answer.log_start_offset = partition.log_start_offset
                    answer.records = b""
                    continue
                read = broker.fetch_for_send(topic, pid, offset, budget, min_one=min_one, zero_copy=ctx.zero_copy)
            except (LkstreamError, KeyError) as exc:
                answer.error_code = _partition_error(exc)
                continue
            data, wait_from = read.data, offset
            if isinstance(data, (bytes, bytearray)) and data and not holds_records(data):
                # Only empty batches up to the high watermark: the end of a compacted partition whose last
                # records the cleaner removed. Kafka has nothing to send there, and a client that is sent
                # empty batches alone may fetch them again at once, forever (KafkaJS): wait as Kafka does,
                # for an append past the high watermark. (A file range starts with a batch of records.)
                data, wait_from = b"", read.high_watermark
            answer.high_watermark, answer.log_start_offset, answer.records = (
                read.high_watermark,
                read.log_start_offset,
                data,
            )
            size = len(data)
            total += size
            if size:
                min_one = False
            else:
                idle[(topic, pid)] = wait_from
    except BaseException:
        _release_records(answers)
        raise
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
            code, timestamp, offset = await _list_offset(ctx, topic.name, p.partition_index, p.timestamp, allowed)
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


async def _list_offset(
    ctx: RequestContext, topic: str, pid: int, timestamp: Any, allowed: bool
) -> tuple[int, int, int]:
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
            # Up to 63 timestamp lookups: off the event loop.
            return (0, *await asyncio.to_thread(_max_timestamp_record, ctx, topic, pid))
        if ts < 0:
            return ErrorCode.invalid_request, -1, -1
        offset = broker.offset_for_timestamp(topic, pid, ts)
        if offset >= partition.high_watermark:
            return 0, -1, -1
        found = broker.read_from(topic, pid, offset, max_msgs=1)
        return 0, (found[0].timestamp if found else -1), offset
    except (LkstreamError, KeyError) as exc:
        return _partition_error(exc), -1, -1


def _max_timestamp_record(ctx: RequestContext, topic: str, pid: int) -> tuple[int, int]:
    """``(timestamp, offset)`` of the first record with the largest timestamp (Kafka's MAX_TIMESTAMP).

    Records need not arrive in timestamp order, so the last record is not the answer. The
    broker's timestamp lookup (sealed segments skipped by their largest timestamp, one batch
    decoded) is monotone: "some record is at or after T" holds up to the largest timestamp and
    not beyond, so a binary search over T finds it in at most 63 lookups, without reading the log.
    """
    broker = ctx.broker
    high = broker.partition(topic, pid).high_watermark
    if broker.offset_for_timestamp(topic, pid, 0) >= high:
        return -1, -1  # empty, or only records without a timestamp
    low, top = 0, 2**63 - 1  # invariant: a record is at or after `low`; none is at or after `top + 1`
    while low < top:
        middle = (low + top + 1) // 2
        if broker.offset_for_timestamp(topic, pid, middle) < high:
            low = middle
        else:
            top = middle - 1
    return low, broker.offset_for_timestamp(topic, pid, low)


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
