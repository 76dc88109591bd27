"""The ``lkstream`` source: batch (``spark.read``) and Structured Streaming (``spark.readStream``).

Planning happens on the driver: the options are parsed, the log is opened
(a daemon through ``lkstream.connect`` or a data directory through the
read-only reader), topics and partitions are resolved and offsets are turned
into one ``[start, end)`` range per topic-partition. Each range (or, with
``minPartitions``, each slice of one) is an :class:`OffsetRange`, a picklable
task description; a Spark worker opens its own connection in :func:`read_range`
and decodes the raw batches of its range straight into Arrow record batches.

A streaming offset is ``{"topic": {"partition": next offset}}`` (JSON keys are
strings). A planned range is read the same way every time it is read: offsets
are dense and immutable, so replaying a micro-batch after a restart yields the
same records, which is what gives exactly-once output into an idempotent sink
(docs/spark.md). The one exception is retention: a range whose records were
deleted fails the task (``failOnDataLoss=true``, the default) or is skipped
(``false``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from lkstream.errors import InvalidArgumentError, LkstreamError, UnknownTopicError
from lkstream.spark.access import DataLoss, LogView, open_view
from lkstream.spark.arrow import ArrowBuilder
from lkstream.spark.options import EARLIEST, LATEST, Access, OffsetSpec, SourceOptions

TopicPartition = tuple[str, int]
Offsets = dict[TopicPartition, int]

#: Rows per Arrow record batch handed to Spark: a record batch has a fixed cost in Spark and the
#: socket protocol; 4,096 measured the same within this machine's noise (docs/spark.md).
ROWS_PER_CHUNK = 64 * 1024


class DataLossError(LkstreamError):
    """Records a query planned to read were deleted by retention (``failOnDataLoss=true``)."""


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One task: read ``topic[partition]`` offsets ``[start, end)``."""

    access: Access
    topic: str
    partition: int
    start: int
    end: int
    include_headers: bool
    fail_on_data_loss: bool
    fetch_max_bytes: int


def to_json(offsets: Offsets) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, pid), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(pid)] = offset
    return out


def from_json(value: dict[str, Any]) -> Offsets:
    return {(topic, int(pid)): int(offset) for topic, parts in value.items() for pid, offset in parts.items()}


def data_loss_message(loss: DataLoss) -> str:
    return (
        f"records of {loss.topic}[{loss.partition}] from offset {loss.start} to {loss.available - 1} are no longer "
        f"available (retention deleted them; the log now starts at {loss.available}). Set failOnDataLoss=false "
        "to skip them"
        if loss.available > loss.start
        else f"records of {loss.topic}[{loss.partition}] from offset {loss.start} are no longer available"
    )


def read_range(task: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Decode the records of ``task`` into Arrow record batches (runs on a Spark worker)."""
    builder = ArrowBuilder(task.topic, task.partition, task.include_headers)
    view = open_view(task.access, fetch_max_bytes=task.fetch_max_bytes)
    try:
        start = task.start
        while start < task.end:
            try:
                for batch in view.batches(task.topic, task.partition, start, task.end):
                    builder.add(batch, start, task.end)
                    if builder.rows >= ROWS_PER_CHUNK:
                        chunk = builder.flush()
                        if chunk is not None:
                            yield chunk
                break
            except DataLoss as loss:
                if task.fail_on_data_loss:
                    raise DataLossError(data_loss_message(loss)) from None
                if loss.available <= loss.start:
                    break
                # Skip what retention deleted: restart at the new log start.
                start = loss.available
        chunk = builder.flush()
        if chunk is not None:
            yield chunk
    finally:
        view.close()


class Planner:
    """Driver-side resolution of topics, partitions and offsets for one query."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._view: LogView | None = None

    @property
    def view(self) -> LogView:
        if self._view is None:
            self._view = open_view(self.options.access, fetch_max_bytes=self.options.fetch_max_bytes)
        return self._view

    def close(self) -> None:
        if self._view is not None:
            self._view.close()
            self._view = None

    def refresh(self) -> None:
        """Drop the view so the next question sees new segments (a data directory view is a snapshot)."""
        if self.options.access.path:
            self.close()

    def topic_partitions(self, *, strict: bool) -> list[TopicPartition]:
        """Every topic-partition the subscription selects now; ``strict`` fails on a missing topic."""
        sub = self.options.subscription
        where = self.options.access.describe()
        if sub.assign:
            out: list[TopicPartition] = []
            for topic, pid in sub.assign:
                parts = self._partitions(topic, strict=strict)
                if pid not in parts:
                    if strict:
                        raise InvalidArgumentError(f"option assign: {topic}[{pid}] does not exist in the {where}")
                    continue
                out.append((topic, pid))
            return out
        topics = [t for t in self.view.topics() if sub.matches(t)] if sub.pattern is not None else list(sub.topics)
        return [(t, p) for t in topics for p in self._partitions(t, strict=strict)]

    def _partitions(self, topic: str, *, strict: bool) -> list[int]:
        try:
            return self.view.partitions(topic)
        except UnknownTopicError:
            if strict:
                raise InvalidArgumentError(
                    f"topic {topic!r} does not exist in the {self.options.access.describe()}"
                ) from None
            return []

    def bounds(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        """``(log start, end)`` of each partition: one question per topic, not per partition."""
        per_topic: dict[str, dict[int, tuple[int, int]]] = {}
        out: dict[TopicPartition, tuple[int, int]] = {}
        for topic, pid in tps:
            if topic not in per_topic:
                per_topic[topic] = self.view.all_bounds(topic)
            if pid in per_topic[topic]:
                out[(topic, pid)] = per_topic[topic][pid]
            else:
                out[(topic, pid)] = self.view.bounds(topic, pid)
        return out

    def resolve(
        self,
        tps: Sequence[TopicPartition],
        spec: OffsetSpec,
        by_timestamp: dict[str, dict[int, int]] | None,
        timestamp: int | None,
        what: str,
    ) -> Offsets:
        """Concrete offsets for ``tps`` from an offsets option, a per-partition or a global timestamp."""
        bounds = self.bounds(tps)
        out: Offsets = {}
        for tp in tps:
            low, high = bounds[tp]
            if by_timestamp is not None:
                ts = by_timestamp.get(tp[0], {}).get(tp[1])
                if ts is None:
                    raise InvalidArgumentError(
                        f"option {what}OffsetsByTimestamp gives no timestamp for {tp[0]}[{tp[1]}]"
                    )
                out[tp] = self._offset_at(tp, ts, high, what)
            elif timestamp is not None:
                out[tp] = self._offset_at(tp, timestamp, high, what)
            elif isinstance(spec, str):
                out[tp] = low if spec == "earliest" else high
            else:
                offset = spec.get(tp[0], {}).get(tp[1])
                if offset is None:
                    raise InvalidArgumentError(
                        f"option {what}Offsets gives no offset for {tp[0]}[{tp[1]}]: name every partition "
                        "(-2 for earliest, -1 for latest)"
                    )
                out[tp] = low if offset == EARLIEST else high if offset == LATEST else offset
        return out

    def _offset_at(self, tp: TopicPartition, timestamp_ms: int, high: int, what: str) -> int:
        """The first offset at or after ``timestamp_ms``; the end when there is none, except for a start with
        ``startingOffsetsByTimestampStrategy=error`` (Kafka's default), which fails the query as Kafka's does."""
        found = self.view.offset_for_timestamp(tp[0], tp[1], timestamp_ms)
        if found < high or what != "starting" or self.options.starting_timestamp_strategy == "latest":
            return found
        if found < self.view.bounds(*tp)[1]:  # a record at the time arrived since the bounds were read
            return found
        raise InvalidArgumentError(
            f"{tp[0]}[{tp[1]}] has no record at or after the starting timestamp {timestamp_ms}: as Kafka's source, "
            "the query fails (startingOffsetsByTimestampStrategy=error); set startingOffsetsByTimestampStrategy="
            "latest to start such partitions at their end"
        )

    def ranges(self, start: Offsets, end: Offsets, *, lenient_new: bool = False) -> list[OffsetRange]:
        """One task per non-empty range, split further to reach ``minPartitions``."""
        opts = self.options
        spans: list[tuple[TopicPartition, int, int, bool]] = []
        for tp, stop in sorted(end.items()):
            begin = start.get(tp)
            # A partition that appeared after the previous batch starts at its beginning; what
            # retention already took from it was never promised to the query.
            fail = opts.fail_on_data_loss and (begin is not None or not lenient_new)
            begin = 0 if begin is None else begin
            if stop > begin:
                spans.append((tp, begin, stop, fail))
        pieces = _split(spans, opts.min_partitions, opts.max_records_per_partition)
        return [
            OffsetRange(opts.access, tp[0], tp[1], a, b, opts.include_headers, fail, opts.fetch_max_bytes)
            for tp, a, b, fail in pieces
        ]


def _split(
    spans: list[tuple[TopicPartition, int, int, bool]],
    min_partitions: int | None,
    max_records: int | None = None,
) -> list[tuple[TopicPartition, int, int, bool]]:
    """Split large ranges so there are about ``min_partitions`` tasks, each piece sized by its share, and
    no task holds more than ``max_records`` offsets (Kafka's maxRecordsPerPartition): the larger of the two."""
    total = sum(b - a for _, a, b, _ in spans)
    if (not min_partitions or len(spans) >= min_partitions) and not max_records:
        return spans
    out: list[tuple[TopicPartition, int, int, bool]] = []
    for tp, a, b, fail in spans:
        by_share = round(min_partitions * (b - a) / total) if min_partitions and len(spans) < min_partitions else 1
        by_size = -(-(b - a) // max_records) if max_records else 1
        parts = max(1, min(b - a, max(by_share, by_size)))
        for i in range(parts):
            lo = a + (b - a) * i // parts
            hi = a + (b - a) * (i + 1) // parts
            if hi > lo:
                out.append((tp, lo, hi, fail))
    return out


def rate_limit(start: Offsets, latest: Offsets, max_rows: int) -> Offsets:
    """End offsets admitting at most ``max_rows`` records, shared in proportion to what each partition has."""
    available = {tp: max(0, high - start.get(tp, 0)) for tp, high in latest.items()}
    total = sum(available.values())
    if total <= max_rows:
        return dict(latest)
    share = {tp: max_rows * n // total for tp, n in available.items()}
    # Hand the rounding remainder to the partitions with most data waiting, so the limit is used up.
    left = max_rows - sum(share.values())
    for tp in sorted(available, key=lambda t: (-(available[t] - share[t]), t)):
        if left <= 0:
            break
        extra = min(left, available[tp] - share[tp])
        share[tp] += extra
        left -= extra
    return {tp: start.get(tp, 0) + share[tp] for tp in latest}


def plan_batch(options: SourceOptions) -> list[OffsetRange]:
    """The tasks of a batch read: every selected partition's range from its starting to its ending offset."""
    planner = Planner(options)
    try:
        tps = planner.topic_partitions(strict=True)
        start = planner.resolve(
            tps, options.starting, options.starting_by_timestamp, options.starting_timestamp, "starting"
        )
        end = planner.resolve(tps, options.ending, options.ending_by_timestamp, options.ending_timestamp, "ending")
        return planner.ranges(start, end)
    finally:
        planner.close()


class BatchReader(DataSourceReader):
    """``spark.read.format("lkstream")``: planned entirely at construction, on the driver."""

    def __init__(self, options: SourceOptions) -> None:
        self.tasks = plan_batch(options)

    def partitions(self) -> Sequence[InputPartition]:
        return self.tasks

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if type(partition) is InputPartition and partition.value is None:
            # What Spark plans when partitions() is empty (nothing between the start and end offsets).
            return iter(())
        assert isinstance(partition, OffsetRange)
        return read_range(partition)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("lkstream")`` with admission control and Trigger.AvailableNow.

    The instance lives in Spark's long-running planner process on the driver,
    so the open log view is kept across micro-batches; workers get pickled
    copies without it and only call :meth:`read`.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.planner = Planner(options)
        self._target: Offsets | None = None
        # When minOffsetsPerTrigger last let a micro-batch through: never yet, so the first one goes (as Kafka's).
        self._last_trigger = -math.inf
        # Fail at query start, on the driver, for a missing topic or an unreachable daemon.
        self.planner.topic_partitions(strict=options.subscription.pattern is None)

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "planner": Planner(self.options), "_target": None, "_last_trigger": -math.inf}

    def initialOffset(self) -> dict[str, Any]:
        opts = self.options
        tps = self.planner.topic_partitions(strict=opts.subscription.pattern is None)
        offsets = self.planner.resolve(
            tps, opts.starting, opts.starting_by_timestamp, opts.starting_timestamp, "starting"
        )
        return to_json(offsets)

    def _latest(self) -> Offsets:
        self.planner.refresh()
        tps = self.planner.topic_partitions(strict=False)
        return {tp: high for tp, (_, high) in self.planner.bounds(tps).items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = from_json(start)
        latest = self._latest() if self._target is None else dict(self._target)
        # Never move a partition backwards (a recreated topic, or a target older than the checkpoint).
        latest = {tp: max(high, begin.get(tp, 0)) for tp, high in latest.items()}
        for tp, offset in begin.items():
            latest.setdefault(tp, offset)
        if self._held_back(begin, latest):
            return start
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(begin, latest, limit.max_rows)
        return to_json(latest)

    def _held_back(self, begin: Offsets, latest: Offsets) -> bool:
        """Kafka's minOffsetsPerTrigger: hold the micro-batch back while fewer records wait, at most
        maxTriggerDelay after the last one. Trigger.AvailableNow reads what it pinned, whatever the count."""
        wanted = self.options.min_offsets_per_trigger
        if not wanted or self._target is not None:
            return False
        now = time.monotonic()
        waiting = sum(max(0, high - begin.get(tp, 0)) for tp, high in latest.items())
        if waiting < wanted and (now - self._last_trigger) * 1000 < self.options.max_trigger_delay_ms:
            return True
        self._last_trigger = now
        return False

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return to_json(self._latest())

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return self.planner.ranges(from_json(start), from_json(end), lenient_new=True)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        return read_range(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the source keeps no state of its own (Spark's checkpoint holds the offsets)."""

    def stop(self) -> None:
        self.planner.close()


class UnplannableStream(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The stream reader of a query that cannot be planned: every call raises why (a bad option, a missing
    topic, an unreachable daemon).

    PySpark 4.3's planner process makes the reader, then calls ``reader.stop()`` in a ``finally``: when the
    constructor raises, ``reader`` was never bound and the ``UnboundLocalError`` of that ``finally`` ends the
    traceback the user reads, below ours. Made this way, the reader exists, the first call Spark makes raises
    our error, and our message is the last one.
    """

    def __init__(self, error: Exception) -> None:
        self.error = error

    def _fail(self) -> NoReturn:
        raise self.error

    def initialOffset(self) -> dict[str, Any]:
        self._fail()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        self._fail()

    def getDefaultReadLimit(self) -> ReadLimit:
        self._fail()

    def prepareForTriggerAvailableNow(self) -> None:
        self._fail()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        self._fail()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        self._fail()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        self._fail()

    def commit(self, end: dict[str, Any]) -> None:
        self._fail()

    def stop(self) -> None:
        """Nothing was opened."""
