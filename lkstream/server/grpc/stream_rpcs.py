"""Produce and Fetch over long-lived streams (a mixin of BrokerService): ``ProduceStream``, ``FetchStream``.

Why streams: a unary call costs the daemon and the client a call set-up each
(HTTP/2 headers, a call object, the access check, a completion on each side):
about 0.4 ms per call on the project's 2-core machine, against 0.16 ms for one
message each way on an open stream (docs/benchmarks-notes.md, "The cost of a call").
A client keeps one stream open per connection and sends every produce (or
fetch) on it, and may send the next request before the previous is answered.

Rules of both streams:

* one answer per request, **in request order**;
* a failed request is answered with ``error`` set (the status, class and fields
  a unary call would fail with; :mod:`lkstream.wire.streams`) and the stream
  goes on; the stream itself ends with a status only when the daemon stops
  (UNAVAILABLE, ``BrokerClosedError``: retriable) or on a bug;
* every request is authenticated and authorized on its own: the token the
  stream was opened with is checked again (a dictionary lookup and a hash),
  then the request against the rule of its unary twin
  (:data:`~lkstream.server.grpc.permissions.RPC_NEEDS`), so revoking a token or
  an ACL takes effect on an open stream at its next request (answered
  UNAUTHENTICATED or PERMISSION_DENIED in its ``error``); a fetch that long-polls
  is checked again after its wait, before it reads.

``ProduceStream`` appends each request's ``record_batch`` as soon as it is read
(``Broker.begin_produce_batch``), in request order, and answers once the append
is acknowledged (in ``sync`` mode: fsynced), so up to :data:`PRODUCE_PIPELINE`
requests share the wait for one fsync. On shutdown it stops reading, answers
what it appended, then ends with UNAVAILABLE; a request the client sent but the
daemon never read is answered by that status and resent by the client.

``FetchStream`` answers each request as the unary ``Fetch`` would, one after the
other (a long poll, ``max_wait_ms``, delays the requests behind it); up to
:data:`FETCH_PIPELINE` requests are read ahead. On shutdown both stop reading,
answer what they read, then end with UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final

import grpc

from lkstream.broker.acks import Acknowledgement
from lkstream.broker.broker import Broker
from lkstream.broker.metrics import BrokerMetrics
from lkstream.errors import BrokerClosedError, InvalidArgumentError, LkstreamError, UnknownTopicError
from lkstream.security.access import Access
from lkstream.server.admin_calls import ensure_topic
from lkstream.server.grpc.access import bearer_header
from lkstream.server.grpc.guard import guard
from lkstream.server.grpc.permissions import RPC_NEEDS
from lkstream.server.stop_signal import StopSignal
from lkstream.wire._proto import messaging_pb2 as pb
from lkstream.wire.contract import status_for
from lkstream.wire.streams import error_status

log = logging.getLogger("lkstream.server")

Context = grpc.aio.ServicerContext[Any, Any]
#: What Handshake tells clients this daemon serves (HandshakeResponse.streams).
STREAMS: Final = ("ProduceStream", "FetchStream")
#: Requests of one ProduceStream appended and not yet answered (more wait unread: flow control).
PRODUCE_PIPELINE: Final = 16

#: Fetch requests of one FetchStream read ahead of the one being answered.
FETCH_PIPELINE: Final = 4

# (when it was read, the answer, what acknowledges it or None when the answer is final)
_Taken = tuple[float, pb.ProduceResponse, Acknowledgement | None]


class StreamRpcs:
    """ProduceStream and FetchStream; needs BrokerService's broker, metrics, access, stopping and handlers."""

    broker: Broker
    metrics: BrokerMetrics
    access: Access
    stopping: StopSignal
    append_batch: Callable[[pb.ProduceRequest, int | None, int], tuple[pb.ProduceResponse, Acknowledgement]]
    _fetch: Callable[[pb.FetchRequest, Callable[[], object]], Any]
    requester: Callable[[Context], str]

    def _authorize(self, credentials: str | None, rpc: str, request: Any) -> None:
        """Authenticate the stream's ``authorization`` value again, then check ``request`` as ``rpc`` would be."""
        if self.access.enabled:
            principal = self.access.authenticate_bearer(credentials)
            for operation, resource_type, resource in RPC_NEEDS[rpc](request, self.broker):
                self.access.require(principal, operation, resource_type, resource)

    def _stream_error(self, exc: LkstreamError) -> pb.ErrorStatus:
        code = status_for(exc)
        if code is grpc.StatusCode.INTERNAL:
            log.error("request failed: %s", exc)
        self.metrics.count_error(code.name)
        return error_status(exc)

    # -- produce ---------------------------------------------------------------------------------

    async def ProduceStream(
        self, requests: AsyncIterator[pb.ProduceRequest], context: Context
    ) -> AsyncIterator[pb.ProduceResponse]:
        requester = self.requester(context)  # whose auto-create budget a new topic takes from
        async for response in self._serve(
            requests,
            context,
            window=PRODUCE_PIPELINE,
            take=lambda request, credentials: self._append_streamed(request, credentials, requester),
            finish=self._acknowledged,
            drop=_release,
        ):
            yield response

    def _append_streamed(
        self, request: pb.ProduceRequest, credentials: str | None, requester: str
    ) -> _Taken | Awaitable[_Taken]:
        """Append now (in request order, as requests are read); the answer waits for the acknowledgement.

        A topic that does not exist yet is created first, in a worker thread (admin work stays off
        the event loop); the stream reads its next request only after that append.
        """
        started = time.perf_counter()
        try:
            self._authorize(credentials, "Produce", request)
            if not request.record_batch:
                raise InvalidArgumentError("a ProduceStream request carries a record_batch")
            count = self.broker.partitions_for(request.topic)
        except UnknownTopicError:
            return self._append_to_new_topic(started, request, requester)
        except LkstreamError as exc:
            return started, pb.ProduceResponse(error=self._stream_error(exc)), None
        return self._append_counted(started, request, count)

    async def _append_to_new_topic(self, started: float, request: pb.ProduceRequest, requester: str) -> _Taken:
        try:
            count = await ensure_topic(self.broker, request.topic, requester=requester)
        except LkstreamError as exc:
            return started, pb.ProduceResponse(error=self._stream_error(exc)), None
        return self._append_counted(started, request, count)

    def _append_counted(self, started: float, request: pb.ProduceRequest, count: int) -> _Taken:
        try:
            explicit = request.partition if request.HasField("partition") else None
            response, ack = self.append_batch(request, explicit, count)
            return started, response, ack
        except LkstreamError as exc:
            return started, pb.ProduceResponse(error=self._stream_error(exc)), None

    async def _acknowledged(self, taken: _Taken) -> pb.ProduceResponse:
        started, response, ack = taken
        if ack is not None:
            try:
                await ack.wait()
            except LkstreamError as exc:
                response = pb.ProduceResponse(error=self._stream_error(exc))
        self.metrics.observe_produce(time.perf_counter() - started)
        return response

    # -- fetch -----------------------------------------------------------------------------------

    async def FetchStream(
        self, requests: AsyncIterator[pb.FetchRequest], context: Context
    ) -> AsyncIterator[pb.FetchResponse]:
        async for response in self._serve(requests, context, window=FETCH_PIPELINE, take=_keep, finish=self._fetched):
            yield response

    async def _fetched(self, taken: tuple[str | None, pb.FetchRequest]) -> pb.FetchResponse:
        credentials, request = taken
        started = time.perf_counter()
        try:
            self._authorize(credentials, "Fetch", request)
            # A long poll asks again after its wait: nothing that arrived after a revocation is delivered.
            response: pb.FetchResponse = await self._fetch(
                request, lambda: self._authorize(credentials, "Fetch", request)
            )
        except LkstreamError as exc:
            response = pb.FetchResponse(error=self._stream_error(exc))
        self.metrics.observe_fetch(time.perf_counter() - started)
        return response

    # -- the stream skeleton ---------------------------------------------------------------------

    async def _serve(
        self,
        requests: AsyncIterator[Any],
        context: Context,
        *,
        window: int,
        take: Callable[[Any, str | None], Any],
        finish: Callable[[Any], Awaitable[Any]],
        drop: Callable[[Any], None] | None = None,
    ) -> AsyncIterator[Any]:
        """Read requests in a task (``take`` each as it is read), answer them in order (``finish``), until
        the client stops writing or the daemon stops (then: UNAVAILABLE once the requests read are answered).

        ``drop`` gets what was taken but never finished, when the call ends early (the client went away).
        ``take`` gets each request with the stream's ``authorization`` value, checked again per request.
        """
        async with guard(context, self.metrics):
            pipe = _Pipe(window)
            credentials = bearer_header(context.invocation_metadata())
            reader = asyncio.ensure_future(self._read(requests, credentials, take, pipe))
            stop = asyncio.ensure_future(self.stopping.wait())
            # Cancel-safe: the reader awaits before reading or while a topic is created, never between an
            # append and handing it on.
            stop.add_done_callback(lambda _: reader.cancel())
            try:
                while (taken := await pipe.next()) is not None:
                    yield await finish(taken)
                    pipe.window.release()
                if reader.cancelled():
                    raise BrokerClosedError("server is shutting down")
                reader.result()  # a bug in the reader ends the call (UNKNOWN)
            finally:
                reader.cancel()
                stop.cancel()
                if drop is not None:
                    for taken in pipe.drain():
                        drop(taken)

    async def _read(
        self,
        requests: AsyncIterator[Any],
        credentials: str | None,
        take: Callable[[Any, str | None], Any],
        pipe: _Pipe,
    ) -> None:
        try:
            while True:
                await pipe.window.acquire()
                request = await anext(requests, None)
                if request is None:
                    return
                taken = take(request, credentials)
                if not isinstance(taken, tuple):  # it waits for admin work: the next request waits behind it
                    taken = await taken
                pipe.put(taken)
        finally:
            pipe.close()


def _release(taken: _Taken) -> None:
    """An append whose answer will never be sent still gives its in-flight bytes back once acknowledged."""
    ack = taken[2]
    if ack is not None:
        ack.release_when_done()


def _keep(request: pb.FetchRequest, credentials: str | None) -> tuple[str | None, pb.FetchRequest]:
    return credentials, request


class _Pipe:
    """What a stream's reader took, waiting for its writer; at most ``window`` read and unanswered."""

    def __init__(self, window: int) -> None:
        self.window = asyncio.Semaphore(window)
        self._items: deque[Any] = deque()
        self._ready = asyncio.Event()
        self._closed = False

    def put(self, item: Any) -> None:
        self._items.append(item)
        self._ready.set()

    def close(self) -> None:
        self._closed = True
        self._ready.set()

    def drain(self) -> list[Any]:
        """What is left (the call ends early)."""
        items, self._items = list(self._items), deque()
        return items

    async def next(self) -> Any | None:
        """The oldest item not yet answered; None once the reader ended and every item was taken."""
        while not self._items:
            if self._closed:
                return None
            self._ready.clear()
            await self._ready.wait()
        return self._items.popleft()
