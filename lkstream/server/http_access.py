"""Access control for the HTTP listener: an aiohttp middleware in front of every route.

In order, for every request:

1. **Open routes** (``GET``/``HEAD`` of ``/metrics``, ``/healthz``, ``/ready``) pass
   untouched: probes and scrapers carry no credentials and name the pod's address.
2. **Host**: the ``Host`` header must name this machine's loopback (``localhost``,
   ``127.0.0.0/8``, ``[::1]``), the address the listener is bound to, or one of
   ``server.http_allowed_hosts``; otherwise 421. A web page that re-points its own
   host name at 127.0.0.1 (DNS rebinding) sends its own name and is refused.
3. **Origin**: a browser's ``Origin`` header must be one of
   ``server.http_allowed_origins`` (none by default); otherwise 403. Scripts and
   command-line clients send none.
4. **Content type**: a request with a body must say ``application/json``; otherwise
   415. A page cannot send JSON cross-origin without a CORS preflight, which this
   server never grants, so it cannot drive a local daemon with a "simple" form or
   ``text/plain`` request either.
5. **Authentication** (``server.auth: true``): ``Authorization: Bearer <token>`` into a
   principal (401 with ``WWW-Authenticate: Bearer`` otherwise), accepted only over TLS
   or from a loopback peer (403: a token must not cross a network in plaintext). The
   principal is left in ``request["lkstream.principal"]`` for the route's own checks.
6. **Authorization**: ``super_users_only`` lets only super users through. That is the
   daemon's rule until each route asks :meth:`Access.require` for its own operation
   (phase 2: the routes are being reorganised); it fails closed meanwhile.

Refusals are the JSON API's error bodies (``{"error": {"code", "message"}}``) and are
counted in ``lk_request_errors_total{code}`` by the gRPC code they match.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final

from aiohttp import web

from lkstream.broker.broker import Broker
from lkstream.broker.metrics import BrokerMetrics
from lkstream.errors import AuthenticationError, LkstreamError
from lkstream.security.access import Access, bearer_token
from lkstream.security.principal import Principal
from lkstream.server.http import HEALTH_PATH, METRICS_PATH, READY_PATH, HttpServer
from lkstream.server.http_errors import error_info, error_response

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: Routes anyone may GET or HEAD, with any Host, without credentials.
OPEN_PATHS: Final = frozenset({METRICS_PATH, HEALTH_PATH, READY_PATH})
PRINCIPAL_KEY: Final = web.RequestKey("lkstream.principal", Principal)
JSON_TYPES: Final = ("application/json",)
_BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _is_loopback(host: str) -> bool:
    host = host.strip("[]").lower()
    if host in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _host_name(host_header: str) -> str:
    """``example.com:8080`` -> ``example.com``; ``[::1]:8080`` -> ``::1``."""
    if host_header.startswith("["):
        return host_header[1 : host_header.find("]")] if "]" in host_header else host_header
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


class HttpAccess:
    """The middleware's settings and the middleware itself (:meth:`middleware`)."""

    def __init__(
        self,
        access: Access,
        metrics: BrokerMetrics | None = None,
        *,
        bound_host: str = "127.0.0.1",
        allowed_hosts: Iterable[str] = (),
        allowed_origins: Iterable[str] = (),
        super_users_only: bool = False,
    ) -> None:
        self.access = access
        self.metrics = metrics
        self.allowed_hosts = {h.lower() for h in allowed_hosts}
        if bound_host not in ("", "0.0.0.0", "::"):
            self.allowed_hosts.add(bound_host.strip("[]").lower())
        self.allowed_origins = {o.rstrip("/").lower() for o in allowed_origins}
        self.super_users_only = super_users_only

    def _refuse(self, status: int, code: str, message: str, grpc_code: str) -> web.Response:
        if self.metrics is not None:
            self.metrics.count_error(grpc_code)
        return error_response(status, {"code": code, "message": message})

    def _refuse_error(self, status: int, error: LkstreamError, grpc_code: str) -> web.Response:
        if self.metrics is not None:
            self.metrics.count_error(grpc_code)
        return error_response(status, error_info(error))

    def _cross_origin(self, request: web.Request) -> web.Response | None:
        host = _host_name(request.headers.get("Host", "")).lower()
        if not (_is_loopback(host) or host in self.allowed_hosts):
            return self._refuse(
                421,
                "host_not_allowed",
                f"Host {host!r} is not this server (server.http_allowed_hosts)",
                "PERMISSION_DENIED",
            )
        origin = request.headers.get("Origin")
        if origin is not None and origin.rstrip("/").lower() not in self.allowed_origins:
            return self._refuse(
                403,
                "origin_not_allowed",
                f"Origin {origin!r} may not call this API (server.http_allowed_origins)",
                "PERMISSION_DENIED",
            )
        has_body = request.body_exists or (request.content_length or 0) > 0
        if request.method in _BODY_METHODS and has_body and request.content_type not in JSON_TYPES:
            return self._refuse(
                415,
                "unsupported_media_type",
                f"send JSON with Content-Type: application/json, not {request.content_type!r}",
                "INVALID_ARGUMENT",
            )
        return None

    def _plaintext_remote(self, request: web.Request) -> bool:
        peer = request.transport.get_extra_info("peername") if request.transport is not None else None
        return not request.secure and not (peer and _is_loopback(str(peer[0])))

    def _authenticate(self, request: web.Request) -> web.Response | None:
        header = request.headers.get("Authorization")
        if self.access.enabled and bearer_token(header) is not None and self._plaintext_remote(request):
            return self._refuse(
                403, "tls_required", "a token is accepted only over TLS or from this machine", "PERMISSION_DENIED"
            )
        try:
            principal = self.access.authenticate_bearer(header)
        except AuthenticationError as exc:
            response = self._refuse_error(401, exc, "UNAUTHENTICATED")
            response.headers["WWW-Authenticate"] = 'Bearer realm="lkstream"'
            return response
        if self.super_users_only and not self.access.is_super_user(principal):
            return self._refuse(
                403,
                "authorization",
                f"principal {principal.name!r} may not use the HTTP JSON API: with authentication on it serves "
                "super users only (server.super_users); use gRPC, where ACLs apply per call",
                "PERMISSION_DENIED",
            )
        request[PRINCIPAL_KEY] = principal
        return None

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method in ("GET", "HEAD") and request.path in OPEN_PATHS:
            return await handler(request)
        refusal = self._cross_origin(request) or self._authenticate(request)
        if refusal is not None:
            return refusal
        return await handler(request)


class GuardedHttpServer(HttpServer):
    """The daemon's HTTP server with :class:`HttpAccess` in front of every route."""

    def __init__(self, broker: Broker, metrics: BrokerMetrics, guard: HttpAccess, **options: Any) -> None:
        super().__init__(broker, metrics, **options)
        self.guard = guard

    def app(self) -> web.Application:
        app = super().app()
        app.middlewares.insert(0, self.guard.middleware)  # outermost: before the API's error mapping
        return app
