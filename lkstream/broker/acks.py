"""What a produce call holds until it may return: in-flight bytes and durability futures.

Thread-safe where stated. The broker creates one :class:`Acknowledgement` per
produce call; the group-commit thread completes its futures in ``sync`` mode.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import threading

from lkstream.broker.partition import Partition
from lkstream.errors import BackpressureError
from lkstream.storage.log import AppendResult

#: Acknowledgements nobody awaits, awaited in the background (a reference keeps each task alive).
_RELEASING: set[asyncio.Future[None]] = set()


class InflightBytes:
    """Bytes accepted by produce calls and not yet acknowledged. Thread-safe."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.value = 0
        self._lock = threading.Lock()

    def reserve(self, nbytes: int) -> None:
        with self._lock:
            # A lone request larger than the limit is admitted, or it could never succeed.
            if self.value and self.value + nbytes > self.limit:
                raise BackpressureError(self.value + nbytes, self.limit)
            self.value += nbytes

    def release(self, nbytes: int) -> None:
        with self._lock:
            self.value -= nbytes


class Acknowledgement:
    """What one produce call waits for before it may return, and the in-flight bytes it holds.

    Reserves ``reserved`` bytes of :class:`InflightBytes` on creation and gives
    them back once every appended batch is acknowledged (written, or in
    ``sync`` mode fsynced), or at once if the produce fails part-way: used as a
    context manager around the appends, then waited on.
    """

    def __init__(self, inflight: InflightBytes, reserved: int, *, sync: bool) -> None:
        inflight.reserve(reserved)
        self._inflight = inflight
        self._reserved = reserved
        self._sync = sync
        self._futures: list[concurrent.futures.Future[None]] = []
        #: The time a LogAppendTime topic stamped the batch with (Kafka's Produce ``log_append_time_ms``), else -1.
        self.log_append_time_ms = -1

    def __enter__(self) -> Acknowledgement:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is not None:
            self._release()

    def append(self, target: Partition, batch: bytearray, *, owned: bool = False) -> AppendResult:
        """Append ``batch`` to ``target`` (``owned``: see :meth:`Partition.append_batch`)."""
        if not self._sync:
            return target.append_batch(batch, owned=owned)
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        result = target.append_batch(batch, functools.partial(_complete, future), owned=owned)
        self._futures.append(future)
        return result

    async def wait(self) -> None:
        try:
            for future in self._futures:
                if future.done():  # fsynced already: no hop through the loop's self-pipe
                    future.result()
                else:
                    await asyncio.wrap_future(future)
        finally:
            self._release()

    def release_when_done(self) -> None:
        """Give the in-flight bytes back once acknowledged, without waiting here. On the event loop.

        For an append whose answer will never be sent (its connection or stream closed, or the
        request failed part-way): nobody awaits it, but its bytes must still leave the in-flight
        count, or each such produce would shrink ``max_inflight_bytes`` for good. They leave when
        the fsync covers them, as an answered produce's do. Nothing to do once :meth:`wait` returned.
        """
        if not self._reserved:
            return
        if all(future.done() for future in self._futures):
            self._release()
            return
        task = asyncio.ensure_future(self._wait_unobserved())
        _RELEASING.add(task)
        task.add_done_callback(_RELEASING.discard)

    async def _wait_unobserved(self) -> None:
        with contextlib.suppress(Exception):  # a failed fsync has nobody to tell: the answer is never sent
            await self.wait()

    def wait_sync(self) -> None:
        try:
            for future in self._futures:
                future.result()
        finally:
            self._release()

    def _release(self) -> None:
        self._inflight.release(self._reserved)
        self._reserved = 0


def _complete(future: concurrent.futures.Future[None], error: BaseException | None) -> None:
    # A waiter that was cancelled (its connection closed) cancels its future: nobody wants the outcome.
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
