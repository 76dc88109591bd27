"""Waiting for data over the daemon (a mixin of :class:`~lkstream.client.remote.RemoteBroker`).

* :meth:`RemoteWaits.wait_for_data` / ``wait_for_data_sync``: the Consumer's wake-up,
  one long-poll Fetch (``max_wait_ms``) per watched partition, answered by the
  daemon when the append lands: nothing polls.
* :meth:`RemoteWaits.subscribe` / ``subscribe_batches``: the daemon pushes batches as
  they are appended; a stream broken by a daemon restart is reopened after the
  last batch delivered.
"""

from __future__ import annotations

import asyncio
import functools
import queue
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from lkstream.broker.partition import DEFAULT_FETCH_BYTES
from lkstream.client.remote_calls import RemoteCalls, fetch_request
from lkstream.client.retry import Retry
from lkstream.errors import InvalidArgumentError
from lkstream.format.batch import span_of_whole_batches
from lkstream.format.codec import Record, decode_batches
from lkstream.storage.log import ReadResult
from lkstream.wire._proto import messaging_pb2 as pb

#: Longest single long-poll Fetch while waiting for data (a longer wait re-asks).
LONG_POLL_S = 10.0


class RemoteWaits(RemoteCalls):
    """Long polls and subscriptions; needs the blocking stub ``_stub`` besides the call plumbing."""

    _stub: Any

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
        return int(response.high_watermark) > offset

    def wait_for_data_sync(self, positions: dict[tuple[str, int], int], timeout: float | None = None) -> bool:
        """Blocking twin of :meth:`wait_for_data` (concurrent long polls as gRPC futures, no threads)."""
        deadline = _deadline(positions, timeout)
        while True:
            wait_s = _wait_slice(deadline)
            answered: queue.SimpleQueue[tuple[Any, int]] = queue.SimpleQueue()
            calls = []
            if self._closed:
                raise InvalidArgumentError("this RemoteBroker is closed")
            for (topic, pid), offset in positions.items():
                call = self._stub.Fetch.future(
                    _wait_request(topic, pid, offset, wait_s), timeout=wait_s + self.timeout, metadata=self._metadata
                )
                call.add_done_callback(functools.partial(_answered, answered, offset))
                calls.append(call)
            try:
                for _ in calls:
                    try:
                        done, offset = answered.get(timeout=wait_s + self.timeout)
                    except queue.Empty:
                        return True  # the calls' own deadlines should have fired: go and look
                    if _arrived(done, offset):
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
    # max_bytes=1: the answer carries at most one batch; the caller only looks at high_watermark.
    request = fetch_request(topic, partition, offset, 1)
    request.max_wait_ms = max(0, int(wait_s * 1000))
    return request


def _deadline(positions: dict[tuple[str, int], int], timeout: float | None) -> float | None:
    if not positions:
        raise InvalidArgumentError("nothing to wait for: no partitions given")
    return None if timeout is None else time.monotonic() + max(0.0, timeout)


def _wait_slice(deadline: float | None) -> float:
    return LONG_POLL_S if deadline is None else max(0.0, min(LONG_POLL_S, deadline - time.monotonic()))


def _answered(answers: queue.SimpleQueue[tuple[Any, int]], offset: int, call: Any) -> None:
    answers.put((call, offset))


def _arrived(call: Any, offset: int) -> bool:
    """Whether a finished long-poll Fetch saw data past ``offset`` (a failed one counts: go and look)."""
    try:
        return int(call.result(timeout=0).high_watermark) > offset
    except (grpc.RpcError, grpc.FutureCancelledError, grpc.FutureTimeoutError):
        return True
