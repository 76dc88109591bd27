"""Client-side batching: :class:`Producer` accumulates single records into produce_many calls.

``Producer(broker)`` works over the embedded :class:`~lkstream.Broker` and over a
:class:`~lkstream.RemoteBroker` alike (both have ``produce_many`` and
``produce_many_sync``). Records are buffered per ``(topic, explicit partition)``
and sent as one ``produce_many`` call when ``linger_ms`` has passed since the
first buffered record or when the buffer reaches ``batch_bytes``.

The buffer is bounded: bytes accepted by :meth:`Producer.send` and not yet
acknowledged never exceed ``buffer_bytes``; a send that would go over raises
:class:`BackpressureError` at once (it never blocks, the buffer never grows
without bound). Records of one buffer are sent in order, one call at a time; batches that
became ready while a call was out go together in the next call (up to ``batch_bytes``).

Two faces: :meth:`send`/:meth:`flush`/:meth:`close` for asyncio code (``send``
returns a :class:`~lkstream.client.delivery.Delivery`: ``await`` it for
``(partition, offset)``), and :meth:`send_sync`/:meth:`flush_sync`/:meth:`close_sync`
for blocking code (``send_sync`` returns a :class:`~lkstream.client.delivery.SyncDelivery`
with ``result(timeout)``; lingering is done by a timer thread). A handle is the record's
batch and its place in it: no future per record (see :mod:`lkstream.client.delivery`).
Delivery is what the broker's produce gives; over a RemoteBroker a failed send may have
been appended (at-least-once on re-send).

Threads: the asyncio face belongs to one event loop and takes no lock per record; the
blocking face may be used from any number of threads. Used from both at once, the two
faces keep separate byte counts, and the bound may be passed by the one record each face
admits at the same instant.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol

from lkstream.client.delivery import Batch, Delivery, Result, Slot, SyncDelivery
from lkstream.errors import BackpressureError, BrokerClosedError, InvalidArgumentError
from lkstream.format.codec import Compression, Headers
from lkstream.format.produce import RECORD_OVERHEAD, check_headers, to_bytes

DEFAULT_LINGER_MS = 5.0
DEFAULT_BATCH_BYTES = 1024 * 1024
DEFAULT_BUFFER_BYTES = 32 * 1024 * 1024

__all__ = ["Delivery", "ProduceTarget", "Producer", "Result", "SyncDelivery"]


class ProduceTarget(Protocol):
    """What a Producer needs: the produce surface shared by Broker and RemoteBroker."""

    async def produce_many(
        self,
        topic: str,
        records: Sequence[Any],
        *,
        partition: int | None = None,
        compression: Compression | str | None = None,
    ) -> list[tuple[int, int]]: ...

    def produce_many_sync(
        self,
        topic: str,
        records: Sequence[Any],
        *,
        partition: int | None = None,
        compression: Compression | str | None = None,
    ) -> list[tuple[int, int]]: ...


class Producer:
    """Batching producer over ``broker_or_remote``; see the module docstring."""

    def __init__(
        self,
        broker_or_remote: ProduceTarget,
        *,
        linger_ms: float = DEFAULT_LINGER_MS,
        batch_bytes: int = DEFAULT_BATCH_BYTES,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        compression: Compression | str | None = None,
    ) -> None:
        if linger_ms < 0 or batch_bytes <= 0 or buffer_bytes <= 0:
            raise InvalidArgumentError("linger_ms must be >= 0 and batch_bytes, buffer_bytes > 0")
        self.broker = broker_or_remote
        self.linger_s = linger_ms / 1000.0
        self.batch_bytes = batch_bytes
        self.buffer_bytes = buffer_bytes
        self.compression = None if compression is None else Compression.parse(compression)
        # An embedded Broker can answer with a view of the results rather than a tuple per record
        # (Broker.produce_many_view): most records' handles are never asked.
        self._produce_many = getattr(broker_or_remote, "produce_many_view", None) or broker_or_remote.produce_many
        self._closed = False
        # asyncio face: touched only on its event loop, so no lock per record.
        self._abuffered = 0  # accepted by send() and not yet acknowledged
        # The batch still filling, per slot; keyed by the topic alone for partition None (the common
        # send: no tuple to build and hash per record), by (topic, partition) otherwise.
        self._afilling: dict[str | Slot, Batch] = {}
        self._aready: dict[Slot, deque[Batch]] = {}  # sealed batches waiting for their call, per slot
        self._asend_locks: dict[Slot, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # blocking face: any thread, under _lock.
        self._lock = threading.Lock()
        self._sbuffered = 0
        self._sfilling: dict[Slot, Batch] = {}
        self._sready: dict[Slot, deque[Batch]] = {}
        self._ssend_locks: dict[Slot, threading.Lock] = {}
        self._timers: set[threading.Timer] = set()

    @property
    def buffered_bytes(self) -> int:
        """Bytes accepted by send (either face) and not yet acknowledged."""
        return self._abuffered + self._sbuffered

    # -- accepting records -------------------------------------------------------------------------

    def _record(self, topic: object, value: object, key: object, headers: object, partition: object) -> tuple[Any, int]:
        """Validate one record: the item ``produce_many`` takes and its size (what the buffer bound counts)."""
        if self._closed:
            raise BrokerClosedError("producer is closed")
        if type(topic) is not str or (partition is not None and type(partition) is not int):
            _check_target(topic, partition)
        if type(value) is not bytes:
            value = to_bytes(value, "value")
        if key is not None and type(key) is not bytes:
            key = to_bytes(key, "key")
        size = RECORD_OVERHEAD + (0 if value is None else len(value)) + (0 if key is None else len(key))
        if headers is None:
            return (key, value), size
        checked = check_headers(headers)
        if not checked:
            return (key, value), size
        return (key, value, checked), size + sum(len(n) + len(x or b"") for n, x in checked)

    def send(
        self,
        topic: str,
        value: object,
        key: object = None,
        headers: Headers | None = None,
        partition: int | None = None,
    ) -> Delivery:
        """Buffer one record; ``await`` the returned :class:`Delivery` for its ``(partition, offset)``.

        Must be called from a running event loop (the producer's asyncio face belongs to
        one). Raises :class:`BackpressureError` at once when the record would take the
        buffer above ``buffer_bytes``. The handle may be dropped: the record is sent anyway.
        """
        # The common record (bytes value, bytes or no key, no headers) is checked inline: this runs
        # once per record, and a call to _record costs as much as the checks themselves.
        if (
            type(value) is bytes
            and headers is None
            and (key is None or type(key) is bytes)
            and type(topic) is str
            and (partition is None or type(partition) is int)
            and not self._closed
        ):
            record: Any = (key, value)
            size = RECORD_OVERHEAD + len(value) + (0 if key is None else len(key))
        else:
            record, size = self._record(topic, value, key, headers, partition)
        buffered = self._abuffered + self._sbuffered + size
        if buffered > self.buffer_bytes:
            raise BackpressureError(buffered, self.buffer_bytes)
        batch = self._afilling.get(topic if partition is None else (topic, partition))
        if batch is None:
            batch = self._new_batch(topic, partition)
        self._abuffered += size
        records = batch.records
        records.append(record)
        batch.nbytes += size
        if batch.nbytes >= self.batch_bytes:
            self._start(batch)
        return Delivery(batch, len(records) - 1)

    def _new_batch(self, topic: str, partition: int | None) -> Batch:
        """Start filling a batch for ``(topic, partition)`` and schedule its send after ``linger_ms``."""
        loop = asyncio.get_running_loop()
        batch = Batch((topic, partition), loop=loop)
        self._afilling[topic if partition is None else (topic, partition)] = batch
        if self.linger_s:
            loop.call_later(self.linger_s, self._start, batch)
        else:
            loop.call_soon(self._start, batch)
        return batch

    def send_sync(
        self,
        topic: str,
        value: object,
        key: object = None,
        headers: Headers | None = None,
        partition: int | None = None,
    ) -> SyncDelivery:
        """Blocking-code twin of :meth:`send`: buffer one record, return a :class:`SyncDelivery`.

        A full buffer is sent in the calling thread; otherwise a timer thread sends it after ``linger_ms``.
        """
        record, size = self._record(topic, value, key, headers, partition)
        slot = (topic, partition)
        with self._lock:
            buffered = self._abuffered + self._sbuffered + size
            if buffered > self.buffer_bytes:
                raise BackpressureError(buffered, self.buffer_bytes)
            self._sbuffered += size
            batch = self._sfilling.get(slot)
            first = batch is None
            if batch is None:
                batch = self._sfilling[slot] = Batch(slot, lock=self._lock)
            batch.records.append(record)
            batch.nbytes += size
            handle = SyncDelivery(batch, len(batch.records) - 1)
            sealed = batch.nbytes >= self.batch_bytes and self._seal_sync(batch)
            if first and not sealed:
                timer = threading.Timer(self.linger_s, self._linger_sync, (batch,))
                timer.daemon = True
                self._timers.add(timer)
                timer.start()
        if sealed:
            self._send_sync(slot)
        return handle

    # -- sending: the asyncio face ------------------------------------------------------------------

    def _start(self, batch: Batch) -> None:
        """Seal ``batch`` (if still its slot's filling one) and start its produce call."""
        slot = batch.slot
        key = slot[0] if slot[1] is None else slot
        if self._afilling.get(key) is not batch:
            return  # already sealed (full, or flushed)
        del self._afilling[key]
        self._aready.setdefault(slot, deque()).append(batch)
        task = asyncio.get_running_loop().create_task(self._send(slot))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, slot: Slot) -> None:
        lock = self._asend_locks.setdefault(slot, asyncio.Lock())
        async with lock:  # one call per slot at a time, in order (asyncio.Lock is FIFO)
            ready = self._aready.get(slot)
            if not ready:
                return  # an earlier call took this task's batch along
            batches = self._drain(ready)
            nbytes = sum(batch.nbytes for batch in batches)
            try:
                results = await self._produce_many(
                    slot[0], _records_of(batches), partition=slot[1], compression=self.compression
                )
            except BaseException as exc:
                for batch in batches:
                    batch.fail(exc)
                if not isinstance(exc, Exception):
                    raise
            else:
                _succeed(batches, results)
            finally:
                self._abuffered -= nbytes

    def _drain(self, ready: deque[Batch]) -> list[Batch]:
        """The next call's batches: the oldest ready one, and those behind it up to ``batch_bytes`` in all.

        Batches sealed while the slot's previous call was out go together in one call, as
        Kafka's producer drains a partition's ready batches into one request: the call rate
        then follows the round trip, and when a call takes longer than ``linger_ms`` the
        records of the ticks it waited for ride on the next call instead of queueing one call
        each behind it (a backlog that only grows; issue 14, row 6).
        """
        batches = [ready.popleft()]
        nbytes = batches[0].nbytes
        while ready and nbytes + ready[0].nbytes <= self.batch_bytes:
            nbytes += ready[0].nbytes
            batches.append(ready.popleft())
        return batches

    # -- sending: the blocking face -----------------------------------------------------------------

    def _seal_sync(self, batch: Batch) -> bool:
        """Move ``batch`` (if still its slot's filling one) to the ready queue; call with ``_lock`` held."""
        slot = batch.slot
        if self._sfilling.get(slot) is not batch:
            return False
        del self._sfilling[slot]
        self._sready.setdefault(slot, deque()).append(batch)
        return True

    def _linger_sync(self, batch: Batch) -> None:
        with self._lock:
            self._timers.discard(threading.current_thread())  # type: ignore[arg-type,unused-ignore]
            sealed = self._seal_sync(batch)
        if sealed:
            self._send_sync(batch.slot)

    def _send_sync(self, slot: Slot) -> None:
        with self._lock:
            lock = self._ssend_locks.setdefault(slot, threading.Lock())
        with lock:
            with self._lock:
                ready = self._sready.get(slot)
                batches = self._drain(ready) if ready else []
            if not batches:
                return  # an earlier call took this batch along
            nbytes = sum(batch.nbytes for batch in batches)
            try:
                results = self.broker.produce_many_sync(
                    slot[0], _records_of(batches), partition=slot[1], compression=self.compression
                )
            except Exception as exc:
                for batch in batches:
                    batch.fail(exc)
            else:
                _succeed(batches, results)
            finally:
                with self._lock:
                    self._sbuffered -= nbytes

    # -- flushing and closing ---------------------------------------------------------------------

    async def flush(self) -> None:
        """Send everything buffered by :meth:`send` now and wait until it is acknowledged (or failed)."""
        for batch in list(self._afilling.values()):
            self._start(batch)
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def flush_sync(self) -> None:
        """Send everything buffered by :meth:`send_sync` now, in this thread, and wait for it."""
        with self._lock:
            filling = list(self._sfilling.values())
            sealed = [batch.slot for batch in filling if self._seal_sync(batch)]
            timers = list(self._timers)
        for slot in sealed:
            self._send_sync(slot)
        for timer in timers:  # a timer already sending holds the slot's lock; wait for it
            timer.cancel()
            if timer.is_alive() and timer is not threading.current_thread():
                timer.join()

    async def close(self) -> None:
        """Flush, then refuse further sends. The broker is not closed (it is the caller's)."""
        await self.flush()
        self._closed = True

    def close_sync(self) -> None:
        """Blocking twin of :meth:`close` for the :meth:`send_sync` face."""
        self.flush_sync()
        self._closed = True

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close_sync()


def _records_of(batches: list[Batch]) -> list[Any]:
    """The records of one call, in order (a lone batch's list as it is)."""
    if len(batches) == 1:
        return batches[0].records
    return [record for batch in batches for record in batch.records]


def _succeed(batches: list[Batch], results: Sequence[Result]) -> None:
    """Hand each batch of a call its part of the call's results."""
    first = 0
    for batch in batches:
        batch.succeed(results, first)
        first += len(batch.records)


def _check_target(topic: object, partition: object) -> None:
    if not isinstance(topic, str):
        raise InvalidArgumentError(f"topic must be a str, got {type(topic).__name__}")
    if partition is not None and (not isinstance(partition, int) or isinstance(partition, bool)):
        raise InvalidArgumentError(f"partition must be an int or None, got {partition!r}")
