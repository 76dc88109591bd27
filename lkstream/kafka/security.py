"""The security seams of the Kafka listener: principals, the authorizer, SASL servers.

Every request handler asks :meth:`RequestContext.allowed` (in
:mod:`lkstream.kafka.context`) before it calls the broker; that one method
calls the configured :class:`Authorizer`. Without configuration every
connection is :data:`ANONYMOUS` and :class:`AllowAll` permits everything, which
is why the listener binds loopback by default.

SASL: a :class:`SaslAuthenticator` names its mechanisms and starts one
:class:`SaslServer` per authentication; SaslHandshake picks the mechanism and
each SaslAuthenticate feeds the client's bytes to :meth:`SaslServer.step`.
When the exchange completes the connection's principal becomes
:attr:`SaslServer.principal`. With no authenticator configured, SaslHandshake
answers UNSUPPORTED_SASL_MECHANISM with an empty mechanism list. PLAIN/SCRAM
implementations plug in here (the security work of issue 11's sibling).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, Protocol

Operation = Literal["read", "write", "create", "delete", "describe", "admin"]
ResourceType = Literal["topic", "group", "cluster"]


@dataclass(frozen=True)
class Principal:
    """Who is on the other end of a connection (``User:name`` in Kafka's terms)."""

    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"


ANONYMOUS: Final = Principal("User", "ANONYMOUS")
CLUSTER_RESOURCE: Final = "kafka-cluster"


class Authorizer(Protocol):
    def authorize(self, principal: Principal, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        """Whether ``principal`` may do ``operation`` on the resource."""
        ...


class AllowAll:
    """The default authorizer: everything is allowed (the listener is loopback-only by default)."""

    def authorize(self, principal: Principal, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        return True


class SaslAuthenticationFailed(Exception):
    """Raised by :meth:`SaslServer.step` when the client's credentials are refused."""


class SaslServer(Protocol):
    """One SASL exchange with one client."""

    def step(self, client_bytes: bytes) -> bytes:
        """Consume the client's message; return the server's answer (raise SaslAuthenticationFailed to refuse)."""
        ...

    @property
    def complete(self) -> bool:
        """Whether the exchange has finished successfully."""
        ...

    @property
    def principal(self) -> Principal:
        """The authenticated principal (valid once :attr:`complete`)."""
        ...


class SaslAuthenticator(Protocol):
    """Offers SASL mechanisms and starts a :class:`SaslServer` for one of them."""

    @property
    def mechanisms(self) -> list[str]: ...

    def start(self, mechanism: str) -> SaslServer: ...
