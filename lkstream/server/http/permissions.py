"""What each HTTP route needs, as ACL operations on resources (the HTTP twin of ``rpc_permissions``).

:data:`ROUTE_NEEDS` maps every route of the JSON API (``"METHOD /path/{template}"``, as
in the OpenAPI document) to a :class:`RouteRule`: a function of the request (its path
parameters and, for JSON bodies, the parsed body) returning the ``(operation,
resource type, name)`` triples the caller must all be allowed. The access middleware
(:mod:`lkstream.server.http.access`) asks them before the handler runs; a route
missing from the table is refused (fail closed), and a test generated from the OpenAPI
document fails when a route has no entry.

The rules are the gRPC ones (docs/security.md):

===================================  =====================================================================
``POST /produce``                    ``write`` on each topic; ``create`` too when it would auto-create it
``POST /consume``                    ``read`` on each topic; ``read`` on the group when it names one
``GET /topics``                      nothing: the answer lists only topics the caller may ``describe``
``POST /topics``                     ``create`` on the topic
``GET|DELETE /topics/{t}``           ``describe`` / ``delete`` on the topic
``POST /topics/{t}/delete-records``  ``delete`` on the topic (Kafka's DeleteRecords asks the same)
``GET|PATCH /topics/{t}/configs``    ``describe_configs`` / ``alter_configs`` on the topic
``POST /topics/{t}/partitions``      ``create`` on the topic
``GET /groups/{group}``              ``describe`` on the group; rows only for topics it may ``describe``
``POST /produce/{partition}``        as ``POST /produce`` on ``server.http_default_topic`` (it may create it)
``GET /fetch/{partition}``           ``read`` on the default topic; ``create`` when the call would create it
``GET /openapi.json``                a principal
===================================  =====================================================================

A rule that reads the body parses it once, with the model the handler uses; the
handler takes the parsed body from the request (:data:`PARSED_BODY_KEY`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web
from pydantic import BaseModel

from lkstream.broker.broker import Broker
from lkstream.errors import LkstreamError, UnknownTopicError
from lkstream.security.acl import Operation, ResourceType
from lkstream.security.principal import Principal
from lkstream.server.http.models import (
    AlterTopicConfigsRequest,
    ConsumeRequest,
    CreatePartitionsRequest,
    CreateTopicRequest,
    DeleteRecordsRequest,
    ProduceRequest,
)
from lkstream.server.needs import Need, would_create

READ, WRITE, CREATE, DELETE, DESCRIBE = (
    Operation.READ,
    Operation.WRITE,
    Operation.CREATE,
    Operation.DELETE,
    Operation.DESCRIBE,
)
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP

#: The authenticated principal of a request (set by the access middleware).
PRINCIPAL_KEY: Final = web.RequestKey("lkstream.principal", Principal)
#: A JSON body the access check parsed already, for the handler to reuse.
PARSED_BODY_KEY: Final = web.RequestKey("lkstream.parsed_body", BaseModel)
#: Asks again whether the request's caller may still make it (its token, then the route's needs);
#: raises AuthenticationError / AuthorizationError. For a handler that answers long after the check
#: (a long poll); absent with authentication off.
RECHECK_KEY: Final = web.RequestKey[Callable[[], None]]("lkstream.recheck")


@dataclass(frozen=True)
class RouteCall:
    """What a rule sees of one request."""

    match_info: Mapping[str, str]
    body: Any  # the parsed body (RouteRule.body), or None
    broker: Broker
    default_topic: str


@dataclass(frozen=True)
class RouteRule:
    """The needs of one route; ``body``: the model to parse the JSON body with first."""

    needs: Callable[[RouteCall], list[Need]]
    body: type[BaseModel] | None = None
    #: The answer lists only what the caller may describe (the route itself needs nothing).
    filtered: bool = False


def _nothing(call: RouteCall) -> list[Need]:
    return []


def _produce(call: RouteCall) -> list[Need]:
    needs: list[Need] = []
    for topic in sorted({entry.topic for entry in call.body.topic_partitions}):
        needs += [(WRITE, TOPIC, topic), *would_create(call.broker, topic)]
    return needs


def _consume(call: RouteCall) -> list[Need]:
    body: ConsumeRequest = call.body
    needs: list[Need] = [(READ, TOPIC, topic) for topic in sorted({spec.topic for spec in body.wanted})]
    if body.group is not None:
        needs.append((READ, GROUP, body.group))
    return needs


def _default_topic_missing(call: RouteCall) -> list[Need]:
    """``create`` on the default topic while it does not exist: the event-log routes create it on first use."""
    try:
        call.broker.partitions_for(call.default_topic)
    except UnknownTopicError:
        return [(CREATE, TOPIC, call.default_topic)]
    except LkstreamError:
        return []
    return []


def _topic_in_path(operation: Operation) -> Callable[[RouteCall], list[Need]]:
    return lambda call: [(operation, TOPIC, call.match_info["topic"])]


ROUTE_NEEDS: Final[dict[str, RouteRule]] = {
    "POST /produce": RouteRule(_produce, body=ProduceRequest),
    "POST /consume": RouteRule(_consume, body=ConsumeRequest),
    "GET /topics": RouteRule(_nothing, filtered=True),
    "POST /topics": RouteRule(lambda call: [(CREATE, TOPIC, call.body.name)], body=CreateTopicRequest),
    "GET /topics/{topic}": RouteRule(_topic_in_path(DESCRIBE)),
    "DELETE /topics/{topic}": RouteRule(_topic_in_path(DELETE)),
    "POST /topics/{topic}/delete-records": RouteRule(_topic_in_path(DELETE), body=DeleteRecordsRequest),
    "GET /topics/{topic}/configs": RouteRule(_topic_in_path(Operation.DESCRIBE_CONFIGS)),
    "PATCH /topics/{topic}/configs": RouteRule(_topic_in_path(Operation.ALTER_CONFIGS), body=AlterTopicConfigsRequest),
    # Growing a topic is creating partitions, as on the Kafka listener and gRPC.
    "POST /topics/{topic}/partitions": RouteRule(_topic_in_path(CREATE), body=CreatePartitionsRequest),
    "GET /groups/{group}": RouteRule(lambda call: [(DESCRIBE, GROUP, call.match_info["group"])], filtered=True),
    "POST /produce/{partition}": RouteRule(
        lambda call: [(WRITE, TOPIC, call.default_topic), *_default_topic_missing(call)]
    ),
    "GET /fetch/{partition}": RouteRule(
        lambda call: [(READ, TOPIC, call.default_topic), *_default_topic_missing(call)]
    ),
    "GET /openapi.json": RouteRule(_nothing),
}


def route_key(request: web.Request) -> str | None:
    """``"METHOD /path/{template}"`` of the route ``request`` matched (HEAD as GET); None when none did."""
    resource = request.match_info.route.resource
    if resource is None:
        return None
    method = "GET" if request.method == "HEAD" else request.method
    return f"{method} {resource.canonical}"
