"""One Kafka client connection: read frames, run handlers in order, write responses in order.

Kafka's ordering rule is that a connection's requests take effect, and are
answered, in the order they were sent. Produce requests are pipelined: each
one appends as soon as it is read (appends happen in order, on the event
loop) and several may wait for their acknowledgement (the fsync in ``sync``
mode) at once, so one connection's batches share fsyncs. Every other request
starts only after every earlier request finished, and so does every request
after a Produce that auto-creates a topic (in a worker thread) before it appends. At most
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
  (logged with the request), never a closed socket; Produce and Fetch answer it on
  every partition of the request, since their clients read errors per partition;
* a frame whose size prefix is out of bounds, or whose header or body does not
  parse, closes this connection only: its byte stream cannot be trusted further.
  Such closes (and timeouts) are logged through the listener's
  :class:`~lkstream.listeners.ThrottledLog`: one line per kind and minute, with a
  count of the rest, so a flood of bad frames cannot fill the log; a client that
  leaves, between requests or in the middle of one, is logged at debug level only.
  With SASL on, a size above :data:`MAX_UNAUTHENTICATED_FRAME_BYTES` before the
  client authenticated is out of bounds (refused before admission).

Before authentication (issue 28, findings 2 and 3): requests are admitted from their own small
budget (``settings.unauthenticated_admission``), never from the one produce data needs, and the
connection is closed ``settings.authentication_timeout_s`` after it was accepted unless SASL
completed by then, whatever it sent meanwhile.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import struct
import time
from collections.abc import Awaitable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from lkstream.broker.admission import Admission
from lkstream.errors import OverloadedError
from lkstream.kafka import kio_codec
from lkstream.kafka.context import RequestContext, ServerState
from lkstream.kafka.handlers import FAILURE_RESPONSES, HANDLERS
from lkstream.kafka.handlers.data import AfterTopicCreation, produce_start
from lkstream.kafka.hot import HeldResponse, ResponseBody, ResponseChunks
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
from lkstream.kafka.writer import ChunkWriter
from lkstream.listeners import peer_address

log = logging.getLogger("lkstream.kafka")

_SASL_APIS = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
#: Largest request read before SASL authentication completed. An unauthenticated client sends only
#: ApiVersions and the SASL requests, and a SASL message above 4 KiB is refused anyway
#: (lkstream.security.sasl): 8 KiB leaves room for the header and a long client id. (Kafka's
#: ``sasl.server.max.receive.size`` is 512 KiB: 112 sockets announcing that much each held 56 MiB.)
MAX_UNAUTHENTICATED_FRAME_BYTES = 8 * 1024
_UNSUPPORTED = struct.pack(">h", ErrorCode.unsupported_version.value)
#: Above this many unsent response bytes, wait for the socket before reading more requests.
_WRITE_BUFFER_HIGH = 1 << 20


class Connection:
    """Serves one client until it disconnects, misbehaves, idles out or the listener stops."""

    def __init__(self, state: ServerState, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._state = state
        self._reader = reader
        self._writer = writer
        peer = writer.get_extra_info("peername")
        self.ctx = RequestContext(state, peer_address(peer) if isinstance(peer, tuple) else "")
        # Stored batches go out with sendfile(2) unless TLS must encrypt them (lkstream.kafka.writer).
        self.ctx.zero_copy = state.settings.zero_copy and writer.get_extra_info("sslcontext") is None
        self._chunk_writer = ChunkWriter(writer, state.send_stats, zero_copy=self.ctx.zero_copy)
        self._loop = asyncio.get_running_loop()
        # Responses not yet written, oldest first; the sender task writes them in order.
        self._pending: collections.deque[tuple[RequestHeader, asyncio.Future[ResponseBody]]] = collections.deque()
        self._sender: asyncio.Task[None] | None = None
        self._room = asyncio.Event()  # set whenever fewer than max_inflight_requests responses wait
        self._room.set()
        self._unfinished: set[asyncio.Task[ResponseBody]] = set()
        self._produce_only = True  # every unfinished request is a Produce that appended already
        self._last_active = self._loop.time()
        self._idle_check: asyncio.TimerHandle | None = None
        self._unsent: list[bytes] = []  # small answers of this loop turn, written together by _flush
        self._drain_until: float | None = None  # set by drain(): the listener is stopping
        self._authentication_deadline: asyncio.TimerHandle | None = None

    async def serve(self) -> None:
        settings = self._state.settings
        self._schedule_idle_check(settings.idle_timeout_s)
        if settings.sasl is not None:
            # From accept, whatever the client sends: ApiVersions every few seconds must not keep a slot.
            self._authentication_deadline = self._loop.call_later(
                settings.authentication_timeout_s, self._authentication_overdue
            )
        try:
            await self._read_requests()
        except FrameError as exc:
            self._closing("malformed", exc)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            # The client left (between requests, or in the middle of one): not an error.
            log.debug("Kafka connection from %s ended: %s", self.ctx.client_host, exc)
        finally:
            if self._idle_check is not None:
                self._idle_check.cancel()
            if self._authentication_deadline is not None:
                self._authentication_deadline.cancel()
            if self._drain_until is not None:
                await self._answer_started_requests(self._drain_until)
            # The client is gone or its stream is garbage (or the listener's grace is over): nobody
            # will read the answers still to come.
            if self._sender is not None:
                self._sender.cancel()
            for task in list(self._unfinished):
                task.cancel()
            self._release_unwritten()
            self._flush()  # answers already made still go out (a client may half-close after its last request)
            self._writer.close()
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()

    def drain(self, deadline: float) -> None:
        """Read no more requests, answer those already read (until ``deadline``, loop time), then close.

        For a stopping listener: a request that was read may have appended already, and an answer
        lost to the close would make its client send the records again (a clean restart must not
        duplicate what a client produced). Complete requests already buffered are still served; a
        request cut short by the close was never started.
        """
        self._drain_until = deadline
        transport = self._writer.transport
        if isinstance(transport, asyncio.ReadTransport):  # always (a socket's transport); for the type checker
            transport.pause_reading()  # no more bytes into the reader after its end below
        self._reader.feed_eof()  # the read loop ends at the end of what was received

    async def _answer_started_requests(self, deadline: float) -> None:
        while self._unfinished or self._sender is not None:
            remaining = deadline - self._loop.time()
            waiting = {*self._unfinished, *((self._sender,) if self._sender is not None else ())}
            if remaining <= 0 or self._writer.is_closing():
                return
            await asyncio.wait(waiting, timeout=remaining)

    async def _read_requests(self) -> None:
        settings = self._state.settings
        while True:
            prefix = await self._reader.readexactly(4)
            size = read_frame_size(prefix, settings.max_frame_bytes)
            if settings.sasl is not None and size > MAX_UNAUTHENTICATED_FRAME_BYTES:
                await self._refuse_unless_authenticated(size)
            admission = await self._admit(size)
            try:
                frame = await self._read_frame(size)
                self._last_active = self._loop.time()
                header = parse_request_header(frame, self._state.versions)
                if settings.sasl is not None and not self._authenticated() and header.api_key not in _SASL_APIS:
                    raise FrameError(f"API {header.api_key} before SASL authentication completed")
                if self.ctx.sasl is not None and self.ctx.sasl.revoked():
                    # A token taken out of the users file stops its connections too, not only new logins.
                    raise FrameError("the token this connection authenticated with was revoked")
                produce = header.api_key == ApiKey.PRODUCE
                if self._unfinished and not (produce and self._produce_only):
                    await asyncio.wait(set(self._unfinished))  # keep side effects in request order
                outcome = self._start(header, frame, produce)
            except BaseException:
                admission.release()
                raise
            if isinstance(outcome, _Ready):
                admission.release()
            else:
                outcome.add_done_callback(lambda _, held=admission: held.release())  # type: ignore[misc]
            self._respond(header, outcome)
            if not self._room.is_set():
                await self._room.wait()  # at most max_inflight_requests answers wait per connection
            elif self._writer.transport.get_write_buffer_size() > _WRITE_BUFFER_HIGH:
                await self._writer.drain()

    def _start(self, header: RequestHeader, frame: bytes, produce: bool) -> asyncio.Future[ResponseBody] | _Ready:
        """Run the request: its answer when known at once (a Produce outside ``sync`` mode), else its task."""
        creates_topics = False
        if produce and is_supported(header.api_key, header.api_version, self._state.versions):
            started = time.perf_counter()
            observe = self._state.settings.observe_produce
            try:
                outcome = produce_start(self.ctx, header, frame)
            except FrameError:
                raise
            except Exception:
                log.exception("Kafka produce v%d from %s failed", header.api_version, self.ctx.client_host)
                return _Ready(_failure_body(header, frame, ErrorCode.unknown_server_error))
            if isinstance(outcome, AfterTopicCreation):
                creates_topics, outcome = True, outcome.answer
            if not isinstance(outcome, Awaitable):
                if observe is not None:
                    observe(time.perf_counter() - started)
                return _Ready(outcome)
            task = asyncio.ensure_future(_guarded(self.ctx, header, frame, outcome))
            if observe is not None:
                task.add_done_callback(lambda _: observe(time.perf_counter() - started))
        else:
            task = asyncio.ensure_future(dispatch(self.ctx, header, frame))
        self._unfinished.add(task)
        self._produce_only = produce and self._produce_only if len(self._unfinished) > 1 else produce
        if creates_topics:
            # Its appends wait for the topic creation: a later Produce must not append before them.
            self._produce_only = False
        task.add_done_callback(self._finished)
        return task

    def _respond(self, header: RequestHeader, outcome: asyncio.Future[ResponseBody] | _Ready) -> None:
        """Write the answer now if it is known and nothing waits before it; else queue it for the sender."""
        if isinstance(outcome, _Ready):
            # The sender may be in the middle of a large answer (it took it off the queue already).
            if not self._pending and self._sender is None:
                self._write(header, outcome.body)
                return
            future: asyncio.Future[ResponseBody] = self._loop.create_future()
            future.set_result(outcome.body)
        else:
            future = outcome
        self._pending.append((header, future))
        if len(self._pending) >= self._state.settings.max_inflight_requests:
            self._room.clear()
        if self._sender is None:
            self._sender = asyncio.ensure_future(self._send_responses())

    def _write(self, header: RequestHeader, body: bytes | None) -> None:
        """Write an answer in one piece (chunked answers go through :meth:`_write_chunks`)."""
        self._last_active = self._loop.time()
        if body is None:  # Produce with acks=0: no answer at all
            return
        flexible = response_is_flexible(header.api_key, header.api_version)
        # Answers finished in the same turn of the event loop go out in one send (a producer with
        # linger.ms=0 pipelines many small requests; a syscall per answer was a fifth of the cost).
        if not self._unsent:
            self._loop.call_soon(self._flush)
        self._unsent.append(response_header(header.correlation_id, len(body), flexible=flexible))
        self._unsent.append(body)

    def _flush(self) -> None:
        if self._unsent:
            data = b"".join(self._unsent)
            self._unsent.clear()
            if not self._writer.is_closing():
                self._writer.write(data)

    async def _write_chunks(self, header: RequestHeader, body: ResponseChunks | HeldResponse) -> None:
        """Write a large answer without copying it (lkstream.kafka.writer); release what it held, in any case."""
        self._last_active = self._loop.time()
        self._flush()  # earlier answers first
        chunks = body.chunks if isinstance(body, HeldResponse) else body
        flexible = response_is_flexible(header.api_key, header.api_version)
        size = sum(len(chunk) for chunk in chunks)
        try:
            await self._chunk_writer.write(response_header(header.correlation_id, size, flexible=flexible), chunks)
        finally:
            if isinstance(body, HeldResponse):
                body.release()

    def _release_unwritten(self) -> None:
        """Answers made but never written (the client left): give back the files and memory they hold."""
        for _, future in self._pending:
            if future.done() and not future.cancelled() and future.exception() is None:
                body = future.result()
                if isinstance(body, HeldResponse):
                    body.release()
            elif not future.done():
                future.add_done_callback(_release_when_made)

    async def _admit(self, size: int) -> Admission:
        """Hold ``size`` bytes of the broker's admission budget before reading the request.

        No room: the connection is not read (its bytes wait in the socket, as with
        Kafka's ``queued.max.request.bytes``) for up to ``read_timeout_s``, then closed.
        """
        settings = self._state.settings
        budget = self.ctx.broker.admission
        if settings.sasl is not None and settings.unauthenticated_admission is not None and not self._authenticated():
            budget = settings.unauthenticated_admission  # sockets that never log in cannot hold produce's budget
        try:
            return await budget.admit(size, "kafka", settings.read_timeout_s)
        except OverloadedError as exc:
            raise FrameError(f"not read: {exc}") from None

    async def _read_frame(self, size: int) -> bytes:
        # A timer rather than asyncio.wait_for: wait_for makes a task per request, a timer costs
        # a heap push and pop (most frames are already buffered when this is called).
        timer = self._loop.call_later(self._state.settings.read_timeout_s, self._read_timed_out, size)
        try:
            return await self._reader.readexactly(size)
        finally:
            timer.cancel()

    def _closing(self, kind: str, reason: object) -> None:
        """Log why this connection is closed: one line per kind and interval for the whole listener."""
        self._state.connection_log.event(
            kind, logging.INFO, "closing Kafka connection from %s: %s", self.ctx.client_host, reason
        )

    def _read_timed_out(self, size: int) -> None:
        timeout = self._state.settings.read_timeout_s
        self._closing("read timeout", f"a request of {size} bytes did not arrive within {timeout:g} s")
        self._writer.transport.abort()  # the pending read ends; serve() cleans up

    async def _refuse_unless_authenticated(self, size: int) -> None:
        """Close the connection (FrameError) if a request of ``size`` bytes comes before SASL completed."""
        if self._unfinished and not self._authenticated():
            await asyncio.wait(set(self._unfinished))  # a SaslAuthenticate still running may complete it
        if not self._authenticated():
            raise FrameError(
                f"a request of {size} bytes before SASL authentication completed "
                f"(at most {MAX_UNAUTHENTICATED_FRAME_BYTES} until then)"
            )

    def _authenticated(self) -> bool:
        return self.ctx.sasl is not None and self.ctx.sasl.complete

    def _authentication_overdue(self) -> None:
        if self._authenticated():
            return
        timeout = self._state.settings.authentication_timeout_s
        self._closing("unauthenticated", f"not authenticated within {timeout:g} s (server.authentication_timeout_s)")
        self._writer.transport.abort()  # the pending read ends; serve() cleans up

    def _finished(self, task: asyncio.Task[ResponseBody]) -> None:
        self._unfinished.discard(task)
        if not self._unfinished:
            self._produce_only = True

    async def _send_responses(self) -> None:
        try:
            while self._pending:
                header, future = self._pending[0]
                try:
                    body = await future
                except FrameError as exc:
                    self._closing("malformed", exc)
                    self._flush()
                    self._writer.close()
                    return
                self._pending.popleft()
                self._room.set()
                try:
                    if isinstance(body, list | HeldResponse):
                        await self._write_chunks(header, body)
                    else:
                        self._write(header, body)
                    if self._writer.transport.get_write_buffer_size() > _WRITE_BUFFER_HIGH:
                        await self._writer.drain()
                except ConnectionError as exc:  # the client left while its answer was being sent
                    log.info("closing Kafka connection from %s: %s", self.ctx.client_host, exc)
                    self._writer.transport.abort()  # the read loop ends; serve() releases the rest
                    return
        finally:
            self._sender = None

    def _schedule_idle_check(self, delay_s: float) -> None:
        self._idle_check = self._loop.call_later(delay_s, self._close_if_idle)

    def _close_if_idle(self) -> None:
        """Kafka's connections.max.idle.ms: one timer per connection, not one per read."""
        timeout = self._state.settings.idle_timeout_s
        idle = self._loop.time() - self._last_active
        if idle >= timeout and not self._pending and not self._unfinished:
            log.debug("closing Kafka connection from %s: idle for %.0f s", self.ctx.client_host, idle)
            self._writer.close()  # the reader sees the end of the stream; serve() cleans up
            return
        self._schedule_idle_check(max(timeout - idle, 1.0))


def _release_when_made(future: asyncio.Future[ResponseBody]) -> None:
    """A handler that finishes after its connection closed: nobody writes its answer."""
    if not future.cancelled() and future.exception() is None:
        body = future.result()
        if isinstance(body, HeldResponse):
            body.release()


@dataclass(frozen=True, slots=True)
class _Ready:
    """An answer known when the request was read (None: a Produce with acks=0)."""

    body: bytes | None


async def _guarded(
    ctx: RequestContext, header: RequestHeader, frame: bytes, outcome: Awaitable[ResponseBody]
) -> ResponseBody:
    try:
        return await outcome
    except Exception:
        log.exception("Kafka produce v%d from %s failed", header.api_version, ctx.client_host)
        return _failure_body(header, frame, ErrorCode.unknown_server_error)


async def dispatch(ctx: RequestContext, header: RequestHeader, frame: bytes) -> ResponseBody:
    """Run the handler of one request; every failure but a malformed body becomes an error response."""
    handler = HANDLERS.get(header.api_key)
    if handler is None:
        return _UNSUPPORTED  # no schema to answer in: the error code alone, after the correlation id
    if (
        not is_supported(header.api_key, header.api_version, ctx.server.versions)
        and header.api_key != ApiKey.API_VERSIONS
    ):
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
        return _failure_body(header, frame, ErrorCode.unknown_server_error)


def _failure_body(header: RequestHeader, frame: bytes, code: ErrorCode) -> bytes | None:
    build = FAILURE_RESPONSES.get(header.api_key)
    if build is not None:
        try:
            return build(header, frame, code.value)
        except Exception:  # the request does not parse either: fall back to the top-level code
            log.exception(
                "Kafka request %s v%d: building its error response failed", header.api_key, header.api_version
            )
    return _error_body(header, code)


def _error_body(header: RequestHeader, code: ErrorCode) -> bytes:
    try:
        return kio_codec.encode(kio_codec.error_response(header.api_key, header.api_version, code.value))
    except Exception:  # a version kio has no schema for
        return struct.pack(">h", code.value)
