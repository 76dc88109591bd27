"""Property tests of the security layer's decoders and decisions.

Derandomized: every run explores the same examples, so a failure replays as is; a
counterexample found once belongs in an ``@example``.

* SASL servers fed arbitrary bytes at any step raise only ``AuthenticationError``.
* The ACL and users files: arbitrary JSON is a document or an ``InvalidArgumentError``,
  never another exception; a parsed ACL document round-trips.
* The authorizer agrees with a brute-force reading of the rules in docs/security.md, and
  ``authorize_any`` holds exactly when ``authorize`` holds for some name.
* ``bearer_token`` accepts any header value without raising.
"""

from __future__ import annotations

import contextlib
import json

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lkstream.errors import AuthenticationError, InvalidArgumentError
from lkstream.security.access import bearer_token
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
from lkstream.security.authorizer import AclAuthorizer, AclIndex
from lkstream.security.credentials import UserDirectory, UsersDocument
from lkstream.security.principal import ANY_PRINCIPAL, Principal
from lkstream.security.sasl import SaslServerFactory

SETTINGS = settings(
    max_examples=200,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

_DOC = UsersDocument.empty()
_DOC.set_password("alice", "s3cret", iterations=4096)
USERS = UserDirectory(_DOC)
FACTORY = SaslServerFactory(lambda: USERS)


@SETTINGS
@given(st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]), st.lists(st.binary(max_size=300), max_size=3))
@example("SCRAM-SHA-256", [b"n,,n=alice,r=abc", b"c=biws,r=x,p=AAAA"])
@example("SCRAM-SHA-256", [b"n,,n==ZZ,r=abc"])
@example("PLAIN", [b"\x00alice\x00"])
def test_sasl_servers_raise_only_authentication_errors(mechanism: str, messages: list[bytes]) -> None:
    server = FACTORY.new(mechanism)
    for message in messages:
        try:
            server.step(message)
        except AuthenticationError:
            assert not server.complete
            return
    assert server.complete == (server.principal is not None)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=6),
    max_leaves=25,
)


@SETTINGS
@given(json_values)
@example({"version": 1, "acls": [{"principal": "a", "operation": "read", "resource_type": "topic", "name": None}]})
@example({"version": 1, "users": {"a": {"scram": {"SCRAM-SHA-256": {"iterations": True}}}}})
def test_security_files_parse_or_refuse_cleanly(value: object) -> None:
    data = json.dumps(value).encode()
    for parse in (AclDocument.parse, UsersDocument.parse):
        with contextlib.suppress(InvalidArgumentError):
            parse(data)


names = st.sampled_from(["a", "ab", "abc", "b", "orders", "orders.eu", ANY_RESOURCE])
entries = st.builds(
    lambda principal, permission, operation, kind, pattern, name: (
        principal,
        permission,
        operation,
        kind,
        pattern,
        name,
    ),
    st.sampled_from(["alice", "bob", ANY_PRINCIPAL]),
    st.sampled_from(list(Permission)),
    st.sampled_from(list(Operation)),
    st.sampled_from(list(ResourceType)),
    st.sampled_from(list(PatternType)),
    names,
)


def build(raw: tuple[str, Permission, Operation, ResourceType, PatternType, str]) -> AclEntry | None:
    principal, permission, operation, kind, pattern, name = raw
    if kind is ResourceType.CLUSTER:
        name, pattern = CLUSTER_NAME, PatternType.LITERAL  # the one cluster resource
    try:
        return AclEntry.build(principal, operation, kind, name, pattern=pattern, permission=permission)
    except InvalidArgumentError:
        return None  # not a valid entry (e.g. write on a group): the file would refuse it


def reference(acl: list[AclEntry], who: str, op: Operation, kind: ResourceType, name: str) -> bool:
    """docs/security.md section 4, read literally."""

    def covers(e: AclEntry, kind_: ResourceType, name_: str) -> bool:
        if e.principal not in (who, ANY_PRINCIPAL) or e.resource_type is not kind_:
            return False
        if e.pattern is PatternType.PREFIX:
            return name_.startswith(e.name)
        return e.name in (name_, ANY_RESOURCE)

    def decide(kind_: ResourceType, name_: str, op_: Operation) -> bool | None:
        matching = [e for e in acl if covers(e, kind_, name_)]
        if any(e.permission is Permission.DENY and e.operation in (op_, Operation.ALL) for e in matching):
            return False
        implied = (
            {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ADMIN} if op_ is Operation.DESCRIBE else set()
        )
        if any(e.permission is Permission.ALLOW and e.operation in {op_, Operation.ALL, *implied} for e in matching):
            return True
        return None

    result = decide(kind, name, op)
    if result is None and op is Operation.CREATE and kind is ResourceType.TOPIC:
        result = decide(ResourceType.CLUSTER, CLUSTER_NAME, Operation.CREATE)
    return result is True


@settings(SETTINGS, max_examples=2000)
@given(
    st.lists(entries, max_size=12),
    st.sampled_from(["alice", "bob", "carol"]),
    st.sampled_from(list(Operation)),
    st.sampled_from(list(ResourceType)),
    names,
)
@example(
    [("alice", Permission.ALLOW, Operation.WRITE, ResourceType.TOPIC, PatternType.LITERAL, "a")],
    "alice",
    Operation.DESCRIBE,
    ResourceType.TOPIC,
    "a",
)
@example(
    [("*", Permission.ALLOW, Operation.CREATE, ResourceType.CLUSTER, PatternType.LITERAL, "a")],
    "bob",
    Operation.CREATE,
    ResourceType.TOPIC,
    "orders",
)
def test_authorizer_agrees_with_the_documented_rules(
    raw: list[tuple[str, Permission, Operation, ResourceType, PatternType, str]],
    who: str,
    op: Operation,
    kind: ResourceType,
    name: str,
) -> None:
    acl = [e for e in map(build, raw) if e is not None]
    if kind is ResourceType.CLUSTER:
        name = CLUSTER_NAME
    index = AclIndex(acl)
    authorizer = AclAuthorizer(lambda: index)
    assert authorizer.authorize(Principal(who, "token"), op, kind, name) == reference(acl, who, op, kind, name)
    assert AclDocument.parse(AclDocument(set(acl)).serialize()).entries == set(acl)


@SETTINGS
@given(st.text(max_size=60))
@example("Bearer \u2028x")
def test_bearer_token_never_raises(header: str) -> None:
    token = bearer_token(header)
    assert token is None or (token and token == token.strip())


@settings(SETTINGS, max_examples=2000)
@given(
    st.lists(entries, max_size=12),
    st.sampled_from(["alice", "bob"]),
    st.sampled_from([Operation.READ, Operation.WRITE, Operation.DESCRIBE, Operation.DELETE]),
    st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP]),
)
@example(
    [
        ("alice", Permission.ALLOW, Operation.WRITE, ResourceType.TOPIC, PatternType.PREFIX, "a"),
        ("alice", Permission.DENY, Operation.WRITE, ResourceType.TOPIC, PatternType.PREFIX, "ab"),
    ],
    "alice",
    Operation.WRITE,
    ResourceType.TOPIC,
)
def test_authorize_any_holds_exactly_when_some_name_is_authorized(
    raw: list[tuple[str, Permission, Operation, ResourceType, PatternType, str]],
    who: str,
    op: Operation,
    kind: ResourceType,
) -> None:
    """InitProducerId's "write on at least one topic": true iff authorize is true for some name.

    Every name that can decide is an entry's name, or one extended by a suffix no entry
    names (``zq``), or such a suffix alone.
    """
    acl = [e for e in map(build, raw) if e is not None]
    index = AclIndex(acl)
    authorizer = AclAuthorizer(lambda: index)
    principal = Principal(who, "token")
    stems = {e.name for e in acl if e.name != ANY_RESOURCE} | {""}
    universe = {stem + suffix for stem in stems for suffix in ("", "zq")} - {""}
    some_name = any(authorizer.authorize(principal, op, kind, name) for name in universe)
    assert authorizer.authorize_any(principal, op, kind) == some_name
