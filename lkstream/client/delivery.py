"""Delivery handles: what :meth:`Producer.send` returns instead of a future per record.

A :class:`Batch` gathers the records sealed together for one ``(topic, partition)`` slot (a
produce call carries one batch, or several that waited for the call before) and learns its outcome once:
the ``(partition, offset)`` of every record, or the error that failed them all. A handle
(:class:`Delivery` for the asyncio face, :class:`SyncDelivery` for the blocking one) is
just that batch and the record's index in it: no future, no event, no lock per record.
The one thing a batch waits on is created only when somebody waits: an ``asyncio.Future``
the first time a :class:`Delivery` of it is awaited (the asyncio face), a
``threading.Event`` per batch (the blocking face).

Why (docs/benchmarks-notes.md, "`Producer.send` and the collector"): an ``asyncio.Future`` per record cost about 0.35 us
(``get_running_loop`` and ``create_future``), and the futures, alive for the linger time,
were promoted by the garbage collector until full collections walked the heap: 24-26% of
a ``send`` loop's time. A handle the caller drops is freed at once by its reference count.

The handles read like the futures they replace: ``await handle`` (the asyncio face),
``result()``, ``exception()``, ``done()``, ``add_done_callback(fn)`` (``fn(handle)``:
scheduled on the event loop for :class:`Delivery`, as asyncio does; run by the thread that
completes the batch, or at once when it is done, for :class:`SyncDelivery`, as
``concurrent.futures`` does). A sent record cannot be withdrawn: ``cancel()`` returns False.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Generator, Sequence
from typing import Any

log = logging.getLogger("lkstream.producer")

Result = tuple[int, int]
Slot = tuple[str, int | None]


class Batch:
    """The records sealed together for one ``(topic, partition)`` slot, and their outcome.

    ``records`` holds items exactly as ``produce_many`` takes them. The asyncio face's
    batches belong to one event loop (``loop``); the blocking face's have ``event`` and
    are completed under ``lock`` (the producer's), which callback registration also takes.
    """

    __slots__ = (
        "callbacks",
        "done",
        "error",
        "event",
        "first",
        "future",
        "lock",
        "loop",
        "nbytes",
        "records",
        "results",
        "slot",
    )

    def __init__(
        self,
        slot: Slot,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        lock: threading.Lock | None = None,
    ) -> None:
        self.slot = slot
        self.records: list[Any] = []
        self.nbytes = 0
        self.loop = loop
        self.lock = lock
        self.event = None if lock is None else threading.Event()
        self.future: asyncio.Future[None] | None = None
        self.callbacks: list[tuple[Callable[[Any], object], Any]] = []
        self.done = False
        self.results: Sequence[Result] | None = None
        self.first = 0  # where this batch's records start in ``results`` (a call may carry several batches)
        self.error: BaseException | None = None

    def succeed(self, results: Sequence[Result], first: int = 0) -> None:
        """Record the outcome: this batch's records are ``results[first:first + len(records)]``."""
        self.first = first
        self._finish(results, None)

    def fail(self, error: BaseException) -> None:
        self._finish(None, error)

    def _finish(self, results: Sequence[Result] | None, error: BaseException | None) -> None:
        if self.lock is None:  # the asyncio face: on the batch's loop
            self.results, self.error, self.done = results, error, True
            if self.future is not None and not self.future.done():
                self.future.set_result(None)
            callbacks, self.callbacks = self.callbacks, []
            for fn, handle in callbacks:
                self.loop.call_soon(fn, handle)  # type: ignore[union-attr]
            return
        with self.lock:
            self.results, self.error, self.done = results, error, True
            callbacks, self.callbacks = self.callbacks, []
        assert self.event is not None
        self.event.set()
        for fn, handle in callbacks:
            try:
                fn(handle)
            except Exception:  # as concurrent.futures does: one bad callback must not stop the others
                log.exception("a delivery callback raised")

    def outcome(self, index: int) -> Result:
        """Record ``index``'s ``(partition, offset)``, or the batch's error raised."""
        if self.error is not None:
            raise self.error
        assert self.results is not None
        return self.results[self.first + index]

    def wait(self) -> asyncio.Future[None]:
        """The asyncio face: a future done when the batch is (one per batch, made on first use)."""
        if self.future is None:
            assert self.loop is not None
            self.future = self.loop.create_future()
            if self.done:
                self.future.set_result(None)
        return self.future


class _Handle:
    __slots__ = ("_batch", "_index")

    def __init__(self, batch: Batch, index: int) -> None:
        self._batch = batch
        self._index = index

    def done(self) -> bool:
        """Whether the record was acknowledged or failed."""
        return self._batch.done

    def cancelled(self) -> bool:
        """Always False: a record handed to the producer is sent."""
        return False

    def cancel(self) -> bool:
        """A sent record cannot be withdrawn: returns False, as for a running ``concurrent.futures.Future``."""
        return False

    def __repr__(self) -> str:
        batch = self._batch
        state = "pending" if not batch.done else ("failed" if batch.error is not None else "acknowledged")
        return f"<{type(self).__name__} {batch.slot[0]!r} #{self._index} {state}>"


class Delivery(_Handle):
    """One record sent with :meth:`Producer.send`: awaitable, resolving to its ``(partition, offset)``."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, Result]:
        batch = self._batch
        if not batch.done:
            yield from batch.wait().__await__()
        return batch.outcome(self._index)

    def result(self) -> Result:
        """``(partition, offset)``; raises the error that failed the record, or ``InvalidStateError`` if pending."""
        if not self._batch.done:
            raise asyncio.InvalidStateError("the record is not acknowledged yet")
        return self._batch.outcome(self._index)

    def exception(self) -> BaseException | None:
        """The error that failed the record, None if it was acknowledged; ``InvalidStateError`` if pending."""
        if not self._batch.done:
            raise asyncio.InvalidStateError("the record is not acknowledged yet")
        return self._batch.error

    def add_done_callback(self, fn: Callable[[Delivery], object]) -> None:
        """Call ``fn(self)`` on the event loop once the record is acknowledged or failed."""
        batch = self._batch
        if batch.done:
            batch.loop.call_soon(fn, self)  # type: ignore[union-attr]
        else:
            batch.callbacks.append((fn, self))

    def remove_done_callback(self, fn: Callable[[Delivery], object]) -> int:
        """Forget ``fn``; returns how many registrations were removed."""
        batch = self._batch
        kept = [(f, h) for f, h in batch.callbacks if not (f == fn and h is self)]
        removed = len(batch.callbacks) - len(kept)
        batch.callbacks = kept
        return removed


class SyncDelivery(_Handle):
    """One record sent with :meth:`Producer.send_sync`: ``result(timeout)`` blocks (``concurrent.futures`` style)."""

    __slots__ = ()

    def _wait(self, timeout: float | None) -> None:
        batch = self._batch
        assert batch.event is not None
        if not batch.done and not batch.event.wait(timeout):
            raise concurrent.futures.TimeoutError(f"the record was not acknowledged within {timeout} s")

    def result(self, timeout: float | None = None) -> Result:
        """``(partition, offset)`` once acknowledged (waiting up to ``timeout`` s); raises the record's error."""
        self._wait(timeout)
        return self._batch.outcome(self._index)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The error that failed the record (None if acknowledged), waiting up to ``timeout`` s."""
        self._wait(timeout)
        return self._batch.error

    def add_done_callback(self, fn: Callable[[SyncDelivery], object]) -> None:
        """Call ``fn(self)`` once the record is done: now if it is, else in the thread that completes it."""
        batch = self._batch
        assert batch.lock is not None
        with batch.lock:
            if not batch.done:
                batch.callbacks.append((fn, self))
                return
        try:
            fn(self)
        except Exception:
            log.exception("a delivery callback raised")
