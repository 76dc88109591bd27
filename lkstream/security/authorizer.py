"""The one authorizer every surface asks: ``authorize(principal, operation, resource_type, name) -> bool``.

* Auth off: :class:`AllowAll` (every caller is the anonymous principal and may do anything).
* Auth on: :class:`AclAuthorizer`, **default deny**. A super user (``server.super_users``)
  may do everything. Otherwise the entries for the principal's name and for ``*`` that
  match the resource decide: a matching ``deny`` wins over any ``allow``; an ``allow``
  of the operation (or of ``all``) grants it; nothing matching denies.
* Implied operations (as Kafka): allowing ``read``, ``write``, ``delete`` or ``admin``
  also allows ``describe``; allowing ``alter_configs`` also allows ``describe_configs``.
  Unlike Kafka, ``describe_configs`` is also allowed by whatever allows ``describe`` (topic
  configs were readable with ``describe`` before the operation existed; deny
  ``describe_configs`` to hide them). A ``deny`` denies only the operation it names (and
  ``all`` denies everything).
* Creating a topic: a topic-level entry for the name decides; without one, ``create``
  on the cluster allows creating any topic.
* :meth:`~Authorizer.authorize_any` asks whether the principal may do an operation on
  *some* resource of a type (Kafka's ``authorizeByResourceType``): an idempotent Kafka
  producer's InitProducerId needs ``write`` on at least one topic, as in Kafka 3.0+.

The ACLs come from a :class:`~lkstream.security.watched.WatchedFile`, so a running
daemon applies ``lkstream acls add|remove`` within the file check interval.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Final, Protocol

from lkstream.security.acl import (
    ANY_RESOURCE,
    CLUSTER_NAME,
    AclDocument,
    AclEntry,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from lkstream.security.principal import ANY_PRINCIPAL, Principal

#: The allowed operations that also allow the key.
_IMPLIED_BY: Final[dict[Operation, frozenset[Operation]]] = {
    Operation.DESCRIBE: frozenset({Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ADMIN}),
    Operation.DESCRIBE_CONFIGS: frozenset(
        {
            Operation.ALTER_CONFIGS,
            Operation.DESCRIBE,
            Operation.READ,
            Operation.WRITE,
            Operation.DELETE,
            Operation.ADMIN,
        }
    ),
}


class Authorizer(Protocol):
    """What a surface asks before it calls the broker."""

    def authorize(self, principal: Principal, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        """Whether ``principal`` may do ``operation`` on the ``resource_type`` called ``name``."""
        ...

    def authorize_any(self, principal: Principal, operation: Operation, resource_type: ResourceType) -> bool:
        """Whether ``principal`` may do ``operation`` on at least one resource of ``resource_type``."""
        ...


class AllowAll:
    """The authorizer of a daemon without authentication: everything is allowed."""

    def authorize(self, principal: Principal, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        return True

    def authorize_any(self, principal: Principal, operation: Operation, resource_type: ResourceType) -> bool:
        return True


class AclIndex:
    """ACL entries grouped by ``(principal, resource type)``, built once per version of the file."""

    def __init__(self, entries: Iterable[AclEntry]) -> None:
        self._by_key: dict[tuple[str, ResourceType], list[AclEntry]] = defaultdict(list)
        for entry in entries:
            self._by_key[(entry.principal, entry.resource_type)].append(entry)

    @classmethod
    def parse(cls, data: bytes) -> AclIndex:
        return cls(AclDocument.parse(data).entries)

    @classmethod
    def empty(cls) -> AclIndex:
        return cls(())

    def matching(self, principal: str, resource_type: ResourceType, name: str) -> Iterable[AclEntry]:
        for who in (principal, ANY_PRINCIPAL):
            for entry in self._by_key.get((who, resource_type), ()):
                if entry.matches_name(name):
                    yield entry

    def of(self, principal: str, resource_type: ResourceType) -> list[AclEntry]:
        """Every entry for ``principal`` or ``*`` on resources of ``resource_type``."""
        return [entry for who in (principal, ANY_PRINCIPAL) for entry in self._by_key.get((who, resource_type), ())]


def _covers(deny: AclEntry, allow: AclEntry) -> bool:
    """Whether the ``deny`` entry's names include every name the ``allow`` entry grants."""
    if deny.pattern is PatternType.LITERAL:
        return deny.name == ANY_RESOURCE or (allow.pattern is PatternType.LITERAL and allow.name == deny.name)
    return allow.name.startswith(deny.name) and allow.name != ANY_RESOURCE


def _decide(entries: Iterable[AclEntry], operation: Operation) -> bool | None:
    """True (allowed), False (denied) or None (no entry speaks to ``operation``)."""
    granting = {operation, Operation.ALL} | _IMPLIED_BY.get(operation, frozenset())
    allowed = False
    for entry in entries:
        if entry.permission is Permission.DENY:
            if entry.operation in (operation, Operation.ALL):
                return False
        elif entry.operation in granting:
            allowed = True
    return True if allowed else None


class AclAuthorizer:
    """Default-deny authorization from an ACL source and a set of super users. Thread-safe."""

    def __init__(self, acls: Callable[[], AclIndex], super_users: Iterable[str] = ()) -> None:
        self._acls = acls
        self.super_users = frozenset(super_users)

    def authorize(self, principal: Principal, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        if principal.anonymous:
            return False
        if principal.name in self.super_users:
            return True
        index = self._acls()
        decision = _decide(index.matching(principal.name, resource_type, name), operation)
        if decision is None and operation is Operation.CREATE and resource_type is ResourceType.TOPIC:
            cluster = index.matching(principal.name, ResourceType.CLUSTER, CLUSTER_NAME)
            decision = _decide(cluster, Operation.CREATE)
        return decision is True

    def authorize_any(self, principal: Principal, operation: Operation, resource_type: ResourceType) -> bool:
        """True when some allow entry grants ``operation`` on names no deny entry fully covers."""
        if principal.anonymous:
            return False
        if principal.name in self.super_users:
            return True
        entries = self._acls().of(principal.name, resource_type)
        granting = {operation, Operation.ALL} | _IMPLIED_BY.get(operation, frozenset())
        denies = [e for e in entries if e.permission is Permission.DENY and e.operation in (operation, Operation.ALL)]
        return any(
            e.permission is Permission.ALLOW and e.operation in granting and not any(_covers(d, e) for d in denies)
            for e in entries
        )
