"""Limits of the gRPC listener: connection cap, timeouts, and admission of request bytes before decoding.

Connections and timeouts are gRPC core's (:func:`server_options`):

* ``grpc.max_allowed_incoming_connections`` = ``server.grpc_max_connections``: core
  closes a connection beyond it at accept, before any handshake;
* ``grpc.max_connection_idle_ms`` = ``server.grpc_idle_timeout_s``: a connection with
  no call in progress that long gets GOAWAY and is closed (clients reconnect on
  their next call, transparently). A client keeps its streams open as long as it
  lives, so the interceptor also ends a stream (OK) that has had nothing to answer
  and no new request for ``grpc_idle_timeout_s``; the client opens a new one on
  its next request, and an idle client's connection closes one timeout later;
* ``grpc.server_handshake_timeout_ms`` = ``server.read_timeout_s``: a connection must
  finish its TLS and HTTP/2 handshake that fast (a socket that sends nothing is
  closed then);
* ``grpc.max_concurrent_streams`` (:data:`MAX_CONCURRENT_STREAMS`) per connection.

Admission (:class:`AdmissionInterceptor`, issue 12 finding 8): every unary and
server-streaming ``lkstream.Broker`` call is served through a *request-streaming*
handler of the same method. The wire is the same (a unary call is one message then
half-close), but the handler runs before the message is read, so it can:

1. for a Produce, reserve a :class:`~lkstream.broker.admission.SizeEstimate` of its
   size in the broker's :class:`~lkstream.broker.admission.AdmissionBudget` *before
   reading it*, waiting up to :data:`~lkstream.broker.admission.ADMISSION_WAIT_S` for
   room, else refuse it unread (RESOURCE_EXHAUSTED,
   :class:`~lkstream.errors.OverloadedError` with ``retry_after_ms``). With BDP
   probing off (:func:`server_options`) gRPC core holds at most one flow-control
   window (:data:`STREAM_WINDOW_BYTES`) per connection of messages nobody asked for,
   so a burst of 256 large produces is read a budget's worth at a time instead of
   all at once;
2. read the raw message and hold its real size (other methods: reserve it now,
   refused at once if it does not fit), all *before* decoding it;
3. decode it, run the unary servicer method, and release the bytes once the answer
   is built (for server-streaming calls, right after decoding: the request is gone).

The bidirectional streams (``ProduceStream``, ``FetchStream``: one answer per request,
in order) are served without a deserializer, so each request arrives as raw bytes: it
is admitted by its size before it is decoded, waiting for room up to
``server.read_timeout_s`` (the stream reads nothing more meanwhile, as the Kafka
listener stops reading a connection), and released once its answer is built. A stream
that waited that long ends, after answering the requests before, with
RESOURCE_EXHAUSTED (``OverloadedError``; the client sends the rest again). A streamed
message is read before it is admitted (see :class:`_AdmittedRequests` for why): each
open stream may hold one message beyond the budget.

The one message of a unary or server-streaming call must arrive within
``server.read_timeout_s`` (else INVALID_ARGUMENT and the bytes go back): a call that
never sends it cannot hold its reservation.

The interceptor comes before access control (interceptors inside it see ordinary
unary handlers and decoded requests), and after the token check
(:class:`~lkstream.server.grpc.access.AuthenticationInterceptor`, outermost), so a
caller without a valid token is refused before it can hold any of the budget.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, TypeAlias

import grpc
from google.protobuf.message import DecodeError

from lkstream.broker.admission import ADMISSION_WAIT_S, Admission, AdmissionBudget, SizeEstimate
from lkstream.broker.metrics import BrokerMetrics
from lkstream.errors import InvalidArgumentError, LkstreamError, OverloadedError
from lkstream.server.grpc.guard import fail
from lkstream.server.settings import ServerSettings

BROKER_PREFIX: Final = "/lkstream.Broker/"
#: Methods whose requests carry record data: refused unread while the budget has no room for data.
DATA_METHODS: Final = frozenset({"/lkstream.Broker/Produce"})
#: Concurrent calls one connection may carry (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS).
MAX_CONCURRENT_STREAMS: Final = 256
#: A connection's flow-control window of bytes no handler asked for yet (HTTP/2 initial window;
#: gRPC's default is 64 KiB). With BDP probing off, core keeps each connection's window at this
#: plus what waiting reads asked for, so at most this much unadmitted data is held per connection.
STREAM_WINDOW_BYTES: Final = 256 * 1024
LISTENER: Final = "grpc"

Context = grpc.aio.ServicerContext[Any, Any]
if TYPE_CHECKING:  # generic only in the type stubs
    Handler: TypeAlias = grpc.RpcMethodHandler[Any, Any]
else:
    Handler = grpc.RpcMethodHandler


def server_options(settings: ServerSettings, message_limit: int) -> list[tuple[str, Any]]:
    """gRPC core options of the daemon's server: message limits, connection cap, timeouts."""
    return [
        ("grpc.max_receive_message_length", message_limit),
        ("grpc.max_send_message_length", message_limit),
        ("grpc.so_reuseport", 0),
        ("grpc.max_allowed_incoming_connections", settings.grpc_max_connections),
        ("grpc.max_connection_idle_ms", int(settings.grpc_idle_timeout_s * 1000)),
        ("grpc.server_handshake_timeout_ms", int(settings.read_timeout_s * 1000)),
        ("grpc.max_concurrent_streams", MAX_CONCURRENT_STREAMS),
        # Without BDP probing gRPC core reads a call's message only when the handler asks for it (it
        # otherwise grows every stream's window and buffers whole messages nobody admitted yet).
        ("grpc.http2.bdp_probe", 0),
        # With gRPC's 64 KiB a 200 KB produce stops mid-message until a window update has gone back
        # to the client (one more wake-up of both processes per call); 256 KiB lets it arrive in one
        # go (docs/benchmarks-notes.md, "The stream window").
        ("grpc.http2.lookahead_bytes", STREAM_WINDOW_BYTES),
    ]


class AdmissionInterceptor(grpc.aio.ServerInterceptor):
    """Admit every ``lkstream.Broker`` request's bytes before decoding it (see the module docstring)."""

    def __init__(
        self, budget: AdmissionBudget, metrics: BrokerMetrics, *, read_timeout_s: float, idle_timeout_s: float
    ) -> None:
        self.budget = budget
        self.metrics = metrics
        #: How long a streamed request waits for room before the stream is ended (``server.read_timeout_s``).
        self.read_timeout_s = read_timeout_s
        #: A stream with every request answered and no new one this long is ended (``server.grpc_idle_timeout_s``).
        self.idle_timeout_s = idle_timeout_s
        # method -> (the inner handler, our wrapper of it): rebuilt only if the inner one changes.
        self._wrapped: dict[str, tuple[Handler, Handler]] = {}
        self._estimate = SizeEstimate()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(details)
        method: str = details.method
        if handler is None or not method.startswith(BROKER_PREFIX):
            return handler
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = self._wrap(method, handler)
        self._wrapped[method] = (handler, wrapped)
        return wrapped

    def _wrap(self, method: str, handler: Handler) -> Handler:
        decode = handler.request_deserializer
        data = method in DATA_METHODS
        if handler.unary_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._unary(handler.unary_unary, decode, data), response_serializer=handler.response_serializer
            )
        if handler.unary_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._streaming(handler.unary_stream, decode, data), response_serializer=handler.response_serializer
            )
        if handler.stream_stream is not None:  # ProduceStream, FetchStream: no deserializer, we get raw bytes
            return grpc.stream_stream_rpc_method_handler(
                self._bidirectional(handler.stream_stream, decode), response_serializer=handler.response_serializer
            )
        return handler  # client-streaming methods (none in lkstream.Broker) would read their own messages

    def _unary(self, inner: Any, decode: Any, data: bool) -> Callable[[Any, Context], Awaitable[Any]]:
        """A request-streaming behaviour around the unary servicer method ``inner``."""

        async def behaviour(_requests: Any, context: Context) -> Any:
            request, admission = await self.admit(context, decode, data)
            with admission:
                return await inner(request, context)

        return behaviour

    def _streaming(self, inner: Any, decode: Any, data: bool) -> Callable[[Any, Context], AsyncIterator[Any]]:
        """A bidirectional-streaming behaviour around the server-streaming servicer method ``inner``."""

        async def behaviour(_requests: Any, context: Context) -> AsyncIterator[Any]:
            request, admission = await self.admit(context, decode, data)
            admission.release()  # the request is decoded; what the stream holds is bounded by its reads
            async for response in inner(request, context):
                yield response

        return behaviour

    def _bidirectional(self, inner: Any, decode: Any) -> Callable[[AsyncIterator[bytes], Context], AsyncIterator[Any]]:
        """A bidirectional-streaming behaviour around ``inner``, whose requests are admitted one by one.

        ``inner`` answers each request once, in request order (the rule of both streams), so
        the oldest admission is released when an answer goes. A request refused (no room
        within ``read_timeout_s``) or that does not decode ends the stream after the
        requests before it are answered: RESOURCE_EXHAUSTED (retriable) or INVALID_ARGUMENT.
        """

        async def behaviour(raw: AsyncIterator[bytes], context: Context) -> AsyncIterator[Any]:
            requests = _AdmittedRequests(raw, decode, self.budget, self.read_timeout_s, self.idle_timeout_s)
            try:
                async for response in inner(requests.read(), context):
                    requests.answered()
                    yield response
            finally:
                requests.release()
            if requests.refused is not None:
                await fail(context, self.metrics, requests.refused)

        return behaviour

    async def admit(self, context: Context, decode: Any, data: bool) -> tuple[Any, Admission]:
        """Read the call's one message within the budget and decode it; abort the call on refusal."""
        admission: Admission | None = None
        try:
            if data:  # reserve a guess first: gRPC core reads the message only when asked (bdp_probe off)
                admission = await self.budget.admit(self._estimate.value, LISTENER, ADMISSION_WAIT_S)
            try:
                async with asyncio.timeout(self.read_timeout_s):  # a timer, not a task: every call passes here
                    raw = await context.read()
            except TimeoutError:
                timeout = self.read_timeout_s
                raise InvalidArgumentError(
                    f"the request message did not arrive within server.read_timeout_s ({timeout:g} s)"
                ) from None
            if raw is grpc.aio.EOF:
                raise InvalidArgumentError("the call carried no request message")
            if admission is None:
                admission = self.budget.try_admit(len(raw), LISTENER)
            else:
                admission.resize(len(raw))
                self._estimate.observe(len(raw))
            request = decode(raw) if decode is not None else raw
        except BaseException as exc:
            if admission is not None:
                admission.release()
            if isinstance(exc, DecodeError):
                exc = InvalidArgumentError(f"the request does not decode: {exc}")
            if isinstance(exc, (OverloadedError, InvalidArgumentError)):
                await fail(context, self.metrics, exc)
            raise
        return request, admission


class _AdmittedRequests:
    """The requests of one stream, each admitted by its raw size before it is decoded.

    Read first, then admitted: the size of a streamed message is known only once it is
    read, and a reservation made before reading would be held by every idle stream (its
    next request may never come) and keep the budget from draining (:mod:`lkstream.server.memory`).
    So each stream may hold one raw message beyond the budget, the one waiting for room;
    while it waits, that stream reads nothing more (gRPC core then holds at most a
    flow-control window of what the client sends next). Waiting, not refusing at once:
    a refused request that the client sent again would be appended after requests that
    followed it on the stream.
    """

    def __init__(
        self, raw: AsyncIterator[bytes], decode: Any, budget: AdmissionBudget, wait_s: float, idle_s: float
    ) -> None:
        self._raw = raw
        self._decode = decode
        self._budget = budget
        self._wait_s = wait_s
        self._idle_s = idle_s
        self._held: deque[Admission] = deque()  # of the requests read and not yet answered, oldest first
        # The idle watchdog: one timer per stream, re-armed only when it fires (a timer per request
        # cost a Timeout, a TimerHandle and its cancellation on every message).
        self._task: asyncio.Task[Any] | None = None  # the task reading (known at the first request)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reader: asyncio.Task[Any] | None = None  # that task, while it waits for a request
        self._idle_since: float | None = None  # loop time since which nothing is answered nor read
        self._watchdog: asyncio.TimerHandle | None = None
        self._expired = False
        #: Why the stream stopped reading early (it ends with this status once the rest is answered).
        self.refused: LkstreamError | None = None

    async def read(self) -> AsyncIterator[Any]:
        """The decoded requests; stops at the client's half-close, after ``idle_s`` with nothing to answer and
        no new request, at a refusal, or at a message that does not decode.

        The idle end is what lets gRPC core's ``max_connection_idle`` close the connection (it only
        counts time with no call in progress, and a client keeps its stream open for as long as it
        lives). It ends the stream with OK, having answered every request it read; a request the
        client sent meanwhile was never read, and the client sends it again on a new stream.
        """
        messages = aiter(self._raw)
        try:
            while True:
                raw = await self._next_message(messages)
                if raw is None:
                    return
                admission = self._budget.admit_now(len(raw))  # no coroutine while there is room
                if admission is None:
                    try:
                        admission = await self._budget.admit(len(raw), LISTENER, self._wait_s)
                    except OverloadedError as exc:
                        self.refused = exc
                        return
                self._held.append(admission)
                try:
                    request = self._decode(raw) if self._decode is not None else raw
                except DecodeError as exc:
                    self._held.pop().release()
                    self.refused = InvalidArgumentError(f"the request does not decode: {exc}")
                    return
                del raw  # only the decoded request lives on while it waits for its answer
                yield request
        finally:
            if self._watchdog is not None:
                self._watchdog.cancel()

    async def _next_message(self, messages: AsyncIterator[bytes]) -> bytes | None:
        """The next raw message, or None at the half-close or once the stream was idle ``idle_s``."""
        task = self._task
        if task is None:  # the stream's reading task, the same for every request
            task = self._task = asyncio.current_task()
            assert task is not None  # always inside the stream's reading task
            self._loop = task.get_loop()
        cancelling = task.cancelling()
        self._reader = task
        self._start_idle()
        try:
            return await anext(messages, None)
        except asyncio.CancelledError:
            # The watchdog's cancellation, and no other: the stream ends idle (OK).
            if self._expired and task.uncancel() <= cancelling:
                return None
            raise
        finally:
            self._reader = None
            self._idle_since = None

    def answered(self) -> None:
        """The oldest request was answered: its bytes go back (and the idle time starts with the last one)."""
        if self._held:
            self._held.popleft().release()
        self._start_idle()

    def _start_idle(self) -> None:
        # Idle: waiting for a request with nothing waiting for an answer (a long-poll fetch or an
        # fsync in progress is not idleness).
        loop = self._loop
        if self._reader is None or self._held or self._idle_since is not None or loop is None:
            return
        self._idle_since = loop.time()
        if self._watchdog is None:
            self._watchdog = loop.call_at(self._idle_since + self._idle_s, self._check_idle)

    def _check_idle(self) -> None:
        """The watchdog fired: end the stream if it has been idle ``idle_s``, else look again when it could be."""
        self._watchdog = None
        if self._idle_since is None or self._reader is None:
            return  # busy now; the next idle spell arms it again
        due = self._idle_since + self._idle_s
        loop = self._reader.get_loop()
        if loop.time() < due:
            self._watchdog = loop.call_at(due, self._check_idle)
            return
        self._expired = True
        self._reader.cancel()

    def release(self) -> None:
        """The stream ended: whatever it still holds goes back (requests read and never answered)."""
        while self._held:
            self._held.popleft().release()
