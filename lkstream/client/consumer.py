"""The consumer: read topics from a broker, embedded or remote, with committed offsets.

::

    consumer = Consumer(broker, group="strategy-v1", offset_store=OffsetStore(base_dir))
    consumer.subscribe("market.ticks", from_committed=True)
    await consumer.consume("market.ticks", handler)   # handler(pid, offset, record)

``broker`` is an embedded :class:`~lkstream.broker.Broker` or anything that
satisfies :class:`ConsumerSource`, such as the daemon client returned by
``lkstream.connect(address)``: the same code runs against the daemon by
changing that one constructor.

Where the group's offsets live: with an embedded broker, in ``offset_store``
(default: the broker's own, under its data directory). With a remote broker, in
the daemon (CommitOffset / FetchCommittedOffsets RPCs): an ``offset_store``
passed with a remote broker is *ignored*, with a warning in the log, so the
embedded code keeps working unchanged while there is only one place a group's
progress is kept (the one every other client of the daemon sees).

Delivery is at-least-once: an offset is committed (automatically every
``auto_commit_interval_ms``, or by :meth:`Consumer.commit`) only after the
handler returned for the records before it, so after a crash a restarted
consumer re-reads at most what was handled since the last commit.

A subscription takes every partition of the topic. Splitting partitions among
several members of a group is the group coordinator's job (a later layer).

Not thread-safe: use one consumer from one thread or one event loop.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Literal, Protocol, runtime_checkable

from lkstream.broker.broker import Broker
from lkstream.broker.partition import DEFAULT_FETCH_BYTES
from lkstream.errors import InvalidArgumentError, OffsetOutOfRangeError
from lkstream.format.batch import span_of_whole_batches
from lkstream.format.codec import Record, decode_batches
from lkstream.storage.log import ReadResult
from lkstream.storage.names import validate_group
from lkstream.storage.offsets import OffsetStore

log = logging.getLogger("lkstream.consumer")

Handler = Callable[[int, int, Record], Awaitable[object] | object]
TopicPartition = tuple[str, int]
OffsetReset = Literal["earliest", "latest", "error"]
Positions = dict[TopicPartition, int]


@runtime_checkable
class ConsumerSource(Protocol):
    """What a :class:`Consumer` needs from a broker: reads, wake-ups and the group's offsets.

    :class:`~lkstream.client.remote.RemoteBroker` satisfies it directly; an embedded
    :class:`~lkstream.broker.Broker` is adapted (with its offset store) by the consumer.
    """

    def partitions_for(self, topic: str) -> int:
        """Partition count of ``topic`` (UnknownTopicError if it does not exist)."""
        ...

    def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        """``(log_start_offset, high_watermark)`` (InvalidArgumentError for a missing partition)."""
        ...

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = ...) -> ReadResult:
        """Whole record batches from ``offset`` (OffsetOutOfRangeError outside the log)."""
        ...

    async def fetch_async(self, topic: str, partition: int, offset: int, max_bytes: int = ...) -> ReadResult:
        """Async twin of :meth:`fetch`."""
        ...

    async def wait_for_data(self, positions: Positions, timeout: float | None = None) -> bool:
        """Wait until any partition has a record at or past its position; False on timeout. No polling."""
        ...

    def wait_for_data_sync(self, positions: Positions, timeout: float | None = None) -> bool:
        """Blocking twin of :meth:`wait_for_data`."""
        ...

    def read_committed(self, group: str, topic: str, partition: int) -> int | None:
        """The group's committed offset, or None if it never committed."""
        ...

    def commit_offset(self, group: str, topic: str, partition: int, offset: int) -> None:
        """Durably record that ``group`` will next read ``offset``."""
        ...


class _EmbeddedSource:
    """An embedded :class:`Broker` plus an :class:`OffsetStore`, seen as a :class:`ConsumerSource`."""

    def __init__(self, broker: Broker, offset_store: OffsetStore) -> None:
        self.broker = broker
        self.offset_store = offset_store

    def partitions_for(self, topic: str) -> int:
        return self.broker.partitions_for(topic)

    def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        p = self.broker.partition(topic, partition)
        return p.log_start_offset, p.high_watermark

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = DEFAULT_FETCH_BYTES) -> ReadResult:
        return self.broker.fetch(topic, partition, offset, max_bytes)

    async def fetch_async(
        self, topic: str, partition: int, offset: int, max_bytes: int = DEFAULT_FETCH_BYTES
    ) -> ReadResult:
        # An embedded read is a page-cache copy of microseconds: inline, as the broker's async API does.
        return self.broker.fetch(topic, partition, offset, max_bytes)

    async def wait_for_data(self, positions: Positions, timeout: float | None = None) -> bool:
        return await self.broker.wait_for_data(positions, timeout)

    def wait_for_data_sync(self, positions: Positions, timeout: float | None = None) -> bool:
        return self.broker.wait_for_data_sync(positions, timeout)

    def read_committed(self, group: str, topic: str, partition: int) -> int | None:
        return self.offset_store.read_committed(group, topic, partition)

    def commit_offset(self, group: str, topic: str, partition: int, offset: int) -> None:
        self.offset_store.commit(group, topic, partition, offset)


class Consumer:
    """Reads assigned partitions in offset order and commits progress for ``group``.

    ``broker``: an embedded :class:`Broker` or a :class:`ConsumerSource` (e.g. a
    ``RemoteBroker``). ``offset_store`` applies to an embedded broker only; see the
    module docstring.
    """

    def __init__(
        self,
        broker: Broker | ConsumerSource,
        group: str | None = None,
        offset_store: OffsetStore | None = None,
        *,
        auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        auto_offset_reset: OffsetReset = "earliest",
        fetch_max_bytes: int = DEFAULT_FETCH_BYTES,
    ) -> None:
        if auto_offset_reset not in ("earliest", "latest", "error"):
            raise InvalidArgumentError(
                f"auto_offset_reset must be earliest, latest or error, not {auto_offset_reset!r}"
            )
        self.broker = broker
        self.group = None if group is None else validate_group(group)
        self.offset_store: OffsetStore | None
        self.source: ConsumerSource
        if isinstance(broker, Broker):
            self.offset_store = offset_store if offset_store is not None else broker.offset_store
            self.source = _EmbeddedSource(broker, self.offset_store)
        elif isinstance(broker, ConsumerSource):
            if offset_store is not None:
                log.warning(
                    "offset_store is ignored with a remote broker: group %r commits its offsets in the daemon",
                    group,
                )
            self.offset_store = None
            self.source = broker
        else:
            raise InvalidArgumentError(
                f"Consumer needs a Broker or a ConsumerSource (e.g. lkstream.connect(...)), not {type(broker).__name__}"
            )
        self.auto_commit = auto_commit and group is not None
        self.auto_commit_interval_s = auto_commit_interval_ms / 1000.0
        self.auto_offset_reset = auto_offset_reset
        self.fetch_max_bytes = fetch_max_bytes
        self._positions: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._last_commit = time.monotonic()
        self._stopping = False
        # Partitions seeked since consume() read its current records (seek from a handler).
        self._seeked: set[TopicPartition] = set()
        # Remote reads only: offset -> in-flight fetch of the range after the last one read.
        self._pipelined = not isinstance(self.source, _EmbeddedSource)
        self._read_ahead: dict[TopicPartition, tuple[int, asyncio.Future[ReadResult]]] = {}

    # -- assignment and positions --------------------------------------------------------------

    def subscribe(self, topic: str, *, from_committed: bool = True) -> None:
        """Take every partition of ``topic``, starting from the group's committed offsets.

        Without a commit (or with ``from_committed=False``) a partition starts at
        ``auto_offset_reset`` (earliest or latest).
        """
        self._take([(topic, pid) for pid in range(self.source.partitions_for(topic))], from_committed)

    def assign(self, partitions: list[TopicPartition]) -> None:
        """Read exactly these partitions, from the committed offset or ``auto_offset_reset``."""
        self._take(partitions, from_committed=True)

    def _take(self, partitions: list[TopicPartition], from_committed: bool) -> None:
        for topic, pid in partitions:
            start = None
            if from_committed and self.group is not None:
                start = self.source.read_committed(self.group, topic, pid)
                if start is not None:
                    self._committed[(topic, pid)] = start
            # _valid_start asks for the partition's bounds, which also proves it exists.
            self._positions[(topic, pid)] = self._valid_start(topic, pid, start)

    def assignment(self) -> list[TopicPartition]:
        return sorted(self._positions)

    def _valid_start(self, topic: str, pid: int, wanted: int | None) -> int:
        start, end = self.source.bounds(topic, pid)
        if wanted is not None and start <= wanted <= end:
            return wanted
        if wanted is not None:
            if self.auto_offset_reset == "error":
                raise OffsetOutOfRangeError(topic, pid, wanted, start, end)
            log.warning(
                "%s[%d]: committed offset %d is outside [%d, %d]; resetting to %s",
                topic,
                pid,
                wanted,
                start,
                end,
                self.auto_offset_reset,
            )
        return start if self.auto_offset_reset == "earliest" else end

    def position(self, topic: str, pid: int) -> int:
        """The next offset this consumer will read from ``topic[pid]``."""
        return self._positions[(topic, pid)]

    def seek(self, topic: str, pid: int, offset: int) -> None:
        """Read ``topic[pid]`` from ``offset`` next; from a :meth:`consume` handler, after the current record."""
        if (topic, pid) not in self._positions:
            raise InvalidArgumentError(f"{topic}[{pid}] is not assigned to this consumer")
        start, end = self.source.bounds(topic, pid)
        if not start <= offset <= end:
            raise OffsetOutOfRangeError(topic, pid, offset, start, end)
        self._positions[(topic, pid)] = offset
        self._seeked.add((topic, pid))

    def committed(self, topic: str, pid: int) -> int | None:
        if self.group is None:
            return None
        return self.source.read_committed(self.group, topic, pid)

    # -- reading --------------------------------------------------------------------------------

    def _fetch(self, tp: TopicPartition, max_records: int | None) -> list[Record]:
        topic, pid = tp
        position = self._positions[tp]
        try:
            result = self.source.fetch(topic, pid, position, self.fetch_max_bytes)
        except OffsetOutOfRangeError as exc:
            return self._reset(tp, exc)
        return decode_batches(result.data, topic, pid, position, max_records)

    async def _fetch_async(self, tp: TopicPartition, max_records: int | None) -> list[Record]:
        topic, pid = tp
        position = self._positions[tp]
        try:
            result = await self._fetch_ahead_or_now(tp, position)
        except OffsetOutOfRangeError as exc:
            return self._reset(tp, exc)
        if self._pipelined:
            # Ask for the next range before decoding this one, so the daemon reads and
            # sends it while this process decodes (two processes, two cores). The next
            # offset comes from batch headers; a seek or a short handler run just
            # discards the read-ahead.
            _, next_offset = span_of_whole_batches(result.data, position)
            if position < next_offset < result.high_watermark:
                read = self.source.fetch_async(topic, pid, next_offset, self.fetch_max_bytes)
                self._read_ahead[tp] = (next_offset, asyncio.ensure_future(read))
        return decode_batches(result.data, topic, pid, position, max_records)

    async def _fetch_ahead_or_now(self, tp: TopicPartition, position: int) -> ReadResult:
        ahead = self._read_ahead.pop(tp, None)
        if ahead is not None:
            offset, read = ahead
            if offset == position:
                return await read
            _discard(read)
        return await self.source.fetch_async(tp[0], tp[1], position, self.fetch_max_bytes)

    def _drop_read_ahead(self) -> None:
        for _, read in self._read_ahead.values():
            _discard(read)
        self._read_ahead.clear()

    def _reset(self, tp: TopicPartition, exc: OffsetOutOfRangeError) -> list[Record]:
        if self.auto_offset_reset == "error":
            raise exc
        self._positions[tp] = exc.earliest if self.auto_offset_reset == "earliest" else exc.latest
        log.warning("%s; resetting %s[%d] to %d", exc, tp[0], tp[1], self._positions[tp])
        return []

    def poll(self, timeout: float = 0.0, max_records: int | None = None) -> list[Record]:
        """Records from the assigned partitions, waiting up to ``timeout`` seconds for the first.

        Blocking (for code without an event loop); woken by appends, not by
        polling. As in Kafka, calling ``poll`` means the records of the
        previous ``poll`` were processed: auto-commit, when due, commits the
        positions reached *before* this call, then the positions advance past
        the records returned now.
        """
        if not self._positions:
            raise InvalidArgumentError("the consumer has no assigned partitions; call subscribe() first")
        if self.auto_commit and time.monotonic() - self._last_commit >= self.auto_commit_interval_s:
            self.commit()
        records = self._read_available(max_records)
        if not records and timeout > 0 and self.source.wait_for_data_sync(self._positions, timeout):
            records = self._read_available(max_records)
        for record in records:
            self._positions[(record.topic, record.partition)] = record.offset + 1
        return records

    def _read_available(self, max_records: int | None, topic: str | None = None) -> list[Record]:
        """Records past the current positions, without moving the positions."""
        out: list[Record] = []
        for tp in [tp for tp in self._positions if topic is None or tp[0] == topic]:
            budget = None if max_records is None else max_records - len(out)
            if budget == 0:
                break
            out.extend(self._fetch(tp, budget))
        return out

    async def _read_available_async(self, max_records: int | None, topic: str | None) -> list[Record]:
        """Async twin of :meth:`_read_available` (a remote fetch does not block the event loop)."""
        out: list[Record] = []
        for tp in [tp for tp in self._positions if topic is None or tp[0] == topic]:
            budget = None if max_records is None else max_records - len(out)
            if budget == 0:
                break
            out.extend(await self._fetch_async(tp, budget))
        return out

    async def consume(
        self,
        topic: str | None,
        handler: Handler,
        *,
        max_records: int | None = None,
        idle_timeout: float | None = None,
    ) -> int:
        """Call ``handler(partition, offset, record)`` for each record, in offset order per partition.

        Runs until :meth:`stop` is called, ``max_records`` were handled, or no
        record arrived for ``idle_timeout`` seconds; returns how many records
        were handled. ``handler`` may be a plain function or a coroutine
        function. ``topic`` (optional) restricts the loop to one subscribed topic.
        """
        if topic is not None and not any(t == topic for t, _ in self._positions):
            self.subscribe(topic)
        self._stopping = False
        handled = 0
        is_async = inspect.iscoroutinefunction(handler)
        try:
            while not self._stopping and (max_records is None or handled < max_records):
                budget = None if max_records is None else max_records - handled
                records = await self._read_available_async(budget, topic)
                if not records:
                    await self._maybe_auto_commit_async()
                    watched = {tp: pos for tp, pos in self._positions.items() if topic is None or tp[0] == topic}
                    if not await self.source.wait_for_data(watched, idle_timeout):
                        break
                    continue
                self._seeked.clear()
                for record in records:
                    if self._stopping:
                        break
                    tp = (record.topic, record.partition)
                    if tp in self._seeked:
                        continue  # the handler moved this partition: the rest of this read is stale
                    result = handler(record.partition, record.offset, record)
                    if is_async or inspect.isawaitable(result):
                        await result  # type: ignore[misc]
                    handled += 1
                    if tp not in self._seeked:
                        # Only a record whose handler returned counts as consumed (at-least-once).
                        self._positions[tp] = record.offset + 1
                await self._maybe_auto_commit_async()
        finally:
            # Read-aheads belong to this event loop; a later consume() may run on another.
            self._drop_read_ahead()
            if self.auto_commit:
                self.commit()
        return handled

    def stop(self) -> None:
        """Make :meth:`consume` return after the record being handled."""
        self._stopping = True

    # -- committing -----------------------------------------------------------------------------

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Durably commit ``offsets`` (default: the current positions) for the group."""
        if self.group is None:
            raise InvalidArgumentError("commit needs a consumer group (group=...)")
        to_commit = dict(self._positions) if offsets is None else offsets
        for (topic, pid), offset in to_commit.items():
            if self._committed.get((topic, pid)) == offset:
                continue
            self.source.commit_offset(self.group, topic, pid, offset)
            self._committed[(topic, pid)] = offset
        self._last_commit = time.monotonic()

    async def _maybe_auto_commit_async(self) -> None:
        if self.auto_commit and time.monotonic() - self._last_commit >= self.auto_commit_interval_s:
            # Offset files are fsynced (a remote commit is a round trip): keep that off the event loop.
            await asyncio.to_thread(self.commit)

    def close(self) -> None:
        """Commit (when auto-commit is on) and forget the assignment."""
        self._drop_read_ahead()
        if self.auto_commit:
            self.commit()
        self._positions.clear()


def _discard(read: asyncio.Future[ReadResult]) -> None:
    """Cancel a read-ahead nobody will await; a finished one's error is dropped, not logged as lost."""
    if read.done():
        if not read.cancelled():
            read.exception()
    else:
        read.cancel()
