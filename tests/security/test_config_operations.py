"""The ACL operations of topic configs (issue 24): Kafka's ALTER_CONFIGS and DESCRIBE_CONFIGS."""

from __future__ import annotations

import pytest

from lkstream.errors import InvalidArgumentError
from lkstream.security.acl import AclEntry, Operation, ResourceType
from lkstream.security.authorizer import AclAuthorizer, AclIndex
from lkstream.security.principal import Principal

ALICE = Principal("alice", "token")
T = ResourceType.TOPIC


def _authorizer(*entries: AclEntry) -> AclAuthorizer:
    index = AclIndex(entries)
    return AclAuthorizer(lambda: index)


def test_alter_configs_grants_describe_configs_and_nothing_else() -> None:
    az = _authorizer(AclEntry.build("alice", "alter_configs", "topic", "orders"))
    assert az.authorize(ALICE, Operation.ALTER_CONFIGS, T, "orders")
    assert az.authorize(ALICE, Operation.DESCRIBE_CONFIGS, T, "orders")
    assert not az.authorize(ALICE, Operation.DESCRIBE, T, "orders")
    assert not az.authorize(ALICE, Operation.WRITE, T, "orders")


def test_describe_grants_describe_configs_but_not_alter_and_a_deny_hides_them() -> None:
    az = _authorizer(AclEntry.build("alice", "read", "topic", "orders"))
    assert az.authorize(ALICE, Operation.DESCRIBE_CONFIGS, T, "orders")
    assert not az.authorize(ALICE, Operation.ALTER_CONFIGS, T, "orders")
    hidden = _authorizer(
        AclEntry.build("alice", "read", "topic", "orders"),
        AclEntry.build("alice", "describe_configs", "topic", "orders", permission="deny"),
    )
    assert not hidden.authorize(ALICE, Operation.DESCRIBE_CONFIGS, T, "orders")
    assert hidden.authorize(ALICE, Operation.READ, T, "orders")


def test_the_config_operations_are_valid_on_topics_and_the_cluster_only() -> None:
    assert AclEntry.build("alice", "alter_configs", "cluster", "cluster").operation is Operation.ALTER_CONFIGS
    with pytest.raises(InvalidArgumentError, match="alter_configs"):
        AclEntry.build("alice", "alter_configs", "group", "g")
