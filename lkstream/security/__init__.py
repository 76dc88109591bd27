"""Access control between the surfaces and the broker: principals, credentials, ACLs and TLS material.

Plain synchronous Python with no network framework (an import contract keeps asyncio,
grpc and aiohttp out), so the gRPC server, the HTTP server and the Kafka listener all
use the same code. The model, the threats and what is and is not protected:
docs/security.md.

=================  ==============================================================
``principal``      :class:`Principal`, ``ANONYMOUS``, user-name rules
``acl``            ACL entries, resource types, operations, the ACL file
``authorizer``     ``Authorizer.authorize(principal, operation, resource_type, name)``
``credentials``    the users file: SCRAM stored keys, hashed bearer tokens
``sasl``           sans-io SASL servers: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
``tls``            server and client TLS material from certificate and key files
``certificates``   the listeners' certificate and key, reloaded when the files change
``watched``        atomic, locked edits and change-driven reloads of those files
``access``         :class:`Access`: the one object a surface asks
=================  ==============================================================
"""

from lkstream.security.access import Access, bearer_token
from lkstream.security.acl import AclEntry, Operation, PatternType, Permission, ResourceType
from lkstream.security.authorizer import Authorizer
from lkstream.security.principal import ANONYMOUS, Principal
from lkstream.security.tls import ClientTls, ServerTls

__all__ = [
    "ANONYMOUS",
    "Access",
    "AclEntry",
    "Authorizer",
    "ClientTls",
    "Operation",
    "PatternType",
    "Permission",
    "Principal",
    "ResourceType",
    "ServerTls",
    "bearer_token",
]
