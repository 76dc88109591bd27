"""The daemon's HTTP JSON API: produce, consume, topics and groups for clients without gRPC.

Mounted by :class:`lkstream.server.http.app.HttpServer` beside ``/metrics`` on the same
port. Routes (documented with curl examples in ``docs/http.md``):

==========================  ======================================================================
``POST /produce``           records of several topic-partitions: UTF-8 strings, ``{"base64": ...}``,
                            or record objects; partition omitted = the partitioner picks (keys
                            hash, keyless records stick to one partition); a record's own
                            ``partition`` wins; a refused produce creates no topic
``POST /consume``           per topic-partition ``fetch_offset`` (``partitions``, or seed 001's
                            ``topic_partitions``); long poll (``max_wait_ms``, ``min_bytes``) woken
                            by appends; with ``group``: from the group's committed offsets,
                            committing the next offsets once the answer is built
``GET|POST /topics``        list, create
``GET|DELETE /topics/{t}``  describe (with per-partition offsets and config overrides), delete
``/topics/{t}/configs``     ``GET`` every config with its source, ``PATCH`` set/delete overrides;
``/topics/{t}/partitions``  ``POST`` grows the topic (:mod:`lkstream.server.http.topic_admin`)
``GET /groups/{group}``     committed offsets and lag per topic-partition
``GET /openapi.json``       the OpenAPI 3.1 document (:mod:`lkstream.server.http.openapi`)
==========================  ======================================================================

Split by role: this module holds the handlers; :mod:`lkstream.server.http.models`
the pydantic models that validate requests and generate the OpenAPI document,
and the conversions to and from the broker's values (records in the one JSON
shape of :mod:`lkstream.format.json_records`); :mod:`lkstream.server.http.errors`
the error table and JSON error bodies; :mod:`lkstream.server.http.eventlog` seed
003's ``/produce/{partition}`` and ``/fetch/{partition}``.

Errors: every failure is a JSON body ``{"error": {"code", "message", ...fields}}``
(:mod:`lkstream.server.http.errors`): an :class:`LkstreamError` gets the HTTP status
derived from its gRPC status, its ``code`` is the class name in snake case without
``Error`` (``unknown_topic``, ``record_too_large``), and its fields ride along.
Request problems have their own codes: ``invalid_json``, ``invalid_request`` and
``invalid_body`` (400; the last for a body that does not decode as its
``Content-Encoding`` says), ``request_too_large`` (413), ``not_ready`` (503 while
starting or shutting down), ``not_found`` and ``method_not_allowed`` for unknown
routes. 429 and 503 carry ``Retry-After``. Bad input never gets a 5xx; a 5xx
means a server-side problem (disk, corruption).

Group consume is a "simple consumer" (Kafka's term): it reads the group's
committed offsets and commits ``next_fetch_offset`` of each partition once the
answer is built (at most once per call), in one atomic commit through the group
coordinator without joining the group. The coordinator accepts such commits only
while the group has no live members (gRPC consumers of a group are fenced), so
an HTTP client cannot overwrite the progress of a running group; two HTTP
clients of one group read the same partitions. Commits only move forward.

Access control (docs/security.md): with authentication on, the access middlewares
(:mod:`lkstream.server.http.access`) check each route's needs before its handler runs
and may hand it the body they parsed (:meth:`HttpApi.parsed_body`); the listings answer only
what the caller may describe (:meth:`HttpApi.visible`).

Concurrency: as in the gRPC servicer, the broker's synchronous append and read
calls run inline on the event loop; only waits (fsync acks, long polls, offset
file commits in a worker thread) are awaited, and admin work (creating, describing
and deleting topics, auto-creating one on produce) runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel
from pydantic_core import to_json

from lkstream.broker.broker import Broker
from lkstream.broker.metrics import BrokerMetrics
from lkstream.errors import (
    InvalidArgumentError,
    LkstreamError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnknownTopicError,
    no_such_partition,
)
from lkstream.format.codec import decode_batches_through
from lkstream.security.access import Access
from lkstream.security.acl import Operation, ResourceType
from lkstream.security.principal import ANONYMOUS, requester_of
from lkstream.server.admin_calls import ensure_topic
from lkstream.server.http.errors import (
    JSON_TYPE,
    ApiError,
    Code,
    body_errors,
    error_code,
    error_info,
    error_response,
    http_status,
    json_response,
)
from lkstream.server.http.models import (
    DEFAULT_CONSUME_BYTES,
    DEFAULT_PARTITION_BYTES,
    ConsumeRequest,
    ConsumeResponse,
    CreateTopicRequest,
    ErrorResponse,
    GroupOffsets,
    ProduceEntry,
    ProduceErrorResponse,
    ProduceRequest,
    ProduceResponse,
    TopicInfo,
    TopicList,
    parse_body,
    produce_items,
    produce_runs,
    record_json,
    topic_json,
)
from lkstream.server.http.openapi import openapi_document
from lkstream.server.http.permissions import PARSED_BODY_KEY, PRINCIPAL_KEY, RECHECK_KEY
from lkstream.server.http.topic_admin import TopicAdminRoutes
from lkstream.storage.names import validate_group
from lkstream.wire.contract import status_for

log = logging.getLogger("lkstream.server.http.app")

# One produce entry's records as runs bound for one partition each (see ``produce_runs``).
_Runs = list[tuple[int | None, list[tuple[Any, ...]]]]

# Names other modules and the tests import from here, where they lived before the split by role.
__all__ = [
    "ConsumeResponse",
    "ErrorResponse",
    "GroupOffsets",
    "HttpApi",
    "ProduceErrorResponse",
    "ProduceRequest",
    "ProduceResponse",
    "TopicInfo",
    "TopicList",
    "error_code",
    "http_status",
    "openapi_document",
    "parse_body",
    "produce_items",
    "record_json",
]


@dataclass
class _Target:
    topic: str
    partition: int
    offset: int
    max_bytes: int
    committed: int | None


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
M = TypeVar("M", bound=BaseModel)


class HttpApi:
    """The JSON routes over one broker; :meth:`add_routes` mounts them on an aiohttp app.

    ``is_ready`` gates every route but ``/openapi.json`` (503 ``not_ready`` while the
    daemon starts or shuts down); setting ``stopping`` ends long polls early.
    """

    def __init__(
        self,
        broker: Broker,
        metrics: BrokerMetrics,
        *,
        max_request_bytes: int,
        is_ready: Callable[[], bool],
        access: Access | None = None,
    ) -> None:
        self.broker = broker
        self.metrics = metrics
        #: Asked only to filter listings; the access middlewares check every route before it gets here.
        self.access = access or Access.disabled()
        self.max_request_bytes = max_request_bytes
        # A response is bounded like a request: record bytes plus JSON overhead stay near this.
        self.max_fetch_bytes = max(1024, max_request_bytes // 2)
        self.is_ready = is_ready
        self.stopping = asyncio.Event()
        self._openapi = to_json(openapi_document())

    def add_routes(self, app: web.Application) -> None:
        app.middlewares.append(self.errors_middleware)
        router = app.router
        router.add_post("/produce", self.produce)
        router.add_post("/consume", self.consume)
        router.add_get("/topics", self.list_topics)
        router.add_post("/topics", self.create_topic)
        router.add_get("/topics/{topic}", self.describe_topic)
        router.add_delete("/topics/{topic}", self.delete_topic)
        TopicAdminRoutes(self.broker, self.check_ready, self.parsed_body).add_routes(app)
        router.add_get("/groups/{group:.+}", self.describe_group)  # a group id may hold "/" (percent-encoded)
        router.add_get("/openapi.json", self.openapi)

    # -- plumbing ----------------------------------------------------------------------------------

    @web.middleware
    async def errors_middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Every failure as a JSON error body; the one place errors are mapped and counted."""
        try:
            return await handler(request)
        except ApiError as exc:
            if exc.status == 400:
                self.metrics.count_error(Code.INVALID_ARGUMENT.name)
            return error_response(exc.status, {"code": exc.code, "message": str(exc), **exc.extra})
        except LkstreamError as exc:
            status = http_status(exc)
            if status >= 500:
                log.error("%s %s failed: %s", request.method, request.path, exc)
            self.metrics.count_error(status_for(exc).name)
            return error_response(status, error_info(exc))
        except web.HTTPRequestEntityTooLarge:
            return self._too_large()
        except ConnectionError:
            raise  # the client went (or was cut off for a slow body): nobody to answer, not a server error
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            code = re.sub(r"\W+", "_", exc.reason.lower()).strip("_")
            response = error_response(
                exc.status, {"code": code, "message": f"{exc.reason}: {request.method} {request.path}"}
            )
            if "Allow" in exc.headers:
                response.headers["Allow"] = exc.headers["Allow"]
            return response
        except Exception:  # a bug: say so in the log, answer JSON all the same
            log.exception("%s %s failed", request.method, request.path)
            return error_response(500, {"code": "internal", "message": "internal error (see the daemon log)"})

    def _too_large(self) -> web.Response:
        message = f"request body exceeds the limit of {self.max_request_bytes} bytes"
        return error_response(413, {"code": "request_too_large", "message": message, "limit": self.max_request_bytes})

    def check_ready(self) -> None:
        """503 ``not_ready`` unless the daemon serves (shared with the event-log routes)."""
        if not self.is_ready():
            raise ApiError(503, "not_ready", "the daemon is starting or shutting down; retry later")

    async def read_body(self, request: web.Request) -> bytes:
        """The request body (413 above ``max_request_bytes``; 400 when it does not decode)."""
        length = request.content_length
        if length is not None and length > self.max_request_bytes:
            raise web.HTTPRequestEntityTooLarge(max_size=self.max_request_bytes, actual_size=length)
        with body_errors(request):
            return await request.read()

    async def parsed_body(self, request: web.Request, model: type[M]) -> M:
        """The body as ``model``: parsed already by the access check, or parsed now."""
        parsed = request.get(PARSED_BODY_KEY)
        if isinstance(parsed, model):
            return parsed
        return parse_body(model, await self.read_body(request))

    def visible(self, request: web.Request, resource_type: ResourceType, names: Iterable[str]) -> list[str]:
        """The ``names`` the caller may describe (all of them without authentication)."""
        if not self.access.enabled:
            return list(names)
        principal = request[PRINCIPAL_KEY]
        return [name for name in names if self.access.allows(principal, Operation.DESCRIBE, resource_type, name)]

    async def openapi(self, request: web.Request) -> web.Response:
        return web.Response(body=self._openapi, content_type=JSON_TYPE)

    # -- produce -----------------------------------------------------------------------------------

    async def produce(self, request: web.Request) -> web.Response:
        self.check_ready()
        body = await self.parsed_body(request, ProduceRequest)
        started = time.perf_counter()
        try:
            entries = body.topic_partitions
            # Auto-creation is budgeted per caller (issue 28, finding 6): its principal, else its address.
            requester = requester_of(request.get(PRINCIPAL_KEY, ANONYMOUS), request.remote)
            outcomes: list[list[tuple[int, int]] | BaseException]
            if len(entries) == 1:
                try:
                    prepared_runs = await self._prepare_entry(entries[0], requester)
                    outcomes = [await self._append_entry(entries[0], prepared_runs)]
                except LkstreamError as exc:
                    outcomes = [exc]
            else:
                # Every await that is not an append (auto-creating a topic runs in a worker thread)
                # comes first, entry by entry. Then the appends run in the request's order, each
                # before its coroutine's first await, and the acks are awaited together. A creation
                # awaited between appends would let a later entry append first, or only after an
                # earlier entry's fsync.
                prepared: list[_Runs | LkstreamError] = []
                for entry in entries:
                    try:
                        prepared.append(await self._prepare_entry(entry, requester))
                    except LkstreamError as exc:
                        prepared.append(exc)
                appends = (self._append_entry(e, runs) for e, runs in zip(entries, prepared, strict=True))
                outcomes = list(await asyncio.gather(*appends, return_exceptions=True))
        finally:
            self.metrics.observe_produce(time.perf_counter() - started)
        results: list[dict[str, Any]] = []
        first_error: LkstreamError | None = None
        for entry, outcome in zip(entries, outcomes, strict=True):
            result: dict[str, Any] = {"topic": entry.topic, "partition": entry.partition}
            if isinstance(outcome, LkstreamError):
                first_error = first_error or outcome
                self.metrics.count_error(status_for(outcome).name)
                result["error"] = error_info(outcome)
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                result["offsets"] = [{"partition": p, "offset": o} for p, o in outcome]
            results.append(result)
        if first_error is not None and all("error" in r for r in results):
            # Nothing was written: the status says why, and a retry cannot duplicate anything.
            return error_response(http_status(first_error), error_info(first_error), results=results)
        return json_response({"results": results})

    async def _prepare_entry(self, entry: ProduceEntry, requester: str) -> _Runs:
        """Check ``entry`` and create its topic if it is missing and may be auto-created (by ``requester``)."""
        runs = produce_runs(entry.records, entry.partition)
        self._refuse_before_creating(entry.topic, runs)
        with contextlib.suppress(UnknownTopicError):  # auto-creation is off: the produce says unknown_topic
            await ensure_topic(self.broker, entry.topic, requester=requester)  # an auto-create, in a worker thread
        return runs

    async def _append_entry(self, entry: ProduceEntry, runs: _Runs | LkstreamError) -> list[tuple[int, int]]:
        if isinstance(runs, LkstreamError):
            raise runs
        if len(runs) == 1:
            return await self.broker.produce_many(entry.topic, runs[0][1], partition=runs[0][0])
        results: list[tuple[int, int]] = []
        for partition, items in runs:  # records that name their own partitions, in order
            results += await self.broker.produce_many(entry.topic, items, partition=partition)
        return results

    def _refuse_before_creating(self, topic: str, runs: Sequence[tuple[int | None, Sequence[tuple[Any, ...]]]]) -> None:
        """Refuse, before the broker auto-creates ``topic``, what it would refuse only after creating it.

        A refused produce leaves no trace: not a topic named by a request that was
        turned down for a record over ``max_message_bytes`` or a partition the new
        topic would not have.
        """
        limit = self.broker.config.max_message_bytes
        largest = max(len(item[0] or b"") + len(item[1] or b"") for _, items in runs for item in items)
        if largest > limit:
            raise RecordTooLargeError(largest, limit)
        asked = [partition for partition, _ in runs if partition is not None]
        if not asked:
            return
        try:
            count = self.broker.partitions_for(topic)
        except UnknownTopicError:
            count = self.broker.config.partitions  # what auto-creation would give it
        for partition in asked:
            if partition >= count:
                raise no_such_partition(topic, partition, count)

    # -- consume -----------------------------------------------------------------------------------

    async def consume(self, request: web.Request) -> web.Response:
        self.check_ready()
        body = await self.parsed_body(request, ConsumeRequest)
        started = time.perf_counter()
        try:
            targets = await self._targets(body)
            reads = self._read_all(targets, body)
            if body.max_wait_ms and sum(n for _, n in reads) < body.min_bytes:
                reads = await self._long_poll(targets, body, reads)
                # The token or an ACL may have gone while it waited: then nothing is delivered (401/403).
                recheck = request.get(RECHECK_KEY)
                if recheck is not None:
                    recheck()
        finally:
            self.metrics.observe_fetch(time.perf_counter() - started)
        group = body.group
        parts = [part for part, _ in reads]
        committing = group is not None and body.commit
        response = json_response({"partitions": parts, "group": group, "committed": committing})
        if group is not None:
            for part in parts:
                self.metrics.record_consumed(part["topic"], group, part["partition"], len(part["records"]))
            if committing:
                # The answer is built (and serialised): only now may the group move past its records.
                await self._commit(group, targets, reads)
        return response

    async def _targets(self, body: ConsumeRequest) -> list[_Target]:
        """Expand and check the asked partitions, and pick each one's start offset."""
        default_bytes = min(self.max_fetch_bytes, DEFAULT_PARTITION_BYTES)
        wanted: list[tuple[str, int, int | None, int]] = []
        seen: set[tuple[str, int]] = set()
        for spec in body.wanted:
            count = self.broker.partitions_for(spec.topic)  # unknown topic: 404 before anything else
            if spec.partition is None:
                if spec.fetch_offset is not None:
                    raise InvalidArgumentError(f"fetch_offset for {spec.topic!r} needs a partition")
                pids: Iterable[int] = range(count)
            else:
                self.broker.partition(spec.topic, spec.partition)  # 400 when the topic has fewer
                pids = (spec.partition,)
            for pid in pids:
                if (spec.topic, pid) in seen:
                    raise InvalidArgumentError(f"{spec.topic}[{pid}] is asked for twice")
                seen.add((spec.topic, pid))
                limit = min(spec.partition_max_bytes or default_bytes, self.max_fetch_bytes)
                wanted.append((spec.topic, pid, spec.fetch_offset, limit))
        committed: dict[tuple[str, int], int | None] = {}
        if body.group is not None:
            # Committed offsets are held in memory by the offsets journal: no I/O here.
            found = self.broker.groups.fetch_committed(body.group, [(t, p) for t, p, _, _ in wanted])
            committed = {(t, p): found.get((t, p)) for t, p, _, _ in wanted}
        targets = []
        for topic, pid, asked, limit in wanted:
            previous = committed.get((topic, pid))
            offset = asked
            if offset is None:
                partition = self.broker.partition(topic, pid)
                start, high = partition.log_start_offset, partition.high_watermark
                if previous is not None and start <= previous <= high:
                    offset = previous
                else:  # never committed, or retention moved past it: Kafka's auto.offset.reset
                    offset = start if body.reset == "earliest" else high
            targets.append(_Target(topic, pid, offset, limit, previous))
        return targets

    def _read_all(self, targets: Sequence[_Target], body: ConsumeRequest) -> list[tuple[dict[str, Any], int]]:
        """One read of every target within ``max_bytes``; ``[(partition json, batch bytes)]``."""
        budget = min(body.max_bytes or DEFAULT_CONSUME_BYTES, self.max_fetch_bytes)
        force_base64 = body.encoding == "base64"
        reads = []
        for target in targets:
            topic, pid, offset = target.topic, target.partition, target.offset
            if budget > 0:
                result = self.broker.fetch(topic, pid, offset, min(target.max_bytes, budget))
                data, start, high = result.data, result.log_start_offset, result.high_watermark
            else:  # the budget went to earlier partitions: report the bounds, read nothing
                partition = self.broker.partition(topic, pid)
                start, high = partition.log_start_offset, partition.high_watermark
                if not start <= offset <= high:
                    raise OffsetOutOfRangeError(topic, pid, offset, start, high)
                data = b""
            # The next offset comes from the batches, not the last record: past a compacted topic's gaps.
            records, after = decode_batches_through(data, topic, pid, offset) if data else ([], offset)
            budget -= len(data)
            reads.append(
                (
                    {
                        "topic": topic,
                        "partition": pid,
                        "fetch_offset": offset,
                        "next_fetch_offset": after,
                        "high_watermark": high,
                        "log_start_offset": start,
                        "records": [record_json(r, force_base64) for r in records],
                    },
                    len(data),
                )
            )
        return reads

    async def _long_poll(
        self, targets: Sequence[_Target], body: ConsumeRequest, reads: list[tuple[dict[str, Any], int]]
    ) -> list[tuple[dict[str, Any], int]]:
        """Wait for appends (``Broker.wait_for_data``, no polling) until ``min_bytes`` or ``max_wait_ms``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + body.max_wait_ms / 1000.0
        while sum(n for _, n in reads) < body.min_bytes and not self.stopping.is_set():
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            # Wake on anything past what this read saw.
            positions = {
                (t.topic, t.partition): part["high_watermark"] for t, (part, _) in zip(targets, reads, strict=True)
            }
            if not await self._wait(self.broker.wait_for_data(positions, remaining)):
                break
            reads = self._read_all(targets, body)
        return reads

    async def _wait(self, arrival: Awaitable[bool]) -> bool:
        """Wait for ``arrival`` or for shutdown; True if data arrived."""
        data = asyncio.ensure_future(arrival)
        stop = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait({data, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            arrived = data.done() and not data.cancelled()
            if not arrived:
                data.cancel()  # shutdown won: the read after the wait returns what there is
        # A wait that failed (the partition closed under it) says so through the next read.
        return arrived and (data.exception() is not None or bool(data.result()))

    async def _commit(self, group: str, targets: Sequence[_Target], reads: list[tuple[dict[str, Any], int]]) -> None:
        """Commit each partition's ``next_fetch_offset`` that differs from what the group had."""
        # Only forward: a committed offset never moves backward (re-reads with an older
        # fetch_offset leave the commit where it is; operators rewind with a reset).
        commits = {
            (t.topic, t.partition): part["next_fetch_offset"]
            for t, (part, _) in zip(targets, reads, strict=True)
            # (a stored offset past the log end is impossible; the coordinator lets a commit replace it)
            if t.committed is None or part["next_fetch_offset"] > t.committed or t.committed > part["high_watermark"]
        }
        if not commits:
            return
        # One atomic, member-less commit through the coordinator: refused while the group
        # has live members (their commits are fenced); waits for an fsync, so off the loop.
        await asyncio.to_thread(self.broker.commit_offsets, group, commits)
        for (topic, pid), offset in commits.items():
            self.metrics.record_committed(topic, group, pid, offset)

    # -- topics and groups -------------------------------------------------------------------------

    async def list_topics(self, request: web.Request) -> web.Response:
        self.check_ready()
        return json_response({"topics": self.visible(request, ResourceType.TOPIC, self.broker.list_topics())})

    async def create_topic(self, request: web.Request) -> web.Response:
        self.check_ready()
        body = await self.parsed_body(request, CreateTopicRequest)
        # Thousands of partitions are seconds of file-system work: in a worker thread (issue 12, finding 9).
        return json_response(await asyncio.to_thread(self._create_topic, body), status=201)

    def _create_topic(self, body: CreateTopicRequest) -> dict[str, Any]:
        self.broker.create_topic(
            body.name,
            body.partitions,
            retention_ms=body.retention_ms,
            retention_bytes=body.retention_bytes,
            configs=body.configs,
        )
        return topic_json(self.broker.describe_topic(body.name))

    async def describe_topic(self, request: web.Request) -> web.Response:
        self.check_ready()
        name = request.match_info["topic"]
        return json_response(await asyncio.to_thread(lambda: topic_json(self.broker.describe_topic(name))))

    async def delete_topic(self, request: web.Request) -> web.Response:
        self.check_ready()
        await asyncio.to_thread(self.broker.delete_topic, request.match_info["topic"])
        return web.Response(status=204)

    async def describe_group(self, request: web.Request) -> web.Response:
        self.check_ready()
        group = validate_group(request.match_info["group"])
        rows = []
        committed = self.broker.groups.fetch_committed(group)
        topics = set(self.visible(request, ResourceType.TOPIC, {topic for topic, _ in committed}))
        for (topic, pid), offset in sorted(committed.items()):
            if topic not in topics:
                continue
            high: int | None = None
            start: int | None = None
            with contextlib.suppress(UnknownTopicError, InvalidArgumentError):
                partition = self.broker.partition(topic, pid)
                high, start = partition.high_watermark, partition.log_start_offset
            rows.append(
                {
                    "topic": topic,
                    "partition": pid,
                    "committed_offset": offset,
                    "high_watermark": high,
                    "log_start_offset": start,
                    "lag": None if high is None else max(0, high - offset),
                }
            )
        return json_response({"group": group, "partitions": rows})
