"""Limits of the HTTP listener: connection cap, timeouts, and admission of request bodies before they are read.

* **Connections:** the listening socket is a :class:`~lkstream.listeners.CappedListener`
  (``server.http_max_connections``, at most ``server.max_connections_per_address`` from
  one address): a connection beyond either is closed at accept.
* **TLS handshake:** with HTTPS, a connection must finish its handshake within
  ``server.handshake_timeout_s`` (asyncio's own default, 60 s, let 140 sockets that never
  started TLS hold the port; issue 28, finding 3).
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
import socket
import ssl
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
DEFAULT_HANDSHAKE_TIMEOUT_S: Final = 10.0


class _TimedSockSite(web.SockSite):
    """aiohttp's ``SockSite`` with a TLS handshake timeout (it passes none to ``create_server``)."""

    def __init__(self, runner: web.BaseRunner, sock: socket.socket, *, ssl_context: ssl.SSLContext | None,
                 handshake_timeout_s: float) -> None:  # fmt: skip
        super().__init__(runner, sock, ssl_context=ssl_context)
        self._handshake_timeout_s = handshake_timeout_s

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            server,
            sock=self._sock,
            ssl=self._ssl_context,
            backlog=self._backlog,
            ssl_handshake_timeout=self._handshake_timeout_s if self._ssl_context is not None else None,
        )


async def serve_app(
    app: web.Application,
    sock: socket.socket,
    *,
    logger: logging.Logger,
    keepalive_timeout_s: float,
    handshake_timeout_s: float,
    ssl_context: ssl.SSLContext | None = None,
) -> web.AppRunner:
    """Serve ``app`` on the listening ``sock`` (closed if this fails); the runner to clean up."""
    try:
        runner = web.AppRunner(
            app, access_log=None, handle_signals=False, logger=logger, keepalive_timeout=keepalive_timeout_s
        )
        await runner.setup()
        site = _TimedSockSite(runner, sock, ssl_context=ssl_context, handshake_timeout_s=handshake_timeout_s)
        await site.start()
    except BaseException:
        sock.close()
        raise
    return runner


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
