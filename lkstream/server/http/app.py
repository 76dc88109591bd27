"""The daemon's HTTP endpoints (aiohttp): ``/metrics``, ``/healthz``, ``/ready`` and the JSON API.

Usage from the daemon (inside its running event loop)::

    from lkstream.broker.metrics import BrokerMetrics
    from lkstream.server.http.app import start_http

    metrics = BrokerMetrics(broker)                     # once, right after Broker(...) recovered
    http = await start_http(broker, metrics, "127.0.0.1", 8080)
    ...                                                 # start gRPC, accept writes
    http.set_ready()                                    # /ready turns 200
    ...
    http.set_not_ready()                                # on SIGTERM, before draining: /ready 503
    await http.stop()                                   # last, after the gRPC server stopped

Routes (GET, and HEAD):

- ``/metrics``: Prometheus text exposition of ``metrics.registry``
  (``prometheus_client.generate_latest``, run in the default executor so a slow
  scrape never blocks the loop); with authentication on, series labelled with a topic
  or a group only for a scraper whose token may ``describe`` them
  (:mod:`lkstream.server.http.scrape`);
- ``/healthz``: 200 ``ok`` while the process serves HTTP (liveness);
- ``/ready``: 200 ``ready`` once :meth:`HttpServer.set_ready` was called (recovery
  finished and writes are accepted) and the broker is open; otherwise 503
  ``not ready`` (readiness).

The JSON API (``/produce``, ``/consume``, ``/topics``, ``/groups/{group}``,
``/openapi.json``) is :mod:`lkstream.server.http.api`, and seed 003's event-log
routes (``/produce/{partition}``, ``/fetch/{partition}`` on one default
topic) :mod:`lkstream.server.http.eventlog`, both mounted on the same
application. Their routes answer 503 ``not_ready`` whenever ``/ready`` does not
answer 200, and :meth:`HttpServer.set_not_ready` ends their long polls early.
Request bodies are limited to ``max_request_bytes`` (default: the broker's
``max_batch_bytes`` plus 1 MiB, as the gRPC message limit); larger ones get 413.
Connections are capped (``max_connections``) and timed out (``idle_timeout_s``,
``read_timeout_s``), and request bodies are admitted against the broker's admission
budget before they are read: :mod:`lkstream.server.http.limits`.

``port=0`` binds a free port; :attr:`HttpServer.port` tells which. The
default host is loopback (``DEFAULT_HOST``); bind another address only on
purpose (a container sets ``0.0.0.0``).

TLS: :meth:`HttpServer.start` takes an ``ssl_context`` (the daemon's, reloaded in
place when the certificate files change); every route, the open ones included,
is then served over HTTPS only. Access control is
:class:`~lkstream.server.http.access.GuardedHttpServer` (docs/security.md).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from lkstream.broker.broker import Broker
from lkstream.broker.metrics import BrokerMetrics
from lkstream.errors import AuthenticationError
from lkstream.listeners import AddressLimit, ConnectionCap, listen, peer_address
from lkstream.security.access import Access
from lkstream.server.http.api import HttpApi
from lkstream.server.http.errors import error_info, error_response
from lkstream.server.http.eventlog import EventLogRoutes
from lkstream.server.http.limits import (
    DEFAULT_HANDSHAKE_TIMEOUT_S,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_READ_TIMEOUT_S,
    HttpLimits,
    serve_app,
)
from lkstream.server.http.scrape import ScrapeView, visible_to
from lkstream.server.settings import REQUEST_HEADROOM_BYTES

DEFAULT_HOST = "127.0.0.1"
#: Seed 003's event-log routes serve this topic (``server.http_default_topic``), made with this many partitions.
DEFAULT_TOPIC = "events"
DEFAULT_TOPIC_PARTITIONS = 100
DEFAULT_PORT = 8080
METRICS_PATH = "/metrics"
HEALTH_PATH = "/healthz"
READY_PATH = "/ready"


#: At most one "not HTTP/1.x" warning per this many seconds (a misdirected client retries in a loop).
NOT_HTTP_LOG_INTERVAL_S = 60.0


class _NotHttpFilter(logging.Filter):
    """Turns aiohttp's traceback per malformed request into one warning line per interval.

    A gRPC client pointed at the HTTP port (``--bootstrap HOST:8080``) opens with the
    HTTP/2 preface and retries with backoff; each attempt used to log a 20-line
    traceback. Other records pass through untouched.
    """

    def __init__(self, interval_s: float = NOT_HTTP_LOG_INTERVAL_S) -> None:
        super().__init__()
        self.interval_s = interval_s
        self._last = -interval_s
        self.suppressed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, (HttpProcessingError, RequestPayloadError)):
            return True
        now = time.monotonic()
        if now - self._last < self.interval_s:
            self.suppressed += 1
            return False
        self._last = now
        if isinstance(exc, RequestPayloadError):
            # The handler already answered 400 invalid_body; aiohttp meets the bad bytes again while draining.
            record.msg = "HTTP port: a request body did not decode as its Content-Encoding says (%s; %d more)"
        else:
            record.msg = (
                "HTTP port: a client sent bytes that are not an HTTP/1.x request (%s; %d more since the last such "
                "warning). A gRPC client pointed at the HTTP port? gRPC listens on server.grpc_port"
            )
        record.args = (f"{type(exc).__name__} {getattr(exc, 'code', '')}".strip(), self.suppressed)
        record.exc_info = record.exc_text = None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        self.suppressed = 0
        return True


#: aiohttp's per-connection error logger for this server, with :class:`_NotHttpFilter`.
protocol_log = logging.getLogger("lkstream.server.http.app.protocol")
protocol_log.addFilter(_NotHttpFilter())


class HttpServer:
    """A running HTTP endpoint; made by :func:`start_http`."""

    def __init__(
        self,
        broker: Broker,
        metrics: BrokerMetrics,
        *,
        ready: bool = False,
        max_request_bytes: int | None = None,
        default_topic: str = DEFAULT_TOPIC,
        default_topic_partitions: int = DEFAULT_TOPIC_PARTITIONS,
        access: Access | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
        per_address: AddressLimit | None = None,
        handshake_timeout_s: float = DEFAULT_HANDSHAKE_TIMEOUT_S,
    ) -> None:
        self.broker = broker
        self.metrics = metrics
        #: With authentication on, what ``/metrics`` names depends on the scraper (lkstream.server.http.scrape).
        self.access = access
        self._ready = ready
        #: Largest request body accepted (413 above it).
        self.max_request_bytes = max_request_bytes or broker.config.max_batch_bytes + REQUEST_HEADROOM_BYTES
        #: Open connections, at most ``max_connections``, ``per_address`` from one address (docs/operations.md).
        self.connections = ConnectionCap("http", max_connections, per_address)
        self.idle_timeout_s = idle_timeout_s
        self.handshake_timeout_s = handshake_timeout_s
        self.limits = HttpLimits(
            broker.admission, metrics, max_request_bytes=self.max_request_bytes, read_timeout_s=read_timeout_s
        )
        self.api = HttpApi(
            broker, metrics, max_request_bytes=self.max_request_bytes, is_ready=lambda: self.ready, access=access
        )
        self.event_log = EventLogRoutes(
            broker,
            metrics,
            topic=default_topic,
            partitions=default_topic_partitions,
            max_fetch_bytes=self.api.max_fetch_bytes,
            check_ready=self.api.check_ready,
        )
        self._runner: web.AppRunner | None = None
        self.host = ""
        self.port = 0
        self.tls = False

    # -- readiness -----------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """True when ``/ready`` answers 200."""
        return self._ready and not self.broker.closed

    def set_ready(self) -> None:
        """Recovery is done and writes are accepted: ``/ready`` answers 200."""
        self._ready = True
        self.api.stopping.clear()

    def set_not_ready(self) -> None:
        """Shutting down (or paused): ``/ready`` and the JSON API answer 503; ``/healthz`` still 200.

        Long polls of ``/consume`` in progress return what they have at once.
        """
        self._ready = False
        self.api.stopping.set()

    # -- lifecycle -----------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.max_request_bytes, middlewares=[self.limits.middleware])
        self.add_probe_routes(app)
        self.api.add_routes(app)
        self.event_log.add_routes(app)
        return app

    async def start(
        self, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        sock = listen(host, port, self.connections)
        self._runner = await serve_app(
            self.app(),
            sock,
            logger=protocol_log,
            keepalive_timeout_s=self.idle_timeout_s,
            handshake_timeout_s=self.handshake_timeout_s,
            ssl_context=ssl_context,
        )
        self.host, self.port = sock.getsockname()[:2]
        self.tls = ssl_context is not None

    async def stop(self) -> None:
        """Close the listener and open connections. Idempotent."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    # -- handlers ------------------------------------------------------------------------------

    def add_probe_routes(self, app: web.Application) -> None:
        """``/metrics``, ``/healthz`` and ``/ready`` (GET and HEAD): this port's, and the admin listener's."""
        app.router.add_get(METRICS_PATH, self._metrics)
        app.router.add_get(HEALTH_PATH, self._healthz)
        app.router.add_get(READY_PATH, self._ready_handler)

    async def _metrics(self, request: web.Request) -> web.Response:
        registry = self.metrics.registry
        if self.access is not None and self.access.enabled:  # names only for who may describe them
            header = request.headers.get("Authorization")
            principal = None
            if header is not None:
                try:
                    principal = self.access.authenticate_bearer(header, _peer(request))
                except AuthenticationError as exc:
                    response = error_response(401, error_info(exc))
                    response.headers["WWW-Authenticate"] = 'Bearer realm="lkstream"'
                    return response
            registry = CollectorRegistry(auto_describe=False)
            registry.register(ScrapeView(self.metrics.registry, visible_to(self.access, principal)))
        body = await asyncio.get_running_loop().run_in_executor(None, generate_latest, registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _ready_handler(self, request: web.Request) -> web.Response:
        if self.ready:
            return web.Response(text="ready\n")
        return web.Response(status=503, text="not ready\n")


def _peer(request: web.Request) -> str | None:
    peer = request.transport.get_extra_info("peername") if request.transport is not None else None
    return peer_address(peer) if peer else None


async def start_http(
    broker: Broker,
    metrics: BrokerMetrics,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    ready: bool = False,
    max_request_bytes: int | None = None,
    default_topic: str = DEFAULT_TOPIC,
    default_topic_partitions: int = DEFAULT_TOPIC_PARTITIONS,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
) -> HttpServer:
    """Serve ``/metrics``, ``/healthz``, ``/ready`` and the JSON API on ``host:port``; return the server.

    ``/ready`` (and the JSON API) answer 503 until :meth:`HttpServer.set_ready` (or
    ``ready=True``). ``max_request_bytes`` limits request bodies (default: the broker's
    ``max_batch_bytes`` plus 1 MiB). Stop it with ``await server.stop()``.
    """
    server = HttpServer(
        broker,
        metrics,
        ready=ready,
        max_request_bytes=max_request_bytes,
        default_topic=default_topic,
        default_topic_partitions=default_topic_partitions,
        max_connections=max_connections,
        idle_timeout_s=idle_timeout_s,
        read_timeout_s=read_timeout_s,
    )
    await server.start(host, port)
    return server
