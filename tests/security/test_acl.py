"""ACL entries, the ACL file and the authorizer's rules (default deny, deny wins, implied describe)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lkstream.errors import InvalidArgumentError
from lkstream.security.acl import AclDocument, AclEntry, Operation, PatternType, Permission, ResourceType
from lkstream.security.authorizer import AclAuthorizer, AclIndex, AllowAll
from lkstream.security.principal import ANONYMOUS, Principal

ALICE = Principal("alice", "token")
BOB = Principal("bob", "token")
T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER


def authorizer(*entries: AclEntry, super_users: tuple[str, ...] = ()) -> AclAuthorizer:
    index = AclIndex(entries)
    return AclAuthorizer(lambda: index, super_users)


def allow(principal: str, op: str, kind: str, name: str, pattern: str = "literal") -> AclEntry:
    return AclEntry.build(principal, op, kind, name, pattern=pattern)


def deny(principal: str, op: str, kind: str, name: str, pattern: str = "literal") -> AclEntry:
    return AclEntry.build(principal, op, kind, name, pattern=pattern, permission="deny")


def test_authorizer_denies_by_default() -> None:
    az = authorizer()
    assert not az.authorize(ALICE, Operation.READ, T, "orders")
    assert not az.authorize(ALICE, Operation.ADMIN, C, "cluster")


def test_literal_entry_grants_only_its_operation_and_name() -> None:
    az = authorizer(allow("alice", "read", "topic", "orders"))
    assert az.authorize(ALICE, Operation.READ, T, "orders")
    assert not az.authorize(ALICE, Operation.WRITE, T, "orders")
    assert not az.authorize(ALICE, Operation.READ, T, "orders2")
    assert not az.authorize(BOB, Operation.READ, T, "orders")
    assert not az.authorize(ALICE, Operation.READ, G, "orders")


def test_prefix_entry_matches_names_starting_with_it() -> None:
    az = authorizer(allow("alice", "write", "topic", "orders.", pattern="prefix"))
    assert az.authorize(ALICE, Operation.WRITE, T, "orders.eu")
    assert az.authorize(ALICE, Operation.WRITE, T, "orders.")
    assert not az.authorize(ALICE, Operation.WRITE, T, "orders")
    assert not az.authorize(ALICE, Operation.WRITE, T, "xorders.eu")


def test_wildcard_principal_and_wildcard_name() -> None:
    az = authorizer(allow("*", "describe", "topic", "*"))
    assert az.authorize(ALICE, Operation.DESCRIBE, T, "anything")
    assert az.authorize(BOB, Operation.DESCRIBE, T, "other")
    assert not az.authorize(BOB, Operation.READ, T, "other")


def test_anonymous_is_never_authorized_when_auth_is_on() -> None:
    az = authorizer(allow("*", "all", "topic", "*"))
    assert not az.authorize(ANONYMOUS, Operation.READ, T, "orders")


def test_deny_wins_over_allow() -> None:
    az = authorizer(allow("*", "read", "topic", "*"), deny("bob", "read", "topic", "secret", pattern="prefix"))
    assert az.authorize(ALICE, Operation.READ, T, "secret.x")
    assert not az.authorize(BOB, Operation.READ, T, "secret.x")
    assert az.authorize(BOB, Operation.READ, T, "public")


def test_all_grants_and_denies_every_operation() -> None:
    az = authorizer(allow("alice", "all", "group", "g1"), deny("alice", "all", "topic", "t"))
    for op in (Operation.READ, Operation.DELETE, Operation.DESCRIBE):
        assert az.authorize(ALICE, op, G, "g1")
    assert not az.authorize(ALICE, Operation.DESCRIBE, T, "t")


@pytest.mark.parametrize("granted", ["read", "write", "delete"])
def test_describe_is_implied_by_read_write_delete(granted: str) -> None:
    az = authorizer(allow("alice", granted, "topic", "orders"))
    assert az.authorize(ALICE, Operation.DESCRIBE, T, "orders")


def test_deny_of_describe_is_not_implied_by_deny_of_read() -> None:
    az = authorizer(allow("alice", "describe", "topic", "orders"), deny("alice", "read", "topic", "orders"))
    assert az.authorize(ALICE, Operation.DESCRIBE, T, "orders")
    assert not az.authorize(ALICE, Operation.READ, T, "orders")


def test_cluster_create_allows_creating_any_topic_unless_a_topic_entry_denies() -> None:
    az = authorizer(allow("alice", "create", "cluster", "cluster"), deny("alice", "create", "topic", "locked"))
    assert az.authorize(ALICE, Operation.CREATE, T, "new-topic")
    assert not az.authorize(ALICE, Operation.CREATE, T, "locked")
    assert not az.authorize(BOB, Operation.CREATE, T, "new-topic")


def test_super_users_may_do_everything() -> None:
    az = authorizer(deny("root", "all", "topic", "*"), super_users=("root",))
    assert az.authorize(Principal("root", "token"), Operation.DELETE, T, "x")
    assert az.authorize(Principal("root", "token"), Operation.ADMIN, C, "cluster")


def test_allow_all_allows_anonymous() -> None:
    assert AllowAll().authorize(ANONYMOUS, Operation.DELETE, T, "x")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("alice", "write", "group", "g"), "does not apply to a group"),
        (("alice", "admin", "topic", "t"), "does not apply to a topic"),
        (("alice", "fly", "topic", "t"), "unknown operation"),
        (("alice", "read", "queue", "t"), "unknown resource type"),
        (("al ice", "read", "topic", "t"), "invalid user name"),
        (("ANONYMOUS", "read", "topic", "t"), "invalid user name"),
        (("alice", "read", "topic", ""), "invalid topic name"),
        (("alice", "read", "topic", "a b"), "invalid topic name"),
        (("alice", "admin", "cluster", "other"), "cluster resource"),
    ],
)
def test_entry_build_rejects_bad_fields(args: tuple[str, str, str, str], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        AclEntry.build(*args)


def test_prefix_star_is_rejected() -> None:
    with pytest.raises(InvalidArgumentError, match="prefix"):
        AclEntry.build("alice", "read", "topic", "*", pattern="prefix")


def test_document_round_trips_and_is_sorted(tmp_path: Path) -> None:
    doc = AclDocument.empty()
    added = doc.add(
        [allow("bob", "read", "topic", "b"), allow("alice", "write", "topic", "a"), deny("*", "read", "group", "g")]
    )
    assert len(added) == 3
    assert doc.add([allow("bob", "read", "topic", "b")]) == []
    again = AclDocument.parse(doc.serialize())
    assert again.entries == doc.entries
    names = [entry["principal"] for entry in json.loads(doc.serialize())["acls"]]
    assert names == sorted(names)
    assert doc.remove([allow("bob", "read", "topic", "b"), allow("nobody", "read", "topic", "x")]) == [
        allow("bob", "read", "topic", "b")
    ]


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"[]",
        b'{"version": 2, "acls": []}',
        b'{"version": 1, "acls": [1]}',
        b'{"version": 1, "acls": [{"principal": "a", "operation": "read", "resource_type": "topic"}]}',
    ],
)
def test_document_parse_rejects_bad_files(data: bytes) -> None:
    with pytest.raises(InvalidArgumentError):
        AclDocument.parse(data)


def test_entry_describe_reads_as_a_sentence() -> None:
    assert (
        allow("alice", "read", "topic", "o.", "prefix").describe()
        == "allow 'alice' to read topic names starting with 'o.'"
    )
    assert (
        AclEntry.build("bob", "admin", "cluster", "cluster", permission=Permission.DENY).describe()
        == "deny 'bob' to admin the cluster"
    )
    assert AclEntry.build("bob", "admin", "cluster", "").pattern is PatternType.LITERAL


def test_authorize_any_needs_an_allow_that_no_deny_covers() -> None:
    write = Operation.WRITE
    assert not authorizer().authorize_any(ALICE, write, T)
    assert authorizer(allow("alice", "write", "topic", "orders")).authorize_any(ALICE, write, T)
    assert authorizer(allow("*", "all", "topic", "logs.", pattern="prefix")).authorize_any(BOB, write, T)
    assert not authorizer(allow("alice", "read", "topic", "orders")).authorize_any(ALICE, write, T)
    assert not authorizer(allow("alice", "all", "group", "g")).authorize_any(ALICE, write, T)
    covered = [
        deny("alice", "write", "topic", "*"),
        deny("alice", "write", "topic", "ord", pattern="prefix"),
        deny("alice", "write", "topic", "orders"),
        deny("*", "all", "topic", "orders"),
    ]
    for refusal in covered:
        az = authorizer(allow("alice", "write", "topic", "orders"), refusal)
        assert not az.authorize_any(ALICE, write, T), refusal.describe()
    # A deny of one topic leaves the rest of a prefix grant usable; a deny of another operation changes nothing.
    assert authorizer(
        allow("alice", "write", "topic", "orders.", pattern="prefix"), deny("alice", "write", "topic", "orders.eu")
    ).authorize_any(ALICE, write, T)
    assert authorizer(allow("alice", "write", "topic", "orders"), deny("alice", "read", "topic", "*")).authorize_any(
        ALICE, write, T
    )
    assert authorizer(super_users=("alice",)).authorize_any(ALICE, write, T)
    assert not authorizer(allow("*", "write", "topic", "*")).authorize_any(ANONYMOUS, write, T)
    assert AllowAll().authorize_any(ANONYMOUS, write, T)
