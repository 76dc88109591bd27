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

Security: ``tls=`` (True for the system's CAs, a CA file path, or a
:class:`~lkstream.security.tls.ClientTls` with a client certificate) makes every
channel TLS; ``token=`` sends ``authorization: Bearer <token>`` with every call. A
token is never sent in plaintext beyond this host: with a non-loopback address it
needs TLS. A refused token raises :class:`~lkstream.errors.AuthenticationError`
(from ``connect`` already), a missing permission
:class:`~lkstream.errors.AuthorizationError` naming it.

The Kafka lane (:mod:`lkstream.client.remote.kafka_lane`): when the daemon has a Kafka
listener, ``produce_many``, ``produce_many_sync`` and ``produce_batch_sync`` send
their batches to it as Kafka Produce requests, and ``fetch`` reads there with a
Kafka Fetch, with fewer thread hand-offs per call than gRPC
(docs/adr/0005-kafka-lane.md). The lane uses
TLS exactly when the gRPC channel does (same CA, client certificate and server
name), and the token with SASL OAUTHBEARER where the listener wants SASL; a listener
this client could not reach as securely as its gRPC channel is not used.
Anything the lane cannot carry (a listener gone, a batch or a read refused) goes
through gRPC, whose errors and retries stay the contract. ``kafka_lane=False`` turns
the lane off; :attr:`RemoteBroker.kafka_lane` says where it goes.

Thread-safety: the blocking methods may be called from any thread. A blocking
produce or fetch runs in the caller's thread, on the lane's sockets (at most four,
one per call at a time) or, for a produce, on the synchronous gRPC channel (its ``ProduceStream`` shared by
every thread, :mod:`lkstream.client.remote.sync`); the async produce runs on the
caller's event loop (one lane connection per loop); the other async methods and a
blocking fetch use ``grpc.aio`` streams kept on the client's own event-loop thread.
``close()`` ends them all and their threads.

Split by role: this module is produce, fetch, admin and the connection's life;
:mod:`lkstream.client.remote.calls` the call plumbing (retries, errors),
:mod:`lkstream.client.remote.waits` long polls and subscriptions, and
:mod:`lkstream.client.remote.groups` the consumer-group calls.
"""

from __future__ import annotations

import asyncio
import random
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from lkstream.broker.partitioner import StickyPartitioner
from lkstream.client.remote.calls import DEFAULT_FETCH_BYTES, fetch_request
from lkstream.client.remote.cluster import RemoteClusterCalls
from lkstream.client.remote.groups import RemoteGroupCalls
from lkstream.client.remote.kafka_lane import (
    AsyncLane,
    BlockingLane,
    LaneSecurity,
    LaneState,
    LaneTimeout,
    LaneUnavailable,
)
from lkstream.client.remote.produce import RemoteProduce
from lkstream.client.remote.streams import STREAM_RPCS, LoopThread, OrderedStream
from lkstream.client.remote.sync import SyncStreams
from lkstream.client.remote.waits import RemoteWaits
from lkstream.client.remote.wire import ClientStub
from lkstream.client.retry import (
    DEFAULT_BACKOFF_MAX_S,
    DEFAULT_RETRY_TIMEOUT_S,
    Retry,
    normalise_address,
)
from lkstream.errors import BrokerUnavailableError, InvalidArgumentError, UnknownTopicError, no_such_partition
from lkstream.format.codec import Compression, Record, read_records
from lkstream.security.access import AUTHORIZATION_KEY
from lkstream.security.loopback import is_loopback_address
from lkstream.security.tls import ClientTls, client_tls
from lkstream.storage.log import PartitionStats, ReadResult
from lkstream.storage.topic_config import ConfigEntry, ConfigSource, ConfigSynonym, ConfigType, TopicConfig
from lkstream.storage.topics import TopicSettings
from lkstream.wire._proto import messaging_pb2 as pb
from lkstream.wire.contract import PROTOCOL_VERSION, VERSION_METADATA_KEY

if TYPE_CHECKING:
    # The embedded broker's module costs about 0.1 s to import; a client (a Spark worker) needs one of its
    # types, and only when it describes a topic (imported there).
    from lkstream.broker.topics import TopicDescription

T = TypeVar("T")

#: Target size of one client-encoded batch (a larger call is split).
DEFAULT_BATCH_BYTES = 1024 * 1024
#: Largest gRPC message the client sends or accepts.
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
#: The first backoff of a call failing with UNAVAILABLE (doubling, capped at ``retry_backoff_max_ms``).
DEFAULT_RETRY_BACKOFF_MS = 100
_CLIENT_NAME = "lkstream-python"
# gRPC's own reconnect backoff (default 1 s growing to 120 s) would outlast our retries after a restart.
_RECONNECT_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


def connect(address: str = "127.0.0.1:9090", **options: Any) -> RemoteBroker:
    """Connect to the daemon at ``address`` and check the protocol version; see :class:`RemoteBroker`."""
    return RemoteBroker(address, **options)


class RemoteBroker(RemoteWaits, RemoteGroupCalls, RemoteClusterCalls, RemoteProduce):
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
        token: str | None = None,
        tls: bool | str | ClientTls | None = None,
        kafka_lane: bool = True,
    ) -> None:
        if (retries is not None and retries < 0) or retry_backoff_ms < 0 or retry_backoff_max_ms < 0:
            raise InvalidArgumentError("retries, retry_backoff_ms and retry_backoff_max_ms must be non-negative")
        if retry_timeout_s is not None and retry_timeout_s < 0:
            raise InvalidArgumentError("retry_timeout_s must be non-negative (or None: retry for ever)")
        address = normalise_address(address)
        self._tls = client_tls(tls)
        if token is not None and self._tls is None and not is_loopback_address(address):
            raise InvalidArgumentError(
                f"refusing to send a token in plaintext to {address}: connect with tls=... (or use a loopback address)"
            )
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
        self._options: list[tuple[str, Any]] = [
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
            *_RECONNECT_OPTIONS,
        ]
        if self._tls is not None and self._tls.server_name:
            self._options.append(("grpc.ssl_target_name_override", self._tls.server_name))
        self._credentials = _channel_credentials(self._tls)
        self._metadata: tuple[tuple[str, str], ...] = ((VERSION_METADATA_KEY, str(protocol_version)),)
        if token is not None:
            self._metadata += ((AUTHORIZATION_KEY, f"Bearer {token}"),)
        self._channel = (
            grpc.insecure_channel(address, options=self._options)
            if self._credentials is None
            else grpc.secure_channel(address, self._credentials, options=self._options)
        )
        self._stub = ClientStub(self._channel)
        self._aio: dict[asyncio.AbstractEventLoop, tuple[grpc.aio.Channel, Any]] = {}
        self._partitions: dict[str, int] = {}
        self._sticky = StickyPartitioner()
        self._streams: dict[str, OrderedStream] = {}
        self._unstreamed: set[str] = set()
        self._parked: dict[tuple[str, int], tuple[float, int, ReadResult]] = {}
        self._parked_lock = threading.Lock()
        self._sync_loop = LoopThread(f"lkstream-client-{address}")
        self._sync_streams = SyncStreams(self._open_sync_stream, f"lkstream-client-{address}")
        self._closed = False
        self.max_message_bytes: int | None = None
        # The Kafka lane (lkstream.client.remote.kafka_lane), with this client's TLS settings and token.
        self._lane_wanted = kafka_lane
        self._token = token
        self._lane_tls: ssl.SSLContext | None = None  # made once, when a listener with TLS is offered
        self._lane_state, self._lane = self._lanes()
        try:
            self.server_protocol_version = self._handshake(protocol_version, self.connect_timeout)
        except BaseException:
            self._channel.close()
            raise

    def _open_sync_stream(self, rpc: str, requests: Iterator[Any]) -> Any:
        return getattr(self._stub, rpc)(requests, metadata=self._metadata)

    def _handshake(self, version: int, timeout: float) -> int:
        request = pb.HandshakeRequest(client_protocol_version=version, client_name=_CLIENT_NAME)
        response: pb.HandshakeResponse = self._call(
            self._stub.Handshake, request, timeout=timeout, retry=Retry.SAFE, deadline=time.monotonic() + timeout
        )
        self.max_message_bytes = int(response.max_message_bytes) or None
        # An older daemon names no streams: its unary twins are used instead.
        self._unstreamed = set(STREAM_RPCS) - set(response.streams)
        self._learn_lane(response)
        self._reached = True
        return int(response.server_protocol_version)

    @property
    def kafka_lane(self) -> str | None:
        """``host:port`` of the daemon's Kafka listener that produce calls and blocking fetches go to, or
        None (all on gRPC).

        Learned at connect (and again after a lost lane connection); ``connect(..., kafka_lane=False)``
        keeps everything on gRPC.
        """
        return self._lane_state.address or None

    def _lanes(self) -> tuple[LaneState, BlockingLane]:
        state = LaneState("")
        self._async_lanes: dict[asyncio.AbstractEventLoop, AsyncLane] = {}
        self._async_lanes_lock = threading.Lock()  # each thread's asyncio.run() adds its loop
        return state, BlockingLane(state, connect_timeout=self.connect_timeout, timeout=self.timeout)

    def _learn_lane(self, response: pb.HandshakeResponse) -> None:
        address = response.kafka_lane_address if self._lane_wanted else ""
        security = self._lane_security(address, response) if address else None
        self._lane_state.confirmed(
            address if security is not None else "",
            int(response.max_batch_bytes) or self._lane_state.request_bytes,
            security or LaneSecurity(),
        )

    def _lane_security(self, address: str, response: pb.HandshakeResponse) -> LaneSecurity | None:
        """How this client reaches the listener Handshake named, or None where it must not use it.

        The lane carries what this client's gRPC channel would: TLS exactly when the channel has
        TLS (verified with the same CA and server name), and for a listener with SASL the
        client's token, which goes in plaintext only to a loopback address, as on gRPC.
        """
        if response.kafka_lane_tls != (self._tls is not None):
            return None
        token = self._token if response.kafka_lane_sasl else None
        if response.kafka_lane_sasl and token is None:
            return None
        if self._tls is None:
            return LaneSecurity(token=token) if token is None or is_loopback_address(address) else None
        if self._lane_tls is None:
            try:
                self._lane_tls = self._tls.ssl_context()
            except InvalidArgumentError:
                return None  # files gRPC could read but ssl cannot: everything stays on gRPC
        return LaneSecurity(self._lane_tls, self._tls.server_name, token)

    def _confirm_lane(self) -> None:
        """Ask the daemon again where its Kafka listener is (after a lane connection was lost)."""
        request = pb.HandshakeRequest(client_protocol_version=self.server_protocol_version, client_name=_CLIENT_NAME)
        self._learn_lane(self._call(self._stub.Handshake, request, retry=Retry.SAFE))

    async def _aconfirm_lane(self) -> None:
        request = pb.HandshakeRequest(client_protocol_version=self.server_protocol_version, client_name=_CLIENT_NAME)
        self._learn_lane(await self._acall("Handshake", request, retry=Retry.SAFE))

    def _async_lane(self) -> AsyncLane:
        loop = asyncio.get_running_loop()
        lane = self._async_lanes.get(loop)
        if lane is not None:
            return lane
        with self._async_lanes_lock:
            if self._closed:  # close() forgot the lanes: a new one would never be closed
                raise InvalidArgumentError("this RemoteBroker is closed")
            # Each asyncio.run() is a new loop: close and forget the lanes of closed ones.
            for old in [old for old in self._async_lanes if old.is_closed()]:
                self._async_lanes.pop(old).close_now()
            lane = self._async_lanes[loop] = AsyncLane(
                self._lane_state, connect_timeout=self.connect_timeout, timeout=self.timeout
            )
        return lane

    # -- fetch -----------------------------------------------------------------------------------

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = DEFAULT_FETCH_BYTES) -> ReadResult:
        """Raw record batches of ``topic[partition]`` from ``offset``, with log bounds (as ``Broker.fetch``).

        Read through the Kafka lane when the daemon offers one (from the caller's thread, a
        plain socket); else, and for every read the listener refuses, asked on the daemon's
        FetchStream (from the client's loop thread, where a 1 MiB answer costs less than on the
        synchronous channel); an older daemon gets a unary Fetch.
        """
        parked = self._parked_read(topic, partition, offset, max_bytes)
        if parked is not None:
            return parked
        if self._lane_state.address and _fits_kafka_fetch(topic, partition, offset, max_bytes):
            read = self._lane_fetch(topic, partition, offset, max_bytes)
            if read is not None:
                return read
        request = fetch_request(topic, partition, offset, max_bytes)
        if "FetchStream" in self._unstreamed:
            response = self._call(self._stub.Fetch, request, retry=Retry.SAFE)
        else:
            (response,) = self._blocking(self._astreamed("FetchStream", [request], Retry.SAFE))
        return _read_result(response)

    def _lane_fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> ReadResult | None:
        """The read through the Kafka lane, or None: it could not carry it, or the daemon refused it (then
        the gRPC fetch raises the error with its class and fields)."""
        if self._lane_state.stale:
            self._confirm_lane()
        try:
            answer = self._lane.fetch(topic, partition, offset, max_bytes)
        except LaneTimeout as exc:
            raise BrokerUnavailableError(self.address, str(exc)) from None  # as gRPC's deadline
        except LaneUnavailable:
            return None
        if answer.error_code:
            return None
        return ReadResult(answer.records, answer.log_start_offset, answer.high_watermark)

    async def fetch_async(
        self, topic: str, partition: int, offset: int, max_bytes: int = DEFAULT_FETCH_BYTES
    ) -> ReadResult:
        """Async twin of :meth:`fetch`."""
        parked = self._parked_read(topic, partition, offset, max_bytes)
        if parked is not None:
            return parked
        request = fetch_request(topic, partition, offset, max_bytes)
        (response,) = await self._astreamed("FetchStream", [request], Retry.SAFE)
        return _read_result(response)

    def read_from(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_msgs: int | None = None,
        max_bytes: int = DEFAULT_FETCH_BYTES,
    ) -> list[Record]:
        """Decoded records of ``topic[partition]`` from ``offset`` (as ``Broker.read_from``)."""

        def fetch(at: int) -> tuple[bytes, int]:
            result = self.fetch(topic, partition, at, max_bytes)
            return result.data, result.high_watermark

        return read_records(fetch, topic, partition, offset, max_msgs)[0]

    # -- offsets and admin -----------------------------------------------------------------------

    def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        """``(log_start_offset, high_watermark)`` of ``topic[partition]`` (one Admin describe)."""
        stats = self.describe_topic(topic).partitions
        if not 0 <= partition < len(stats):
            raise no_such_partition(topic, partition, len(stats))
        return stats[partition].log_start_offset, stats[partition].high_watermark

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
        configs: Mapping[str, str] | None = None,
        validate_only: bool = False,
    ) -> None:
        """Create a topic (``configs``: Kafka's topic configs by name, string values); see ``Broker.create_topic``."""
        create = pb.CreateTopic(
            name=name,
            partitions=partitions or 0,
            retention_ms=retention_ms,
            retention_bytes=retention_bytes,
            configs=dict(configs or {}),
            validate_only=validate_only,
        )
        response = self._call(self._stub.Admin, pb.AdminRequest(create_topic=create))
        if not validate_only:
            self._partitions[name] = int(response.topic.partitions)

    def alter_topic_configs(
        self,
        name: str,
        set: Mapping[str, str] | None = None,
        delete: Iterable[str] = (),
        *,
        validate_only: bool = False,
    ) -> TopicConfig:
        """Set and delete config overrides of ``name``; the overrides after (see ``Broker.alter_topic_configs``)."""
        alter = pb.AlterTopicConfigs(name=name, set=dict(set or {}), delete=list(delete), validate_only=validate_only)
        response = self._call(self._stub.Admin, pb.AdminRequest(alter_topic_configs=alter))
        return _description(response.topic).configs

    def create_partitions(self, name: str, count: int, *, validate_only: bool = False) -> None:
        """Grow ``name`` to ``count`` partitions (see ``Broker.create_partitions``)."""
        grow = pb.CreatePartitions(name=name, count=count, validate_only=validate_only)
        response = self._call(self._stub.Admin, pb.AdminRequest(create_partitions=grow))
        self._partitions[name] = int(response.topic.partitions)

    def describe_topic_configs(self, name: str) -> list[ConfigEntry]:
        """Every topic config of ``name``, its value, source and synonyms (``Broker.describe_topic_configs``)."""
        request = pb.AdminRequest(describe_topic=pb.DescribeTopic(name=name, include_config_entries=True))
        info = self._call(self._stub.Admin, request, retry=Retry.SAFE).topic
        return [_config_entry(e) for e in info.config_entries]

    def delete_topic(self, name: str) -> None:
        self._partitions.pop(name, None)
        self._call(self._stub.Admin, pb.AdminRequest(delete_topic=pb.DeleteTopic(name=name)))

    def delete_records(self, topic: str, before: Mapping[int, int]) -> dict[int, int]:
        """Delete the records of ``topic`` below ``before[partition]`` (as ``Broker.delete_records``)."""
        request = pb.AdminRequest(delete_records=pb.DeleteRecords(topic=topic, before=dict(before)))
        # Safe to retry: moving a log start to the same offset again changes nothing.
        response = self._call(self._stub.Admin, request, retry=Retry.SAFE)
        return {int(pid): int(low) for pid, low in response.low_watermarks.items()}

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

    def _describe_count(self, topic: str) -> int:
        return self.describe_topic(topic, create=True).settings.partitions

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
        self._sync_streams.close()
        self._close_streams()
        self._lane.close()
        with self._async_lanes_lock:
            lanes, self._async_lanes = self._async_lanes, {}
        for loop, lane in lanes.items():
            if loop.is_closed():
                lane.close_now()
            else:
                loop.call_soon_threadsafe(lane.close)  # a transport is closed on its own loop
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


def _channel_credentials(tls: ClientTls | None) -> grpc.ChannelCredentials | None:
    if tls is None:
        return None
    pem = tls.pem()
    return grpc.ssl_channel_credentials(
        root_certificates=pem.root_certificates, private_key=pem.private_key, certificate_chain=pem.certificate_chain
    )


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


def _read_result(response: pb.FetchResponse) -> ReadResult:
    return ReadResult(response.record_batches, response.log_start_offset, response.high_watermark)


def _description(info: pb.TopicInfo) -> TopicDescription:
    from lkstream.broker.topics import TopicDescription  # lazily: see the TYPE_CHECKING import

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
            dirty_ratio=p.dirty_ratio if p.dirty_ratio >= 0 else None,
        )
        for p in info.partition_stats
    ]
    settings = TopicSettings(info.partitions, info.retention_ms, info.retention_bytes)
    return TopicDescription(info.name, settings, stats, configs=TopicConfig.from_json(dict(info.configs)))


def _config_entry(entry: pb.TopicConfigEntry) -> ConfigEntry:
    synonyms = tuple(ConfigSynonym(s.name, s.value, ConfigSource[s.source]) for s in entry.synonyms)
    return ConfigEntry(
        entry.name, entry.value, ConfigSource[entry.source], ConfigType[entry.type], entry.documentation, synonyms
    )


def _fits_kafka_fetch(topic: str, partition: int, offset: int, max_bytes: int) -> bool:
    """Whether a Kafka Fetch v5 can ask what gRPC's Fetch would (else gRPC answers, with its errors).

    ``max_bytes`` 0 means the default size on gRPC and nothing at all in Kafka; the others are the
    widths of Kafka's fields (int32 partition and limit, int64 offset, int16-length topic name).
    """
    return (
        0 < max_bytes < 2**31
        and 0 <= partition < 2**31
        and 0 <= offset < 2**63
        and len(topic.encode("utf-8", "surrogatepass")) < 2**15
    )
