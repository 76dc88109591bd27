"""The admin listener: ``/healthz``, ``/ready`` and ``/metrics`` on a port of their own (issue 28, finding 3).

On the API's HTTP port, probes and scrapes share the connection cap with every other client: 140
sockets that never started TLS left ``/healthz`` answering 1 probe in 35, and the Kubernetes
liveness probe restarted the pod in a loop. Redpanda serves them on an admin port; so does this
listener (``server.admin_host``, default loopback, and ``server.admin_port``, off by default, 9644
in deploy/k8s): its own small connection cap (``server.admin_max_connections``, 16) and a
per-address limit of a quarter of it (a probe or a scraper holds one or two connections, so at
least four addresses are needed to fill it; beyond that, restrict who reaches the port, e.g. a
Kubernetes NetworkPolicy), short timeouts, the same TLS as every listener, and nothing but the three probe routes of
the :class:`~lkstream.server.http.app.HttpServer` it reports on (the same handlers, the same
readiness, and ``/metrics`` under the same rule: docs/security.md). The HTTP port keeps serving
them too.
"""

from __future__ import annotations

import ssl

from aiohttp import web

from lkstream.listeners import AddressLimit, ConnectionCap, listen
from lkstream.server.http.app import HttpServer, protocol_log
from lkstream.server.http.limits import serve_app

DEFAULT_MAX_CONNECTIONS = 16
#: Probes and scrapes send their request at once: a connection idle this long is closed.
IDLE_TIMEOUT_S = 10.0


class AdminServer:
    """The admin listener of one :class:`HttpServer` (its probe handlers, on their own socket)."""

    def __init__(
        self,
        http: HttpServer,
        *,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        per_address: AddressLimit | None = None,
        handshake_timeout_s: float,
    ) -> None:
        self.http = http
        #: Open connections, at most ``max_connections`` (``per_address`` from one address).
        self.connections = ConnectionCap("admin", max_connections, per_address)
        self.handshake_timeout_s = handshake_timeout_s
        self._runner: web.AppRunner | None = None
        self.host = ""
        self.port = 0
        self.tls = False

    def app(self) -> web.Application:
        app = web.Application(client_max_size=4096)  # GET and HEAD only: no body worth reading
        self.http.add_probe_routes(app)
        return app

    async def start(self, host: str, port: int, *, ssl_context: ssl.SSLContext | None = None) -> None:
        sock = listen(host, port, self.connections)
        self._runner = await serve_app(
            self.app(),
            sock,
            logger=protocol_log,
            keepalive_timeout_s=IDLE_TIMEOUT_S,
            handshake_timeout_s=self.handshake_timeout_s,
            ssl_context=ssl_context,
        )
        self.host, self.port = sock.getsockname()[:2]
        self.tls = ssl_context is not None

    async def stop(self) -> None:
        """Close the listener and its connections. Idempotent."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"
