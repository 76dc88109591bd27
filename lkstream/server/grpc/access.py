"""Access control on the gRPC port: TLS credentials and the interceptors that authenticate and authorize.

With ``server.auth: true`` the daemon's gRPC server gets an :class:`AuthenticationInterceptor`,
outermost, and an :class:`AccessInterceptor` inside the admission interceptor
(:mod:`lkstream.server.grpc.limits`). For every call they

1. let ``grpc.health.v1.Health`` through untouched (probes carry no credentials);
2. authenticate the ``authorization: Bearer <token>`` metadata into a principal
   (UNAUTHENTICATED otherwise), for every other method, server reflection included.
   This needs no request, so :class:`AuthenticationInterceptor` does it before any
   request byte is admitted or read: a caller without a valid token cannot hold the
   admission budget (issue 12, finding 8), even by never sending its message;
3. for ``lkstream.Broker`` methods, ask :data:`~lkstream.server.grpc.permissions.RPC_NEEDS`
   what the request needs and the daemon's :class:`~lkstream.security.access.Access`
   whether the principal has it (PERMISSION_DENIED naming the missing operation and
   resource otherwise); a method with no rule is refused (:class:`AccessInterceptor`,
   on the decoded request);
4. run the servicer with the principal in :data:`CALL_AUTHORITY`, so listings can
   hold only what the caller may describe (:func:`call_principal`), and so a call that
   outlives its admission (a Subscribe stream, a long-poll Fetch) can ask again before it
   delivers anything (:func:`recheck_call`): a revoked token or a removed ACL entry ends it
   with UNAUTHENTICATED or PERMISSION_DENIED (issue 28, finding 8).

Refusals travel like every other error (status, class name and fields in trailing
metadata; counted in ``lk_request_errors_total{code}``). Without ``auth`` there is no
interceptors and no per-call cost. TLS is independent: :func:`server_credentials`
builds gRPC's credentials from the same files as every other listener; they ask the
daemon's :class:`~lkstream.security.certificates.ServerCertificates` on every new
connection, so a reloaded certificate serves the next handshake (no restart).
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeAlias

import grpc

from lkstream.broker.broker import Broker
from lkstream.broker.metrics import BrokerMetrics
from lkstream.errors import AuthenticationError, AuthorizationError, LkstreamError
from lkstream.security.access import AUTHORIZATION_KEY, Access
from lkstream.security.certificates import ServerCertificates
from lkstream.security.principal import ANONYMOUS, Principal
from lkstream.security.tls import ServerPem
from lkstream.server.grpc.guard import fail
from lkstream.server.grpc.permissions import RPC_NEEDS

log = logging.getLogger("lkstream.server")

BROKER_SERVICE: Final = "lkstream.Broker"
#: Services served to anyone, with or without credentials.
OPEN_SERVICES: Final = frozenset({"grpc.health.v1.Health"})


@dataclass(frozen=True, slots=True)
class CallAuthority:
    """Who makes the call being served, and how to ask again whether it still may."""

    principal: Principal
    #: Authenticates the call's token and checks its rule again; raises AuthenticationError or AuthorizationError.
    recheck: Callable[[], Principal]


#: The authority of the call being served (None without authentication: ANONYMOUS, allowed everything).
#: Set, never reset, in the call's own task: gRPC serves each call in a task of its own, so the
#: value ends with the call, and a streaming handler that the loop closes later from another task
#: (a client that left) has no token to reset in a context it does not run in (finding 12).
CALL_AUTHORITY: Final[contextvars.ContextVar[CallAuthority | None]] = contextvars.ContextVar(
    "lkstream_call_authority", default=None
)

Context = grpc.aio.ServicerContext[Any, Any]
if TYPE_CHECKING:  # generic only in the type stubs
    Handler: TypeAlias = grpc.RpcMethodHandler[Any, Any]
else:
    Handler = grpc.RpcMethodHandler


def call_principal() -> Principal:
    """The principal of the RPC this coroutine serves."""
    authority = CALL_AUTHORITY.get()
    return ANONYMOUS if authority is None else authority.principal


def recheck_call() -> None:
    """Raise unless the RPC this coroutine serves may still go on: its token still verifies and its
    rule still holds (AuthenticationError / AuthorizationError; nothing without authentication).

    For calls that deliver long after they were admitted: each Subscribe delivery, a Fetch after
    its long poll. The token check is a dictionary lookup and a hash; the files are looked at
    again at most once per ``security_reload_interval_ms``.
    """
    authority = CALL_AUTHORITY.get()
    if authority is not None:
        authority.recheck()


def bearer_header(metadata: Iterable[tuple[str, Any]] | None) -> str | None:
    """The ``authorization`` value of a call's metadata (None when it sent none)."""
    return next((str(value) for key, value in metadata or () if key == AUTHORIZATION_KEY), None)


def _certificate_configuration(pem: ServerPem) -> grpc.ServerCertificateConfiguration:
    return grpc.ssl_server_certificate_configuration(
        [(pem.private_key, pem.certificate_chain)], root_certificates=pem.client_ca
    )


def server_credentials(certificates: ServerCertificates) -> grpc.ServerCredentials:
    """gRPC server credentials that follow ``certificates`` (client certificates required with a client CA).

    gRPC calls the fetcher before each new connection's handshake, from one of its own
    threads; it only compares a version number and, when it moved, hands over the new pair.
    """
    served = certificates.version
    initial = certificates.pem()

    def fetch() -> grpc.ServerCertificateConfiguration | None:
        nonlocal served
        if certificates.version == served:
            return None  # unchanged: gRPC keeps what it has
        served = certificates.version
        return _certificate_configuration(certificates.pem())

    return grpc.dynamic_ssl_server_credentials(
        _certificate_configuration(initial),
        fetch,  # type: ignore[arg-type]  # gRPC documents None as "unchanged"; its stubs leave it out
        require_client_authentication=initial.require_client_certificate,
    )


def _split(method: str) -> tuple[str, str]:
    service, _, name = method.lstrip("/").partition("/")
    return service, name


class AuthenticationInterceptor(grpc.aio.ServerInterceptor):
    """The token check alone, from the call's metadata, before anything reads or admits the request.

    Must be the outermost interceptor: a refused call gets a handler that ends it with
    UNAUTHENTICATED without reading its message. :class:`AccessInterceptor` checks the
    token again (a dictionary lookup and a hash) to get the principal it authorizes.
    """

    def __init__(self, access: Access, metrics: BrokerMetrics) -> None:
        self.access = access
        self.metrics = metrics

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        method: str = details.method
        if _split(method)[0] not in OPEN_SERVICES:
            try:
                self.access.authenticate_bearer(bearer_header(details.invocation_metadata))
            except AuthenticationError as exc:
                return self._refusal(method, exc)
        return await continuation(details)

    def _refusal(self, method: str, error: AuthenticationError) -> Handler:
        async def refuse(_requests: Any, context: Context) -> None:
            log.debug("refused %s from %s: %s", method, context.peer(), error)
            await fail(context, self.metrics, error)

        # Request-streaming whatever the method's kind (the wire is the same): the message is never read.
        return grpc.stream_stream_rpc_method_handler(refuse)


class AccessInterceptor(grpc.aio.ServerInterceptor):
    """Authenticate every call and authorize every ``lkstream.Broker`` call (see the module docstring)."""

    def __init__(self, access: Access, broker: Broker, metrics: BrokerMetrics) -> None:
        self.access = access
        self.broker = broker
        self.metrics = metrics
        self._wrapped: dict[str, Handler] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        method: str = details.method
        if _split(method)[0] in OPEN_SERVICES:
            return await continuation(details)
        wrapped = self._wrapped.get(method)
        if wrapped is None:
            handler = await continuation(details)
            if handler is None:
                return None  # UNIMPLEMENTED, as without the interceptor
            wrapped = self._wrap(method, handler)
            self._wrapped[method] = wrapped
        return wrapped

    async def admit(self, method: str, request: Any, context: Context) -> None:
        """Make the caller's authority the call's (:data:`CALL_AUTHORITY`) once it may make this call;
        abort the call otherwise."""
        try:
            principal = self._admit(method, request, context)
        except LkstreamError as exc:
            log.debug("refused %s from %s: %s", method, context.peer(), exc)
            await fail(context, self.metrics, exc)
        CALL_AUTHORITY.set(CallAuthority(principal, lambda: self._admit(method, request, context)))

    def _admit(self, method: str, request: Any, context: Context) -> Principal:
        principal = self.access.authenticate_bearer(bearer_header(context.invocation_metadata()))
        service, name = _split(method)
        if service != BROKER_SERVICE:
            return principal  # server reflection: a principal is enough
        rule = RPC_NEEDS.get(name)
        if rule is None:  # a new RPC without an entry in the table: fail closed
            raise AuthorizationError(principal.name, f"call {name} (no access rule)", "cluster", "cluster")
        for operation, resource_type, resource in rule(request, self.broker):
            self.access.require(principal, operation, resource_type, resource)
        return principal

    def _wrap(self, method: str, handler: Handler) -> Handler:
        kinds = {
            "unary_unary": grpc.unary_unary_rpc_method_handler,
            "unary_stream": grpc.unary_stream_rpc_method_handler,
            "stream_unary": grpc.stream_unary_rpc_method_handler,
            "stream_stream": grpc.stream_stream_rpc_method_handler,
        }
        for kind, make in kinds.items():
            inner = getattr(handler, kind)
            if inner is not None:
                behaviour = self._streaming(method, inner) if kind.endswith("stream") else self._unary(method, inner)
                return make(
                    behaviour,
                    request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer,
                )
        raise AssertionError(f"handler of {method} has no behaviour")  # pragma: no cover

    def _unary(self, method: str, inner: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def behaviour(request: Any, context: Context) -> Any:
            await self.admit(method, request, context)
            return await inner(request, context)

        return behaviour

    def _streaming(self, method: str, inner: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
        async def behaviour(request: Any, context: Context) -> AsyncIterator[Any]:
            await self.admit(method, request, context)
            async for response in inner(request, context):
                yield response

        return behaviour
