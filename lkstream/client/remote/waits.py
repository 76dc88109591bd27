"""Waiting for data over the daemon (a mixin of :class:`~lkstream.client.remote.broker.RemoteBroker`).

* :meth:`RemoteWaits.wait_for_data` / ``wait_for_data_sync``: the Consumer's wake-up,
  one long-poll Fetch (``max_wait_ms``) per watched partition, answered by the
  daemon when the append lands: nothing polls. The answer carries the new batches;
  they are kept ("parked", briefly and bounded) for the fetch that follows the
  wake-up, which then needs no second round trip.
* :meth:`RemoteWaits.subscribe` / ``subscribe_batches``: the daemon pushes batches as
  they are appended; a stream broken by a daemon restart is reopened after the
  last batch delivered.
"""

from __future__ import annotations

import asyncio
import functools
import queue
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from lkstream.client.remote.calls import DEFAULT_FETCH_BYTES, RemoteCalls, fetch_request
from lkstream.client.retry import Retry
from lkstream.errors import InvalidArgumentError
from lkstream.format.batch import span_of_whole_batches
from lkstream.format.codec import Record, decode_batches
from lkstream.storage.log import ReadResult
from lkstream.wire._proto import messaging_pb2 as pb

#: Longest single long-poll Fetch while waiting for data (a longer wait re-asks).
LONG_POLL_S = 10.0
#: How long the batches a wake-up brought are kept for the next fetch at that offset.
PARK_S = 0.5
#: Bytes of such batches kept at most (over all partitions); a wake-up beyond it parks nothing.
PARKED_BYTES_MAX = 8 * 1024 * 1024


class RemoteWaits(RemoteCalls):
    """Long polls and subscriptions; needs the blocking stub ``_stub`` besides the call plumbing."""

    _stub: Any
    #: (topic, partition) -> (monotonic time parked, offset asked, what the long poll answered)
    _parked: dict[tuple[str, int], tuple[float, int, ReadResult]]
    _parked_lock: threading.Lock

    def _park(self, topic: str, partition: int, offset: int, response: pb.FetchResponse) -> None:
        """Keep a long poll's answer for the fetch the wake-up leads to (when it holds new batches)."""
        data = response.record_batches
        if not data or int(response.high_watermark) <= offset:
            return
        with self._parked_lock:
            now = time.monotonic()
            for key in [k for k, (at, _, _) in self._parked.items() if now - at > PARK_S]:
                del self._parked[key]
            if sum(len(r.data) for _, _, r in self._parked.values()) + len(data) > PARKED_BYTES_MAX:
                return
            result = ReadResult(data, int(response.log_start_offset), int(response.high_watermark))
            self._parked[(topic, partition)] = (now, offset, result)

    def _parked_read(self, topic: str, partition: int, offset: int, max_bytes: int) -> ReadResult | None:
        """The parked answer for a fetch of ``topic[partition]`` at ``offset``, if fresh and within ``max_bytes``."""
        if not self._parked:
            return None
        with self._parked_lock:
            entry = self._parked.pop((topic, partition), None)
        if entry is None:
            return None
        at, asked, result = entry
        if asked != offset or time.monotonic() - at > PARK_S or len(result.data) > max(max_bytes, 1):
            return None
        return result

    async def wait_for_data(self, positions: dict[tuple[str, int], int], timeout: float | None = None) -> bool:
        """Wait until any ``(topic, partition)`` has a record at or past its offset; False on timeout.

        One long-poll Fetch (``max_wait_ms``) per partition, concurrently: the daemon
        answers when the append lands, so nothing polls. A failed wait returns True
        ("go and look"): the caller's next fetch retries or raises the real error.
        """
        deadline = _deadline(positions, timeout)
        while True:
            wait_s = _wait_slice(deadline)
            stub = self._astub()
            tasks = [
                asyncio.ensure_future(self._arrival(stub, topic, pid, offset, wait_s))
                for (topic, pid), offset in positions.items()
            ]
            try:
                pending = set(tasks)
                while pending:
                    done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    if any(task.result() for task in done):
                        return True
            finally:
                for task in tasks:
                    task.cancel()
            if deadline is not None and time.monotonic() >= deadline:
                return False

    async def _arrival(self, stub: Any, topic: str, pid: int, offset: int, wait_s: float) -> bool:
        request = _wait_request(topic, pid, offset, wait_s)
        try:
            response = await stub.Fetch(request, timeout=wait_s + self.timeout, metadata=self._metadata)
        except grpc.RpcError:
            return True
        self._park(topic, pid, offset, response)
        return int(response.high_watermark) > offset

    def wait_for_data_sync(self, positions: dict[tuple[str, int], int], timeout: float | None = None) -> bool:
        """Blocking twin of :meth:`wait_for_data` (concurrent long polls as gRPC futures, no threads)."""
        deadline = _deadline(positions, timeout)
        while True:
            wait_s = _wait_slice(deadline)
            answered: queue.SimpleQueue[tuple[Any, tuple[str, int, int]]] = queue.SimpleQueue()
            calls = []
            if self._closed:
                raise InvalidArgumentError("this RemoteBroker is closed")
            for (topic, pid), offset in positions.items():
                call = self._stub.Fetch.future(
                    _wait_request(topic, pid, offset, wait_s), timeout=wait_s + self.timeout, metadata=self._metadata
                )
                call.add_done_callback(functools.partial(_answered, answered, (topic, pid, offset)))
                calls.append(call)
            try:
                for _ in calls:
                    try:
                        done, (topic, pid, offset) = answered.get(timeout=wait_s + self.timeout)
                    except queue.Empty:
                        return True  # the calls' own deadlines should have fired: go and look
                    response = _answer(done)
                    if response is None:
                        return True  # a failed wait: go and look (the fetch reports the real error)
                    self._park(topic, pid, offset, response)
                    if int(response.high_watermark) > offset:
                        return True
            finally:
                for call in calls:
                    call.cancel()
            if deadline is not None and time.monotonic() >= deadline:
                return False

    # -- subscribe -----------------------------------------------------------------------------------

    async def subscribe(self, topic: str, partition: int, offset: int) -> AsyncIterator[Record]:
        """Records from ``offset`` on, then each new one as it is appended, until the caller stops.

        Rides :meth:`subscribe_batches`: the daemon pushes whole batches as they
        are appended and this client decodes them.
        """
        async for result in self.subscribe_batches(topic, partition, offset):
            for record in decode_batches(result.data, topic, partition, offset):
                yield record
                offset = record.offset + 1

    async def subscribe_batches(
        self, topic: str, partition: int, offset: int, max_bytes: int = DEFAULT_FETCH_BYTES
    ) -> AsyncIterator[ReadResult]:
        """Raw whole batches from ``offset`` on, pushed by the daemon as they are appended.

        The first batch may start before ``offset`` (decode with ``min_offset``).
        gRPC flow control keeps the daemon at most a window ahead of the caller,
        so reading and decoding overlap without unbounded buffering. When the
        stream breaks with ``UNAVAILABLE`` (the daemon restarts), it is opened
        again after a backoff, from the offset after the last batch delivered,
        for up to ``retry_timeout_s`` per outage: nothing is skipped or repeated.
        """
        attempts = self._attempts(Retry.SAFE)
        while True:
            attempts.count += 1
            call = self._astub().SubscribeBatches(
                fetch_request(topic, partition, offset, max_bytes), metadata=self._metadata
            )
            try:
                async for response in call:
                    data = bytes(response.record_batches)
                    offset = max(offset, span_of_whole_batches(data, offset)[1])
                    if attempts.count > 1:
                        attempts.reset()
                        self._back()
                    yield ReadResult(data, response.log_start_offset, response.high_watermark)
                return
            except grpc.RpcError as exc:
                delay = attempts.delay(exc)
                if delay is None or self._closed:
                    raise self._gave_up(exc, attempts.count) from None
                self._lost(exc, delay)
            finally:
                call.cancel()
            await asyncio.sleep(delay)


def _wait_request(topic: str, partition: int, offset: int, wait_s: float) -> pb.FetchRequest:
    # The answer brings the new batches along (parked for the fetch that follows the wake-up).
    request = fetch_request(topic, partition, offset, DEFAULT_FETCH_BYTES)
    request.max_wait_ms = max(0, int(wait_s * 1000))
    return request


def _deadline(positions: dict[tuple[str, int], int], timeout: float | None) -> float | None:
    if not positions:
        raise InvalidArgumentError("nothing to wait for: no partitions given")
    return None if timeout is None else time.monotonic() + max(0.0, timeout)


def _wait_slice(deadline: float | None) -> float:
    return LONG_POLL_S if deadline is None else max(0.0, min(LONG_POLL_S, deadline - time.monotonic()))


def _answered(
    answers: queue.SimpleQueue[tuple[Any, tuple[str, int, int]]], asked: tuple[str, int, int], call: Any
) -> None:
    answers.put((call, asked))


def _answer(call: Any) -> pb.FetchResponse | None:
    """What a finished long-poll Fetch answered; None when it failed."""
    try:
        response: pb.FetchResponse = call.result(timeout=0)
    except (grpc.RpcError, grpc.FutureCancelledError, grpc.FutureTimeoutError):
        return None
    return response
