"""Seed 003's event-log routes: one default topic, produced to and fetched by partition number.

::

    curl -X POST http://localhost:8080/produce/5 -H "Content-Type: application/x-www-form-urlencoded" \\
         -d "key=user43&value=goodbye"                   # {"topic": "events", "partition": 5, "offset": 0}
    curl -X GET http://localhost:8080/fetch/5            # [{"offset": 0, ..., "key": "user43", "value": "goodbye"}]

* The topic is ``server.http_default_topic`` (``events``), created with
  ``server.http_default_topic_partitions`` (100, as seed 003 has) the first time
  either route names it.
* ``POST /produce/{partition}`` takes a form body (``key`` optional, ``value``
  required; a JSON object ``{"key", "value"}`` works too) and answers the offset
  once the record is acknowledged under the daemon's ``fsync_mode``: in ``sync``
  after its fsync, in ``group`` once written (fsynced within
  ``fsync_interval_ms``), as every produce is (docs/durability.md).
* ``GET /fetch/{partition}`` answers the partition's records in order as a JSON
  array of record objects (:mod:`lkstream.format.json_records` less topic and
  partition), from ``offset`` (default: the log start), at most ``max`` (default
  1000, at most 10000) and about one response's worth of bytes; the
  ``X-Next-Offset`` header says where the next page starts.

Errors are the JSON error bodies of the rest of the API (docs/http.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

from aiohttp import web

from lkstream.broker.broker import Broker
from lkstream.broker.metrics import BrokerMetrics
from lkstream.errors import InvalidArgumentError, RecordTooLargeError, no_such_partition
from lkstream.format.codec import read_records
from lkstream.server.admin_calls import ensure_topic
from lkstream.server.http.errors import ApiError, body_errors, json_response
from lkstream.server.http.models import record_json

DEFAULT_FETCH_RECORDS: Final = 1000
MAX_FETCH_RECORDS: Final = 10_000
FORM_TYPES: Final = ("application/x-www-form-urlencoded", "multipart/form-data")


class EventLogRoutes:
    """``POST /produce/{partition}`` and ``GET /fetch/{partition}`` over the default topic."""

    def __init__(
        self,
        broker: Broker,
        metrics: BrokerMetrics,
        *,
        topic: str,
        partitions: int,
        max_fetch_bytes: int,
        check_ready: Callable[[], None],
    ) -> None:
        self.broker = broker
        self.metrics = metrics
        self.topic = topic
        self.partitions = partitions
        self.max_fetch_bytes = max_fetch_bytes
        self.check_ready = check_ready

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/produce/{partition}", self.produce)
        app.router.add_get("/fetch/{partition}", self.fetch)

    async def _partition(self, request: web.Request) -> int:
        raw = request.match_info["partition"]
        if not raw.isdigit():
            raise InvalidArgumentError(f"partition must be a number, not {raw!r}")
        # The default topic on first use (its 100 partitions are admin work: in a worker thread).
        count = await ensure_topic(self.broker, self.topic, requester="daemon", partitions=self.partitions)
        pid = int(raw)
        if pid >= count:
            raise no_such_partition(self.topic, pid, count)
        return pid

    async def produce(self, request: web.Request) -> web.Response:
        self.check_ready()
        pid = await self._partition(request)
        key, value = await _key_and_value(request)
        limit = self.broker.config.max_message_bytes
        if len(key or b"") + len(value) > limit:
            raise RecordTooLargeError(len(key or b"") + len(value), limit)
        [(_, offset)] = await self.broker.produce_many(self.topic, [(key, value)], partition=pid)
        return json_response({"topic": self.topic, "partition": pid, "offset": offset})

    async def fetch(self, request: web.Request) -> web.Response:
        self.check_ready()
        pid = await self._partition(request)
        partition = self.broker.partition(self.topic, pid)
        offset = _query_int(request, "offset", partition.log_start_offset, 2**63 - 1)
        wanted = _query_int(request, "max", DEFAULT_FETCH_RECORDS, MAX_FETCH_RECORDS)
        records: list[dict[str, Any]] = []
        budget = self.max_fetch_bytes

        def fetch(at: int) -> tuple[bytes, int]:
            nonlocal budget
            result = self.broker.fetch(self.topic, pid, at, budget)
            budget -= len(result.data)
            return result.data, result.high_watermark

        while len(records) < wanted and budget > 0:
            # Past batches without records too (a compacted topic's gaps): X-Next-Offset never sticks.
            batch, offset = read_records(fetch, self.topic, pid, offset, wanted - len(records))
            if not batch:
                break
            records += [record_json(r, False) for r in batch]
        response = json_response(records)
        response.headers["X-Next-Offset"] = str(offset)
        return response


async def _key_and_value(request: web.Request) -> tuple[bytes | None, bytes]:
    """``key`` and ``value`` of a form body (or of a JSON object), as UTF-8 bytes."""
    if request.content_type in FORM_TYPES:
        with body_errors(request):
            form = await request.post()
        fields: dict[str, Any] = {name: form.get(name) for name in ("key", "value")}
        unknown = sorted(set(form) - {"key", "value"})
    else:
        with body_errors(request):
            raw = await request.read()
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise ApiError(
                400, "invalid_request", "send a form body key=...&value=... (or a JSON object with key and value)"
            ) from None
        if not isinstance(body, dict):
            raise ApiError(400, "invalid_request", "the body must be a form key=...&value=... or a JSON object")
        fields = {name: body.get(name) for name in ("key", "value")}
        unknown = sorted(set(body) - {"key", "value"})
    if unknown:
        raise ApiError(400, "invalid_request", f"unknown field(s) {', '.join(unknown)}: only key and value")
    if not isinstance(fields["value"], str):
        raise ApiError(400, "invalid_request", "value is required (a text field)")
    if fields["key"] is not None and not isinstance(fields["key"], str):
        raise ApiError(400, "invalid_request", "key must be a text field")
    key = fields["key"]
    return (None if key is None else key.encode()), fields["value"].encode()


def _query_int(request: web.Request, name: str, default: int, maximum: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or int(raw) > maximum:
        raise ApiError(400, "invalid_request", f"query parameter {name} must be an integer from 0 to {maximum}")
    return int(raw)
