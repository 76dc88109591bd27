"""The daemon's HTTP JSON API: produce, consume, topics and groups for clients without gRPC.

Mounted by :class:`lkstream.server.http.HttpServer` beside ``/metrics`` on the same
port. Routes (documented with curl examples in ``docs/http.md``):

==========================  ======================================================================
``POST /produce``           records of several topic-partitions: UTF-8 strings, ``{"base64": ...}``,
                            or ``{"key", "value", "headers"}`` objects; partition omitted = the
                            partitioner picks (keys hash, keyless records stick to one partition)
``POST /consume``           per topic-partition ``fetch_offset``; long poll (``max_wait_ms``,
                            ``min_bytes``) woken by appends; with ``group``: from the group's
                            committed offsets, committing the next offsets once the answer is built
``GET|POST /topics``        list, create
``GET|DELETE /topics/{t}``  describe (with per-partition offsets), delete
``GET /groups/{group}``     committed offsets and lag per topic-partition
``GET /openapi.json``       the OpenAPI 3.1 document, generated from the pydantic models below
==========================  ======================================================================

One set of pydantic models both validates requests (strict: no ``"1"`` for ``1``,
no unknown fields) and generates the OpenAPI document (:func:`openapi_document`),
so the document describes what the code accepts. Responses are built as plain
dicts for speed and serialised by ``pydantic_core.to_json``; the response models
document them and the tests check every answer against them (schemathesis).

Errors: every failure is a JSON body ``{"error": {"code", "message", ...fields}}``.
An :class:`LkstreamError` gets the HTTP status derived from its gRPC status in
:mod:`lkstream.wire.contract` (:func:`http_status`, one table), its ``code`` is
the class name in snake case without ``Error`` (``unknown_topic``,
``offset_out_of_range``), and its fields (``topic``, ``partition``, ``earliest``,
``latest``, ...) ride along. Request problems have their own codes:
``invalid_json`` and ``invalid_request`` (400), ``request_too_large`` (413),
``not_ready`` (503 while starting or shutting down), ``not_found`` and
``method_not_allowed`` for unknown routes. 429 and 503 carry ``Retry-After``.
Bad input never gets a 5xx; a 5xx means a server-side problem (disk, corruption).

Group consume is a "simple consumer" (Kafka's term): it reads the group's
committed offsets and commits ``next_fetch_offset`` of each partition once the
answer is built (at most once per call), in one atomic commit through the group
coordinator without joining the group. The coordinator accepts such commits only
while the group has no live members (gRPC consumers of a group are fenced), so
an HTTP client cannot overwrite the progress of a running group; two HTTP
clients of one group read the same partitions. Commits only move forward.

Concurrency: as in the gRPC servicer, the broker's synchronous append and read
calls run inline on the event loop; only waits (fsync acks, long polls, offset
file commits in a worker thread) are awaited.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal, TypeVar

import grpc
from aiohttp import web
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic.json_schema import models_json_schema
from pydantic_core import to_json

from lkstream.broker.broker import Broker, TopicDescription
from lkstream.broker.metrics import BrokerMetrics
from lkstream.broker.partition import DEFAULT_FETCH_BYTES
from lkstream.errors import (
    DiskFullError,
    InvalidArgumentError,
    LkstreamError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnknownTopicError,
)
from lkstream.format.codec import Record, decode_batches
from lkstream.storage.names import MAX_NAME_LENGTH, validate_group
from lkstream.storage.topics import MAX_PARTITIONS
from lkstream.wire.contract import status_for

log = logging.getLogger("lkstream.server.http")

M = TypeVar("M", bound=BaseModel)

API_VERSION: Final = "1"
#: Longest long poll a consume may ask for (the gRPC Fetch has the same bound).
MAX_WAIT_MS: Final = 60_000
#: Default ``max_bytes`` of a consume (all partitions) and ``partition_max_bytes`` (each).
DEFAULT_CONSUME_BYTES: Final = 4 * 1024 * 1024
DEFAULT_PARTITION_BYTES: Final = DEFAULT_FETCH_BYTES
#: Seconds a client should wait before retrying a 429 or 503.
RETRY_AFTER_S: Final = 1
JSON_TYPE: Final = "application/json"

TOPIC_PATTERN: Final = r"^[A-Za-z0-9._-]{1,249}$"
# The storage rule of group ids (validate_group) says more (no "__", no trailing "_");
# the pattern is the part JSON Schema can say cheaply, the broker checks the rest (400).
GROUP_PATTERN: Final = TOPIC_PATTERN
# Exactly what base64.b64decode(validate=True) accepts: the alphabet, padded to 4.
BASE64_PATTERN: Final = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
MAX_INT32: Final = 2**31 - 1
MAX_INT64: Final = 2**63 - 1

# ---------------------------------------------------------------------------------------------
# Error mapping: one table, derived from the gRPC one in lkstream.wire.contract.
# ---------------------------------------------------------------------------------------------

Code = grpc.StatusCode

#: HTTP status of each gRPC status an LkstreamError travels as (``status_for``).
HTTP_STATUS_BY_GRPC: Final[dict[grpc.StatusCode, int]] = {
    Code.INVALID_ARGUMENT: 400,
    Code.UNAUTHENTICATED: 401,
    Code.PERMISSION_DENIED: 403,
    Code.NOT_FOUND: 404,
    Code.ALREADY_EXISTS: 409,
    Code.FAILED_PRECONDITION: 409,
    Code.ABORTED: 409,  # a consumer-group conflict worth retrying (stale generation, rebalancing)
    Code.OUT_OF_RANGE: 416,
    Code.RESOURCE_EXHAUSTED: 429,
    Code.UNAVAILABLE: 503,
    Code.DATA_LOSS: 500,
    Code.INTERNAL: 500,
}
#: Where HTTP says more than gRPC can: most specific class first.
HTTP_STATUS_OVERRIDES: Final[Sequence[tuple[type[LkstreamError], int]]] = (
    (RecordTooLargeError, 413),  # gRPC: INVALID_ARGUMENT
    (DiskFullError, 507),  # gRPC: RESOURCE_EXHAUSTED; retrying soon will not help
)
#: Error attributes copied into the JSON error body when present.
ERROR_FIELDS: Final = ("topic", "partition", "offset", "earliest", "latest", "size", "limit")
_RETRY_STATUSES: Final = frozenset({429, 503})


def http_status(error: LkstreamError) -> int:
    """The HTTP status ``error`` is answered with (500 for an unlisted class)."""
    for cls, status in HTTP_STATUS_OVERRIDES:
        if isinstance(error, cls):
            return status
    return HTTP_STATUS_BY_GRPC.get(status_for(error), 500)


def error_code(error: LkstreamError) -> str:
    """``UnknownTopicError`` -> ``"unknown_topic"``: the stable ``code`` of the JSON error body."""
    name = type(error).__name__.removesuffix("Error") or "lkstream"
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def error_info(error: LkstreamError) -> dict[str, Any]:
    """The ``{"code", "message", ...fields}`` object describing ``error``."""
    info: dict[str, Any] = {"code": error_code(error), "message": str(error)}
    for name in ERROR_FIELDS:
        value = getattr(error, name, None)
        if isinstance(value, (int, str)) and not isinstance(value, bool):
            info[name] = value
    return info


class ApiError(Exception):
    """A request-level failure that has no LkstreamError class (bad JSON, too large, not ready)."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.extra = extra


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    response = web.Response(body=to_json(body), status=status, content_type=JSON_TYPE)
    if headers:
        response.headers.update(headers)
    return response


def error_response(status: int, info: dict[str, Any], **extra: Any) -> web.Response:
    headers = {"Retry-After": str(RETRY_AFTER_S)} if status in _RETRY_STATUSES else None
    return json_response({"error": info, **extra}, status, headers)


# ---------------------------------------------------------------------------------------------
# Request and response models (they also generate the OpenAPI document).
# ---------------------------------------------------------------------------------------------


class _Request(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class _Response(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _integral(value: object) -> object:
    """``5.0`` is the integer 5 in JSON Schema: accept it; ``5.5``, ``"5"`` and ``true`` stay errors."""
    if type(value) is float and value.is_integer():
        return int(value)
    return value


#: An integer field: strict (no strings, no booleans), but integral JSON numbers count as integers.
Int = Annotated[int, BeforeValidator(_integral)]

TopicName = Annotated[str, Field(pattern=TOPIC_PATTERN, max_length=MAX_NAME_LENGTH, description="A topic name.")]
GroupName = Annotated[str, Field(pattern=GROUP_PATTERN, max_length=MAX_NAME_LENGTH, description="A group id.")]
PartitionId = Annotated[Int, Field(ge=0, le=MAX_PARTITIONS - 1, description="A partition number.")]
Offset = Annotated[Int, Field(ge=0, le=MAX_INT64)]


class Base64Value(_Request):
    """Arbitrary bytes, base64-encoded (standard alphabet, padded)."""

    base64: str = Field(pattern=BASE64_PATTERN, description="The bytes, base64-encoded.")


#: A key, value or header value: a UTF-8 string, or bytes as ``{"base64": ...}``.
Bytes = str | Base64Value


class HeaderIn(_Request):
    key: str = Field(description="Header name (UTF-8).")
    value: Bytes | None = Field(description="Header value; null for none.")


class RecordIn(_Request):
    """A record with a key and headers (a bare string or base64 object is a value alone)."""

    value: Bytes | None = Field(description="The value; null for a tombstone.")
    key: Bytes | None = Field(None, description="The key: picks the partition when none is given.")
    headers: list[HeaderIn] = Field(default_factory=list, description="Headers, in order (names may repeat).")


class ProduceEntry(_Request):
    topic: TopicName
    partition: PartitionId | None = Field(
        None, description="Target partition; omitted: keyed records hash, keyless ones share one partition."
    )
    records: list[str | Base64Value | RecordIn] = Field(
        min_length=1, description="Values (string or base64 object) or record objects."
    )


class ProduceRequest(_Request):
    """``POST /produce``."""

    topic_partitions: list[ProduceEntry] = Field(min_length=1)


class ErrorInfo(_Response):
    code: str = Field(description="Stable machine-readable code, e.g. unknown_topic, offset_out_of_range.")
    message: str
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    earliest: int | None = Field(None, description="Log start offset (offset_out_of_range).")
    latest: int | None = Field(None, description="High watermark (offset_out_of_range).")
    size: int | None = None
    limit: int | None = None
    details: list[dict[str, Any]] | None = Field(None, description="One entry per invalid field (invalid_request).")


class ErrorResponse(_Response):
    error: ErrorInfo


class RecordOffset(_Response):
    partition: int
    offset: int


class ProduceResult(_Response):
    """The outcome of one ``topic_partitions`` entry: offsets (one per record, in order) or an error."""

    topic: str
    partition: int | None = Field(description="The partition asked for (null: the partitioner chose).")
    offsets: list[RecordOffset] | None = None
    error: ErrorInfo | None = None


class ProduceResponse(_Response):
    results: list[ProduceResult]


class ProduceErrorResponse(ErrorResponse):
    """Every entry failed: ``error`` is the first entry's, ``results`` has each one's (absent for a bad request)."""

    results: list[ProduceResult] | None = None


class ConsumePartition(_Request):
    topic: TopicName
    partition: PartitionId | None = Field(None, description="Omitted: every partition of the topic.")
    fetch_offset: Offset | None = Field(
        None, description="First offset to return; omitted: the group's committed offset, else `reset`."
    )
    partition_max_bytes: Int | None = Field(None, ge=1, le=MAX_INT32, description="Batch bytes for this partition.")


class ConsumeRequest(_Request):
    """``POST /consume``."""

    partitions: list[ConsumePartition] = Field(min_length=1)
    max_wait_ms: Int = Field(0, ge=0, le=MAX_WAIT_MS, description="Long poll: wait up to this for min_bytes.")
    min_bytes: Int = Field(1, ge=0, le=MAX_INT32, description="Answer at once when this many bytes are ready.")
    max_bytes: Int | None = Field(None, ge=1, le=MAX_INT32, description="Batch bytes over all partitions.")
    group: GroupName | None = Field(None, description="Consume as this group: committed offsets, then commit.")
    commit: bool = Field(True, description="With a group: commit the next offsets (false: peek).")
    reset: Literal["earliest", "latest"] = Field(
        "earliest", description="Where to start without fetch_offset and without a valid committed offset."
    )
    encoding: Literal["auto", "base64"] = Field(
        "auto", description="auto: strings when valid UTF-8, else base64 objects; base64: always base64."
    )


class Base64Out(_Response):
    base64: str


BytesOut = str | Base64Out


class HeaderOut(_Response):
    key: str
    value: BytesOut | None


class RecordOut(_Response):
    offset: int
    timestamp: int = Field(description="Milliseconds since the epoch (create time).")
    key: BytesOut | None
    value: BytesOut | None
    headers: list[HeaderOut]


class PartitionRecords(_Response):
    topic: str
    partition: int
    fetch_offset: int = Field(description="Where this read started.")
    next_fetch_offset: int = Field(description="Ask for this next.")
    high_watermark: int
    log_start_offset: int
    records: list[RecordOut]


class ConsumeResponse(_Response):
    partitions: list[PartitionRecords]
    group: str | None = None
    committed: bool = Field(False, description="The group committed next_fetch_offset of each partition.")


class CreateTopicRequest(_Request):
    """``POST /topics``; omitted settings take the broker's defaults."""

    name: TopicName
    partitions: Int | None = Field(None, ge=1, le=MAX_PARTITIONS)
    retention_ms: Int | None = Field(None, ge=-1, le=MAX_INT64, description="-1: keep forever.")
    retention_bytes: Int | None = Field(None, ge=-1, le=MAX_INT64, description="-1: no size limit.")


class PartitionInfo(_Response):
    partition: int
    log_start_offset: int
    next_offset: int
    high_watermark: int
    segment_count: int
    size_bytes: int
    active_segment_bytes: int


class TopicInfo(_Response):
    name: str
    partitions: int
    retention_ms: int
    retention_bytes: int
    partition_stats: list[PartitionInfo]


class TopicList(_Response):
    topics: list[str]


class GroupPartition(_Response):
    topic: str
    partition: int
    committed_offset: int
    high_watermark: int | None = Field(description="Null when the partition no longer exists.")
    log_start_offset: int | None
    lag: int | None = Field(description="high_watermark - committed_offset (0 when ahead).")


class GroupOffsets(_Response):
    group: str
    partitions: list[GroupPartition]


# ---------------------------------------------------------------------------------------------
# Conversions.
# ---------------------------------------------------------------------------------------------

_b64decode = base64.b64decode
_b64encode = base64.b64encode


def _in_bytes(value: str | Base64Value | None) -> bytes | None:
    if value is None:
        return None
    if type(value) is str:
        return value.encode()
    assert isinstance(value, Base64Value)
    return _b64decode(value.base64, validate=True)


def produce_items(records: Iterable[str | Base64Value | RecordIn]) -> list[tuple[Any, ...]]:
    """Request records as the broker's ``(key, value[, headers])`` tuples."""
    out: list[tuple[Any, ...]] = []
    append = out.append
    try:
        for item in records:
            kind = type(item)
            if kind is str:
                append((None, item.encode()))  # type: ignore[union-attr]
            elif kind is Base64Value:
                append((None, _b64decode(item.base64, validate=True)))  # type: ignore[union-attr]
            else:
                assert isinstance(item, RecordIn)
                key, value = _in_bytes(item.key), _in_bytes(item.value)
                if item.headers:
                    headers = [(h.key, _in_bytes(h.value)) for h in item.headers]
                    for name, _ in headers:
                        name.encode()  # the C encoder would fail late on an unencodable name
                    append((key, value, headers))
                else:
                    append((key, value))
    except (binascii.Error, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise InvalidArgumentError(f"invalid record: {exc}") from None
    return out


def _out_bytes(value: bytes | None, force_base64: bool) -> str | dict[str, str] | None:
    if value is None:
        return None
    if not force_base64:
        try:
            return value.decode()
        except UnicodeDecodeError:
            pass
    return {"base64": _b64encode(value).decode("ascii")}


def record_json(record: Record, force_base64: bool) -> dict[str, Any]:
    return {
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": _out_bytes(record.key, force_base64),
        "value": _out_bytes(record.value, force_base64),
        "headers": [{"key": k, "value": _out_bytes(v, force_base64)} for k, v in record.headers],
    }


def topic_json(description: TopicDescription) -> dict[str, Any]:
    return {
        "name": description.name,
        "partitions": description.settings.partitions,
        "retention_ms": description.settings.retention_ms,
        "retention_bytes": description.settings.retention_bytes,
        "partition_stats": [
            {
                "partition": pid,
                "log_start_offset": s.log_start_offset,
                "next_offset": s.next_offset,
                "high_watermark": s.high_watermark,
                "segment_count": s.segment_count,
                "size_bytes": s.size_bytes,
                "active_segment_bytes": s.active_segment_bytes,
            }
            for pid, s in enumerate(description.partitions)
        ],
    }


def parse_body(model: type[M], body: bytes) -> M:
    """Validate a JSON body; any problem becomes a 400 (``invalid_json`` or ``invalid_request``)."""
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        if any(e["type"] == "json_invalid" for e in errors):
            raise ApiError(400, "invalid_json", f"the body is not valid JSON: {errors[0]['msg']}") from None
        details = [{"loc": ".".join(str(p) for p in e["loc"]), "msg": e["msg"]} for e in errors[:20]]
        summary = "; ".join(f"{d['loc'] or 'body'}: {d['msg']}" for d in details[:5])
        raise ApiError(400, "invalid_request", f"invalid {model.__name__}: {summary}", details=details) from None


# ---------------------------------------------------------------------------------------------
# The API.
# ---------------------------------------------------------------------------------------------


@dataclass
class _Target:
    topic: str
    partition: int
    offset: int
    max_bytes: int
    committed: int | None


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


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
    ) -> None:
        self.broker = broker
        self.metrics = metrics
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
        router.add_get("/groups/{group}", self.describe_group)
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

    def _check_ready(self) -> None:
        if not self.is_ready():
            raise ApiError(503, "not_ready", "the daemon is starting or shutting down; retry later")

    async def _body(self, request: web.Request) -> bytes:
        length = request.content_length
        if length is not None and length > self.max_request_bytes:
            raise web.HTTPRequestEntityTooLarge(max_size=self.max_request_bytes, actual_size=length)
        return await request.read()

    async def openapi(self, request: web.Request) -> web.Response:
        return web.Response(body=self._openapi, content_type=JSON_TYPE)

    # -- produce -----------------------------------------------------------------------------------

    async def produce(self, request: web.Request) -> web.Response:
        self._check_ready()
        body = parse_body(ProduceRequest, await self._body(request))
        started = time.perf_counter()
        try:
            entries = body.topic_partitions
            outcomes: list[list[tuple[int, int]] | BaseException]
            if len(entries) == 1:
                try:
                    outcomes = [await self._produce_entry(entries[0])]
                except LkstreamError as exc:
                    outcomes = [exc]
            else:
                # Each coroutine appends before its first await, in order; then the acks are awaited together.
                outcomes = await asyncio.gather(*(self._produce_entry(e) for e in entries), return_exceptions=True)
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

    async def _produce_entry(self, entry: ProduceEntry) -> list[tuple[int, int]]:
        items = produce_items(entry.records)
        return await self.broker.produce_many(entry.topic, items, partition=entry.partition)

    # -- consume -----------------------------------------------------------------------------------

    async def consume(self, request: web.Request) -> web.Response:
        self._check_ready()
        body = parse_body(ConsumeRequest, await self._body(request))
        started = time.perf_counter()
        try:
            targets = await self._targets(body)
            reads = self._read_all(targets, body)
            if body.max_wait_ms and sum(n for _, n in reads) < body.min_bytes:
                reads = await self._long_poll(targets, body, reads)
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
        for spec in body.partitions:
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
            records = decode_batches(data, topic, pid, offset) if data else []
            budget -= len(data)
            reads.append(
                (
                    {
                        "topic": topic,
                        "partition": pid,
                        "fetch_offset": offset,
                        "next_fetch_offset": records[-1].offset + 1 if records else offset,
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
        self._check_ready()
        return json_response({"topics": self.broker.list_topics()})

    async def create_topic(self, request: web.Request) -> web.Response:
        self._check_ready()
        body = parse_body(CreateTopicRequest, await self._body(request))
        self.broker.create_topic(
            body.name, body.partitions, retention_ms=body.retention_ms, retention_bytes=body.retention_bytes
        )
        return json_response(topic_json(self.broker.describe_topic(body.name)), status=201)

    async def describe_topic(self, request: web.Request) -> web.Response:
        self._check_ready()
        return json_response(topic_json(self.broker.describe_topic(request.match_info["topic"])))

    async def delete_topic(self, request: web.Request) -> web.Response:
        self._check_ready()
        self.broker.delete_topic(request.match_info["topic"])
        return web.Response(status=204)

    async def describe_group(self, request: web.Request) -> web.Response:
        self._check_ready()
        group = validate_group(request.match_info["group"])
        rows = []
        for (topic, pid), offset in sorted(self.broker.groups.fetch_committed(group).items()):
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


# ---------------------------------------------------------------------------------------------
# The OpenAPI document.
# ---------------------------------------------------------------------------------------------

_MODELS: Final[Sequence[type[BaseModel]]] = (
    ProduceRequest,
    ProduceResponse,
    ProduceErrorResponse,
    ConsumeRequest,
    ConsumeResponse,
    CreateTopicRequest,
    TopicInfo,
    TopicList,
    GroupOffsets,
    ErrorResponse,
)


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _json(model: type[BaseModel], description: str) -> dict[str, Any]:
    return {"description": description, "content": {JSON_TYPE: {"schema": _ref(model)}}}


_ERRORS: Final = {
    400: "Malformed request (bad JSON, wrong types, invalid names or base64, bad partition).",
    404: "Unknown topic.",
    409: "Conflict (the topic already exists).",
    413: "Request body, record or batch too large.",
    416: "Offset out of range: the error carries earliest and latest.",
    429: "Backpressure: too many bytes in flight; see Retry-After.",
    503: "Starting or shutting down; see Retry-After.",
}


def _errors(*statuses: int, model: type[BaseModel] = ErrorResponse) -> dict[str, Any]:
    return {str(s): _json(model, _ERRORS[s]) for s in statuses}


def _path_param(name: str, pattern: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string", "pattern": pattern, "maxLength": MAX_NAME_LENGTH},
    }


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the JSON API, built from the same models that validate requests."""
    _, top = models_json_schema(
        [(m, "validation" if issubclass(m, _Request) else "serialization") for m in _MODELS],
        ref_template="#/components/schemas/{model}",
    )
    body = {"required": True, "content": {JSON_TYPE: {"schema": {}}}}

    def with_body(model: type[BaseModel]) -> dict[str, Any]:
        return {**body, "content": {JSON_TYPE: {"schema": _ref(model)}}}

    topic = _path_param("topic", TOPIC_PATTERN, "Topic name.")
    group = _path_param("group", GROUP_PATTERN, "Group id (no '__', no trailing '_').")
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "LKSTREAM HTTP JSON API",
            "version": API_VERSION,
            "description": "Produce, consume and administer an LKSTREAM daemon over JSON (docs/http.md).",
        },
        "paths": {
            "/produce": {
                "post": {
                    "operationId": "produce",
                    "summary": "Append records to one or more topic-partitions.",
                    "requestBody": with_body(ProduceRequest),
                    "responses": {
                        "200": _json(ProduceResponse, "Offsets per entry; an entry may carry its own error."),
                        **_errors(400, 404, 413, 429, 503, model=ProduceErrorResponse),
                    },
                }
            },
            "/consume": {
                "post": {
                    "operationId": "consume",
                    "summary": "Read records (long poll), optionally as a group that commits.",
                    "requestBody": with_body(ConsumeRequest),
                    "responses": {
                        "200": _json(ConsumeResponse, "Records per partition."),
                        **_errors(400, 404, 413, 416, 503),
                    },
                }
            },
            "/topics": {
                "get": {
                    "operationId": "listTopics",
                    "summary": "Topic names.",
                    "responses": {"200": _json(TopicList, "Topic names, sorted."), **_errors(503)},
                },
                "post": {
                    "operationId": "createTopic",
                    "summary": "Create a topic.",
                    "requestBody": with_body(CreateTopicRequest),
                    "responses": {"201": _json(TopicInfo, "Created."), **_errors(400, 409, 413, 503)},
                },
            },
            "/topics/{topic}": {
                "parameters": [topic],
                "get": {
                    "operationId": "describeTopic",
                    "summary": "Settings and per-partition offsets of a topic.",
                    "responses": {"200": _json(TopicInfo, "The topic."), **_errors(400, 404, 503)},
                },
                "delete": {
                    "operationId": "deleteTopic",
                    "summary": "Delete a topic, its data and its committed offsets.",
                    "responses": {"204": {"description": "Deleted."}, **_errors(400, 404, 503)},
                },
            },
            "/groups/{group}": {
                "parameters": [group],
                "get": {
                    "operationId": "describeGroup",
                    "summary": "Committed offsets and lag of a group.",
                    "responses": {"200": _json(GroupOffsets, "Per topic-partition."), **_errors(400, 503)},
                },
            },
            "/openapi.json": {
                "get": {
                    "operationId": "openapi",
                    "summary": "This document.",
                    "responses": {"200": {"description": "OpenAPI 3.1.", "content": {JSON_TYPE: {"schema": {}}}}},
                }
            },
        },
        "components": {"schemas": top["$defs"]},
    }
