"""Errors of the HTTP JSON API: one table from :mod:`lkstream.wire.contract`'s, and the JSON error body.

Every failure is a JSON body ``{"error": {"code", "message", ...fields}}``. An
:class:`~lkstream.errors.LkstreamError` gets the HTTP status derived from its
gRPC status (:func:`http_status`), its ``code`` is the class name in snake case
without ``Error`` (``unknown_topic``, ``record_too_large``), and its fields ride
along. Request problems without an error class are :class:`ApiError`.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterator, Sequence
from typing import Any, Final

import grpc
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError
from pydantic_core import to_json

from lkstream.errors import DiskFullError, LkstreamError, PartitionLimitError, RecordTooLargeError
from lkstream.wire.contract import status_for

#: Seconds a client should wait before retrying a 429 or 503.
RETRY_AFTER_S: Final = 1
JSON_TYPE: Final = "application/json"


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
    # gRPC: RESOURCE_EXHAUSTED. The daemon's state (its partitions against max_partitions), not a fault of
    # the server, refuses it and retrying will not help: a 4xx, as Kafka's POLICY_VIOLATION is a refusal.
    (PartitionLimitError, 409),
)
#: Error attributes copied into the JSON error body when present.
ERROR_FIELDS: Final = ("topic", "partition", "offset", "earliest", "latest", "size", "limit", "retry_after_ms")
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


def retry_after_s(info: dict[str, Any]) -> int:
    """Whole seconds for ``Retry-After``: the error's own advice (``retry_after_ms``) rounded up, else the default."""
    advice = info.get("retry_after_ms")
    return max(1, math.ceil(advice / 1000)) if isinstance(advice, int) else RETRY_AFTER_S


def error_response(status: int, info: dict[str, Any], **extra: Any) -> web.Response:
    headers = {"Retry-After": str(retry_after_s(info))} if status in _RETRY_STATUSES else None
    return json_response({"error": info, **extra}, status, headers)


@contextlib.contextmanager
def body_errors(request: web.Request) -> Iterator[None]:
    """A body that cannot be read as sent (a ``Content-Encoding: gzip`` body that is not gzip) is a 400, not a 500."""
    try:
        yield
    except (RequestPayloadError, HttpProcessingError) as exc:
        encoding = request.headers.get("Content-Encoding")
        cause = exc.__cause__ or exc
        said = f"Content-Encoding: {encoding}, but the body does not decode" if encoding else "the body is unreadable"
        raise ApiError(400, "invalid_body", f"{said} ({type(cause).__name__}: {cause})".replace("\n", " ")) from None
