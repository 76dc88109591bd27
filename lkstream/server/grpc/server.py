"""The gRPC servicer: one :class:`Broker` behind ``proto/messaging.proto``'s ``Broker`` service.

Concurrency: one asyncio event loop (``grpc.aio``). The broker's append and
read paths are synchronous and take microseconds (a C-level encode or CRC pass
and a ``write(2)`` into the page cache), so handlers call them inline, as the
embedded async API does (ADR 0003); they await only what really waits: the
fsync in ``sync`` mode, new data for Subscribe and long-poll Fetch
(``Partition.wait_for_offset``, woken by the append, no polling) and offset commits (fsync + rename, run in a
worker thread).

Errors: every handler runs inside :func:`_guard`, the one place that turns an
:class:`LkstreamError` into a status code (table in :mod:`lkstream.wire.contract`)
with the error's fields in trailing metadata, and counts it in
``lk_request_errors_total{code}``.

Metrics: handlers observe produce and fetch latency, records delivered to a
group (Fetch and Subscribe requests that name one) and committed offsets, in the
:class:`BrokerMetrics` the daemon gives the servicer.

The process around the servicer (the :class:`~lkstream.server.daemon.Daemon`,
signal handling, the ready line, HTTP start/stop and shutdown order) is
:mod:`lkstream.server.daemon`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import grpc

from lkstream.broker.acks import Acknowledgement
from lkstream.broker.broker import Broker
from lkstream.broker.metrics import BrokerMetrics
from lkstream.broker.partition import DEFAULT_FETCH_BYTES, Partition
from lkstream.broker.partitioner import StickyPartitioner
from lkstream.broker.topics import TopicDescription
from lkstream.errors import (
    BrokerClosedError,
    CorruptRecordError,
    InvalidArgumentError,
    OffsetOutOfRangeError,
)
from lkstream.format.batch import span_of_whole_batches
from lkstream.format.codec import Record, decode_batch, decode_batches_through, iter_batches
from lkstream.security.access import Access
from lkstream.security.acl import Operation, ResourceType
from lkstream.security.principal import requester_of
from lkstream.server.admin_calls import ensure_topic
from lkstream.server.grpc.access import call_principal, recheck_call
from lkstream.server.grpc.cluster_rpcs import ClusterRpcs, DaemonFacts
from lkstream.server.grpc.group_rpcs import GroupRpcs
from lkstream.server.grpc.guard import guard
from lkstream.server.grpc.stream_rpcs import STREAMS, StreamRpcs
from lkstream.server.stop_signal import StopSignal
from lkstream.storage.log import ReadResult
from lkstream.storage.names import validate_group
from lkstream.storage.topic_config import ConfigEntry
from lkstream.wire._proto import messaging_pb2 as pb
from lkstream.wire._proto import messaging_pb2_grpc as pb_grpc
from lkstream.wire.contract import (
    MIN_CLIENT_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    check_client_version,
)

log = logging.getLogger("lkstream.server")

SERVICE_NAME = "lkstream.Broker"
#: Longest long-poll wait a Fetch may ask for (``FetchRequest.max_wait_ms``).
MAX_FETCH_WAIT_MS = 60_000
#: With authentication on, a Subscribe stream waiting for data wakes this often to ask whether its
#: token and ACLs still hold, so a revoked one ends even if nothing is produced (issue 28, finding 8).
RECHECK_IDLE_S = 1.0
#: Bytes a repeated message field adds around each element: a tag and a length varint of at most 5.
_FIELD_FRAMING = 6


def _package_version() -> str:
    # Not `lkstream.__version__`: importing the top-level package would import the client layer.
    try:
        return metadata.version("lkstream")
    except metadata.PackageNotFoundError:
        return "unknown"


__version__ = _package_version()


def peer_host(peer: str) -> str:
    """The host of a gRPC peer string (``ipv4:127.0.0.1:5000``, ``ipv6:[::1]:5000``, ``unix:/path``)."""
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return peer
    return rest.rsplit(":", 1)[0].strip("[]")


def _record(record: Record) -> pb.Record:
    return pb.Record(
        offset=record.offset,
        key=record.key or b"",
        value=record.value or b"",
        ts=max(record.timestamp, 0),
        headers=[pb.Header(key=k, value=v or b"") for k, v in record.headers],
        partition=record.partition,
    )


def _config_entry(entry: ConfigEntry) -> pb.TopicConfigEntry:
    return pb.TopicConfigEntry(
        name=entry.name,
        value=entry.value,
        source=entry.source.name,
        type=entry.type.name,
        documentation=entry.documentation,
        synonyms=[pb.ConfigSynonym(name=s.name, value=s.value, source=s.source.name) for s in entry.synonyms],
    )


def _topic_info(description: TopicDescription) -> pb.TopicInfo:
    return pb.TopicInfo(
        configs=description.configs.to_json(),
        name=description.name,
        partitions=description.settings.partitions,
        retention_ms=description.settings.retention_ms,
        retention_bytes=description.settings.retention_bytes,
        partition_stats=[
            pb.PartitionInfo(
                partition=pid,
                log_start_offset=s.log_start_offset,
                next_offset=s.next_offset,
                high_watermark=s.high_watermark,
                segment_count=s.segment_count,
                size_bytes=s.size_bytes,
                active_segment_bytes=s.active_segment_bytes,
                dirty_ratio=-1.0 if s.dirty_ratio is None else s.dirty_ratio,
            )
            for pid, s in enumerate(description.partitions)
        ],
    )


@dataclass(frozen=True)
class LaneOffer:
    """The Kafka listener Handshake names to clients: ``address`` (empty: none), and whether it wants TLS and SASL."""

    address: str = ""
    tls: bool = False
    sasl: bool = False


class BrokerService(GroupRpcs, StreamRpcs, ClusterRpcs, pb_grpc.BrokerServicer):
    """The ``lkstream.Broker`` servicer. Runs on one event loop; not thread-safe.

    Subclassing the generated base keeps the server startable whatever the proto
    adds: an RPC this class does not define answers UNIMPLEMENTED.
    """

    def __init__(
        self, broker: Broker, metrics: BrokerMetrics, max_fetch_bytes: int, access: Access | None = None
    ) -> None:
        self.broker = broker
        self.metrics = metrics
        #: Asked only to filter listings; the access interceptor checks every call before it gets here.
        self.access = access or Access.disabled()
        self.max_fetch_bytes = max_fetch_bytes
        self.stopping = StopSignal()
        self._sticky = StickyPartitioner()
        #: Told to clients in Handshake: the Kafka listener they may produce through, and whether it
        #: wants TLS and SASL (set once it listens).
        self.kafka_lane = LaneOffer()
        #: What DescribeCluster says of the daemon (its addresses, once bound).
        self.facts = DaemonFacts(version=__version__)

    # -- produce ---------------------------------------------------------------------------------

    async def Produce(
        self, request: pb.ProduceRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ProduceResponse:
        started = time.perf_counter()
        try:
            async with guard(context, self.metrics):
                return await self._produce(request, self.requester(context))
        finally:
            self.metrics.observe_produce(time.perf_counter() - started)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _produce(self, request: pb.ProduceRequest, requester: str) -> pb.ProduceResponse:
        explicit = request.partition if request.HasField("partition") else None
        if request.record_batch:
            return await self._produce_batch(request, explicit, requester)
        if not request.values:
            raise InvalidArgumentError("a produce request needs values or a record_batch")
        await ensure_topic(self.broker, request.topic, requester=requester)
        key = request.key or None
        records = [(key, value) for value in request.values]
        results = await self.broker.produce_many(request.topic, records, partition=explicit)
        offsets = [offset for _, offset in results]
        return pb.ProduceResponse(
            partition=results[0][0], offsets=offsets, base_offset=offsets[0], last_offset=offsets[-1]
        )

    async def _produce_batch(
        self, request: pb.ProduceRequest, explicit: int | None, requester: str
    ) -> pb.ProduceResponse:
        count = await ensure_topic(self.broker, request.topic, requester=requester)
        response, ack = self.append_batch(request, explicit, count)
        await ack.wait()
        return response

    def append_batch(
        self, request: pb.ProduceRequest, explicit: int | None, count: int
    ) -> tuple[pb.ProduceResponse, Acknowledgement]:
        """Append ``request.record_batch`` to its topic of ``count`` partitions now; the answer may be
        sent once the acknowledgement is waited for."""
        if request.values or request.key:
            raise InvalidArgumentError("record_batch excludes key and values: send one or the other")
        pid = explicit if explicit is not None else (0 if count == 1 else self._sticky.next(count))
        try:
            # A fresh copy of the request's bytes, handed over: the hot tail keeps it as is.
            batch = bytearray(request.record_batch)
            (base, last), ack = self.broker.begin_produce_batch(request.topic, pid, batch, owned=True)
        except CorruptRecordError as exc:
            # A bad batch from a client is the client's argument, not data loss on this broker.
            raise InvalidArgumentError(f"record_batch rejected: {exc}") from exc
        return pb.ProduceResponse(partition=pid, base_offset=base, last_offset=last), ack

    def requester(self, context: grpc.aio.ServicerContext[Any, Any]) -> str:
        """Who makes this call, for the per-caller auto-create budget: its principal, else its address."""
        return requester_of(call_principal(), peer_host(context.peer()))

    # -- fetch and subscribe ---------------------------------------------------------------------

    def _fetch_bytes(self, requested: int) -> int:
        return min(requested or DEFAULT_FETCH_BYTES, self.max_fetch_bytes)

    async def Fetch(self, request: pb.FetchRequest, context: grpc.aio.ServicerContext[Any, Any]) -> pb.FetchResponse:
        started = time.perf_counter()
        try:
            async with guard(context, self.metrics):
                return await self._fetch(request)
        finally:
            self.metrics.observe_fetch(time.perf_counter() - started)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _fetch(self, request: pb.FetchRequest, recheck: Callable[[], object] = recheck_call) -> pb.FetchResponse:
        """One Fetch; ``recheck`` raises if the caller may no longer read what a long poll waited for."""
        topic, pid, offset = request.topic, request.partition, request.offset
        if request.group:
            validate_group(request.group)  # it becomes a metric label: only a valid name may
        result = self.broker.fetch(topic, pid, offset, self._fetch_bytes(request.max_bytes))
        if request.max_wait_ms and result.high_watermark <= offset and not self.stopping.is_set():
            # Long poll: woken by the append (or shutdown), never by polling.
            wait_s = min(request.max_wait_ms, MAX_FETCH_WAIT_MS) / 1000.0
            with contextlib.suppress(BrokerClosedError):  # deleted meanwhile: the fetch below says how
                await self._arrival(self.broker.partition(topic, pid), offset, wait_s)
            recheck()  # the token or an ACL may have gone while it waited: deliver nothing then
            result = self.broker.fetch(topic, pid, offset, self._fetch_bytes(request.max_bytes))
        response = pb.FetchResponse(high_watermark=result.high_watermark, log_start_offset=result.log_start_offset)
        if request.raw_batches:
            response.record_batches = result.data
            if request.group:
                self.metrics.record_consumed(topic, request.group, pid, span_of_whole_batches(result.data, offset)[0])
        else:
            records, response.next_offset = self._records_past_gaps(result, topic, pid, offset, request.max_bytes)
            response.records.extend(records)
            if request.group:
                self.metrics.record_consumed(topic, request.group, pid, len(response.records))
        return response

    def _records_past_gaps(
        self, result: ReadResult, topic: str, pid: int, offset: int, max_bytes: int
    ) -> tuple[list[pb.Record], int]:
        """The records of a fetch, reading on past batches without records (a compacted topic's gaps);
        and the offset to fetch next (``FetchResponse.next_offset``)."""
        while True:
            records, after = self._decoded_records(result.data, topic, pid, offset)
            if records or not result.data or after <= offset or after >= result.high_watermark:
                return records, max(after, offset)
            offset = after
            result = self.broker.fetch(topic, pid, offset, self._fetch_bytes(max_bytes))

    def _decoded_records(self, data: bytes, topic: str, pid: int, offset: int) -> tuple[list[pb.Record], int]:
        """Decoded records of ``data`` whose encoding fits the response budget (at least one record).

        Decoded records can be much larger than their batches (small records carry more
        protobuf framing than v2 record framing, and compressed batches inflate), so the
        response is cut by its own encoded size, never by ``max_bytes`` of raw batches
        alone: an answer above the transport's message limit would fail on every retry and
        leave the reader stuck (issue 12, finding 10). The reader continues from the
        offset after the last record it got.
        """
        budget = self.max_fetch_bytes
        out: list[pb.Record] = []
        used = 0
        records, after = decode_batches_through(data, topic, pid, offset, max_bytes=budget)
        for record in records:
            message = _record(record)
            size = message.ByteSize() + _FIELD_FRAMING
            if out and used + size > budget:
                return out, record.offset  # cut here: the reader continues at the first record left out
            out.append(message)
            used += size
        return out, after

    async def Subscribe(
        self, request: pb.FetchRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.Record]:
        """Stream records from ``offset`` on, then each new one as it is appended, until cancelled."""
        async with guard(context, self.metrics):
            topic, pid = request.topic, request.partition
            async for result, offset in self._follow(request):
                # One batch decoded at a time (memory: one inflated batch at most); a damaged batch
                # ends the stream with DATA_LOSS after the records in front of it.
                for _, batch in iter_batches(result.data):
                    for record in decode_batch(batch, topic, pid, offset):
                        yield _record(record)

    async def SubscribeBatches(
        self, request: pb.FetchRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.FetchResponse]:
        """Like Subscribe, but one message of whole raw batches per read: the client decodes."""
        async with guard(context, self.metrics):
            async for result, _ in self._follow(request):
                yield pb.FetchResponse(
                    record_batches=result.data,
                    high_watermark=result.high_watermark,
                    log_start_offset=result.log_start_offset,
                )

    async def _follow(self, request: pb.FetchRequest) -> AsyncIterator[tuple[ReadResult, int]]:
        """Yield ``(read, offset it was read from)`` from ``request.offset`` on, forever.

        Each read holds whole batches only, so the next offset comes from the
        headers without decoding. Waits are woken by the append or by shutdown. With
        authentication on, every read is authorized again first (:func:`recheck_call`), and
        a wait wakes every :data:`RECHECK_IDLE_S` to do so: a revoked token or a removed ACL
        entry ends the stream (UNAUTHENTICATED, PERMISSION_DENIED) before anything more is
        delivered.
        """
        topic, pid, offset, group = request.topic, request.partition, request.offset, request.group
        if group:
            validate_group(group)  # it becomes a metric label: only a valid name may
        partition = self.broker.partition(topic, pid)
        start, high = partition.log_start_offset, partition.high_watermark
        if not start <= offset <= high:
            raise OffsetOutOfRangeError(topic, pid, offset, start, high)
        max_bytes = self._fetch_bytes(request.max_bytes)
        idle_wake = RECHECK_IDLE_S if self.access.enabled else None
        while True:
            if self.stopping.is_set():
                raise BrokerClosedError("server is shutting down")
            recheck_call()
            if partition.high_watermark > offset:
                result = self.broker.fetch(topic, pid, offset, max_bytes)
                records, next_offset = span_of_whole_batches(result.data, offset)
                if next_offset > offset:
                    yield result, offset
                    if group:
                        self.metrics.record_consumed(topic, group, pid, records)
                    offset = next_offset
                    continue
            await self._arrival(partition, offset, idle_wake)

    async def _arrival(self, partition: Partition, offset: int, timeout: float | None = None) -> None:
        """Wait until ``offset`` is readable, the daemon stops, or ``timeout`` passes, whichever comes first.

        No task per wait: the append resolves the future of :meth:`Partition.arrival`, and so
        does shutdown (a :class:`StopSignal` callback). A partition closed meanwhile ends the
        wait too; the caller's next read says why.
        """
        arrival = partition.arrival(offset)
        if arrival is None:
            return

        def stop() -> None:
            if not arrival.done():
                arrival.set_result(None)

        self.stopping.listeners.add(stop)
        try:
            if not self.stopping.is_set():
                await asyncio.wait_for(arrival, timeout)
        except (TimeoutError, BrokerClosedError):
            pass
        finally:
            self.stopping.listeners.discard(stop)
            partition.forget_arrival(arrival)

    # -- offsets, admin, handshake ---------------------------------------------------------------

    async def CommitOffset(
        self, request: pb.CommitRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.CommitResponse:
        """The seed's one-partition commit; with ``member_id`` it is fenced like CommitOffsets."""
        async with guard(context, self.metrics):
            offsets = {(request.topic, request.partition): request.offset}
            await self.commit(request.group, offsets, request.member_id or None, request.generation)
            return pb.CommitResponse()
        raise AssertionError("unreachable")  # pragma: no cover

    async def FetchCommittedOffsets(
        self, request: pb.FetchCommittedRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.FetchCommittedResponse:
        async with guard(context, self.metrics):
            group, topic = validate_group(request.group), request.topic
            pids = list(request.partitions) or list(range(self.broker.partitions_for(topic)))
            for pid in pids:
                self.broker.partition(topic, pid)  # NOT_FOUND / INVALID_ARGUMENT first
            # Committed offsets are held in memory by the offsets journal: no I/O here.
            found = self.broker.groups.fetch_committed(group, [(topic, pid) for pid in pids])
            return pb.FetchCommittedResponse(offsets={pid: offset for (_, pid), offset in found.items()})
        raise AssertionError("unreachable")  # pragma: no cover

    async def OffsetsForTimestamp(
        self, request: pb.OffsetsForTimestampRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.OffsetsForTimestampResponse:
        async with guard(context, self.metrics):
            topic = request.topic
            pids = list(request.partitions) or list(range(self.broker.partitions_for(topic)))
            offsets = {pid: self.broker.offset_for_timestamp(topic, pid, request.timestamp_ms) for pid in pids}
            return pb.OffsetsForTimestampResponse(offsets=offsets)
        raise AssertionError("unreachable")  # pragma: no cover

    async def Admin(self, request: pb.AdminRequest, context: grpc.aio.ServicerContext[Any, Any]) -> pb.AdminResponse:
        """Topic admin. Creating, deleting and describing touch every partition (thousands of
        directories, files and fsyncs for a large topic), so they run in a worker thread: the
        event loop keeps serving other clients meanwhile (issue 12, finding 9)."""
        async with guard(context, self.metrics):
            action = request.WhichOneof("action")
            if action == "create_topic":
                return await asyncio.to_thread(self._create_topic, request.create_topic)
            if action == "delete_topic":
                await asyncio.to_thread(self.broker.delete_topic, request.delete_topic.name)
                return pb.AdminResponse()
            if action == "list_topics":
                return pb.AdminResponse(topics=self.visible(ResourceType.TOPIC, self.broker.list_topics()))
            if action == "describe_topic":
                d = request.describe_topic
                await ensure_topic(self.broker, d.name, requester=self.requester(context), create=d.create_if_missing)
                return await asyncio.to_thread(self._describe_topic, d.name, entries=d.include_config_entries)
            if action == "alter_topic_configs":
                return await asyncio.to_thread(self._alter_topic_configs, request.alter_topic_configs)
            if action == "create_partitions":
                return await asyncio.to_thread(self._create_partitions, request.create_partitions)
            if action == "delete_records":
                r = request.delete_records
                lows = await asyncio.to_thread(self.broker.delete_records, r.topic, dict(r.before))
                return pb.AdminResponse(low_watermarks=lows)
            raise InvalidArgumentError("an admin request needs one action")
        raise AssertionError("unreachable")  # pragma: no cover

    def owner(self) -> str | None:
        """The calling principal's name, which owns the group members it joins (None without authentication)."""
        return Access.owner(call_principal()) if self.access.enabled else None

    def _create_topic(self, c: pb.CreateTopic) -> pb.AdminResponse:
        create = self.broker.validate_topic_creation if c.validate_only else self.broker.create_topic
        create(
            c.name,
            c.partitions or None,
            retention_ms=c.retention_ms if c.HasField("retention_ms") else None,
            retention_bytes=c.retention_bytes if c.HasField("retention_bytes") else None,
            configs=dict(c.configs),
        )
        return pb.AdminResponse() if c.validate_only else self._describe_topic(c.name)

    def _alter_topic_configs(self, a: pb.AlterTopicConfigs) -> pb.AdminResponse:
        alter = self.broker.validate_topic_configs if a.validate_only else self.broker.alter_topic_configs
        alter(a.name, dict(a.set), list(a.delete))
        return self._describe_topic(a.name)

    def _create_partitions(self, c: pb.CreatePartitions) -> pb.AdminResponse:
        if c.validate_only:
            self.broker.validate_partition_count(c.name, c.count)
        else:
            self.broker.create_partitions(c.name, c.count)
        return self._describe_topic(c.name)

    def _describe_topic(self, name: str, *, entries: bool = False) -> pb.AdminResponse:
        info = _topic_info(self.broker.describe_topic(name))
        if entries:
            info.config_entries.extend(_config_entry(e) for e in self.broker.describe_topic_configs(name))
        return pb.AdminResponse(topic=info)

    def visible(self, resource_type: ResourceType, names: list[str]) -> list[str]:
        """The names of ``names`` the calling principal may describe (all of them without authentication)."""
        if not self.access.enabled:
            return names
        principal = call_principal()
        return [name for name in names if self.access.allows(principal, Operation.DESCRIBE, resource_type, name)]

    async def Handshake(
        self, request: pb.HandshakeRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.HandshakeResponse:
        async with guard(context, self.metrics):
            check_client_version(request.client_protocol_version)
            return pb.HandshakeResponse(
                server_protocol_version=PROTOCOL_VERSION,
                min_client_protocol_version=MIN_CLIENT_PROTOCOL_VERSION,
                server_version=__version__,
                max_message_bytes=self.broker.config.max_message_bytes,
                max_batch_bytes=self.broker.config.max_batch_bytes,
                streams=STREAMS,
                kafka_lane_address=self.kafka_lane.address,
                kafka_lane_tls=self.kafka_lane.tls,
                kafka_lane_sasl=self.kafka_lane.sasl,
            )
        raise AssertionError("unreachable")  # pragma: no cover
