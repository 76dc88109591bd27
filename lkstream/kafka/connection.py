"""One Kafka client connection: read frames, run handlers in order, write responses in order.

Kafka's ordering rule is that a connection's requests take effect, and are
answered, in the order they were sent. Produce requests are pipelined: each
one appends as soon as it is read (appends happen in order, on the event
loop) and several may wait for their acknowledgement (the fsync in ``sync``
mode) at once, so one connection's batches share fsyncs. Every other request
starts only after every earlier request finished. At most
``max_inflight_requests`` requests wait per connection; reading stops until
the oldest is answered.

Limits (issue 12, finding 7 and 8): a request's size is reserved in the broker's
admission budget before its bytes are read (no room: the connection is not read
until there is, for up to ``read_timeout_s``), and its bytes must then arrive
within ``read_timeout_s``; a connection that sends no request for
``idle_timeout_s`` is closed. The reservation is released when the request's
response is ready.

Failures stay with the request or the connection that caused them:

* an unknown API key, or a version outside the table, gets an error response
  (UNSUPPORTED_VERSION; for ApiVersions in the v0 layout, see the handler);
* a handler exception gets the API's error response with UNKNOWN_SERVER_ERROR
  (logged with the request), never a closed socket;
* a frame whose size prefix is out of bounds, or whose header or body does not
  parse, closes this connection only: its byte stream cannot be trusted further.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Awaitable

from kio.schema.errors import ErrorCode

from lkstream.broker.admission import Admission
from lkstream.errors import OverloadedError
from lkstream.kafka import kio_codec
from lkstream.kafka.context import RequestContext, ServerState
from lkstream.kafka.handlers import HANDLERS
from lkstream.kafka.protocol import (
    ApiKey,
    FrameError,
    RequestHeader,
    is_supported,
    parse_request_header,
    read_frame_size,
    response_header,
    response_is_flexible,
)

log = logging.getLogger("lkstream.kafka")

_SASL_APIS = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
_UNSUPPORTED = struct.pack(">h", ErrorCode.unsupported_version.value)


class Connection:
    """Serves one client until it disconnects, misbehaves, idles out or the listener stops."""

    def __init__(self, state: ServerState, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._state = state
        self._reader = reader
        self._writer = writer
        peer = writer.get_extra_info("peername")
        self.ctx = RequestContext(state, peer[0] if isinstance(peer, tuple) else "")
        self._responses: asyncio.Queue[tuple[RequestHeader, asyncio.Task[bytes | None]] | None] = asyncio.Queue(
            maxsize=state.settings.max_inflight_requests
        )
        self._unfinished: set[asyncio.Task[bytes | None]] = set()
        self._produce_only = True  # every unfinished request is a Produce

    async def serve(self) -> None:
        sender = asyncio.create_task(self._send_responses())
        try:
            await self._read_requests()
        except (FrameError, asyncio.IncompleteReadError, ConnectionError, TimeoutError) as exc:
            if not isinstance(exc, asyncio.IncompleteReadError) or exc.partial:
                log.info("closing Kafka connection from %s: %s", self.ctx.client_host, exc)
        finally:
            # The client is gone or its stream is garbage: nobody will read the answers.
            sender.cancel()
            for task in list(self._unfinished):
                task.cancel()
            self._writer.close()
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()

    async def _read_requests(self) -> None:
        settings = self._state.settings
        while True:
            prefix = await asyncio.wait_for(self._reader.readexactly(4), settings.idle_timeout_s)
            size = read_frame_size(prefix, settings.max_frame_bytes)
            admission = await self._admit(size)
            try:
                frame = await self._read_frame(size)
                header = parse_request_header(frame)
                if settings.sasl is not None and not self._authenticated() and header.api_key not in _SASL_APIS:
                    raise FrameError(f"API {header.api_key} before SASL authentication completed")
                produce = header.api_key == ApiKey.PRODUCE
                if self._unfinished and not (produce and self._produce_only):
                    await asyncio.wait(set(self._unfinished))  # keep side effects in request order
                task = asyncio.ensure_future(self._dispatch(header, frame))
            except BaseException:
                admission.release()
                raise
            task.add_done_callback(lambda _, held=admission: held.release())  # type: ignore[misc]
            self._unfinished.add(task)
            self._produce_only = produce and self._produce_only if len(self._unfinished) > 1 else produce
            task.add_done_callback(self._finished)
            await self._responses.put((header, task))

    async def _admit(self, size: int) -> Admission:
        """Hold ``size`` bytes of the broker's admission budget before reading the request.

        No room: the connection is not read (its bytes wait in the socket, as with
        Kafka's ``queued.max.request.bytes``) for up to ``read_timeout_s``, then closed.
        """
        try:
            return await self.ctx.broker.admission.admit(size, "kafka", self._state.settings.read_timeout_s)
        except OverloadedError as exc:
            raise FrameError(f"not read: {exc}") from None

    async def _read_frame(self, size: int) -> bytes:
        try:
            return await asyncio.wait_for(self._reader.readexactly(size), self._state.settings.read_timeout_s)
        except TimeoutError:
            timeout = self._state.settings.read_timeout_s
            raise FrameError(f"a request of {size} bytes did not arrive within {timeout:g} s") from None

    def _authenticated(self) -> bool:
        return self.ctx.sasl is not None and self.ctx.sasl.complete

    def _finished(self, task: asyncio.Task[bytes | None]) -> None:
        self._unfinished.discard(task)
        if not self._unfinished:
            self._produce_only = True

    async def _send_responses(self) -> None:
        while True:
            item = await self._responses.get()
            if item is None:
                return
            header, task = item
            try:
                body = await task
            except FrameError as exc:
                log.info("closing Kafka connection from %s: %s", self.ctx.client_host, exc)
                self._writer.close()
                return
            if body is None:
                continue
            flexible = response_is_flexible(header.api_key, header.api_version)
            self._writer.write(response_header(header.correlation_id, len(body), flexible=flexible) + body)
            if self._writer.transport.get_write_buffer_size() > 1 << 20:
                await self._writer.drain()

    def _dispatch(self, header: RequestHeader, frame: bytes) -> Awaitable[bytes | None]:
        return dispatch(self.ctx, header, frame)


async def dispatch(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes | None:
    """Run the handler of one request; every failure but a malformed body becomes an error response."""
    handler = HANDLERS.get(header.api_key)
    if handler is None:
        return _UNSUPPORTED  # no schema to answer in: the error code alone, after the correlation id
    if not is_supported(header.api_key, header.api_version) and header.api_key != ApiKey.API_VERSIONS:
        return _error_body(header, ErrorCode.unsupported_version)
    try:
        return await handler(ctx, header, frame)
    except FrameError:
        raise
    except Exception:
        log.exception(
            "Kafka request %s v%d from %s (%s) failed",
            header.api_key,
            header.api_version,
            ctx.client_host,
            header.client_id,
        )
        return _error_body(header, ErrorCode.unknown_server_error)


def _error_body(header: RequestHeader, code: ErrorCode) -> bytes:
    try:
        return kio_codec.encode(kio_codec.error_response(header.api_key, header.api_version, code.value))
    except Exception:  # a version kio has no schema for
        return struct.pack(">h", code.value)
