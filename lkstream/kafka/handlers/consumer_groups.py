"""KIP-848's ConsumerGroupHeartbeat (``group.protocol=consumer``) on LKSTREAM's own group coordinator.

In Kafka's newer consumer protocol the coordinator assigns partitions, as LKSTREAM's
:class:`~lkstream.broker.groups.coordinator.GroupCoordinator` always has, so one heartbeat maps
onto it directly:

==========================================  ==================================================
ConsumerGroupHeartbeat                      GroupCoordinator
==========================================  ==================================================
member epoch 0 (join), subscribed topics    ``join`` (a new member keeps the id the client chose,
                                            v1; v0 clients get a generated one)
subscribed topics changed                   ``join`` of the known member (a rebalance)
the answer's assignment                     ``owned - revoke``: what it may consume now; the rest
                                            arrives in later heartbeats once other members
                                            released it (never owned by two members at once)
owned partitions no longer reported         released, if the coordinator had asked for them back
member epoch in the answer                  the group's generation (offset commits carry it back
                                            and are fenced with it)
member epoch -1 / -2 (leave)                ``leave``
server assignor ``uniform`` (default) /     ``cooperative-sticky`` / ``range``
``range``
==========================================  ==================================================

Such groups are LKSTREAM groups: ``lkstream groups`` lists them, their commits are fenced by the
coordinator (owner and generation), and an LKSTREAM :class:`~lkstream.Consumer` with the same
assignor may even share the group with Kafka clients. A member joining a group that classic
Kafka members hold converts it (KIP-848's online upgrade), and the group goes back to the classic
coordinator when its last consumer-protocol member leaves (:mod:`lkstream.broker.groups.conversion`).
Partitions travel by topic id (:mod:`lkstream.kafka.topic_ids`), which is why this API is served only
with the listener's topic-id switch on (the default).
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any, Final

from kio.schema.errors import ErrorCode

from lkstream.broker.groups.conversion import NotUpgradableError, upgrade_if_classic
from lkstream.broker.groups.coordinator import DEFAULT_REBALANCE_TIMEOUT_MS
from lkstream.broker.groups.types import TopicPartition
from lkstream.errors import (
    FencedInstanceError,
    InconsistentGroupProtocolError,
    InvalidArgumentError,
    LkstreamError,
    UnknownAssignorError,
    UnknownMemberError,
    UnknownTopicError,
)
from lkstream.kafka import kio_codec
from lkstream.kafka.context import RequestContext
from lkstream.kafka.errors import error_code
from lkstream.kafka.handlers import classic_routing
from lkstream.kafka.protocol import ApiKey, RequestHeader

#: KIP-848's server-side assignors, as LKSTREAM's: "uniform" spreads partitions and moves few, as
#: cooperative-sticky does; "range" is range (eager here: everything is released, then granted).
ASSIGNORS: Final[dict[str | None, str]] = {
    None: "cooperative-sticky",
    "uniform": "cooperative-sticky",
    "range": "range",
}
#: How often members heartbeat (Kafka's group.consumer.heartbeat.interval.ms is 5 s; a shorter one
#: hands partitions over faster, at a few requests per second per member).
HEARTBEAT_INTERVAL_MS: Final = 1_000
#: Kafka's group.consumer.session.timeout.ms is 45 s; LKSTREAM's group default is 10 s.
SESSION_TIMEOUT_MS: Final = 10_000
LEAVE_EPOCH: Final = -1
STATIC_LEAVE_EPOCH: Final = -2


async def consumer_group_heartbeat(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    request = kio_codec.decode_request(ApiKey.CONSUMER_GROUP_HEARTBEAT, header.api_version, frame, header.body_offset)
    response_cls = kio_codec.response_type(ApiKey.CONSUMER_GROUP_HEARTBEAT, header.api_version)

    def answer(code: int, message: str | None = None, **values: Any) -> bytes:
        fields = {"member_id": None, "member_epoch": -1, "assignment": None, **values}
        return kio_codec.encode(
            kio_codec.make(
                response_cls,
                throttle_time=datetime.timedelta(0),
                error_code=code,
                error_message=message,
                heartbeat_interval=datetime.timedelta(milliseconds=HEARTBEAT_INTERVAL_MS),
                **fields,
            )
        )

    if not ctx.allowed("read", "group", request.group_id):
        return answer(ErrorCode.group_authorization_failed)
    # As Kafka's KafkaApis (and JoinGroup over gRPC): a member may subscribe only to topics it may
    # describe, or the assignment would show it topics it may not see. Kafka sends no message here.
    if request.subscribed_topic_names and not all(
        ctx.allowed("describe", "topic", topic) for topic in request.subscribed_topic_names
    ):
        return answer(ErrorCode.topic_authorization_failed)
    try:
        if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            ctx.broker.leave_group(request.group_id, request.member_id, owner=ctx.owner)
            classic_routing.downgrade_groups(ctx)  # the last consumer-protocol member may have gone
            return answer(0, member_id=request.member_id, member_epoch=request.member_epoch)
        if request.member_epoch == 0:
            _upgrade_if_classic(ctx, request)
        member_id = _join_if_needed(ctx, request, header.client_id)
        owned = _reported(ctx, request.topic_partitions)
        coordinator = ctx.broker.groups
        result = coordinator.heartbeat(request.group_id, member_id, owner=ctx.owner)
        # Released: what it was told to give back and no longer reports. Partitions granted but not
        # yet acknowledged are missing from its report too, and must stay its own.
        released = result.revoke - owned if owned is not None else frozenset()
        if released:
            result = coordinator.heartbeat(request.group_id, member_id, released=released, owner=ctx.owner)
    except UnknownMemberError as exc:
        return answer(ErrorCode.unknown_member_id, str(exc))
    except FencedInstanceError as exc:
        return answer(ErrorCode.fenced_instance_id, str(exc))
    except UnknownAssignorError as exc:
        return answer(ErrorCode.unsupported_assignor, str(exc))
    except (InconsistentGroupProtocolError, NotUpgradableError) as exc:
        return answer(ErrorCode.group_id_not_found, str(exc))  # Kafka: "Group ... is not a consumer group"
    except LkstreamError as exc:
        return answer(error_code(exc), str(exc))
    assignment_cls = kio_codec.struct_type(response_cls, "assignment")
    partition_cls = kio_codec.item_type(assignment_cls, "topic_partitions")
    mine: dict[str, list[int]] = {}
    for topic, pid in sorted(result.owned - result.revoke):
        mine.setdefault(topic, []).append(pid)
    assignment = kio_codec.make(
        assignment_cls,
        topic_partitions=tuple(
            kio_codec.make(partition_cls, topic_id=ctx.server.topic_ids.id_of(topic), partitions=tuple(pids))
            for topic, pids in mine.items()
        ),
    )
    return answer(0, member_id=member_id, member_epoch=result.generation, assignment=assignment)


def _upgrade_if_classic(ctx: RequestContext, request: Any) -> None:
    """KIP-848's online upgrade: a live classic group of that name becomes a consumer group first."""
    assignor = ASSIGNORS.get(request.server_assignor)
    if assignor is None:
        raise UnknownAssignorError(request.server_assignor, tuple(name for name in ASSIGNORS if name))
    groups = ctx.broker.groups
    upgrade_if_classic(ctx.server.groups, groups, request.group_id, assignor, groups.limits.migration_policy)


def _join_if_needed(ctx: RequestContext, request: Any, client_id: str) -> str:
    """The member id to heartbeat as: a new member joins, a changed subscription rejoins."""
    broker = ctx.broker
    topics = request.subscribed_topic_names
    if request.member_epoch == 0 or topics is not None:
        known = request.member_epoch != 0 and bool(request.member_id)
        if topics is None:
            raise InvalidArgumentError("a ConsumerGroupHeartbeat joining (member epoch 0) must name its topics")
        assignor = ASSIGNORS.get(request.server_assignor)
        if assignor is None:
            raise UnknownAssignorError(request.server_assignor, tuple(name for name in ASSIGNORS if name))
        current = broker.groups.member_topics(request.group_id, request.member_id) if request.member_id else None
        if known and current == frozenset(topics):
            return str(request.member_id)  # the client repeats an unchanged subscription
        limits = broker.groups.limits
        joined = broker.groups.join(
            request.group_id,
            list(topics),
            member_id=request.member_id if known or current is not None else None,
            instance_id=request.instance_id,
            assignor=assignor,
            # The broker chooses KIP-848 sessions (Kafka's group.consumer.session.timeout.ms): within the bounds.
            session_timeout_ms=min(
                max(SESSION_TIMEOUT_MS, limits.min_session_timeout_ms), limits.max_session_timeout_ms
            ),
            rebalance_timeout_ms=_rebalance_timeout_ms(request.rebalance_timeout),
            client_id=client_id,
            client_host=ctx.client_host,
            new_member_id=request.member_id or None,
            owner=ctx.owner,
        )
        return joined.member_id
    if not request.member_id:
        raise UnknownMemberError(request.group_id, "")
    return str(request.member_id)


def _rebalance_timeout_ms(value: datetime.timedelta) -> int:
    """The client's rebalance timeout (its max.poll.interval.ms); -1 means unchanged, or not given."""
    ms = int(value.total_seconds() * 1000)
    return ms if ms > 0 else DEFAULT_REBALANCE_TIMEOUT_MS


def _reported(ctx: RequestContext, topic_partitions: Any) -> frozenset[TopicPartition] | None:
    """The partitions the member says it owns (None: unchanged since its last heartbeat)."""
    if topic_partitions is None:
        return None
    owned: set[TopicPartition] = set()
    for entry in topic_partitions:
        name = ctx.server.topic_ids.name_of(
            entry.topic_id if isinstance(entry.topic_id, uuid.UUID) else uuid.UUID(int=0)
        )
        if name is None:
            raise UnknownTopicError(str(entry.topic_id))
        owned.update((name, int(pid)) for pid in entry.partitions)
    return frozenset(owned)
