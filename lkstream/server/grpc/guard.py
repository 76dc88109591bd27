"""The one place a servicer call's errors become gRPC statuses (and its protocol version is checked).

Every RPC body runs inside ``async with guard(context, metrics):``: a client that
states an unsupported protocol version gets FAILED_PRECONDITION before the body
runs, and any :class:`~lkstream.errors.LkstreamError` the body raises leaves as
the status :mod:`lkstream.wire.contract` assigns to its class, with its fields
in trailing metadata, and is counted by status code.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, NoReturn

import grpc

from lkstream.broker.metrics import BrokerMetrics
from lkstream.errors import InvalidArgumentError, LkstreamError
from lkstream.wire.contract import VERSION_METADATA_KEY, check_client_version, error_metadata, status_for

log = logging.getLogger("lkstream.server")


async def _abort(context: grpc.aio.ServicerContext[Any, Any], error: LkstreamError) -> NoReturn:
    await context.abort(status_for(error), str(error), trailing_metadata=error_metadata(error))
    raise AssertionError("unreachable: abort raises")  # pragma: no cover


def _check_version(context: grpc.aio.ServicerContext[Any, Any]) -> None:
    for key, value in context.invocation_metadata() or ():
        if key == VERSION_METADATA_KEY:
            try:
                version = int(value)
            except (TypeError, ValueError):
                raise InvalidArgumentError(f"{VERSION_METADATA_KEY} must be an integer, got {value!r}") from None
            check_client_version(version)


class guard(contextlib.AbstractAsyncContextManager[None]):
    """Check the protocol version, then map any LkstreamError raised in the block to a status.

    The one error-mapping place: each mapped error is also counted by its status code name.
    """

    def __init__(self, context: grpc.aio.ServicerContext[Any, Any], metrics: BrokerMetrics) -> None:
        self._context = context
        self._metrics = metrics

    async def __aenter__(self) -> None:
        try:
            _check_version(self._context)
        except LkstreamError as exc:
            await self._fail(exc)

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> bool:
        if isinstance(exc, LkstreamError):
            await self._fail(exc)
        return False

    async def _fail(self, exc: LkstreamError) -> NoReturn:
        await fail(self._context, self._metrics, exc)


async def fail(context: grpc.aio.ServicerContext[Any, Any], metrics: BrokerMetrics, exc: LkstreamError) -> NoReturn:
    """End the call with ``exc``'s status and fields, counted by status code (also used by the access check)."""
    code = status_for(exc)
    if code is grpc.StatusCode.INTERNAL:
        log.error("request failed: %s", exc)
    metrics.count_error(code.name)
    await _abort(context, exc)
