"""ACL entries and the ACL file: who may do what to which topic, group or the cluster.

An entry says: ``principal`` is allowed (or denied) ``operation`` on resources of
``resource_type`` whose name equals ``name`` (``literal``; ``*`` is every name) or
starts with it (``prefix``). Operations per resource type:

=========  ========================================================================
topic      read, write, create, delete, describe, alter_configs, describe_configs, all
group      read, delete, describe, all
cluster    admin, create, describe, alter_configs, describe_configs, all (the name is ``cluster``)
=========  ========================================================================

``alter_configs`` and ``describe_configs`` are Kafka's ALTER_CONFIGS and DESCRIBE_CONFIGS: changing
a topic's configs (or, on the cluster, the broker's, which are read-only here) and reading them.

The ACL file (default ``{persist_dir}/security/acls.json``, edited by ``lkstream acls``)::

    {"version": 1,
     "acls": [{"principal": "alice", "permission": "allow", "operation": "read",
               "resource_type": "topic", "pattern": "prefix", "name": "orders."}]}

How entries combine is :class:`~lkstream.security.authorizer.AclAuthorizer`'s business.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any, Final

from lkstream.errors import InvalidArgumentError
from lkstream.security.principal import validate_principal_name
from lkstream.security.watched import parse_document

ACL_FILE_VERSION: Final = 1
#: The one name of the cluster resource.
CLUSTER_NAME: Final = "cluster"
#: A literal entry with this name matches every resource of its type.
ANY_RESOURCE: Final = "*"
_MAX_NAME_LENGTH: Final = 255


class ResourceType(StrEnum):
    TOPIC = "topic"
    GROUP = "group"
    CLUSTER = "cluster"


class Operation(StrEnum):
    READ = "read"
    WRITE = "write"
    CREATE = "create"
    DELETE = "delete"
    DESCRIBE = "describe"
    ADMIN = "admin"
    ALTER_CONFIGS = "alter_configs"
    DESCRIBE_CONFIGS = "describe_configs"
    ALL = "all"


class PatternType(StrEnum):
    LITERAL = "literal"
    PREFIX = "prefix"


class Permission(StrEnum):
    ALLOW = "allow"
    DENY = "deny"


#: Which operations an entry on each resource type may name.
OPERATIONS: Final[dict[ResourceType, frozenset[Operation]]] = {
    ResourceType.TOPIC: frozenset(
        {
            Operation.READ,
            Operation.WRITE,
            Operation.CREATE,
            Operation.DELETE,
            Operation.DESCRIBE,
            Operation.ALTER_CONFIGS,
            Operation.DESCRIBE_CONFIGS,
            Operation.ALL,
        }
    ),
    ResourceType.GROUP: frozenset({Operation.READ, Operation.DELETE, Operation.DESCRIBE, Operation.ALL}),
    ResourceType.CLUSTER: frozenset(
        {
            Operation.ADMIN,
            Operation.CREATE,
            Operation.DESCRIBE,
            Operation.ALTER_CONFIGS,
            Operation.DESCRIBE_CONFIGS,
            Operation.ALL,
        }
    ),
}


def _parse_enum(enum: type[StrEnum], value: object, what: str) -> Any:
    try:
        return enum(str(value).lower())
    except ValueError:
        known = ", ".join(member.value for member in enum)
        raise InvalidArgumentError(f"unknown {what} {value!r}: use one of {known}") from None


def _check_resource_name(resource_type: ResourceType, pattern: PatternType, name: object) -> str:
    if resource_type is ResourceType.CLUSTER:
        if name not in (CLUSTER_NAME, "", None) or pattern is not PatternType.LITERAL:
            raise InvalidArgumentError(f"the cluster resource is named {CLUSTER_NAME!r} and takes no prefix")
        return CLUSTER_NAME
    if not isinstance(name, str) or not name or len(name) > _MAX_NAME_LENGTH or not name.isprintable() or " " in name:
        raise InvalidArgumentError(f"invalid {resource_type} name {name!r}: 1-255 printable characters, no spaces")
    if pattern is PatternType.PREFIX and name == ANY_RESOURCE:
        raise InvalidArgumentError("a prefix ACL cannot be '*': use a literal '*' for every name")
    return name


@dataclass(frozen=True, order=True, slots=True)
class AclEntry:
    """One ACL entry (validated on construction through :meth:`build`)."""

    principal: str
    permission: Permission
    operation: Operation
    resource_type: ResourceType
    pattern: PatternType
    name: str

    @classmethod
    def build(
        cls,
        principal: object,
        operation: object,
        resource_type: object,
        name: object,
        *,
        pattern: object = PatternType.LITERAL,
        permission: object = Permission.ALLOW,
    ) -> AclEntry:
        """Validate every field; raise :class:`InvalidArgumentError` naming the bad one."""
        kind: ResourceType = _parse_enum(ResourceType, resource_type, "resource type")
        op: Operation = _parse_enum(Operation, operation, "operation")
        if op not in OPERATIONS[kind]:
            allowed = ", ".join(sorted(o.value for o in OPERATIONS[kind]))
            raise InvalidArgumentError(f"operation {op.value!r} does not apply to a {kind.value}: use {allowed}")
        how: PatternType = _parse_enum(PatternType, pattern, "pattern type")
        return cls(
            principal=validate_principal_name(principal),
            permission=_parse_enum(Permission, permission, "permission"),
            operation=op,
            resource_type=kind,
            pattern=how,
            name=_check_resource_name(kind, how, name),
        )

    def matches_name(self, name: str) -> bool:
        """Whether this entry covers the resource called ``name`` (its type already matched)."""
        if self.pattern is PatternType.PREFIX:
            return name.startswith(self.name)
        return self.name in (name, ANY_RESOURCE)

    def describe(self) -> str:
        target = "the cluster" if self.resource_type is ResourceType.CLUSTER else f"{self.resource_type} "
        if self.resource_type is not ResourceType.CLUSTER:
            target += f"names starting with {self.name!r}" if self.pattern is PatternType.PREFIX else repr(self.name)
        return f"{self.permission} {self.principal!r} to {self.operation} {target}"

    def to_json(self) -> dict[str, str]:
        return {key: str(value) for key, value in asdict(self).items()}


@dataclass
class AclDocument:
    """The ACL file's content: a sorted set of entries."""

    entries: set[AclEntry]

    @classmethod
    def empty(cls) -> AclDocument:
        return cls(set())

    @classmethod
    def parse(cls, data: bytes) -> AclDocument:
        """Parse and validate the file's bytes; raise :class:`InvalidArgumentError` naming the bad entry."""
        entries = set()
        for i, item in enumerate(parse_document(data, ACL_FILE_VERSION, "acls", list, "ACL")):
            if not isinstance(item, dict):
                raise InvalidArgumentError(f"ACL entry {i} is not an object")
            try:
                entries.add(
                    AclEntry.build(
                        item.get("principal"),
                        item.get("operation"),
                        item.get("resource_type"),
                        item.get("name"),
                        pattern=item.get("pattern", PatternType.LITERAL),
                        permission=item.get("permission", Permission.ALLOW),
                    )
                )
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"ACL entry {i}: {exc}") from None
        return cls(entries)

    def serialize(self) -> bytes:
        document = {"version": ACL_FILE_VERSION, "acls": [entry.to_json() for entry in sorted(self.entries)]}
        return (json.dumps(document, indent=2) + "\n").encode()

    def add(self, entries: Iterable[AclEntry]) -> list[AclEntry]:
        """Add ``entries``; return those that were not there yet."""
        added = [entry for entry in entries if entry not in self.entries]
        self.entries.update(added)
        return added

    def remove(self, entries: Iterable[AclEntry]) -> list[AclEntry]:
        """Remove ``entries``; return those that were there."""
        removed = [entry for entry in entries if entry in self.entries]
        self.entries.difference_update(removed)
        return removed
