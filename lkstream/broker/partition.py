"""A topic partition as the broker serves it: its log, its hot tail, and waiting readers.

Thread-safe. Lock order: ``Partition._lock`` then ``PartitionLog._lock``.
Readers waiting for new data are woken by the append (or, in ``sync`` mode, by
the fsync that makes it visible), never by polling.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from lkstream.broker.tail import HotTail, TailBudget
from lkstream.broker.wakeups import run_on_loop
from lkstream.errors import BrokerClosedError, InvalidArgumentError, OffsetOutOfRangeError
from lkstream.format.codec import Record, read_records
from lkstream.storage.durability import FsyncMode, GroupCommitter
from lkstream.storage.log import AppendResult, PartitionLog, PartitionStats, ReadResult
from lkstream.storage.ranges import SendableRead

DEFAULT_FETCH_BYTES = 1024 * 1024


class Producer(Protocol):
    def __call__(
        self, topic: str, records: Sequence[Any], *, partition: int | None = None
    ) -> Awaitable[list[tuple[int, int]]]: ...


_AsyncWaiter = tuple[int, asyncio.AbstractEventLoop, "asyncio.Future[None]"]


def _resolve(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


class DataArrived:
    """A broker-wide signal for blocking readers of several partitions at once.

    Partitions call :meth:`notify` after new data becomes visible (inside their
    own lock: lock order Partition, then this). Cheap when nobody waits.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._waiting = 0

    def notify(self) -> None:
        if self._waiting:
            with self._cond:
                self._cond.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout: float | None) -> bool:
        """Block until ``predicate()`` holds (re-checked on every notify) or ``timeout`` passes."""
        with self._cond:
            self._waiting += 1
            try:
                return self._cond.wait_for(predicate, timeout)
            finally:
                self._waiting -= 1


class Partition:
    """One partition of a topic: ``append_*``, ``read_*`` and ``wait_for_offset``."""

    def __init__(
        self,
        topic: str,
        pid: int,
        log: PartitionLog,
        committer: GroupCommitter,
        tail_bytes: int,
        *,
        data_arrived: DataArrived | None = None,
        producer: Producer | None = None,
        tail_budget: TailBudget | None = None,
    ) -> None:
        self.topic = topic
        self.pid = pid
        self.log = log
        self._committer = committer
        self._sync = committer.mode is FsyncMode.SYNC
        self._lock = threading.Lock()
        self._tail = HotTail(tail_bytes, tail_budget, self._lock)
        self._visible = threading.Condition(self._lock)
        self._async_waiters: list[_AsyncWaiter] = []
        self._sync_waiters = 0
        self._closed = False
        self._data_arrived = data_arrived
        self._producer = producer
        self.produced_records = 0

    # -- writing ---------------------------------------------------------------------------------

    def append_batch(
        self,
        batch: bytearray,
        on_durable: Callable[[BaseException | None], None] | None = None,
        *,
        owned: bool = False,
    ) -> AppendResult:
        """Append one record batch (validated, offset-stamped in place).

        ``owned`` says the caller hands ``batch`` over and never touches it again
        (the broker's own encoded batches, checksummed a moment ago): the hot tail
        then keeps it as is instead of copying it, and the log skips the second CRC
        pass. In ``sync`` mode ``on_durable`` runs on the group-commit thread once the
        batch is fsynced; the batch becomes visible to readers at that moment.
        In the other modes it is visible on return and ``on_durable`` is not used.
        """
        with self._lock:
            result = self.log.append(batch, checksummed=owned)
            if not result.duplicate:
                self._appended_locked(batch, result, owned)
        self._tail.budget.enforce()  # may trim other partitions' tails: outside this partition's lock
        if result.duplicate:
            # Outside the lock: the committer may run the callback at once, and it takes this lock.
            return self._answer_duplicate(result, on_durable)
        if self._sync:
            next_offset = result.last_offset + 1

            def durable(error: BaseException | None) -> None:
                if error is None:
                    with self._lock:
                        self._wake_locked(self.log.high_watermark)
                if on_durable is not None:
                    on_durable(error)

            self._committer.when_durable(self.log, next_offset, durable)
        else:
            self._committer.written(self.log, result.size)
        return result

    def _appended_locked(self, batch: bytearray, result: AppendResult, owned: bool) -> None:
        if result.rolled:
            self._tail.drop_below(result.base_offset)  # the tail holds the active segment only
        # The tail keeps its own immutable copy unless the batch is handed over: callers may
        # reuse their buffer.
        if len(batch) <= self._tail.max_bytes:
            self._tail.add(result.base_offset, result.last_offset + 1, batch if owned else bytes(batch))
        else:
            self._tail.clear()  # too big to cache: keep the tail gap-free
        self.produced_records += result.last_offset - result.base_offset + 1
        if not self._sync:
            self._wake_locked(self.log.high_watermark)

    def _answer_duplicate(
        self, result: AppendResult, on_durable: Callable[[BaseException | None], None] | None
    ) -> AppendResult:
        """An idempotent retry: acknowledge it like the original, once that is durable (sync mode)."""
        if self._sync and on_durable is not None:
            self._committer.when_durable(self.log, result.last_offset + 1, on_durable)
        return result

    async def append_many(self, records: Sequence[Any]) -> list[int]:
        """Append ``(key, value[, headers])`` records to this partition; return their offsets.

        Same validation, batching and acknowledgement as ``Broker.produce_many``
        with an explicit partition.
        """
        if self._producer is None:
            raise InvalidArgumentError("this partition was not opened by a broker that can produce")
        results = await self._producer(self.topic, records, partition=self.pid)
        return [offset for _, offset in results]

    def roll_if_due(self) -> bool:
        """Seal the active segment if ``segment.ms`` says so (a quiet partition); whether it did."""
        with self._lock:
            rolled = self.log.roll_if_due()
            if rolled:
                self._tail.clear()  # it held the segment just sealed: the cleaner may rewrite that now
            return rolled

    # -- reading ---------------------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    def read_raw(self, offset: int, max_bytes: int = DEFAULT_FETCH_BYTES) -> ReadResult:
        """Whole record batches from the one holding ``offset`` (see :meth:`PartitionLog.read`)."""
        with self._lock:
            start, high = self.log.log_start_offset, self.log.high_watermark
            if offset < start or offset > high:
                raise OffsetOutOfRangeError(self.topic, self.pid, offset, start, high)
            cached = self._tail.read(offset, max_bytes, high)
        if cached is not None:
            return ReadResult(bytes(cached), start, high)
        return self.log.read(offset, max_bytes)

    def read_for_send(
        self, offset: int, max_bytes: int, *, min_one: bool = True, zero_copy: bool = True
    ) -> SendableRead:
        """:meth:`read_raw` for a surface that sends stored bytes as they are (the Kafka listener).

        The hot tail's batches come as bytes (already in memory); the log's as a
        :class:`~lkstream.storage.ranges.FileRange` where ``zero_copy`` allows it (release it
        once sent). Without ``min_one`` a first batch larger than ``max_bytes`` is not returned.
        """
        with self._lock:
            start, high = self.log.log_start_offset, self.log.high_watermark
            if offset < start or offset > high:
                raise OffsetOutOfRangeError(self.topic, self.pid, offset, start, high)
            cached = self._tail.read(offset, max_bytes, high, min_one=min_one)
        if cached is not None:
            return SendableRead(cached, start, high)
        return self.log.read_for_send(offset, max_bytes, min_one=min_one, zero_copy=zero_copy)

    def read_from(self, offset: int, max_msgs: int | None = None, max_bytes: int = DEFAULT_FETCH_BYTES) -> list[Record]:
        """Decoded records from ``offset`` on: at most ``max_msgs``, about ``max_bytes`` of batches.

        Empty only at the high watermark: a read that finds batches without records for the
        offsets asked (a compacted log's gaps, docs/adr/0006) reads on past them.
        """

        def fetch(at: int) -> tuple[bytes, int]:
            result = self.read_raw(at, max_bytes)
            return result.data, result.high_watermark

        return read_records(fetch, self.topic, self.pid, offset, max_msgs)[0]

    # -- waiting ---------------------------------------------------------------------------------

    async def wait_for_offset(self, offset: int, timeout: float | None = None) -> bool:
        """Wait until ``offset`` is readable (below the high watermark); False on timeout."""
        arrival = self.arrival(offset)
        if arrival is None:
            return True
        try:
            await asyncio.wait_for(arrival, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            self.forget_arrival(arrival)

    def arrival(self, offset: int) -> asyncio.Future[None] | None:
        """A future of the running loop, resolved once ``offset`` is readable; None if it already is.

        For callers that wait for it beside something else (the daemon's shutdown) without a
        task each. It fails with :class:`BrokerClosedError` if the partition closes. Hand it
        back to :meth:`forget_arrival` once done with it (resolved, cancelled or given up).
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            self._check_open()
            if self.log.high_watermark > offset:
                return None
            self._async_waiters.append((offset, loop, future))
        return future

    def forget_arrival(self, future: asyncio.Future[None]) -> None:
        """Stop waking ``future`` (a no-op once the append that resolved it removed it)."""
        with self._lock:
            for index, waiter in enumerate(self._async_waiters):
                if waiter[2] is future:
                    del self._async_waiters[index]
                    return

    def wait_for_offset_sync(self, offset: int, timeout: float | None = None) -> bool:
        """Blocking twin of :meth:`wait_for_offset`."""
        with self._visible:
            self._sync_waiters += 1
            try:
                ready = self._visible.wait_for(lambda: self._closed or self.log.high_watermark > offset, timeout)
                self._check_open()
                return ready
            finally:
                self._sync_waiters -= 1

    def _wake_locked(self, high_watermark: int) -> None:
        if self._sync_waiters:
            self._visible.notify_all()
        if self._data_arrived is not None:
            self._data_arrived.notify()
        if not self._async_waiters:
            return
        ready = [w for w in self._async_waiters if w[0] < high_watermark]
        if not ready:
            return
        self._async_waiters = [w for w in self._async_waiters if w[0] >= high_watermark]
        for _, loop, future in ready:
            run_on_loop(loop, _resolve, future, None)

    def _check_open(self) -> None:
        if self._closed:
            raise BrokerClosedError(f"{self.topic}[{self.pid}] was closed (topic deleted or broker closed)")

    def stats(self) -> PartitionStats:
        return self.log.stats()

    def close(self) -> None:
        """Close the log; readers still waiting get :class:`BrokerClosedError` instead of waiting forever."""
        self._committer.forget(self.log)
        try:
            self.log.close()
        finally:
            with self._lock:
                self._closed = True
                self._tail.close()
                waiters, self._async_waiters = self._async_waiters, []
                self._visible.notify_all()
            if self._data_arrived is not None:
                self._data_arrived.notify()
            closed = BrokerClosedError(f"{self.topic}[{self.pid}] was closed (topic deleted or broker closed)")
            for _, loop, future in waiters:
                run_on_loop(loop, _resolve, future, closed)
