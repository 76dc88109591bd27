"""Blocking calls on the daemon's streams from the caller's own thread (the synchronous gRPC channel).

The blocking produce methods of the remote client (``produce_many_sync``,
``produce_batch_sync``) used to run the async code on the client's event-loop thread: a
hop from the caller's thread to that thread and back, two wake-ups and two GIL
hand-overs, about half of a small call's client CPU (docs/benchmarks-notes.md,
"Blocking calls without the hop"). A blocking ``fetch`` keeps the hop: its 1 MiB answers cost the caller
more CPU on this channel than there (measured in the same place); the class serves any
stream, but only ``ProduceStream`` uses it.
:class:`SyncStream` is the same ordered stream as
:class:`~lkstream.client.remote.streams.OrderedStream`, on the synchronous channel:

* a caller writes its request into the call's request iterator (gRPC sends it from a
  thread of its own, which blocks in that iterator between requests) and then reads
  answers itself, in its own thread;
* many threads may share one stream: requests are queued in order under a lock, and
  the thread that holds the read lock reads answers in order, handing each to the
  request it belongs to, until its own has come; the next reader finds its answer
  waiting or reads on;
* an answer whose ``error`` is set fails its own request only
  (:class:`~lkstream.wire.streams.StreamAnswer`); when the call ends every unanswered
  request fails with its status, and the daemon's OK end of an idle stream fails them as
  unread (sent again at once on a new stream, as on the async path);
* a request without an answer within its timeout gives up the stream: one watchdog
  thread per client (:class:`SyncStreams`, ticking every second at most) cancels it, and
  every unanswered request fails with DEADLINE_EXCEEDED.

Retries and error mapping are the owner's (:class:`~lkstream.client.remote.streams.StreamedCalls`).
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final

import grpc

from lkstream.client.remote.streams import STREAM_RPCS, StreamClosed, StreamedCalls, from_daemon
from lkstream.client.retry import Retry
from lkstream.errors import InvalidArgumentError
from lkstream.wire.streams import StreamAnswer

#: Longest wait of the watchdog between two looks at the streams' oldest requests.
_WATCH_TICK_S: Final = 1.0
_END: Final = object()  # ends the request iterator


class _Slot:
    """One request's place in the stream: its deadline, then its answer or its error."""

    __slots__ = ("deadline", "done", "error", "response")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.done = False
        self.response: Any = None
        self.error: grpc.RpcError | None = None

    def answer(self, response: Any) -> None:
        if response.HasField("error"):
            self.fail(StreamAnswer(response.error))
        else:
            self.response, self.done = response, True

    def fail(self, error: grpc.RpcError) -> None:
        self.error, self.done = error, True


class SyncStream:
    """One bidirectional call on the synchronous channel, shared by threads; answers matched in order.

    ``open_call(requests)`` starts the call (e.g. ``stub.ProduceStream(requests, metadata=...)``).
    """

    def __init__(self, open_call: Callable[[Iterator[Any]], Any]) -> None:
        self._requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._pending: deque[_Slot] = deque()
        self._send_lock = threading.Lock()  # keeps requests and their slots in one order
        self._read_lock = threading.Lock()  # one reader of answers at a time
        self.failure: grpc.RpcError | None = None
        self._expired = False
        self._call = open_call(self._iterate())

    @property
    def usable(self) -> bool:
        return self.failure is None

    def _iterate(self) -> Iterator[Any]:
        while (request := self._requests.get()) is not _END:
            yield request

    def send(self, request: Any, timeout: float) -> _Slot:
        """Queue ``request`` for sending; :meth:`wait` on the returned slot gives its answer. Any thread."""
        slot = _Slot(time.monotonic() + timeout)
        with self._send_lock:
            if self.failure is not None:
                raise self.failure
            self._pending.append(slot)
            self._requests.put(request)
        return slot

    def wait(self, slot: _Slot) -> Any:
        """The answer to ``slot``'s request (or raise its error), reading answers in this thread."""
        with self._read_lock:
            while not slot.done:
                self._read_one()
        if slot.error is not None:
            raise slot.error
        return slot.response

    def _read_one(self) -> None:
        try:
            response = next(self._call)
        except StopIteration:
            self._fail(StreamClosed("the daemon ended the stream", unread=True))
            return
        except grpc.RpcError as exc:
            self._fail(self._ended(exc))
            return
        with self._send_lock:
            head = self._pending.popleft() if self._pending else None
        if head is None:
            self._fail(StreamClosed("an answer to no request (protocol error)", grpc.StatusCode.INTERNAL))
        else:
            head.answer(response)

    def _ended(self, exc: grpc.RpcError) -> grpc.RpcError:
        """What the unanswered requests fail with when the call ended with ``exc``."""
        if self._expired:
            return self.failure or StreamClosed("no answer in time", grpc.StatusCode.DEADLINE_EXCEEDED)
        if exc.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.CANCELLED) and not from_daemon(exc):
            # The call ended on this side (closed, or a send raced its end): all that is known is that it ended.
            return StreamClosed(f"the stream ended: {exc.details()}")
        return exc

    def _fail(self, error: grpc.RpcError) -> None:
        with self._send_lock:
            if self.failure is None:
                self.failure = error
                self._requests.put(_END)  # gRPC's sending thread leaves the iterator and ends
            while self._pending:
                self._pending.popleft().fail(self.failure)
        self._call.cancel()

    def expire(self, now: float) -> None:
        """Give the stream up when its oldest unanswered request is past its deadline (the watchdog's tick)."""
        with self._send_lock:
            overdue = bool(self._pending) and self._pending[0].deadline <= now and self.failure is None
            if overdue:
                self._expired = True
        if overdue:
            self._fail(StreamClosed("no answer in time", grpc.StatusCode.DEADLINE_EXCEEDED))

    def close(self) -> None:
        """End the call; unanswered requests fail (their callers see the stream closed)."""
        self._fail(StreamClosed("the stream was closed", grpc.StatusCode.CANCELLED))


class SyncStreams:
    """A client's synchronous streams by name, opened on first use, and the watchdog that expires them."""

    def __init__(self, open_call: Callable[[str, Iterator[Any]], Any], name: str) -> None:
        self._open_call = open_call
        self._name = name
        self._lock = threading.Lock()
        self._streams: dict[str, SyncStream] = {}
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None
        self._tick = _WATCH_TICK_S

    def get(self, rpc: str, timeout: float) -> SyncStream:
        """The open ``rpc`` stream (a new one when there is none or the last one failed)."""
        stream = self._streams.get(rpc)
        if stream is not None and stream.usable:
            return stream
        with self._lock:
            if self._stop.is_set():
                raise StreamClosed("the client is closed", grpc.StatusCode.CANCELLED)
            stream = self._streams.get(rpc)
            if stream is None or not stream.usable:
                stream = self._streams[rpc] = SyncStream(lambda requests: self._open_call(rpc, requests))
            if self._watchdog is None:
                self._tick = min(_WATCH_TICK_S, max(0.01, timeout / 10))
                self._watchdog = threading.Thread(target=self._watch, name=f"{self._name}-watchdog", daemon=True)
                self._watchdog.start()
            return stream

    def _watch(self) -> None:
        while not self._stop.wait(self._tick):
            now = time.monotonic()
            for stream in list(self._streams.values()):
                stream.expire(now)

    def close(self) -> None:
        """Close every stream and stop the watchdog (idempotent)."""
        with self._lock:
            self._stop.set()
            streams, self._streams = list(self._streams.values()), {}
            watchdog, self._watchdog = self._watchdog, None
        for stream in streams:
            with contextlib.suppress(Exception):
                stream.close()
        if watchdog is not None and watchdog is not threading.current_thread():
            watchdog.join()


class SyncStreamedCalls(StreamedCalls):
    """Mixin of RemoteBroker: the blocking twin of :meth:`StreamedCalls._astreamed`, in the caller's thread."""

    _sync_streams: SyncStreams
    _stub: Any

    def _streamed_sync(self, name: str, requests: Sequence[Any], retry: Retry) -> list[Any]:
        """Answers to ``requests``, all sent on the ``name`` stream before the first answer is awaited.

        Retried, and replaced by the unary twin for an older daemon, as
        :meth:`~lkstream.client.remote.streams.StreamedCalls._astreamed` is.
        """
        pending = [self._send_sync(name, request, retry) for request in requests]
        return [answer.result() for answer in pending]

    def _send_sync(self, name: str, request: Any, retry: Retry) -> SentRequest:
        """Send ``request`` on the ``name`` stream now; its :meth:`SentRequest.result` waits for the answer."""
        if self._closed:
            raise InvalidArgumentError("this RemoteBroker is closed")
        sent = None
        if name not in self._unstreamed:
            with contextlib.suppress(grpc.RpcError):  # the stream broke: result() sends it again, with retries
                stream = self._sync_streams.get(name, self.timeout)
                sent = (stream, stream.send(request, self.timeout))
        return SentRequest(self, name, request, retry, sent)

    def _streamed_one_sync(
        self, name: str, request: Any, retry: Retry, sent: tuple[SyncStream, _Slot] | None = None
    ) -> Any:
        if name in self._unstreamed:
            return self._call(getattr(self._stub, STREAM_RPCS[name]), request, retry=retry)
        attempts = self._attempts(retry)
        while True:
            attempts.count += 1
            try:
                if sent is None:
                    stream = self._sync_streams.get(name, self.timeout)
                    sent = (stream, stream.send(request, self.timeout))
                response = sent[0].wait(sent[1])
            except grpc.RpcError as exc:
                sent = None
                time.sleep(self._retry_after(exc, attempts))
                continue
            self._back()
            return response


class SentRequest:
    """A request sent on a synchronous stream (or about to be retried); :meth:`result` waits for its answer."""

    __slots__ = ("_calls", "_name", "_request", "_retry", "_sent")

    def __init__(
        self,
        calls: SyncStreamedCalls,
        name: str,
        request: Any,
        retry: Retry,
        sent: tuple[SyncStream, _Slot] | None,
    ) -> None:
        self._calls, self._name, self._request, self._retry, self._sent = calls, name, request, retry, sent

    def result(self) -> Any:
        """The answer, read in this thread; retried as the stream's unary twin would be (call once)."""
        return self._calls._streamed_one_sync(self._name, self._request, self._retry, self._sent)
