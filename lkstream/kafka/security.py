"""The security seams of the Kafka listener: principals, the authorizer, SASL servers, TLS.

The listener uses :mod:`lkstream.security`, like the gRPC and HTTP surfaces:

* every request handler asks :meth:`RequestContext.allowed` (in
  :mod:`lkstream.kafka.context`) before it calls the broker; that one method calls
  the configured :class:`Authorizer` with the connection's principal. Without
  configuration every connection is :data:`ANONYMOUS` and :class:`AllowAll`
  permits everything, which is why the listener binds loopback by default;
* SASL: a :class:`SaslAuthenticator` (the daemon's ``Access.sasl(...)``, a
  :class:`~lkstream.security.sasl.SaslServerFactory`) names its mechanisms and
  makes one :class:`SaslServer` per authentication; SaslHandshake picks the
  mechanism and each SaslAuthenticate feeds the client's bytes to
  :meth:`SaslServer.step`, which raises :class:`SaslAuthenticationFailed` to
  refuse. When the exchange completes the connection's principal becomes
  :attr:`SaslServer.principal`. With an authenticator configured, a connection may
  send only ApiVersions and the SASL requests until it authenticated;
* TLS: ``ListenerSettings.ssl_context`` (the daemon's, reloaded in place when the
  certificate files change) makes the listener SSL, or SASL_SSL with SASL.

Resource names are Kafka's: topic and group names, and the cluster (:data:`CLUSTER_RESOURCE`).
:data:`API_ACCESS` says what each API the listener serves needs; the handlers ask it
with ``ctx.allowed`` and answer Kafka's error codes (TOPIC_, GROUP_ and
CLUSTER_AUTHORIZATION_FAILED). A test sends every API with each needed permission
left out, and fails for an API without an entry here (tests/security).
"""

from __future__ import annotations

from typing import Final, Literal, Protocol

from lkstream.errors import AuthenticationError
from lkstream.kafka.protocol import ApiKey
from lkstream.security.acl import CLUSTER_NAME
from lkstream.security.authorizer import AllowAll, Authorizer
from lkstream.security.principal import ANONYMOUS, Principal
from lkstream.security.sasl import SaslServer

#: The operations and resource types handlers name (the values of lkstream.security's enums).
Operation = Literal["read", "write", "create", "delete", "describe", "admin", "alter_configs", "describe_configs"]
ResourceType = Literal["topic", "group", "cluster"]

#: The name of the one cluster resource in ACL entries.
CLUSTER_RESOURCE: Final = CLUSTER_NAME

#: What :meth:`SaslServer.step` raises when the client's credentials are refused.
SaslAuthenticationFailed = AuthenticationError


#: What each API needs (docs/kafka.md, "Security"); the refusal is the error code in brackets.
API_ACCESS: Final[dict[int, str]] = {
    ApiKey.API_VERSIONS: "nothing (before authentication)",
    ApiKey.SASL_HANDSHAKE: "nothing (before authentication)",
    ApiKey.SASL_AUTHENTICATE: "nothing (before authentication)",
    ApiKey.PRODUCE: "write on the topic [TOPIC]; a missing topic is not auto-created without create on it",
    ApiKey.FETCH: "read on the topic [TOPIC]",
    ApiKey.LIST_OFFSETS: "describe on the topic [TOPIC]",
    ApiKey.METADATA: "describe on each topic named [TOPIC], create to auto-create it; all topics: filtered",
    ApiKey.OFFSET_COMMIT: "read on the group [GROUP] and on each topic [TOPIC]; "
    "a standalone commit that moves an offset back: admin on the cluster [CLUSTER]",
    ApiKey.OFFSET_FETCH: "describe on the group [GROUP] and on each topic [TOPIC]; all topics: filtered",
    ApiKey.FIND_COORDINATOR: "describe on the group [GROUP]",
    ApiKey.JOIN_GROUP: "read on the group [GROUP]; a member id only by the principal that joined with it",
    ApiKey.SYNC_GROUP: "read on the group [GROUP]; the member's own principal",
    ApiKey.HEARTBEAT: "read on the group [GROUP]; the member's own principal",
    ApiKey.LEAVE_GROUP: "read on the group [GROUP]; the member's own principal",
    ApiKey.DESCRIBE_GROUPS: "describe on the group [GROUP]",
    ApiKey.LIST_GROUPS: "nothing: lists only groups the principal may describe",
    ApiKey.DELETE_GROUPS: "delete on the group [GROUP]",
    ApiKey.OFFSET_DELETE: "delete on the group [GROUP] and read on each topic [TOPIC]",
    ApiKey.CREATE_TOPICS: "create on the topic (or on the cluster) [TOPIC]",
    ApiKey.DELETE_TOPICS: "delete on the topic [TOPIC]",
    ApiKey.DELETE_RECORDS: "delete on the topic [TOPIC]",
    ApiKey.CREATE_PARTITIONS: "create on the topic [TOPIC]",
    ApiKey.INIT_PRODUCER_ID: "write on at least one topic [CLUSTER]; transactional ids are refused",
    ApiKey.DESCRIBE_CONFIGS: "describe_configs on the topic [TOPIC] (describe allows it too); "
    "broker configs: describe_configs on the cluster [CLUSTER]",
    ApiKey.ALTER_CONFIGS: "alter_configs on the topic [TOPIC]; broker configs: alter_configs on the cluster [CLUSTER]",
    ApiKey.INCREMENTAL_ALTER_CONFIGS: "alter_configs on the topic [TOPIC]; "
    "broker configs: alter_configs on the cluster [CLUSTER]",
    ApiKey.DESCRIBE_CLUSTER: "nothing: the brokers and cluster id, as Metadata answers them",
    ApiKey.LIST_PARTITION_REASSIGNMENTS: "describe on the cluster [CLUSTER]",
    ApiKey.CONSUMER_GROUP_HEARTBEAT: "read on the group [GROUP], then describe on each subscribed topic [TOPIC]; "
    "a member id only by the principal that joined with it",
}


class SaslAuthenticator(Protocol):
    """Offers SASL mechanisms and makes a :class:`SaslServer` for one of them."""

    @property
    def mechanisms(self) -> tuple[str, ...]: ...

    def new(self, mechanism: str, address: str | None = None) -> SaslServer:
        """A server for ``mechanism`` talking to a client at ``address`` (raises
        :class:`SaslAuthenticationFailed` if it is not offered)."""
        ...


__all__ = [
    "ANONYMOUS",
    "API_ACCESS",
    "CLUSTER_RESOURCE",
    "AllowAll",
    "Authorizer",
    "Operation",
    "Principal",
    "ResourceType",
    "SaslAuthenticationFailed",
    "SaslAuthenticator",
    "SaslServer",
]
