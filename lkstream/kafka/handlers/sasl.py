"""SaslHandshake and SaslAuthenticate onto a pluggable :class:`~lkstream.kafka.security.SaslAuthenticator`.

SaslHandshake v0 would switch the connection to raw SASL tokens (no Kafka
framing); clients use v1, where the tokens travel in SaslAuthenticate
requests, and only that form is served (a v0 handshake gets
UNSUPPORTED_SASL_MECHANISM with the list).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from lkstream.kafka import kio_codec
from lkstream.kafka.context import RequestContext
from lkstream.kafka.protocol import ApiKey, RequestHeader
from lkstream.kafka.security import SaslAuthenticationFailed


async def sasl_handshake(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    request = kio_codec.decode_request(ApiKey.SASL_HANDSHAKE, header.api_version, frame, header.body_offset)
    response_cls = kio_codec.response_type(ApiKey.SASL_HANDSHAKE, header.api_version)
    authenticator = ctx.server.settings.sasl
    mechanisms = tuple(authenticator.mechanisms) if authenticator is not None else ()
    if authenticator is None or request.mechanism not in mechanisms or header.api_version < 1:
        return kio_codec.encode(
            kio_codec.make(response_cls, error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=mechanisms)
        )
    if ctx.sasl is not None:
        return kio_codec.encode(
            kio_codec.make(response_cls, error_code=ErrorCode.illegal_sasl_state, mechanisms=mechanisms)
        )
    ctx.sasl_mechanism = request.mechanism
    ctx.sasl = authenticator.start(request.mechanism)
    return kio_codec.encode(kio_codec.make(response_cls, error_code=0, mechanisms=mechanisms))


async def sasl_authenticate(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    request = kio_codec.decode_request(ApiKey.SASL_AUTHENTICATE, header.api_version, frame, header.body_offset)
    response_cls = kio_codec.response_type(ApiKey.SASL_AUTHENTICATE, header.api_version)
    server = ctx.sasl
    if server is None or server.complete:
        return kio_codec.encode(
            kio_codec.make(
                response_cls, error_code=ErrorCode.illegal_sasl_state, error_message="send SaslHandshake first"
            )
        )
    try:
        answer = server.step(bytes(request.auth_bytes))
    except SaslAuthenticationFailed as exc:
        ctx.sasl = None
        return kio_codec.encode(
            kio_codec.make(response_cls, error_code=ErrorCode.sasl_authentication_failed, error_message=str(exc))
        )
    if server.complete:
        ctx.principal = server.principal
    return kio_codec.encode(kio_codec.make(response_cls, error_code=0, auth_bytes=answer))
