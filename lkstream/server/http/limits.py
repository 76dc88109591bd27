"""Limits of the HTTP listener: connection cap, timeouts, and admission of request bodies before they are read.

* **Connections:** the listening socket is a :class:`~lkstream.listeners.CappedListener`
  (``server.http_max_connections``): a connection beyond the cap is closed at accept.
* **Idle and header timeout:** aiohttp's keep-alive timer
  (``server.http_idle_timeout_s``) closes a connection that has not sent a complete
  request header that long after it opened or after its last response; it covers
  idle keep-alive connections and slow ("slowloris") headers alike.
* **Body timeout:** once a request's handler starts, its body must have arrived
  within ``server.read_timeout_s``, or the connection is closed (the handler sees
  the connection reset; nothing it had not read is acted on).
* **Admission** (issue 12 finding 8): before the handler reads a body,
  :class:`HttpLimits` reserves its ``Content-Length`` (a chunked body: the request
  size limit) in the broker's :class:`~lkstream.broker.admission.AdmissionBudget`,
  waiting up to :data:`~lkstream.broker.admission.ADMISSION_WAIT_S` for room, and
  answers 429 ``overloaded`` with ``Retry-After`` and ``retry_after_ms`` otherwise;
  the bytes are released when the handler returns. Until then aiohttp holds at most
  its read buffer of the body (it stops reading the socket above it).

The middleware goes first in the application, so the admission and the timer cover
everything the routes do.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from aiohttp import web

from lkstream.broker.admission import ADMISSION_WAIT_S, AdmissionBudget
from lkstream.broker.metrics import BrokerMetrics
from lkstream.errors import OverloadedError
from lkstream.server.http.errors import error_info, error_response
from lkstream.wire.contract import status_for

log = logging.getLogger("lkstream.server.http.app")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
LISTENER: Final = "http"
DEFAULT_MAX_CONNECTIONS: Final = 128
DEFAULT_IDLE_TIMEOUT_S: Final = 60.0
DEFAULT_READ_TIMEOUT_S: Final = 30.0


class HttpLimits:
    """The admission and body-timeout middleware of one HTTP server (see the module docstring)."""

    def __init__(
        self,
        budget: AdmissionBudget,
        metrics: BrokerMetrics,
        *,
        max_request_bytes: int,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    ) -> None:
        self.budget = budget
        self.metrics = metrics
        self.max_request_bytes = max_request_bytes
        self.read_timeout_s = read_timeout_s
        #: Connections closed because a body did not arrive within read_timeout_s.
        self.body_timeouts = 0

    def _size(self, request: web.Request) -> int:
        """Bytes to reserve for ``request``'s body: its length, or the limit when it does not say (chunked)."""
        length = request.content_length
        if length is not None:
            return length if length <= self.max_request_bytes else 0  # larger: refused unread (413), not held
        return self.max_request_bytes if request.body_exists else 0

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        size = self._size(request)
        if size == 0:
            return await handler(request)
        try:
            admission = await self.budget.admit(size, LISTENER, ADMISSION_WAIT_S)
        except OverloadedError as exc:
            self.metrics.count_error(status_for(exc).name)
            return error_response(429, error_info(exc))
        timer = asyncio.get_running_loop().call_later(self.read_timeout_s, self._body_overdue, request)
        try:
            return await handler(request)
        except ConnectionError:
            if request.transport is None or request.transport.is_closing():
                return web.Response(status=408)  # the client left or was cut off: this never reaches it
            raise
        finally:
            timer.cancel()
            admission.release()

    def _body_overdue(self, request: web.Request) -> None:
        if request.content.is_eof() or request.transport is None:
            return
        self.body_timeouts += 1
        log.debug(
            "closing a connection: its %s %s body took over %.0f s", request.method, request.path, self.read_timeout_s
        )
        request.transport.close()
