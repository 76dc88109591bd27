"""What a request handler sees: the broker, the listener's settings, the connection, the authorizer."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lkstream.kafka.security import (
    ANONYMOUS,
    AllowAll,
    Authorizer,
    Operation,
    Principal,
    ResourceType,
    SaslAuthenticator,
    SaslServer,
)
from lkstream.kafka.writer import SendStats
from lkstream.listeners import AddressLimit, ThrottledLog
from lkstream.security.acl import Operation as AclOperation
from lkstream.security.acl import ResourceType as AclResourceType

if TYPE_CHECKING:
    from lkstream.broker.admission import AdmissionBudget
    from lkstream.broker.broker import Broker
    from lkstream.broker.groups.classic import ClassicGroups
    from lkstream.kafka.metadata_cache import MetadataCache
    from lkstream.kafka.topic_ids import TopicIds

#: Handlers name operations and resource types as text; the authorizer takes lkstream.security's enums.
_OPERATIONS = {op.value: op for op in AclOperation}
_RESOURCE_TYPES = {kind.value: kind for kind in AclResourceType}

#: The one node of this single-node cluster.
NODE_ID = 0
CLUSTER_ID = "lkstream"


@dataclass
class ListenerSettings:
    """Settings of one Kafka listener (see ``server.kafka_*`` in docs/configuration.md)."""

    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str | None = None  # what Metadata and FindCoordinator return; default the bind host
    max_connections: int = 128  # server.kafka_max_connections: more are closed at accept
    max_frame_bytes: int = 100 * 1024 * 1024
    max_inflight_requests: int = 16  # per connection: pipelined produce requests awaiting their ack
    idle_timeout_s: float = 600.0  # Kafka's connections.max.idle.ms
    read_timeout_s: float = 30.0  # a request's bytes must follow its size prefix within this (server.read_timeout_s)
    #: Connections one peer address may hold (server.max_connections_per_address); None: only the cap.
    max_connections_per_address: AddressLimit | None = None
    #: With ``sasl``: time from accept to a completed authentication (server.authentication_timeout_s); no
    #: request extends it, so a client that never logs in cannot keep a slot with ApiVersions.
    authentication_timeout_s: float = 10.0
    #: Time a TLS handshake may take (server.handshake_timeout_s; asyncio's own default is 60 s).
    handshake_timeout_s: float = 10.0
    #: With ``sasl``: the budget requests are admitted from until their connection authenticated
    #: (server.unauthenticated_admitted_bytes); None: the broker's own.
    unauthenticated_admission: AdmissionBudget | None = None
    authorizer: Authorizer = field(default_factory=AllowAll)
    sasl: SaslAuthenticator | None = None
    #: The topic-id switch: serve Metadata v10-12 and KIP-848's ConsumerGroupHeartbeat, which name
    #: topics by their persisted ids (lkstream.kafka.topic_ids). Off: every API stays below its
    #: topic-id versions, as before topic ids were persisted.
    topic_ids: bool = True
    #: TLS (SSL, or SASL_SSL with ``sasl``); None: plaintext.
    ssl_context: ssl.SSLContext | None = None
    #: A number that moves when the authorizer's answers may change (cached Metadata answers depend on it).
    acl_version: Callable[[], int] = lambda: 0
    #: Told each Produce's seconds from its frame read to its answer made (the daemon's lk_produce_latency_seconds).
    observe_produce: Callable[[float], None] | None = None
    #: Told each Fetch's seconds from its frame read to its answer made, its wait included
    #: (the daemon's lk_fetch_latency_seconds).
    observe_fetch: Callable[[float], None] | None = None
    #: Send stored batches with sendfile(2) on plaintext connections (server.kafka_zero_copy); off,
    #: or on TLS, Fetch reads them into memory (CRC-checked) and writes them (lkstream.kafka.writer).
    zero_copy: bool = True


@dataclass
class ServerState:
    """Shared by every connection of one listener."""

    broker: Broker
    settings: ListenerSettings
    groups: ClassicGroups
    metadata: MetadataCache
    advertised_host: str
    advertised_port: int
    versions: dict[int, tuple[int, int]]  # api key -> (min, max) served (protocol.version_table)
    topic_ids: TopicIds
    send_stats: SendStats = field(default_factory=SendStats)
    #: Why connections are closed (malformed frames, timeouts): one line per kind and interval.
    connection_log: ThrottledLog = field(default_factory=lambda: ThrottledLog(logging.getLogger("lkstream.kafka")))


@dataclass
class RequestContext:
    """One connection's view: its principal and SASL state, plus the shared server state."""

    server: ServerState
    client_host: str
    principal: Principal = ANONYMOUS
    sasl_mechanism: str | None = None
    sasl: SaslServer | None = None
    #: A SASL exchange failed: this connection cannot authenticate any more (the client reconnects).
    sasl_failed: bool = False
    #: Fetch may answer with file ranges sent by sendfile(2) (a plaintext connection, and the listener allows it).
    zero_copy: bool = False

    @property
    def broker(self) -> Broker:
        return self.server.broker

    @property
    def owner(self) -> str | None:
        """Who owns the group members this connection joins: its principal's name (None: auth off)."""
        return None if self.principal.anonymous else self.principal.name

    def allowed(self, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        """The one place every handler asks before it calls the broker."""
        return self.server.settings.authorizer.authorize(
            self.principal, _OPERATIONS[operation], _RESOURCE_TYPES[resource_type], name
        )

    def allowed_any(self, operation: Operation, resource_type: ResourceType) -> bool:
        """Whether the principal may do ``operation`` on at least one resource of ``resource_type``."""
        return self.server.settings.authorizer.authorize_any(
            self.principal, _OPERATIONS[operation], _RESOURCE_TYPES[resource_type]
        )
