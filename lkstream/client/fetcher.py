"""Fetching and decoding for a consumer, with one read ahead per partition over a remote source.

:class:`Fetcher` reads whole batches from the consumer's positions and decodes them
into records; it moves a position forward only past offsets that hold no record (the
gaps of a compacted log, docs/adr/0006): past records the consumer moves it, once a
handler returned. An offset outside the log is handed to
:meth:`~lkstream.client.positions.Assignment.reset`.

Over a remote source (the daemon) the async path keeps one fetch in flight per
partition: it asks for the next range before decoding the current one, so the daemon
reads and sends while this process decodes (two processes, two cores). An embedded
read is a page-cache copy of microseconds and gains nothing from it. Not thread-safe:
one consumer thread or event loop.
"""

from __future__ import annotations

import asyncio

from lkstream.client.positions import Assignment
from lkstream.client.sources import ConsumerSource, EmbeddedSource, TopicPartition
from lkstream.errors import OffsetOutOfRangeError
from lkstream.format.batch import span_of_whole_batches
from lkstream.format.codec import Record, decode_batches
from lkstream.storage.log import ReadResult


class Fetcher:
    """Reads records past ``assignment``'s positions from ``source`` (see the module docstring)."""

    def __init__(
        self, source: ConsumerSource, assignment: Assignment, fetch_max_bytes: int, *, pipelined: bool
    ) -> None:
        self.source = source
        self.assignment = assignment
        self.fetch_max_bytes = fetch_max_bytes
        self.pipelined = pipelined
        # An embedded broker's reads were CRC-checked in this process (on read, or at append for the hot tail).
        self.crc_checked = isinstance(source, EmbeddedSource)
        # offset -> in-flight fetch of the range after the last one read (remote sources only).
        self._read_ahead: dict[TopicPartition, tuple[int, asyncio.Future[ReadResult]]] = {}

    def read_available(self, max_records: int | None, topic: str | None = None) -> list[Record]:
        """Records past the current positions of the readable partitions, without moving the positions."""
        out: list[Record] = []
        for tp in self.assignment.readable(topic):
            budget = None if max_records is None else max_records - len(out)
            if budget == 0:
                break
            out.extend(self.fetch(tp, budget))
        return out

    async def read_available_async(
        self, max_records: int | None, topic: str | None
    ) -> list[tuple[TopicPartition, list[Record]]]:
        """Async twin of :meth:`read_available` (a remote fetch does not block the event loop).

        The records come per partition, ``[(tp, records)]`` with no empty lists, so the
        consumer's loop moves each partition's position once per read, not once per record.
        """
        out: list[tuple[TopicPartition, list[Record]]] = []
        count = 0
        for tp in self.assignment.readable(topic):
            budget = None if max_records is None else max_records - count
            if budget == 0:
                break
            records = await self.fetch_async(tp, budget)
            if records:
                out.append((tp, records))
                count += len(records)
        return out

    def fetch(self, tp: TopicPartition, max_records: int | None) -> list[Record]:
        topic, pid = tp
        while True:
            position = self.assignment.positions[tp]
            try:
                result = self.source.fetch(topic, pid, position, self.fetch_max_bytes)
            except OffsetOutOfRangeError as exc:
                self.assignment.reset(tp, exc)
                return []
            records = decode_batches(result.data, topic, pid, position, max_records, crc_checked=self.crc_checked)
            if records or not self._skip_empty(tp, position, result):
                return records

    async def fetch_async(self, tp: TopicPartition, max_records: int | None) -> list[Record]:
        topic, pid = tp
        while True:
            position = self.assignment.positions[tp]
            try:
                result = await self._ahead_or_now(tp, position)
            except OffsetOutOfRangeError as exc:
                self.assignment.reset(tp, exc)
                return []
            if self.pipelined and tp in self.assignment.positions:
                # Ask for the next range before decoding this one. The next offset comes from
                # batch headers; a seek or a short handler run just discards the read-ahead.
                _, next_offset = span_of_whole_batches(result.data, position)
                if position < next_offset < result.high_watermark:
                    read = self.source.fetch_async(topic, pid, next_offset, self.fetch_max_bytes)
                    self._read_ahead[tp] = (next_offset, asyncio.ensure_future(read))
            records = decode_batches(result.data, topic, pid, position, max_records, crc_checked=self.crc_checked)
            if records or tp not in self.assignment.positions or not self._skip_empty(tp, position, result):
                return records

    def _skip_empty(self, tp: TopicPartition, position: int, result: ReadResult) -> bool:
        """Move ``tp`` past batches that hold no record from ``position`` on; whether to read again.

        A compacted log keeps a batch's offsets when the cleaner removes its records (and writes
        empty batches over removed ones): a read there returns batches but no record, and a
        position left where it was would read them again forever.
        """
        if not result.data or self.assignment.positions.get(tp) != position:
            return False
        _, after = span_of_whole_batches(result.data, position)
        if after <= position:
            return False
        self.assignment.positions[tp] = after
        return after < result.high_watermark

    async def _ahead_or_now(self, tp: TopicPartition, position: int) -> ReadResult:
        ahead = self._read_ahead.pop(tp, None)
        if ahead is not None:
            offset, read = ahead
            if offset == position:
                return await read
            _discard(read)
        return await self.source.fetch_async(tp[0], tp[1], position, self.fetch_max_bytes)

    def drop(self, tp: TopicPartition) -> None:
        """Forget the read-ahead of ``tp`` (it was seeked, revoked or lost)."""
        ahead = self._read_ahead.pop(tp, None)
        if ahead is not None:
            _discard(ahead[1])

    def drop_all(self) -> None:
        """Forget every read-ahead: they belong to the event loop that started them."""
        for _, read in self._read_ahead.values():
            _discard(read)
        self._read_ahead.clear()


def _discard(read: asyncio.Future[ReadResult]) -> None:
    """Cancel a read-ahead nobody will await; a finished one's error is dropped, not logged as lost."""
    if read.done():
        if not read.cancelled():
            read.exception()
    else:
        read.cancel()
