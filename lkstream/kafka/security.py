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
"""

from __future__ import annotations

from typing import Final, Literal, Protocol

from lkstream.errors import AuthenticationError
from lkstream.security.acl import CLUSTER_NAME
from lkstream.security.authorizer import AllowAll, Authorizer
from lkstream.security.principal import ANONYMOUS, Principal
from lkstream.security.sasl import SaslServer

#: The operations and resource types handlers name (the values of lkstream.security's enums).
Operation = Literal["read", "write", "create", "delete", "describe", "admin"]
ResourceType = Literal["topic", "group", "cluster"]

#: The name of the one cluster resource in ACL entries.
CLUSTER_RESOURCE: Final = CLUSTER_NAME

#: What :meth:`SaslServer.step` raises when the client's credentials are refused.
SaslAuthenticationFailed = AuthenticationError


class SaslAuthenticator(Protocol):
    """Offers SASL mechanisms and makes a :class:`SaslServer` for one of them."""

    @property
    def mechanisms(self) -> tuple[str, ...]: ...

    def new(self, mechanism: str) -> SaslServer:
        """A server for ``mechanism`` (raises :class:`SaslAuthenticationFailed` if it is not offered)."""
        ...


__all__ = [
    "ANONYMOUS",
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
