"""What a Produce request's fields must hold before anything of it is handled, as Kafka checks them.

Kafka's broker (``ReplicaManager.appendRecords``) handles nothing of a Produce whose ``acks``
is not -1 (all in-sync replicas), 0 (none) or 1 (the leader): every partition the caller may
write, of a topic that exists, is answered INVALID_REQUIRED_ACKS (21), the others
TOPIC_AUTHORIZATION_FAILED or UNKNOWN_TOPIC_OR_PARTITION, as its ``KafkaApis`` sorts them
first; no topic is auto-created and the answer is sent (a client asking for such acks is
broken and must hear it). The other fields it takes as they come: ``timeout_ms`` (negative
included) only bounds a wait for replicas, which a single node never has (issue 28, finding 11).
"""

from __future__ import annotations

from typing import Final

from kio.schema.errors import ErrorCode

from lkstream.errors import LkstreamError
from lkstream.kafka.context import RequestContext
from lkstream.kafka.hot import ProducePartitionResult, ProduceRequestData, encode_produce_response
from lkstream.kafka.protocol import RequestHeader

#: Kafka's required acks: all in-sync replicas, none, the leader.
VALID_ACKS: Final = frozenset({-1, 0, 1})


def invalid_acks_answer(ctx: RequestContext, header: RequestHeader, request: ProduceRequestData) -> bytes | None:
    """Kafka's answer to ``request`` when its ``acks`` is not valid; None when it is (handle it)."""
    if request.acks in VALID_ACKS:
        return None
    message = f"acks must be -1, 0 or 1, not {request.acks}: nothing was written"
    results = [
        (
            topic,
            [
                ProducePartitionResult(part.partition, _code(ctx, topic, part.partition), -1, -1, message)
                for part in parts
            ],
        )
        for topic, parts in request.topics
    ]
    return encode_produce_response(header.api_version, results)


def _code(ctx: RequestContext, topic: str, partition: int) -> int:
    if not ctx.allowed("write", "topic", topic):
        return ErrorCode.topic_authorization_failed
    try:
        ctx.broker.partition(topic, partition)
    except (LkstreamError, KeyError):
        return ErrorCode.unknown_topic_or_partition
    return ErrorCode.invalid_required_acks
