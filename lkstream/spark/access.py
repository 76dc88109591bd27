"""One view of a log for the Spark source, over a daemon (``bootstrap``) or a data directory (``path``).

:class:`LogView` answers the planning questions (topics, partitions, bounds,
offsets for a timestamp) on the driver, and :meth:`LogView.batches` hands the
raw v2 batches of an offset range to a task. Only the public client
(``lkstream.connect``) and the read-only storage reader are used, so a data
directory is never written and may be read beside a live daemon.

Objects are cheap and hold one connection (or none); open one where it is used,
never pickle one (Spark workers get an :class:`~lkstream.spark.options.Access`
and open their own).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from lkstream.errors import InvalidArgumentError, OffsetOutOfRangeError, UnknownTopicError
from lkstream.format.batch import parse_header, span_of_whole_batches
from lkstream.format.codec import decode_batch, iter_batches
from lkstream.spark.options import Access

if TYPE_CHECKING:
    from lkstream.client.remote import RemoteBroker
    from lkstream.storage.reader import DataDirReader


class Fetched(Protocol):
    """What a daemon fetch answers (the client's ReadResult; named here, spark does not import storage)."""

    @property
    def data(self) -> bytes: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def high_watermark(self) -> int: ...


class DataLoss(Exception):
    """Records of a planned range are gone (retention deleted them): ``[start, available)`` is lost."""

    def __init__(self, topic: str, partition: int, start: int, available: int) -> None:
        super().__init__(topic, partition, start, available)
        self.topic = topic
        self.partition = partition
        self.start = start
        self.available = available


class LogView(Protocol):
    def topics(self) -> list[str]: ...
    def partitions(self, topic: str) -> list[int]: ...
    def bounds(self, topic: str, partition: int) -> tuple[int, int]: ...
    def all_bounds(self, topic: str) -> dict[int, tuple[int, int]]: ...
    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int: ...
    def batches(self, topic: str, partition: int, start: int, end: int) -> Iterator[bytes]: ...
    def close(self) -> None: ...


def open_view(access: Access, *, fetch_max_bytes: int = 4 * 1024 * 1024) -> LogView:
    """A :class:`LogView` on ``access``; raises ``BrokerUnavailableError`` / ``InvalidArgumentError`` early.

    Each kind imports its client here, so a Spark worker loads only the one its task uses (the
    gRPC client costs a worker about 0.1 s and 20 MB it does not need for a ``path`` read).
    """
    if access.bootstrap:
        from lkstream.client.remote import connect

        return DaemonView(connect(access.bootstrap, **access.credentials.connect_options()), fetch_max_bytes)
    assert access.path is not None
    from lkstream.storage.reader import DataDirReader

    return DirectoryView(DataDirReader(access.path))


class DaemonView:
    """A daemon through :class:`RemoteBroker`; a task's fetches run one ahead of its decoding."""

    def __init__(self, broker: RemoteBroker, fetch_max_bytes: int) -> None:
        self.broker = broker
        self.fetch_max_bytes = fetch_max_bytes
        self._ahead: concurrent.futures.ThreadPoolExecutor | None = None

    def topics(self) -> list[str]:
        return sorted(self.broker.list_topics())

    def partitions(self, topic: str) -> list[int]:
        return list(range(len(self.broker.describe_topic(topic).partitions)))

    def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        return self.broker.bounds(topic, partition)

    def all_bounds(self, topic: str) -> dict[int, tuple[int, int]]:
        stats = self.broker.describe_topic(topic).partitions
        return {pid: (s.log_start_offset, s.high_watermark) for pid, s in enumerate(stats)}

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int:
        return self.broker.offsets_for_timestamp(topic, timestamp_ms, [partition])[partition]

    def batches(self, topic: str, partition: int, start: int, end: int) -> Iterator[bytes]:
        """Raw batches covering ``[start, end)``; raises :class:`DataLoss` when ``start`` was deleted.

        The next range is fetched (in a helper thread) while the caller decodes this
        one, so the daemon reads and sends while the task decodes.
        """
        offset = start
        fetching = self._fetch_soon(topic, partition, offset)
        while offset < end:
            result = self._fetched(fetching, topic, partition, offset)
            _, after = span_of_whole_batches(result.data, offset)
            if after <= offset:
                # Nothing whole came back: the range lies beyond what the log holds now.
                raise DataLoss(topic, partition, offset, max(result.high_watermark, offset))
            if after < min(end, result.high_watermark):
                fetching = self._fetch_soon(topic, partition, after)
            for _, batch in iter_batches(result.data):
                if parse_header(batch).base_offset >= end:
                    return
                yield batch
            offset = after

    def _fetch_soon(self, topic: str, partition: int, offset: int) -> concurrent.futures.Future[Fetched]:
        if self._ahead is None:
            self._ahead = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="lkstream-spark-fetch")
        return self._ahead.submit(self.broker.fetch, topic, partition, offset, self.fetch_max_bytes)

    def _fetched(
        self, fetching: concurrent.futures.Future[Fetched], topic: str, partition: int, offset: int
    ) -> Fetched:
        try:
            result = fetching.result()
        except OffsetOutOfRangeError as exc:
            if exc.earliest > offset:
                raise DataLoss(topic, partition, offset, exc.earliest) from None
            raise
        if result.log_start_offset > offset:
            raise DataLoss(topic, partition, offset, result.log_start_offset)
        return result

    def close(self) -> None:
        if self._ahead is not None:
            self._ahead.shutdown(wait=True, cancel_futures=True)
            self._ahead = None
        self.broker.close()


class DirectoryView:
    """A data directory through the read-only :class:`DataDirReader`."""

    def __init__(self, reader: DataDirReader) -> None:
        self.reader = reader

    def topics(self) -> list[str]:
        return self.reader.topics()

    def partitions(self, topic: str) -> list[int]:
        if topic not in self.reader.topic_dirs():
            raise UnknownTopicError(topic)
        return self.reader.partitions(topic)

    def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        reader = self.reader.partition(topic, partition)
        end = reader.end_offset()
        return min(reader.log_start_offset, end), end

    def all_bounds(self, topic: str) -> dict[int, tuple[int, int]]:
        return {pid: self.bounds(topic, pid) for pid in self.partitions(topic)}

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int:
        """First offset whose timestamp is >= ``timestamp_ms``; the log end when every record is older."""
        reader = self.reader.partition(topic, partition)
        end = reader.log_start_offset
        for raw in reader.batches(reader.log_start_offset):
            end = raw.header.next_offset
            if raw.header.max_timestamp < timestamp_ms:
                continue
            for record in decode_batch(raw.data, topic, partition):
                if record.timestamp >= timestamp_ms:
                    return record.offset
        return end

    def batches(self, topic: str, partition: int, start: int, end: int) -> Iterator[bytes]:
        reader = self.reader.partition(topic, partition)
        if reader.log_start_offset > start:
            raise DataLoss(topic, partition, start, reader.log_start_offset)
        expected = start
        for raw in reader.batches(start):
            if raw.header.base_offset >= end:
                return
            if raw.header.base_offset > expected and expected == start:
                # The segment holding ``start`` was deleted between planning and reading.
                raise DataLoss(topic, partition, start, raw.header.base_offset)
            expected = raw.header.next_offset
            yield raw.data
        if expected < end:
            raise DataLoss(topic, partition, expected, expected)

    def close(self) -> None:
        pass


def check_topic(view: LogView, topic: str, access: Access) -> list[int]:
    """Partitions of ``topic``; an unknown topic is an :class:`InvalidArgumentError` naming the log."""
    try:
        parts = view.partitions(topic)
    except UnknownTopicError:
        raise InvalidArgumentError(f"topic {topic!r} does not exist in the {access.describe()}") from None
    return parts
