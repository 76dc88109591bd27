"""What each RPC of the ``lkstream.Broker`` service needs, as ACL operations on resources.

:data:`RPC_NEEDS` maps every method to a function of its request (and the broker, for
"does the topic exist yet?") returning the ``(operation, resource type, name)``
triples the caller must all be allowed. The access interceptor
(:mod:`lkstream.server.grpc.access`) asks them before the servicer runs; a method
missing from the table is refused (fail closed), and a test generated from the
service descriptor fails when a new RPC has no entry.

The rules follow Kafka's: producing needs ``write`` on the topic (and ``create`` when it
would auto-create it); reading needs ``read`` on the topic; a consumer group's calls
need ``read`` on the group; committing needs ``read`` on the group and on each topic;
looking at offsets needs ``describe``; operator offset resets need ``admin`` on the
cluster, deleting a group ``delete`` on it, describing the daemon ``describe`` on the
cluster. Listing topics or groups needs nothing: the answer holds only what the
caller may ``describe`` (:data:`FILTERED`). Handshake only needs a principal.
``ProduceStream`` and ``FetchStream`` carry many requests: opening one needs a
principal, and the servicer checks each request with the rule of ``Produce`` or
``Fetch`` (:mod:`lkstream.server.grpc.stream_rpcs`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final

from lkstream.broker.broker import Broker
from lkstream.security.acl import CLUSTER_NAME, Operation, ResourceType
from lkstream.server.needs import Need, would_create

Rule = Callable[[Any, Broker], list[Need]]

READ, WRITE, CREATE, DELETE, DESCRIBE, ADMIN = (
    Operation.READ,
    Operation.WRITE,
    Operation.CREATE,
    Operation.DELETE,
    Operation.DESCRIBE,
    Operation.ADMIN,
)
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER


def _read(request: Any, broker: Broker) -> list[Need]:
    """Fetch, Subscribe, SubscribeBatches: read the topic (and the group a request names for its metrics)."""
    needs: list[Need] = [(READ, TOPIC, request.topic)]
    if request.group:
        needs.append((READ, GROUP, request.group))
    return needs


def _group_member(request: Any, broker: Broker) -> list[Need]:
    return [(READ, GROUP, request.group)]


def _topics(operation: Operation, topics: Iterable[str]) -> list[Need]:
    return [(operation, TOPIC, topic) for topic in sorted(set(topics))]


def _admin(request: Any, broker: Broker) -> list[Need]:
    action = request.WhichOneof("action")
    if action == "create_topic":
        return [(CREATE, TOPIC, request.create_topic.name)]
    if action == "delete_topic":
        return [(DELETE, TOPIC, request.delete_topic.name)]
    if action == "delete_records":  # Kafka's DeleteRecords asks DELETE on the topic too
        return [(DELETE, TOPIC, request.delete_records.topic)]
    if action == "describe_topic":
        d = request.describe_topic
        configs = [(Operation.DESCRIBE_CONFIGS, TOPIC, d.name)] if d.include_config_entries else []
        return [(DESCRIBE, TOPIC, d.name), *configs, *would_create(broker, d.name, d.create_if_missing)]
    if action == "alter_topic_configs":
        return [(Operation.ALTER_CONFIGS, TOPIC, request.alter_topic_configs.name)]
    if action == "create_partitions":  # growing a topic is creating partitions, as on the Kafka listener
        return [(CREATE, TOPIC, request.create_partitions.name)]
    return []  # list_topics is filtered; no action is the servicer's INVALID_ARGUMENT


RPC_NEEDS: Final[dict[str, Rule]] = {
    "Produce": lambda r, b: [(WRITE, TOPIC, r.topic), *would_create(b, r.topic)],
    "Fetch": _read,
    "Subscribe": _read,
    "SubscribeBatches": _read,
    "CommitOffset": lambda r, b: [(READ, GROUP, r.group), (READ, TOPIC, r.topic)],
    "FetchCommittedOffsets": lambda r, b: [(DESCRIBE, GROUP, r.group), (DESCRIBE, TOPIC, r.topic)],
    "OffsetsForTimestamp": lambda r, b: [(DESCRIBE, TOPIC, r.topic)],
    "Admin": _admin,
    "Handshake": lambda r, b: [],
    "JoinGroup": lambda r, b: [(READ, GROUP, r.group), *_topics(DESCRIBE, r.topics)],
    "SyncGroup": _group_member,
    "Heartbeat": _group_member,
    "LeaveGroup": _group_member,
    "CommitOffsets": lambda r, b: [(READ, GROUP, r.group), *_topics(READ, (o.topic for o in r.offsets))],
    "DescribeGroup": lambda r, b: [(DESCRIBE, GROUP, r.group)],
    "ListGroups": lambda r, b: [],
    "ResetOffsets": lambda r, b: [(ADMIN, CLUSTER, CLUSTER_NAME)],
    "DeleteGroup": lambda r, b: [(DELETE, GROUP, r.group)],  # as Kafka's DeleteGroups
    "DescribeCluster": lambda r, b: [(DESCRIBE, CLUSTER, CLUSTER_NAME)],
    # Streams need a principal to open; the servicer checks each request with its unary twin's rule.
    "ProduceStream": lambda r, b: [],
    "FetchStream": lambda r, b: [],
}

#: Methods whose answer lists only what the caller may describe (they need no permission themselves).
FILTERED: Final = frozenset({"Admin.list_topics", "ListGroups"})
