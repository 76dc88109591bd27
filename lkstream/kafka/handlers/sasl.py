"""SaslHandshake and SaslAuthenticate onto a pluggable :class:`~lkstream.kafka.security.SaslAuthenticator`.

SaslHandshake v0 would switch the connection to raw SASL tokens (no Kafka
framing); clients use v1, where the tokens travel in SaslAuthenticate
requests, and only that form is served (a v0 handshake gets
UNSUPPORTED_SASL_MECHANISM with the list).

One authentication per connection: a second handshake, or a SaslAuthenticate
without a handshake or after the exchange ended, is ILLEGAL_SASL_STATE. A
refused exchange is SASL_AUTHENTICATION_FAILED, answered after
:data:`FAILED_AUTHENTICATION_DELAY_S` (Kafka's
``connection.failed.authentication.delay.ms``), and leaves the connection
unable to authenticate: the client reports the failure and reconnects. Failures
also count against the user and the client's address in the daemon's failure
budget, across connections (:mod:`lkstream.security.failures`).

Each SASL step runs in :data:`KEY_DERIVATION`, a small thread pool of its own: PLAIN
derives the password's PBKDF2 key (milliseconds), which on the event loop stalled
every connection, and a pool of its own keeps a flood of logins from taking the
threads admin work needs.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Final

from kio.schema.errors import ErrorCode

from lkstream.kafka import kio_codec
from lkstream.kafka.context import RequestContext
from lkstream.kafka.protocol import ApiKey, RequestHeader
from lkstream.kafka.security import SaslAuthenticationFailed

#: How long a refused authentication waits before it is answered (slows password guessing per connection).
FAILED_AUTHENTICATION_DELAY_S: Final = 0.1
#: Where SASL steps run (password key derivation), off the event loop. Two threads: two cores' worth.
KEY_DERIVATION: Final = ThreadPoolExecutor(max_workers=2, thread_name_prefix="lkstream-sasl")


async def sasl_handshake(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    request = kio_codec.decode_request(ApiKey.SASL_HANDSHAKE, header.api_version, frame, header.body_offset)
    response_cls = kio_codec.response_type(ApiKey.SASL_HANDSHAKE, header.api_version)
    authenticator = ctx.server.settings.sasl
    mechanisms = tuple(authenticator.mechanisms) if authenticator is not None else ()
    if authenticator is None or request.mechanism not in mechanisms or header.api_version < 1:
        return kio_codec.encode(
            kio_codec.make(response_cls, error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=mechanisms)
        )
    if ctx.sasl is not None or ctx.sasl_failed:
        return kio_codec.encode(
            kio_codec.make(response_cls, error_code=ErrorCode.illegal_sasl_state, mechanisms=mechanisms)
        )
    ctx.sasl_mechanism = request.mechanism
    ctx.sasl = authenticator.new(request.mechanism, ctx.client_host)
    return kio_codec.encode(kio_codec.make(response_cls, error_code=0, mechanisms=mechanisms))


async def sasl_authenticate(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    request = kio_codec.decode_request(ApiKey.SASL_AUTHENTICATE, header.api_version, frame, header.body_offset)
    response_cls = kio_codec.response_type(ApiKey.SASL_AUTHENTICATE, header.api_version)
    server = ctx.sasl
    if server is None or server.complete:
        message = "authenticated already" if server is not None else "send SaslHandshake first"
        return kio_codec.encode(
            kio_codec.make(response_cls, error_code=ErrorCode.illegal_sasl_state, error_message=message)
        )
    try:
        loop = asyncio.get_running_loop()
        answer = await loop.run_in_executor(KEY_DERIVATION, server.step, bytes(request.auth_bytes))
    except SaslAuthenticationFailed as exc:
        ctx.sasl, ctx.sasl_failed = None, True
        await asyncio.sleep(FAILED_AUTHENTICATION_DELAY_S)
        return kio_codec.encode(
            kio_codec.make(response_cls, error_code=ErrorCode.sasl_authentication_failed, error_message=str(exc))
        )
    if server.complete and server.principal is not None:
        ctx.principal = server.principal
    return kio_codec.encode(kio_codec.make(response_cls, error_code=0, auth_bytes=answer))
