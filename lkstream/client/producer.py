"""Client-side batching: :class:`Producer` accumulates single records into produce_many calls.

``Producer(broker)`` works over the embedded :class:`~lkstream.Broker` and over a
:class:`~lkstream.RemoteBroker` alike (both have ``produce_many`` and
``produce_many_sync``). Records are buffered per ``(topic, explicit partition)``
and sent as one ``produce_many`` call when ``linger_ms`` has passed since the
first buffered record or when the buffer reaches ``batch_bytes``.

The buffer is bounded: bytes accepted by :meth:`Producer.send` and not yet
acknowledged never exceed ``buffer_bytes``; a send that would go over raises
:class:`BackpressureError` at once (it never blocks, the buffer never grows
without bound). Records of one buffer are sent in order, one call at a time.

Two faces: :meth:`send`/:meth:`flush`/:meth:`close` for asyncio code (``send``
returns an ``asyncio.Future`` of ``(partition, offset)``), and
:meth:`send_sync`/:meth:`flush_sync`/:meth:`close_sync` for blocking code
(``send_sync`` returns a ``concurrent.futures.Future``; lingering is done by a
timer thread). Delivery is what the broker's produce gives; over a
RemoteBroker a failed send may have been appended (at-least-once on re-send).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol

from lkstream.errors import BackpressureError, BrokerClosedError, InvalidArgumentError
from lkstream.format.codec import Compression, Headers
from lkstream.format.produce import RECORD_OVERHEAD, check_headers, to_bytes

DEFAULT_LINGER_MS = 5.0
DEFAULT_BATCH_BYTES = 1024 * 1024
DEFAULT_BUFFER_BYTES = 32 * 1024 * 1024

Result = tuple[int, int]
_Key = tuple[str, int | None]


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


class _Buffer:
    """The records of one produce call being gathered for one slot, with their futures."""

    __slots__ = ("futures", "nbytes", "records", "slot")

    def __init__(self, slot: _Key) -> None:
        self.slot = slot
        # Items exactly as produce_many takes them: (key, value), or (key, value, headers) when it has any.
        self.records: list[tuple[bytes | None, bytes | None] | tuple[bytes | None, bytes | None, Headers]] = []
        self.futures: list[Any] = []
        self.nbytes = 0


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
        self._lock = threading.Lock()  # guards the buffers and the byte count (both faces)
        self._buffered = 0  # accepted and not yet acknowledged
        self._closed = False
        # async face
        self._abuffers: dict[_Key, _Buffer] = {}  # the buffer still filling, per slot
        # Sealed buffers waiting for their call, per face (keyed by the face's filling-buffer dict).
        self._aready: dict[_Key, deque[_Buffer]] = {}
        self._sready: dict[_Key, deque[_Buffer]] = {}
        self._asend_locks: dict[_Key, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # blocking face
        self._sbuffers: dict[_Key, _Buffer] = {}
        self._ssend_locks: dict[_Key, threading.Lock] = {}
        self._timers: set[threading.Timer] = set()

    @property
    def buffered_bytes(self) -> int:
        """Bytes accepted by send and not yet acknowledged."""
        return self._buffered

    # -- accepting records -------------------------------------------------------------------------

    def _admit(
        self,
        buffers: dict[_Key, _Buffer],
        topic: str,
        value: object,
        *,
        key: object,
        headers: object,
        partition: object,
        future: Any,
    ) -> tuple[_Buffer, bool] | None:
        """Validate one record and add it, with its future, to its buffer.

        Returns None when nothing else is to be done (the common case, kept
        cheap: this runs once per record), else the buffer and whether it is
        full (send it now) rather than new (start its linger timer).
        """
        if self._closed:
            raise BrokerClosedError("producer is closed")
        if type(topic) is not str or (partition is not None and type(partition) is not int):
            _check_target(topic, partition)
        if type(value) is not bytes:
            value = to_bytes(value, "value")
        if key is not None and type(key) is not bytes:
            key = to_bytes(key, "key")
        size = RECORD_OVERHEAD + (0 if value is None else len(value)) + (0 if key is None else len(key))
        checked: Headers = () if headers is None else check_headers(headers)
        if checked:
            size += sum(len(n) + len(x or b"") for n, x in checked)
            record: Any = (key, value, checked)
        else:
            record = (key, value)
        slot: _Key = (topic, partition)  # type: ignore[assignment]  # checked above: (str, int | None)
        with self._lock:
            buffered = self._buffered + size
            if buffered > self.buffer_bytes:
                raise BackpressureError(buffered, self.buffer_bytes)
            self._buffered = buffered
            buffer = buffers.get(slot)
            first = buffer is None
            if buffer is None:
                buffer = buffers[slot] = _Buffer(slot)
            buffer.records.append(record)
            buffer.futures.append(future)
            buffer.nbytes += size
            if buffer.nbytes >= self.batch_bytes:
                return buffer, True
            return (buffer, False) if first else None

    def send(
        self,
        topic: str,
        value: object,
        key: object = None,
        headers: Headers | None = None,
        partition: int | None = None,
    ) -> asyncio.Future[Result]:
        """Buffer one record; the future resolves to its ``(partition, offset)`` once acknowledged.

        Must be called from a running event loop. Raises :class:`BackpressureError`
        at once when the record would take the buffer above ``buffer_bytes``.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Result] = loop.create_future()
        action = self._admit(self._abuffers, topic, value, key=key, headers=headers, partition=partition, future=future)
        if action is not None:
            buffer, full = action
            if full:
                self._start(self._abuffers, buffer)
            elif self.linger_s:
                loop.call_later(self.linger_s, self._start, self._abuffers, buffer)
            else:
                loop.call_soon(self._start, self._abuffers, buffer)
        return future

    def send_sync(
        self,
        topic: str,
        value: object,
        key: object = None,
        headers: Headers | None = None,
        partition: int | None = None,
    ) -> concurrent.futures.Future[Result]:
        """Blocking-code twin of :meth:`send`: buffer one record, return a ``concurrent.futures.Future``.

        A full buffer is sent in the calling thread; otherwise a timer thread sends it after ``linger_ms``.
        """
        future: concurrent.futures.Future[Result] = concurrent.futures.Future()
        action = self._admit(self._sbuffers, topic, value, key=key, headers=headers, partition=partition, future=future)
        if action is None:
            return future
        buffer, full = action
        with self._lock:
            if full:
                sealed = self._seal(self._sbuffers, buffer)
            else:
                sealed = False
                timer = threading.Timer(self.linger_s, self._linger_sync, (buffer,))
                timer.daemon = True
                self._timers.add(timer)
                timer.start()
        if sealed:
            self._send_sync(buffer.slot)
        return future

    # -- sending ----------------------------------------------------------------------------------

    def _seal(self, buffers: dict[_Key, _Buffer], buffer: _Buffer) -> bool:
        """Move ``buffer`` (if still its slot's filling one) to the ready queue; call with ``_lock`` held."""
        slot = buffer.slot
        if buffers.get(slot) is not buffer:
            return False  # already sealed (full, or flushed)
        del buffers[slot]
        ready = self._aready if buffers is self._abuffers else self._sready
        ready.setdefault(slot, deque()).append(buffer)
        return True

    def _take(self, queues: dict[_Key, deque[_Buffer]], slot: _Key) -> _Buffer | None:
        with self._lock:
            ready = queues.get(slot)
            return ready.popleft() if ready else None

    def _release(self, nbytes: int) -> None:
        with self._lock:
            self._buffered -= nbytes

    def _start(self, buffers: dict[_Key, _Buffer], buffer: _Buffer) -> None:
        with self._lock:
            if not self._seal(buffers, buffer):
                return
        task = asyncio.get_running_loop().create_task(self._send(buffer.slot))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, slot: _Key) -> None:
        lock = self._asend_locks.setdefault(slot, asyncio.Lock())
        async with lock:  # one call per buffer at a time, in order (asyncio.Lock is FIFO)
            buffer = self._take(self._aready, slot)
            if buffer is None:
                return
            try:
                results = await self.broker.produce_many(
                    slot[0], buffer.records, partition=slot[1], compression=self.compression
                )
            except BaseException as exc:
                for future in buffer.futures:
                    if not future.done():
                        future.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
            else:
                for future, result in zip(buffer.futures, results, strict=True):
                    if not future.done():
                        future.set_result(result)
            finally:
                self._release(buffer.nbytes)

    def _linger_sync(self, buffer: _Buffer) -> None:
        with self._lock:
            self._timers.discard(threading.current_thread())  # type: ignore[arg-type,unused-ignore]
            sealed = self._seal(self._sbuffers, buffer)
        if sealed:
            self._send_sync(buffer.slot)

    def _send_sync(self, slot: _Key) -> None:
        with self._lock:
            lock = self._ssend_locks.setdefault(slot, threading.Lock())
        with lock:
            buffer = self._take(self._sready, slot)
            if buffer is None:
                return
            try:
                results = self.broker.produce_many_sync(
                    slot[0], buffer.records, partition=slot[1], compression=self.compression
                )
            except Exception as exc:
                for future in buffer.futures:
                    future.set_exception(exc)
            else:
                for future, result in zip(buffer.futures, results, strict=True):
                    future.set_result(result)
            finally:
                self._release(buffer.nbytes)

    # -- flushing and closing ---------------------------------------------------------------------

    async def flush(self) -> None:
        """Send everything buffered by :meth:`send` now and wait until it is acknowledged (or failed)."""
        with self._lock:
            filling = list(self._abuffers.items())
        for _, buffer in filling:
            self._start(self._abuffers, buffer)
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def flush_sync(self) -> None:
        """Send everything buffered by :meth:`send_sync` now, in this thread, and wait for it."""
        with self._lock:
            filling = list(self._sbuffers.items())
            sealed = [slot for slot, buffer in filling if self._seal(self._sbuffers, buffer)]
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


def _check_target(topic: object, partition: object) -> None:
    if not isinstance(topic, str):
        raise InvalidArgumentError(f"topic must be a str, got {type(topic).__name__}")
    if partition is not None and (not isinstance(partition, int) or isinstance(partition, bool)):
        raise InvalidArgumentError(f"partition must be an int or None, got {partition!r}")
