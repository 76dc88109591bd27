"""Requests over one long-lived bidirectional stream (``ProduceStream``, ``FetchStream``), answers in order.

A unary gRPC call costs a call set-up on both ends, about 0.4 ms of a round trip
on the project's 2-core machine; a message each way on an open stream about
0.16 ms (docs/benchmarks-notes.md, "The cost of a call"). :class:`OrderedStream` keeps
one such call open on one event loop: :meth:`OrderedStream.send` writes a request
and returns the future of its answer, so a caller may have several requests in
flight; one reader task hands the answers, which the daemon sends in request
order, to the futures in the same order.

When the call ends (the daemon stopped, the connection broke, a deadline
passed), every unanswered request fails with the call's status and the stream
is done: the owner opens a new one for the next request. Whether a failed
request is sent again is the owner's decision (:mod:`lkstream.client.retry`).
The daemon also ends a stream that stayed idle for its ``grpc_idle_timeout_s``
(so the connection can close): that end is OK, after every request it read was
answered, so a request sent meanwhile was never read, and one whose write failed
because the call had ended was never sent: either is sent again at once on a new
stream (:attr:`StreamClosed.unread`), neither lost nor duplicated.

:class:`LoopThread` runs one event loop in a daemon thread: the async methods of the
remote client keep their streams there, whatever loop their caller runs on, and so does
a blocking fetch. The blocking produce methods use the synchronous channel's stream
instead (:mod:`lkstream.client.remote.sync`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Final, TypeVar

import grpc

from lkstream.client.remote.calls import RemoteCalls
from lkstream.client.retry import Attempts, Retry
from lkstream.errors import InvalidArgumentError
from lkstream.wire.contract import ERROR_CLASS_KEY
from lkstream.wire.streams import StreamAnswer

T = TypeVar("T")

#: The streams this client can use, each with its unary twin (used with a daemon that does not name it).
STREAM_RPCS: Final = {"ProduceStream": "Produce", "FetchStream": "Fetch"}
#: Seconds a cancelled stream gets to finish on its event loop.
_CANCEL_GRACE_S: Final = 1.0
#: Seconds a loop thread gets to finish its tasks when it is stopped.
_STOP_GRACE_S: Final = 5.0


class StreamClosed(grpc.RpcError):
    """The stream ended or failed on this side; shaped like the UNAVAILABLE failure of a call."""

    def __init__(
        self, details: str, code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE, *, unread: bool = False
    ) -> None:
        super().__init__(details)
        self._code = code
        self._details = details
        #: The daemon ended the stream with OK having answered every request it read: the unanswered were unread.
        self.unread = unread

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> Any:  # pairs, as grpc gives them (its stubs say otherwise)
        return ()


class OrderedStream:
    """One bidirectional call on the running event loop; answers are matched to requests in order.

    ``open_call()`` starts the call (e.g. ``stub.ProduceStream(metadata=...)``). An answer
    whose ``error`` field is set fails its own request only, with a
    :class:`~lkstream.wire.streams.StreamAnswer`. Not thread-safe: one event loop.
    """

    def __init__(self, open_call: Callable[[], Any]) -> None:
        self._loop = asyncio.get_running_loop()
        self._call = open_call()
        self._pending: deque[tuple[asyncio.Future[Any], asyncio.TimerHandle]] = deque()
        self._write = asyncio.Lock()  # grpc.aio allows one write in progress at a time
        self.failure: grpc.RpcError | None = None
        self._unwritable = False  # a write failed: the call ended, the reader is learning how
        self._reader = asyncio.ensure_future(self._read())

    @property
    def usable(self) -> bool:
        return self.failure is None and not self._unwritable

    async def send(self, request: Any, timeout: float) -> asyncio.Future[Any]:
        """Write ``request``; the returned future resolves to its answer or fails with its error.

        Without an answer within ``timeout`` seconds the stream is given up
        (DEADLINE_EXCEEDED for every unanswered request).
        """
        answer: asyncio.Future[Any] = self._loop.create_future()
        async with self._write:
            if self.failure is not None:
                raise self.failure
            self._pending.append((answer, self._loop.call_later(timeout, self._expire, answer, timeout)))
            try:
                await self._call.write(request)
            except grpc.RpcError as exc:
                if from_daemon(exc):
                    self._fail(exc)
                else:
                    self._unsent(answer, exc)
            except (asyncio.InvalidStateError, grpc.aio.UsageError) as exc:
                self._unsent(answer, exc)
        return answer

    def _unsent(self, answer: asyncio.Future[Any], error: Exception) -> None:
        """The call ended (the daemon ended an idle stream, or the connection broke) before ``answer``'s
        request was written: that request was not sent, so it fails as unread and is sent again at once on
        a new stream. The requests written before it get what the reader learns of the call's end.
        """
        self._unwritable = True
        for entry in self._pending:
            if entry[0] is answer:
                entry[1].cancel()
                self._pending.remove(entry)
                break
        if not answer.done():
            answer.set_exception(StreamClosed(f"the stream ended before this request was sent: {error}", unread=True))

    def _expire(self, answer: asyncio.Future[Any], timeout: float) -> None:
        if not answer.done():
            self._fail(StreamClosed(f"no answer within {timeout:g} s", grpc.StatusCode.DEADLINE_EXCEEDED))

    async def _read(self) -> None:
        try:
            while True:
                response = await self._call.read()
                if response is grpc.aio.EOF:
                    raise StreamClosed("the daemon ended the stream", unread=True)
                if not self._pending:
                    raise StreamClosed("an answer to no request (protocol error)", grpc.StatusCode.INTERNAL)
                answer, timer = self._pending.popleft()
                timer.cancel()
                if answer.done():
                    continue  # its caller gave up (cancelled)
                if response.HasField("error"):
                    answer.set_exception(StreamAnswer(response.error))
                else:
                    answer.set_result(response)
        except grpc.RpcError as exc:
            if exc.code() is grpc.StatusCode.INTERNAL and not from_daemon(exc):
                # grpc.aio's own status when a write raced the call's end: it replaces the status the call
                # ended with, so all that is known is that the call ended, as when a connection breaks.
                exc = StreamClosed(f"the stream ended while a request was written: {exc.details()}")
            self._fail(exc)
        except asyncio.CancelledError:
            self._fail(StreamClosed("the stream was closed", grpc.StatusCode.CANCELLED), cancel=False)
            # End the call cleanly while this loop still runs: it may be closing (the end of an
            # asyncio.run), and a call finishing after its loop closed makes gRPC log "Event loop is
            # closed". Half-closing lets the daemon end the stream with OK.
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self._finish(), _CANCEL_GRACE_S)
            self._call.cancel()
            raise

    async def _finish(self) -> None:
        await self._call.done_writing()
        while await self._call.read() is not grpc.aio.EOF:
            pass

    def _fail(self, error: grpc.RpcError, *, cancel: bool = True) -> None:
        if self.failure is None:
            self.failure = error
        while self._pending:
            answer, timer = self._pending.popleft()
            timer.cancel()
            if not answer.done():
                answer.set_exception(self.failure)
        if cancel:
            self._call.cancel()

    def close(self) -> None:
        """End the call (from its loop); unanswered requests fail with CANCELLED."""
        self._reader.cancel()

    async def aclose(self) -> None:
        """End the call and wait until it ended (at most a second)."""
        self._reader.cancel()
        await asyncio.wait({self._reader}, timeout=_CANCEL_GRACE_S)


def from_daemon(exc: grpc.RpcError) -> bool:
    """Whether ``exc`` is a status the daemon sent (it names an error class), not one grpc made on this side."""
    trailing: Any = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
    return bool(dict(trailing or ()).get(ERROR_CLASS_KEY))


class LoopThread:
    """An event loop in a daemon thread, started on first use, for the streams of one client."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop (started now if it was not running)."""
        return self._loop or self._start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop and block until it returns (or raises)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    async def run_async(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Await ``coroutine`` run on the loop (directly when the caller is on it)."""
        loop = self.loop
        if asyncio.get_running_loop() is loop:
            return await coroutine
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, loop))

    def _start(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=loop.run_forever, name=self._name, daemon=True)
                self._thread.start()
                self._loop = loop
            return self._loop

    def stop(self, before: Callable[[], Coroutine[Any, Any, None]] | None = None) -> None:
        """Run ``before()`` on the loop (e.g. closing its channels), then stop the loop and its thread."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        if thread is threading.current_thread():  # close() from a callback on the loop itself
            loop.call_soon(loop.stop)
            return
        if before is not None:
            # Closing is best effort; the loop stops anyway.
            with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
                asyncio.run_coroutine_threadsafe(before(), loop).result(_STOP_GRACE_S)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(_STOP_GRACE_S)
        if not thread.is_alive():
            loop.close()


class StreamedCalls(RemoteCalls):
    """Mixin of RemoteBroker: requests sent on the daemon's streams, retried as their unary twins are.

    The streams live on the client's own loop thread (:class:`LoopThread`), whatever
    loop or thread the caller is on: a gRPC call must end on a running loop, and a
    caller's loop may end any time (each ``asyncio.run``), while the client's loop
    lives as long as the client. The attributes below are set by RemoteBroker's
    constructor. A stream the daemon's Handshake does not name (an older daemon) is
    replaced by its unary twin, on the caller's loop.
    """

    _streams: dict[str, OrderedStream]
    _unstreamed: set[str]
    _sync_loop: LoopThread

    async def _astreamed(self, name: str, requests: Sequence[Any], retry: Retry) -> list[Any]:
        """Answers to ``requests``, all sent on the ``name`` stream before the first answer is awaited.

        Each request is retried on its own like a call of the stream's unary twin of
        kind ``retry``; ``requests`` must not depend on each other's order (callers
        send one partition's requests one after the other).
        """
        if self._closed:
            raise InvalidArgumentError("this RemoteBroker is closed")
        if name in self._unstreamed:
            return [await self._acall(STREAM_RPCS[name], request, retry=retry) for request in requests]
        return await self._sync_loop.run_async(self._streamed(name, requests, retry))

    def _stream(self, name: str) -> OrderedStream:
        stream = self._streams.get(name)
        if stream is None or not stream.usable:
            stub = self._astub()
            metadata = self._metadata
            stream = self._streams[name] = OrderedStream(lambda: getattr(stub, name)(metadata=metadata))
        return stream

    async def _streamed(self, name: str, requests: Sequence[Any], retry: Retry) -> list[Any]:
        sent: list[asyncio.Future[Any]] = []
        try:
            stream = self._stream(name)
            for request in requests:
                sent.append(await stream.send(request, self.timeout))
        except grpc.RpcError:
            pass  # the stream broke: the rest go one by one, with retries
        return [
            await self._streamed_one(name, request, retry, sent[i] if i < len(sent) else None)
            for i, request in enumerate(requests)
        ]

    async def _streamed_one(
        self, name: str, request: Any, retry: Retry, answer: asyncio.Future[Any] | None = None
    ) -> Any:
        attempts = self._attempts(retry)
        while True:
            attempts.count += 1
            try:
                if answer is None:
                    answer = await self._stream(name).send(request, self.timeout)
                response = await answer
            except grpc.RpcError as exc:
                answer = None
                await asyncio.sleep(self._retry_after(exc, attempts))
                continue
            self._back()
            return response

    def _retry_after(self, exc: grpc.RpcError, attempts: Attempts) -> float:
        """Seconds before the next attempt of a streamed request that failed with ``exc`` (0: at once).

        Raises the mapped error when it is not retried (any more).
        """
        if isinstance(exc, StreamClosed) and exc.unread and attempts.count == 1:
            return 0.0  # the daemon ended an idle stream as this was sent: never read, send it now
        delay = attempts.delay(exc)
        if delay is None or self._closed:
            raise self._gave_up(exc, attempts.count) from None
        self._lost(exc, delay)
        return delay

    def _blocking(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on this client's own event loop thread (a blocking fetch shares its streams).

        A 1 MiB fetch costs the caller more CPU on the synchronous channel than through this
        hop (docs/benchmarks-notes.md, "Blocking calls without the hop"), so fetches stay here.
        """
        if self._closed:
            coroutine.close()
            raise InvalidArgumentError("this RemoteBroker is closed")
        return self._sync_loop.run(coroutine)

    def _close_streams(self) -> None:
        """Close the streams and the channel of the client's loop, then stop its thread."""
        self._sync_loop.stop(before=self._close_loop)

    async def _close_loop(self) -> None:
        """Close this loop's streams and channel, waiting until they ended (the loop stops next)."""
        streams, self._streams = self._streams, {}
        for stream in streams.values():
            await stream.aclose()
        entry = self._aio.pop(asyncio.get_running_loop(), None)
        if entry is not None:
            await entry[0].close()
        # gRPC finishes a call in tasks of its own: let them end before the loop stops.
        others = asyncio.all_tasks() - {asyncio.current_task()}
        if others:
            await asyncio.wait(others, timeout=_CANCEL_GRACE_S)
