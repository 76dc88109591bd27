"""The remote client: the embedded Broker's produce/fetch/admin surface over gRPC.

``lkstream.connect("127.0.0.1:9090")`` returns a :class:`RemoteBroker`. Code
written against the embedded ``Broker`` (``produce_many``, ``produce_many_sync``,
``fetch``, ``read_from``, topic admin) runs against the daemon by changing that
one constructor.

Produce encodes record batches here, in the client, with the same C codec the
embedded broker uses, and sends each as ``ProduceRequest.record_batch``: the
daemon appends it with no per-record work. Keyed records are routed with
Kafka's murmur2 partitioner, which needs the topic's partition count: it is
asked once (Admin describe) and cached. Keyless records of one call go to one
partition, chosen by the daemon (sticky), as the embedded broker does.

A :class:`~lkstream.client.consumer.Consumer` takes a ``RemoteBroker`` in place of
the embedded broker (it satisfies ``ConsumerSource``): positions come from
:meth:`RemoteBroker.bounds`, waits for new data are long-poll Fetches
(``FetchRequest.max_wait_ms``, woken by the daemon's append) and the group's
offsets live in the daemon (CommitOffset / FetchCommittedOffsets).

Errors come back as the same :mod:`lkstream.errors` classes the embedded broker
raises (table in :mod:`lkstream.wire.contract`); an unreachable daemon raises
:class:`BrokerUnavailableError` naming the address.

Reconnecting (:mod:`lkstream.client.retry`): a call failing with gRPC
``UNAVAILABLE`` (a daemon restarting, connection refused) is retried with
exponential backoff (``retry_backoff_ms`` doubling per attempt, capped at
``retry_backoff_max_ms``) and jitter for up to ``retry_timeout_s`` (30 s; None:
for ever) after its first failure, or ``retries`` retries when set. Reads,
describes, commits and group heartbeats are always retried. **Produce is
at-least-once:** it is retried too, also when the connection dropped after the
request was sent, so a record the daemon appended just before it went away can
be appended again (a duplicate, never a silent loss). Topic create and delete,
group joins and resets are retried only when the request never left the client.
:meth:`RemoteBroker.subscribe` resumes after the last batch it delivered. When
every attempt fails, the error names the address and the number of attempts.
An address without a port gets 9090; an address that answers HTTP/1.x (the
daemon's HTTP port) fails at once, saying so.

Thread-safety: the blocking methods may be called from any thread. The async
methods use one ``grpc.aio`` channel per event loop.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import queue
import random
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, TypeVar

import grpc

from lkstream.broker.broker import TopicDescription
from lkstream.broker.partition import DEFAULT_FETCH_BYTES
from lkstream.broker.partitioner import StickyPartitioner, partition_for_key
from lkstream.client.remote_groups import RemoteGroupCalls
from lkstream.client.retry import (
    DEFAULT_BACKOFF_MAX_S,
    DEFAULT_RETRY_TIMEOUT_S,
    Attempts,
    Retry,
    normalise_address,
    wrong_protocol,
)
from lkstream.errors import (
    BrokerUnavailableError,
    InvalidArgumentError,
    LkstreamError,
    RecordTooLargeError,
    UnknownTopicError,
)
from lkstream.format.batch import span_of_whole_batches
from lkstream.format.codec import Compression, Headers, KeyValue, Record, decode_batches, encode_batch
from lkstream.format.produce import chunk_by_size, normalise_records, record_sizes
from lkstream.storage.log import PartitionStats, ReadResult
from lkstream.storage.topics import TopicSettings
from lkstream.wire._proto import messaging_pb2 as pb
from lkstream.wire._proto import messaging_pb2_grpc as pb_grpc
from lkstream.wire.contract import PROTOCOL_VERSION, VERSION_METADATA_KEY, error_from_status

T = TypeVar("T")
log = logging.getLogger("lkstream.client")

#: Target size of one client-encoded batch (a larger call is split).
DEFAULT_BATCH_BYTES = 1024 * 1024
#: Largest gRPC message the client sends or accepts.
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
#: The first backoff of a call failing with UNAVAILABLE (doubling, capped at ``retry_backoff_max_ms``).
DEFAULT_RETRY_BACKOFF_MS = 100
# gRPC's own reconnect backoff (default 1 s growing to 120 s) would outlast our retries after a restart.
_RECONNECT_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]

#: Longest single long-poll Fetch while waiting for data (a longer wait re-asks).
LONG_POLL_S = 10.0

# (partition or None for "the daemon picks", encoded batch, indices of the records in it)
_Chunk = tuple[int | None, bytearray, list[int]]


def connect(address: str = "127.0.0.1:9090", **options: Any) -> RemoteBroker:
    """Connect to the daemon at ``address`` and check the protocol version; see :class:`RemoteBroker`."""
    return RemoteBroker(address, **options)


class RemoteBroker(RemoteGroupCalls):
    """A connection to an LKSTREAM daemon with the embedded :class:`Broker`'s surface."""

    def __init__(
        self,
        address: str = "127.0.0.1:9090",
        *,
        timeout: float = 30.0,
        connect_timeout: float = 5.0,
        connect_timeout_s: float | None = None,
        retries: int | None = None,
        retry_timeout_s: float | None = DEFAULT_RETRY_TIMEOUT_S,
        retry_backoff_ms: float = DEFAULT_RETRY_BACKOFF_MS,
        retry_backoff_max_ms: float = DEFAULT_BACKOFF_MAX_S * 1000,
        retry_seed: int | None = None,
        batch_bytes: int = DEFAULT_BATCH_BYTES,
        compression: Compression | str | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        protocol_version: int = PROTOCOL_VERSION,
    ) -> None:
        if (retries is not None and retries < 0) or retry_backoff_ms < 0 or retry_backoff_max_ms < 0:
            raise InvalidArgumentError("retries, retry_backoff_ms and retry_backoff_max_ms must be non-negative")
        if retry_timeout_s is not None and retry_timeout_s < 0:
            raise InvalidArgumentError("retry_timeout_s must be non-negative (or None: retry for ever)")
        address = normalise_address(address)
        self.address = address
        self.timeout = timeout
        self.connect_timeout = connect_timeout if connect_timeout_s is None else connect_timeout_s
        self.retries = retries
        self.retry_timeout_s = retry_timeout_s
        self.retry_backoff_s = retry_backoff_ms / 1000.0
        self.retry_backoff_max_s = retry_backoff_max_ms / 1000.0
        self._random = random.Random(retry_seed)
        self._unavailable_since: float | None = None
        self._reached = False  # the handshake succeeded: later failures are a daemon going away
        self.batch_bytes = batch_bytes
        self.compression = Compression.parse(compression)
        self._options = [
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
            *_RECONNECT_OPTIONS,
        ]
        self._metadata = ((VERSION_METADATA_KEY, str(protocol_version)),)
        self._channel = grpc.insecure_channel(address, options=self._options)
        self._stub = pb_grpc.BrokerStub(self._channel)  # type: ignore[no-untyped-call]
        self._aio: dict[asyncio.AbstractEventLoop, tuple[grpc.aio.Channel, Any]] = {}
        self._partitions: dict[str, int] = {}
        self._sticky = StickyPartitioner()
        self._closed = False
        self.max_message_bytes: int | None = None
        try:
            self.server_protocol_version = self._handshake(protocol_version, self.connect_timeout)
        except BaseException:
            self._channel.close()
            raise

    def _handshake(self, version: int, timeout: float) -> int:
        request = pb.HandshakeRequest(client_protocol_version=version, client_name="lkstream-python")
        response: pb.HandshakeResponse = self._call(
            self._stub.Handshake, request, timeout=timeout, retry=Retry.SAFE, deadline=time.monotonic() + timeout
        )
        self.max_message_bytes = int(response.max_message_bytes) or None
        self._reached = True
        return int(response.server_protocol_version)

    # -- call plumbing ---------------------------------------------------------------------------

    def _error(self, exc: grpc.RpcError) -> LkstreamError:
        misdirected = wrong_protocol(self.address, exc)
        if misdirected is not None:
            return misdirected
        call: Any = exc
        code = call.code() if hasattr(call, "code") else grpc.StatusCode.UNKNOWN
        details = (call.details() if hasattr(call, "details") else "") or ""
        trailing = call.trailing_metadata() if hasattr(call, "trailing_metadata") else None
        return error_from_status(code, details, tuple(trailing or ()), self.address)

    def _attempts(self, retry: Retry, deadline: float | None = None) -> Attempts:
        return Attempts(
            retry,
            timeout_s=self.retry_timeout_s,
            retries=self.retries,
            backoff_s=self.retry_backoff_s,
            backoff_max_s=self.retry_backoff_max_s,
            rng=self._random,
            deadline=deadline,
        )

    def _gave_up(self, exc: grpc.RpcError, attempts: int) -> LkstreamError:
        error = self._error(exc)
        if attempts > 1 and isinstance(error, BrokerUnavailableError):
            call: Any = exc
            details = (call.details() if hasattr(call, "details") else "") or ""
            error = BrokerUnavailableError(self.address, f"gave up after {attempts} attempts: {details}")
        return error

    def _lost(self, exc: grpc.RpcError, delay: float) -> None:
        """Say once per outage that the daemon went away (the CLI shows WARNING lines on stderr).

        Not while connecting: a daemon never reached is one error at the end, not an outage.
        """
        if self._reached and self._unavailable_since is None:
            self._unavailable_since = time.monotonic()
            details = ((exc.details() if hasattr(exc, "details") else "") or "").splitlines()
            log.warning(
                "lost the daemon at %s (%s); reconnecting (first retry in %.1f s)",
                self.address,
                details[0] if details else "UNAVAILABLE",
                delay,
            )

    def _back(self) -> None:
        if self._unavailable_since is not None:
            down = time.monotonic() - self._unavailable_since
            self._unavailable_since = None
            log.warning("reconnected to the daemon at %s after %.1f s", self.address, down)

    def _call(
        self,
        method: Any,
        request: Any,
        *,
        timeout: float | None = None,
        retry: Retry = Retry.UNSENT,
        deadline: float | None = None,
    ) -> Any:
        if self._closed:
            raise InvalidArgumentError("this RemoteBroker is closed")
        attempts = self._attempts(retry, deadline)
        while True:
            attempts.count += 1
            limit = timeout or self.timeout
            if deadline is not None:
                limit = max(0.001, min(limit, deadline - time.monotonic()))
            try:
                response = method(request, timeout=limit, metadata=self._metadata)
            except grpc.RpcError as exc:
                delay = attempts.delay(exc)
                if delay is None or delay <= 0 or self._closed:
                    raise self._gave_up(exc, attempts.count) from None
                self._lost(exc, delay)
                time.sleep(delay)
                continue
            self._back()
            return response

    def _astub(self) -> Any:
        if self._closed:
            raise InvalidArgumentError("this RemoteBroker is closed")
        loop = asyncio.get_running_loop()
        entry = self._aio.get(loop)
        if entry is None:
            channel = grpc.aio.insecure_channel(self.address, options=self._options)
            entry = (channel, pb_grpc.BrokerStub(channel))  # type: ignore[no-untyped-call]
            self._aio[loop] = entry
        return entry[1]

    async def _acall(self, name: str, request: Any, *, retry: Retry = Retry.UNSENT) -> Any:
        attempts = self._attempts(retry)
        while True:
            attempts.count += 1
            try:
                response = await getattr(self._astub(), name)(request, timeout=self.timeout, metadata=self._metadata)
            except grpc.RpcError as exc:
                delay = attempts.delay(exc)
                if delay is None or self._closed:
                    raise self._gave_up(exc, attempts.count) from None
                self._lost(exc, delay)
                await asyncio.sleep(delay)
                continue
            self._back()
            return response

    # -- produce ---------------------------------------------------------------------------------

    async def produce_many(
        self,
        topic: str,
        records: Sequence[Any],
        *,
        partition: int | None = None,
        compression: Compression | str | None = None,
    ) -> list[tuple[int, int]]:
        """Append ``(key, value[, headers])`` records; return ``[(partition, offset)]`` in input order."""
        pairs, headers = normalise_records(records)
        if not pairs:
            return []
        self._check_sizes(pairs)  # before a describe that may auto-create the topic
        count = None
        if partition is None and any(key is not None for key, _ in pairs):
            count = self._partitions.get(topic) or await self._adescribe_count(topic)
        chunks = self._plan(pairs, headers, partition, count, compression)
        results: list[tuple[int, int]] = [(0, 0)] * len(pairs)
        for pid, batch, indices in chunks:
            response = await self._acall("Produce", _produce_request(topic, pid, batch), retry=Retry.RESEND)
            _place(results, indices, response)
        return results

    def produce_many_sync(
        self,
        topic: str,
        records: Sequence[Any],
        *,
        partition: int | None = None,
        compression: Compression | str | None = None,
    ) -> list[tuple[int, int]]:
        """Blocking twin of :meth:`produce_many`."""
        pairs, headers = normalise_records(records)
        if not pairs:
            return []
        self._check_sizes(pairs)  # before a describe that may auto-create the topic
        count = None
        if partition is None and any(key is not None for key, _ in pairs):
            count = self.partitions_for(topic, create=True)
        results: list[tuple[int, int]] = [(0, 0)] * len(pairs)
        for pid, batch, indices in self._plan(pairs, headers, partition, count, compression):
            request = _produce_request(topic, pid, batch)
            _place(results, indices, self._call(self._stub.Produce, request, retry=Retry.RESEND))
        return results

    async def produce_batch(self, topic: str, partition: int, batch: bytes | bytearray) -> tuple[int, int]:
        """Append one pre-encoded v2 batch; return ``(base_offset, last_offset)``."""
        response = await self._acall("Produce", _produce_request(topic, partition, batch), retry=Retry.RESEND)
        return int(response.base_offset), int(response.last_offset)

    def produce_batch_sync(self, topic: str, partition: int, batch: bytes | bytearray) -> tuple[int, int]:
        """Blocking twin of :meth:`produce_batch`."""
        response = self._call(self._stub.Produce, _produce_request(topic, partition, batch), retry=Retry.RESEND)
        return int(response.base_offset), int(response.last_offset)

    def _check_sizes(self, pairs: list[KeyValue]) -> None:
        """The daemon appends our batches without looking at records: enforce its per-record limit here."""
        if self.max_message_bytes is not None:
            largest = max(record_sizes(pairs))
            if largest > self.max_message_bytes:
                raise RecordTooLargeError(largest, self.max_message_bytes)

    def _plan(
        self,
        pairs: list[KeyValue],
        headers: list[Headers] | None,
        explicit: int | None,
        count: int | None,
        compression: Compression | str | None,
    ) -> list[_Chunk]:
        """Route records to partitions (as the embedded broker does) and encode one batch per chunk."""
        codec = self.compression if compression is None else Compression.parse(compression)
        sizes = record_sizes(pairs)
        routes: dict[int | None, list[int]]
        if explicit is not None or count is None or count == 1:
            routes = {explicit if count != 1 or explicit is not None else 0: list(range(len(pairs)))}
        else:
            keyless = self._sticky.next(count)
            routes = {}
            for i, (key, _) in enumerate(pairs):
                target = keyless if key is None else partition_for_key(key, count)
                routes.setdefault(target, []).append(i)
        chunks: list[_Chunk] = []
        for pid, indices in routes.items():
            for chunk in chunk_by_size(indices, sizes, self.batch_bytes):
                batch = encode_batch(
                    [pairs[i] for i in chunk],
                    headers=None if headers is None else [headers[i] for i in chunk],
                    compression=codec,
                )
                chunks.append((pid, batch, chunk))
        return chunks

    # -- fetch -----------------------------------------------------------------------------------

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = DEFAULT_FETCH_BYTES) -> ReadResult:
        """Raw record batches of ``topic[partition]`` from ``offset``, with log bounds (as ``Broker.fetch``)."""
        response = self._call(self._stub.Fetch, _fetch_request(topic, partition, offset, max_bytes), retry=Retry.SAFE)
        return ReadResult(bytes(response.record_batches), response.log_start_offset, response.high_watermark)

    async def fetch_async(
        self, topic: str, partition: int, offset: int, max_bytes: int = DEFAULT_FETCH_BYTES
    ) -> ReadResult:
        """Async twin of :meth:`fetch`."""
        response = await self._acall("Fetch", _fetch_request(topic, partition, offset, max_bytes), retry=Retry.SAFE)
        return ReadResult(bytes(response.record_batches), response.log_start_offset, response.high_watermark)

    def read_from(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_msgs: int | None = None,
        max_bytes: int = DEFAULT_FETCH_BYTES,
    ) -> list[Record]:
        """Decoded records of ``topic[partition]`` from ``offset`` (as ``Broker.read_from``)."""
        records = decode_batches(self.fetch(topic, partition, offset, max_bytes).data, topic, partition, offset)
        return records if max_msgs is None else records[:max_msgs]

    # -- waiting for data (the Consumer's wake-up) --------------------------------------------------

    def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        """``(log_start_offset, high_watermark)`` of ``topic[partition]`` (one Admin describe)."""
        stats = self.describe_topic(topic).partitions
        if not 0 <= partition < len(stats):
            raise InvalidArgumentError(
                f"partition {partition!r} does not exist in {topic!r} (it has {len(stats)} partitions)"
            )
        return stats[partition].log_start_offset, stats[partition].high_watermark

    async def wait_for_data(self, positions: dict[tuple[str, int], int], timeout: float | None = None) -> bool:
        """Wait until any ``(topic, partition)`` has a record at or past its offset; False on timeout.

        One long-poll Fetch (``max_wait_ms``) per partition, concurrently: the daemon
        answers when the append lands, so nothing polls. A failed wait returns True
        ("go and look"): the caller's next fetch retries or raises the real error.
        """
        deadline = _deadline(positions, timeout)
        while True:
            wait_s = _wait_slice(deadline)
            stub = self._astub()
            tasks = [
                asyncio.ensure_future(self._arrival(stub, topic, pid, offset, wait_s))
                for (topic, pid), offset in positions.items()
            ]
            try:
                pending = set(tasks)
                while pending:
                    done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    if any(task.result() for task in done):
                        return True
            finally:
                for task in tasks:
                    task.cancel()
            if deadline is not None and time.monotonic() >= deadline:
                return False

    async def _arrival(self, stub: Any, topic: str, pid: int, offset: int, wait_s: float) -> bool:
        request = _wait_request(topic, pid, offset, wait_s)
        try:
            response = await stub.Fetch(request, timeout=wait_s + self.timeout, metadata=self._metadata)
        except grpc.RpcError:
            return True
        return int(response.high_watermark) > offset

    def wait_for_data_sync(self, positions: dict[tuple[str, int], int], timeout: float | None = None) -> bool:
        """Blocking twin of :meth:`wait_for_data` (concurrent long polls as gRPC futures, no threads)."""
        deadline = _deadline(positions, timeout)
        while True:
            wait_s = _wait_slice(deadline)
            answered: queue.SimpleQueue[tuple[Any, int]] = queue.SimpleQueue()
            calls = []
            if self._closed:
                raise InvalidArgumentError("this RemoteBroker is closed")
            for (topic, pid), offset in positions.items():
                call = self._stub.Fetch.future(
                    _wait_request(topic, pid, offset, wait_s), timeout=wait_s + self.timeout, metadata=self._metadata
                )
                call.add_done_callback(functools.partial(_answered, answered, offset))
                calls.append(call)
            try:
                for _ in calls:
                    try:
                        done, offset = answered.get(timeout=wait_s + self.timeout)
                    except queue.Empty:
                        return True  # the calls' own deadlines should have fired: go and look
                    if _arrived(done, offset):
                        return True
            finally:
                for call in calls:
                    call.cancel()
            if deadline is not None and time.monotonic() >= deadline:
                return False

    # -- subscribe -----------------------------------------------------------------------------------

    async def subscribe(self, topic: str, partition: int, offset: int) -> AsyncIterator[Record]:
        """Records from ``offset`` on, then each new one as it is appended, until the caller stops.

        Rides :meth:`subscribe_batches`: the daemon pushes whole batches as they
        are appended and this client decodes them.
        """
        async for result in self.subscribe_batches(topic, partition, offset):
            for record in decode_batches(result.data, topic, partition, offset):
                yield record
                offset = record.offset + 1

    async def subscribe_batches(
        self, topic: str, partition: int, offset: int, max_bytes: int = DEFAULT_FETCH_BYTES
    ) -> AsyncIterator[ReadResult]:
        """Raw whole batches from ``offset`` on, pushed by the daemon as they are appended.

        The first batch may start before ``offset`` (decode with ``min_offset``).
        gRPC flow control keeps the daemon at most a window ahead of the caller,
        so reading and decoding overlap without unbounded buffering. When the
        stream breaks with ``UNAVAILABLE`` (the daemon restarts), it is opened
        again after a backoff, from the offset after the last batch delivered,
        for up to ``retry_timeout_s`` per outage: nothing is skipped or repeated.
        """
        attempts = self._attempts(Retry.SAFE)
        while True:
            attempts.count += 1
            call = self._astub().SubscribeBatches(
                _fetch_request(topic, partition, offset, max_bytes), metadata=self._metadata
            )
            try:
                async for response in call:
                    data = bytes(response.record_batches)
                    offset = max(offset, span_of_whole_batches(data, offset)[1])
                    if attempts.count > 1:
                        attempts.reset()
                        self._back()
                    yield ReadResult(data, response.log_start_offset, response.high_watermark)
                return
            except grpc.RpcError as exc:
                delay = attempts.delay(exc)
                if delay is None or self._closed:
                    raise self._gave_up(exc, attempts.count) from None
                self._lost(exc, delay)
            finally:
                call.cancel()
            await asyncio.sleep(delay)

    # -- offsets and admin -----------------------------------------------------------------------

    def commit_offset(self, group: str, topic: str, partition: int, offset: int) -> None:
        """Durably record that ``group`` will next read ``offset`` of ``topic[partition]``."""
        request = pb.CommitRequest(group=group, topic=topic, partition=partition, offset=offset)
        self._call(self._stub.CommitOffset, request, retry=Retry.SAFE)  # the same offset twice is harmless

    def committed_offsets(self, group: str, topic: str, partitions: Sequence[int] = ()) -> dict[int, int]:
        """``{partition: committed offset}`` of ``group`` (all partitions when none are named).

        A partition the group never committed is absent.
        """
        request = pb.FetchCommittedRequest(group=group, topic=topic, partitions=list(partitions))
        response = self._call(self._stub.FetchCommittedOffsets, request, retry=Retry.SAFE)
        return {int(pid): int(offset) for pid, offset in response.offsets.items()}

    def offsets_for_timestamp(
        self, topic: str, timestamp_ms: int, partitions: Sequence[int] | None = None
    ) -> dict[int, int]:
        """``{partition: first offset whose record timestamp is >= timestamp_ms}`` (all partitions by default).

        A partition whose records are all older maps to its high watermark (as
        ``Broker.offset_for_timestamp``).
        """
        request = pb.OffsetsForTimestampRequest(
            topic=topic, partitions=list(partitions or ()), timestamp_ms=timestamp_ms
        )
        response = self._call(self._stub.OffsetsForTimestamp, request, retry=Retry.SAFE)
        return {int(pid): int(offset) for pid, offset in response.offsets.items()}

    def read_committed(self, group: str, topic: str, partition: int) -> int | None:
        """The committed offset of ``group`` on ``topic[partition]``, or None (as ``OffsetStore.read_committed``)."""
        return self.committed_offsets(group, topic, [partition]).get(partition)

    def create_topic(
        self,
        name: str,
        partitions: int | None = None,
        *,
        retention_ms: int | None = None,
        retention_bytes: int | None = None,
    ) -> None:
        create = pb.CreateTopic(
            name=name, partitions=partitions or 0, retention_ms=retention_ms, retention_bytes=retention_bytes
        )
        response = self._call(self._stub.Admin, pb.AdminRequest(create_topic=create))
        self._partitions[name] = int(response.topic.partitions)

    def delete_topic(self, name: str) -> None:
        self._partitions.pop(name, None)
        self._call(self._stub.Admin, pb.AdminRequest(delete_topic=pb.DeleteTopic(name=name)))

    def list_topics(self) -> list[str]:
        response = self._call(self._stub.Admin, pb.AdminRequest(list_topics=pb.ListTopics()), retry=Retry.SAFE)
        return list(response.topics)

    def describe_topic(self, name: str, *, create: bool = False) -> TopicDescription:
        request = pb.AdminRequest(describe_topic=pb.DescribeTopic(name=name, create_if_missing=create))
        description = _description(self._call(self._stub.Admin, request, retry=Retry.SAFE).topic)
        self._partitions[name] = description.settings.partitions
        return description

    def partitions_for(self, topic: str, *, create: bool = False) -> int:
        """Partition count of ``topic`` (cached after the first ask)."""
        cached = self._partitions.get(topic)
        return cached if cached is not None else len(self.describe_topic(topic, create=create).partitions)

    async def _adescribe_count(self, topic: str) -> int:
        request = pb.AdminRequest(describe_topic=pb.DescribeTopic(name=topic, create_if_missing=True))
        description = _description((await self._acall("Admin", request, retry=Retry.SAFE)).topic)
        self._partitions[topic] = description.settings.partitions
        return description.settings.partitions

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (a consumer's heartbeat thread stops then)."""
        return self._closed

    def close(self) -> None:
        """Close the channels. Async channels are closed without waiting for their calls."""
        if self._closed:
            return
        self._closed = True
        self._channel.close()
        for loop, (channel, _) in list(self._aio.items()):
            if not loop.is_closed():
                _close_soon(loop, channel.close)
        self._aio.clear()

    def __enter__(self) -> RemoteBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> RemoteBroker:
        return self

    async def __aexit__(self, *exc: object) -> None:
        channel = self._aio.pop(asyncio.get_running_loop(), None)
        if channel is not None:
            await channel[0].close()
        self.close()


def _close_soon(loop: asyncio.AbstractEventLoop, close: Callable[[], Any]) -> None:
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        loop.create_task(close())
    elif loop.is_running():
        asyncio.run_coroutine_threadsafe(close(), loop)
    # A stopped loop's channel is released with the loop.


def _produce_request(topic: str, partition: int | None, batch: bytes | bytearray) -> pb.ProduceRequest:
    return pb.ProduceRequest(topic=topic, partition=partition, record_batch=bytes(batch))


def _fetch_request(topic: str, partition: int, offset: int, max_bytes: int) -> pb.FetchRequest:
    if offset < 0:
        raise InvalidArgumentError(f"offset must be non-negative, got {offset}")
    return pb.FetchRequest(topic=topic, partition=partition, offset=offset, max_bytes=max_bytes, raw_batches=True)


def _wait_request(topic: str, partition: int, offset: int, wait_s: float) -> pb.FetchRequest:
    # max_bytes=1: the answer carries at most one batch; the caller only looks at high_watermark.
    request = _fetch_request(topic, partition, offset, 1)
    request.max_wait_ms = max(0, int(wait_s * 1000))
    return request


def _deadline(positions: dict[tuple[str, int], int], timeout: float | None) -> float | None:
    if not positions:
        raise InvalidArgumentError("nothing to wait for: no partitions given")
    return None if timeout is None else time.monotonic() + max(0.0, timeout)


def _wait_slice(deadline: float | None) -> float:
    return LONG_POLL_S if deadline is None else max(0.0, min(LONG_POLL_S, deadline - time.monotonic()))


def _answered(answers: queue.SimpleQueue[tuple[Any, int]], offset: int, call: Any) -> None:
    answers.put((call, offset))


def _arrived(call: Any, offset: int) -> bool:
    """Whether a finished long-poll Fetch saw data past ``offset`` (a failed one counts: go and look)."""
    try:
        return int(call.result(timeout=0).high_watermark) > offset
    except (grpc.RpcError, grpc.FutureCancelledError, grpc.FutureTimeoutError):
        return True


def _place(results: list[tuple[int, int]], indices: list[int], response: pb.ProduceResponse) -> None:
    pid, base = int(response.partition), int(response.base_offset)
    for delta, i in enumerate(indices):
        results[i] = (pid, base + delta)


def _description(info: pb.TopicInfo) -> TopicDescription:
    if not info.name:
        raise UnknownTopicError("?")
    stats = [
        PartitionStats(
            log_start_offset=p.log_start_offset,
            next_offset=p.next_offset,
            high_watermark=p.high_watermark,
            segment_count=p.segment_count,
            size_bytes=p.size_bytes,
            active_segment_bytes=p.active_segment_bytes,
        )
        for p in info.partition_stats
    ]
    settings = TopicSettings(info.partitions, info.retention_ms, info.retention_bytes)
    return TopicDescription(info.name, settings, stats)
