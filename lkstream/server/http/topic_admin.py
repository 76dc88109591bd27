"""Topic configs, partitions and DeleteRecords over HTTP (issue 24): the JSON twins of Kafka's admin APIs.

===================================  =============================================================
``GET /topics/{t}/configs``          every topic config: value, source (DYNAMIC_TOPIC_CONFIG,
                                     STATIC_BROKER_CONFIG, DEFAULT_CONFIG), type, documentation,
                                     synonyms (Kafka's DescribeConfigs)
``PATCH /topics/{t}/configs``        ``{"set": {...}, "delete": [...], "validate_only": false}``
                                     (Kafka's IncrementalAlterConfigs); answers the topic
``POST /topics/{t}/partitions``      ``{"count": N, "validate_only": false}`` (CreatePartitions);
                                     answers the topic
``POST /topics/{t}/delete-records``  ``{"partitions": [{"partition": P, "before": OFFSET}]}``
                                     (Kafka's DeleteRecords; -1: the high watermark); answers
                                     each partition's log start offset after it
===================================  =============================================================

Mounted by :class:`~lkstream.server.http.api.HttpApi`; its error middleware maps refusals
(an unknown or unsupported config is 400 ``invalid_config`` / ``unsupported_config``, a missing
topic 404, an offset above the high watermark 416). Admin work (``topic.json`` rewritten and
fsynced, a log start made durable) runs in a worker thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiohttp import web

from lkstream.broker.broker import Broker
from lkstream.server.http.errors import json_response
from lkstream.server.http.models import (
    AlterTopicConfigsRequest,
    CreatePartitionsRequest,
    DeleteRecordsRequest,
    topic_json,
)


class TopicAdminRoutes:
    """The routes above over one broker (``check_ready`` and ``parsed_body`` are the API's own)."""

    def __init__(self, broker: Broker, check_ready: Callable[[], None], parsed_body: Any) -> None:
        self.broker = broker
        self.check_ready = check_ready
        self.parsed_body = parsed_body

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/topics/{topic}/configs", self.describe_configs)
        app.router.add_patch("/topics/{topic}/configs", self.alter_configs)
        app.router.add_post("/topics/{topic}/partitions", self.create_partitions)
        app.router.add_post("/topics/{topic}/delete-records", self.delete_records)

    async def describe_configs(self, request: web.Request) -> web.Response:
        self.check_ready()
        name = request.match_info["topic"]
        return json_response(await asyncio.to_thread(self._configs, name))

    def _configs(self, name: str) -> dict[str, Any]:
        entries = self.broker.describe_topic_configs(name)
        return {
            "topic": name,
            "configs": [
                {
                    "name": e.name,
                    "value": e.value,
                    "source": e.source.name,
                    "type": e.type.name,
                    "documentation": e.documentation,
                    "synonyms": [{"name": s.name, "value": s.value, "source": s.source.name} for s in e.synonyms],
                }
                for e in entries
            ],
        }

    async def alter_configs(self, request: web.Request) -> web.Response:
        self.check_ready()
        name = request.match_info["topic"]
        body: AlterTopicConfigsRequest = await self.parsed_body(request, AlterTopicConfigsRequest)
        alter = self.broker.validate_topic_configs if body.validate_only else self.broker.alter_topic_configs
        await asyncio.to_thread(alter, name, body.set, body.delete)
        return json_response(await asyncio.to_thread(lambda: topic_json(self.broker.describe_topic(name))))

    async def create_partitions(self, request: web.Request) -> web.Response:
        self.check_ready()
        name = request.match_info["topic"]
        body: CreatePartitionsRequest = await self.parsed_body(request, CreatePartitionsRequest)
        if body.validate_only:
            self.broker.validate_partition_count(name, body.count)
        else:
            await asyncio.to_thread(self.broker.create_partitions, name, body.count)
        return json_response(await asyncio.to_thread(lambda: topic_json(self.broker.describe_topic(name))))

    async def delete_records(self, request: web.Request) -> web.Response:
        """Kafka's DeleteRecords: each partition's log start moves to ``before`` (durable when answered)."""
        self.check_ready()
        topic = request.match_info["topic"]
        body: DeleteRecordsRequest = await self.parsed_body(request, DeleteRecordsRequest)
        before = {entry.partition: entry.before for entry in body.partitions}
        lows = await asyncio.to_thread(self.broker.delete_records, topic, before)
        partitions = [{"partition": pid, "low_watermark": low} for pid, low in sorted(lows.items())]
        return json_response({"topic": topic, "partitions": partitions})
