"""Access control for the HTTP listener: two aiohttp middlewares around every route.

:meth:`HttpAccess.middleware` (outermost), with authentication on or off, in order:

1. **Open routes** (``GET``/``HEAD`` of ``/metrics``, ``/healthz``, ``/ready``) pass
   untouched: probes and scrapers carry no credentials and name the pod's address.
2. **Host**: the ``Host`` header must name this machine's loopback (``localhost``,
   ``127.0.0.0/8``, ``[::1]``), the address the listener is bound to, or one of
   ``server.http_allowed_hosts``; otherwise 421. A web page that re-points its own
   host name at 127.0.0.1 (DNS rebinding) sends its own name and is refused.
3. **Origin**: a browser's ``Origin`` header must be one of
   ``server.http_allowed_origins`` (none by default); otherwise 403. A browser that
   says the request comes from another site (``Sec-Fetch-Site: cross-site`` or
   ``same-site``) without an allowed ``Origin`` is refused too. Scripts and
   command-line clients send neither.
4. **Content type**: a request with a body must say ``application/json``; otherwise
   415. A page cannot send JSON cross-origin without a CORS preflight, which this
   server never grants. The one exception is seed 003's ``POST /produce/{partition}``,
   which also takes a form body (``curl -d key=...&value=...``): a form is what any
   page can post, so for it the Host, Origin and Sec-Fetch-Site checks above are
   the defence (every current browser sends ``Origin`` with a cross-origin POST).
5. **Authentication** (``server.auth: true``): ``Authorization: Bearer <token>`` into a
   principal (401 with ``WWW-Authenticate: Bearer`` otherwise), accepted only over TLS
   or from a loopback peer (403: a token must not cross a network in plaintext). With
   ``server.tls_client_ca_file``, a verified client certificate too (403; the TLS
   layer asks for one but lets the open routes go without, for probes). The principal
   is left in ``request[PRINCIPAL_KEY]`` (ANONYMOUS with authentication off).

:meth:`RouteAuthorizer.middleware` (innermost, inside the API's error mapping; only with
authentication on): looks up the route's rule in
:data:`~lkstream.server.http.permissions.ROUTE_NEEDS` and asks
:meth:`Access.require` for each need (403 naming the missing operation and resource);
a route without a rule is refused. It leaves a check to repeat in ``request[RECHECK_KEY]``
(the token, then the same needs), which a long poll asks after its wait (issue 28, finding 8).

Refusals are the JSON API's error bodies (``{"error": {"code", "message"}}``) and are
counted in ``lk_request_errors_total{code}`` by the gRPC code they match.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final

from aiohttp import web

from lkstream.broker.broker import Broker
from lkstream.broker.metrics import BrokerMetrics
from lkstream.errors import AuthenticationError, AuthorizationError, LkstreamError
from lkstream.security.access import Access, bearer_token
from lkstream.security.loopback import is_loopback_host
from lkstream.server.http.app import HEALTH_PATH, METRICS_PATH, READY_PATH, HttpServer
from lkstream.server.http.errors import error_info, error_response
from lkstream.server.http.models import parse_body
from lkstream.server.http.permissions import (
    PARSED_BODY_KEY,
    PRINCIPAL_KEY,
    RECHECK_KEY,
    ROUTE_NEEDS,
    RouteCall,
    route_key,
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: Routes anyone may GET or HEAD, with any Host, without credentials.
OPEN_PATHS: Final = frozenset({METRICS_PATH, HEALTH_PATH, READY_PATH})
JSON_TYPES: Final = ("application/json",)
FORM_TYPES: Final = ("application/x-www-form-urlencoded", "multipart/form-data")
#: Routes that also take a form body (seed 003).
FORM_ROUTES: Final = frozenset({"POST /produce/{partition}"})
#: Sec-Fetch-Site values of a request a page of another site made.
_FOREIGN_SITES: Final = frozenset({"cross-site", "same-site"})
_BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})

__all__ = ["PRINCIPAL_KEY", "GuardedHttpServer", "HttpAccess", "RouteAuthorizer"]


def _host_name(host_header: str) -> str:
    """``example.com:8080`` -> ``example.com``; ``[::1]:8080`` -> ``::1``."""
    if host_header.startswith("["):
        return host_header[1 : host_header.find("]")] if "]" in host_header else host_header
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


def _is_open(request: web.Request) -> bool:
    return request.method in ("GET", "HEAD") and request.path in OPEN_PATHS


class HttpAccess:
    """The outer middleware's settings and the middleware itself (:meth:`middleware`)."""

    def __init__(
        self,
        access: Access,
        metrics: BrokerMetrics | None = None,
        *,
        bound_host: str = "127.0.0.1",
        allowed_hosts: Iterable[str] = (),
        allowed_origins: Iterable[str] = (),
        require_client_certificate: bool = False,
    ) -> None:
        self.access = access
        self.metrics = metrics
        self.allowed_hosts = {h.lower() for h in allowed_hosts}
        if bound_host not in ("", "0.0.0.0", "::"):
            self.allowed_hosts.add(bound_host.strip("[]").lower())
        self.allowed_origins = {o.rstrip("/").lower() for o in allowed_origins}
        self.require_client_certificate = require_client_certificate

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
        if not (is_loopback_host(host) or host in self.allowed_hosts):
            return self._refuse(
                421,
                "host_not_allowed",
                f"Host {host!r} is not this server (server.http_allowed_hosts)",
                "PERMISSION_DENIED",
            )
        origin = request.headers.get("Origin")
        allowed_origin = origin is not None and origin.rstrip("/").lower() in self.allowed_origins
        if origin is not None and not allowed_origin:
            return self._refuse(
                403,
                "origin_not_allowed",
                f"Origin {origin!r} may not call this API (server.http_allowed_origins)",
                "PERMISSION_DENIED",
            )
        if request.headers.get("Sec-Fetch-Site", "").lower() in _FOREIGN_SITES and not allowed_origin:
            return self._refuse(
                403,
                "origin_not_allowed",
                "a page of another site may not call this API (server.http_allowed_origins)",
                "PERMISSION_DENIED",
            )
        has_body = request.body_exists or (request.content_length or 0) > 0
        accepted = JSON_TYPES + FORM_TYPES if route_key(request) in FORM_ROUTES else JSON_TYPES
        if request.method in _BODY_METHODS and has_body and request.content_type not in accepted:
            return self._refuse(
                415,
                "unsupported_media_type",
                f"send JSON with Content-Type: application/json, not {request.content_type!r}",
                "INVALID_ARGUMENT",
            )
        return None

    def _plaintext_remote(self, request: web.Request) -> bool:
        peer = request.transport.get_extra_info("peername") if request.transport is not None else None
        return not request.secure and not (peer and is_loopback_host(str(peer[0])))

    def _authenticate(self, request: web.Request) -> web.Response | None:
        header = request.headers.get("Authorization")
        if self.access.enabled and bearer_token(header) is not None and self._plaintext_remote(request):
            return self._refuse(
                403, "tls_required", "a token is accepted only over TLS or from this machine", "PERMISSION_DENIED"
            )
        if self.require_client_certificate and not self._client_certificate(request):
            return self._refuse(
                403,
                "client_certificate_required",
                "this API requires a client certificate from the configured CA (server.tls_client_ca_file)",
                "UNAUTHENTICATED",
            )
        try:
            principal = self.access.authenticate_bearer(header)
        except AuthenticationError as exc:
            response = self._refuse_error(401, exc, "UNAUTHENTICATED")
            response.headers["WWW-Authenticate"] = 'Bearer realm="lkstream"'
            return response
        request[PRINCIPAL_KEY] = principal
        return None

    @staticmethod
    def _client_certificate(request: web.Request) -> bool:
        # With CERT_OPTIONAL the TLS layer verified any certificate sent; getpeercert() is {} without one.
        transport = request.transport
        return bool(transport is not None and transport.get_extra_info("peercert"))

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if _is_open(request):
            return await handler(request)
        refusal = self._cross_origin(request) or self._authenticate(request)
        if refusal is not None:
            return refusal
        return await handler(request)


class RouteAuthorizer:
    """The inner middleware: each route's needs (:data:`ROUTE_NEEDS`) asked of the authorizer."""

    def __init__(
        self, access: Access, broker: Broker, read_body: Callable[[web.Request], Awaitable[bytes]], default_topic: str
    ) -> None:
        self.access = access
        self.broker = broker
        self.read_body = read_body
        self.default_topic = default_topic

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if _is_open(request) or request.match_info.http_exception is not None:
            return await handler(request)  # probes; unknown routes answer 404/405 as before
        principal = request[PRINCIPAL_KEY]
        key = route_key(request)
        rule = ROUTE_NEEDS.get(key or "")
        if rule is None:  # a new route without an entry in the table: fail closed
            raise AuthorizationError(principal.name, f"call {key} (no access rule)", "cluster", "cluster")
        body: Any = None
        if rule.body is not None:
            body = parse_body(rule.body, await self.read_body(request))
            request[PARSED_BODY_KEY] = body
        call = RouteCall(request.match_info, body, self.broker, self.default_topic)
        needs = rule.needs(call)
        for operation, resource_type, name in needs:
            self.access.require(principal, operation, resource_type, name)
        header = request.headers.get("Authorization")

        def recheck() -> None:
            # The needs as admitted: a long poll asks again whether its caller may still have its answer.
            still = self.access.authenticate_bearer(header)
            for operation, resource_type, name in needs:
                self.access.require(still, operation, resource_type, name)

        request[RECHECK_KEY] = recheck
        return await handler(request)


class GuardedHttpServer(HttpServer):
    """The daemon's HTTP server: :class:`HttpAccess` outermost and, with authentication, :class:`RouteAuthorizer`."""

    def __init__(self, broker: Broker, metrics: BrokerMetrics, guard: HttpAccess, **options: Any) -> None:
        super().__init__(broker, metrics, access=guard.access, **options)
        self.guard = guard

    def app(self) -> web.Application:
        app = super().app()
        app.middlewares.insert(0, self.guard.middleware)  # outermost: before the API's error mapping
        if self.guard.access.enabled:
            authorizer = RouteAuthorizer(self.guard.access, self.broker, self.api.read_body, self.event_log.topic)
            app.middlewares.append(authorizer.middleware)  # innermost: its refusals are mapped and counted
        return app
