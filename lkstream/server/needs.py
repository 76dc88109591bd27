"""What the daemon's surfaces share about ACL needs: the ``(operation, resource type, name)`` triple.

Both the gRPC permission table (:mod:`lkstream.server.grpc.permissions`) and the HTTP one
(:mod:`lkstream.server.http.permissions`) build their rules from these, so neither surface imports
the other.
"""

from __future__ import annotations

from lkstream.broker.broker import Broker
from lkstream.errors import LkstreamError, UnknownTopicError
from lkstream.security.acl import Operation, ResourceType

Need = tuple[Operation, ResourceType, str]


def would_create(broker: Broker, topic: str, asked: bool = True) -> list[Need]:
    """``create`` on ``topic`` when the call would auto-create it (asked, allowed by config, missing)."""
    if not (asked and broker.config.auto_create_topics):
        return []
    try:
        broker.partitions_for(topic)
    except UnknownTopicError:
        return [(Operation.CREATE, ResourceType.TOPIC, topic)]
    except LkstreamError:
        return []  # a bad name: the servicer reports it
    return []
