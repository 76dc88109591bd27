"""What a request handler sees: the broker, the listener's settings, the connection, the authorizer."""

from __future__ import annotations

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

if TYPE_CHECKING:
    from lkstream.broker.broker import Broker
    from lkstream.broker.groups.classic import ClassicGroups
    from lkstream.kafka.metadata_cache import MetadataCache

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
    authorizer: Authorizer = field(default_factory=AllowAll)
    sasl: SaslAuthenticator | None = None


@dataclass
class ServerState:
    """Shared by every connection of one listener."""

    broker: Broker
    settings: ListenerSettings
    groups: ClassicGroups
    metadata: MetadataCache
    advertised_host: str
    advertised_port: int


@dataclass
class RequestContext:
    """One connection's view: its principal and SASL state, plus the shared server state."""

    server: ServerState
    client_host: str
    principal: Principal = ANONYMOUS
    sasl_mechanism: str | None = None
    sasl: SaslServer | None = None

    @property
    def broker(self) -> Broker:
        return self.server.broker

    def allowed(self, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        """The one place every handler asks before it calls the broker."""
        return self.server.settings.authorizer.authorize(self.principal, operation, resource_type, name)
