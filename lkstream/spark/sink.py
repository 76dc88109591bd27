"""The ``lkstream`` sink: ``df.write`` / ``df.writeStream.format("lkstream")`` through a daemon.

Input columns, as in Spark's Kafka sink: ``value`` (required, binary or
string), ``key`` (binary or string), ``topic`` (string; or the ``topic``
option, which wins when both are given), ``partition`` (int; by default keyed
rows go to murmur2(key) and keyless rows stick to one partition per call, as
every LKSTREAM producer does) and ``headers`` (array of struct key string,
value binary). The schema is checked on the driver when the query starts.

Delivery is **at-least-once**: each Spark task produces its rows and returns;
nothing is staged for a global commit. A task that fails after some of its
produce calls were acknowledged and is retried appends those rows again, and a
micro-batch re-run after a driver restart appends the whole batch again. The
duplicates are whole rows at new offsets (docs/spark.md).

Speed: keyless rows (and rows with a ``partition`` column) are cut into batches
from the Arrow columns' lengths (numpy, no Python work per row), encoded from the
Arrow buffers (:mod:`lkstream.spark.columns`, in C), and
appended with up to :data:`IN_FLIGHT` batches in flight on the connection's
stream, which appends them in the order they were sent; keyed rows and rows with
headers go through ``produce_many_sync``, one call at a time. Every call is made
from the task's own thread on the client's synchronous stream (no event loop, no
hop to the client's loop thread).
"""

from __future__ import annotations

import itertools
import random
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import repeat
from typing import Any, Final

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from lkstream.client.remote import RemoteBroker, connect
from lkstream.client.remote.produce import PendingBatch
from lkstream.errors import InvalidArgumentError, RecordTooLargeError, UnknownTopicError
from lkstream.format.codec import Compression
from lkstream.spark.columns import as_binary, encode_rows
from lkstream.spark.options import SinkOptions

# Bytes a record adds to a batch beyond its key and value (varint framing, a rough upper bound).
RECORD_OVERHEAD: Final = 24
#: Produce calls of one task in flight at once (on the connection's one stream, appended in order).
IN_FLIGHT: Final = 4


@dataclass
class Written(WriterCommitMessage):
    """What one task appended."""

    rows: int


def _is_headers(dtype: DataType) -> bool:
    if not isinstance(dtype, ArrayType) or not isinstance(dtype.elementType, StructType):
        return False
    fields = {f.name: f.dataType for f in dtype.elementType.fields}
    return (
        set(fields) == {"key", "value"}
        and isinstance(fields["key"], StringType)
        and isinstance(fields["value"], BinaryType | StringType)
    )


def check_sink_schema(schema: StructType, options: SinkOptions) -> None:
    """Reject, on the driver, a schema the sink cannot write."""
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise InvalidArgumentError(
            f"the lkstream sink needs a column named value (binary or string); the input has {sorted(fields)}"
        )
    allowed: dict[str, tuple[type[DataType], ...]] = {
        "value": (BinaryType, StringType),
        "key": (BinaryType, StringType),
        "topic": (StringType,),
        "partition": (IntegerType,),
    }
    for name, dtype in fields.items():
        if name == "headers":
            if not _is_headers(dtype):
                raise InvalidArgumentError(
                    f"column headers must be array<struct<key: string, value: binary>>, got {dtype.simpleString()}"
                )
        elif name not in allowed:
            raise InvalidArgumentError(
                f"the lkstream sink does not know column {name!r}; it writes key, value, topic, partition "
                "and headers (select or drop the others)"
            )
        elif not isinstance(dtype, allowed[name]):
            kinds = " or ".join(t.typeName() for t in allowed[name])
            raise InvalidArgumentError(f"column {name} must be {kinds}, got {dtype.simpleString()}")
    if options.topic is None and "topic" not in fields:
        raise InvalidArgumentError("the lkstream sink needs a topic: set option topic or add a topic column")


def _as_bytes(column: pa.Array) -> list[bytes | None]:
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(pa.binary())
    values: list[bytes | None] = column.to_pylist()
    return values


def _lengths(column: pa.Array | None, rows: int) -> np.ndarray[Any, Any]:
    """Bytes of each row's binary or string value (0 for null), without copying the values."""
    if column is None:
        return np.zeros(rows, dtype=np.int64)
    offsets = column.buffers()[1]
    width = np.int64 if pa.types.is_large_binary(column.type) or pa.types.is_large_string(column.type) else np.int32
    ends = np.frombuffer(offsets, dtype=width, count=column.offset + rows + 1)[column.offset :]
    lengths = np.diff(ends).astype(np.int64)
    if column.null_count:
        lengths[column.is_null().to_numpy(zero_copy_only=False)] = 0
    return lengths


def cut_points(sizes: np.ndarray[Any, Any], batch_bytes: int) -> list[int]:
    """Row indices where batches begin, after the first: each batch holds as many rows as fit in
    ``batch_bytes`` (record framing included), and at least one."""
    ends = np.cumsum(sizes + RECORD_OVERHEAD)
    cuts: list[int] = []
    start, start_bytes = 0, 0
    while True:
        # The first row ending past the budget starts the next batch (a batch holds at least one row).
        at = max(start + 1, int(np.searchsorted(ends, start_bytes + batch_bytes, side="right")))
        if at >= len(sizes):
            return cuts
        cuts.append(at)
        start, start_bytes = at, int(ends[at - 1])


class _ArrowProducer:
    """Appends Arrow record batches of sink rows to the daemon (one connection per task)."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, batches: Iterator[pa.RecordBatch]) -> Written:
        opts = self.options
        with connect(
            opts.bootstrap,
            batch_bytes=opts.batch_bytes,
            compression=opts.compression,
            **opts.credentials.connect_options(),
        ) as broker:
            return self._write(broker, batches)

    def _write(self, broker: RemoteBroker, batches: Iterator[pa.RecordBatch]) -> Written:
        sends = _Window(IN_FLIGHT)
        total = 0
        try:
            for batch in batches:
                if batch.num_rows:
                    self._write_batch(broker, batch, sends)
                    total += batch.num_rows
            sends.drain()
        finally:
            sends.cancel()
        return Written(total)

    def _write_batch(self, broker: RemoteBroker, batch: pa.RecordBatch, sends: _Window) -> None:
        opts = self.options
        names = batch.schema.names
        topics = (
            [opts.topic] * batch.num_rows if opts.topic is not None else batch.column(names.index("topic")).to_pylist()
        )
        parts = batch.column(names.index("partition")).to_pylist() if "partition" in names else None
        groups: dict[tuple[str, int | None], list[int]] = {}
        if parts is None and len(set(topics)) == 1:
            groups[(topics[0], None)] = list(range(batch.num_rows))
        else:
            for i, topic in enumerate(topics):
                groups.setdefault((topic, None if parts is None else parts[i]), []).append(i)
        for (topic, partition), rows in groups.items():
            if topic is None:
                raise InvalidArgumentError("a row of the lkstream sink has a null topic")
            part = batch if len(rows) == batch.num_rows else batch.take(pa.array(rows))
            self._write_group(broker, topic, partition, part, sends)

    def _write_group(
        self, broker: RemoteBroker, topic: str, partition: int | None, rows: pa.RecordBatch, sends: _Window
    ) -> None:
        names = rows.schema.names
        value_col = rows.column(names.index("value"))
        key_col = rows.column(names.index("key")) if "key" in names else None
        if "headers" in names:
            headers = [
                [(h["key"], h["value"]) for h in hs] if hs else []
                for hs in rows.column(names.index("headers")).to_pylist()
            ]
            keys = _as_bytes(key_col) if key_col is not None else repeat(None)
            records: list[Any] = list(zip(keys, _as_bytes(value_col), headers, strict=False))
            sends.drain()  # calls of one task stay in order
            broker.produce_many_sync(topic, records, partition=partition)
        elif partition is None and key_col is not None and key_col.null_count < len(key_col):
            # Keyed rows: the client routes each key with murmur2, as every producer does.
            sends.drain()
            broker.produce_many_sync(topic, list(zip(_as_bytes(key_col), _as_bytes(value_col), strict=True)))
        else:
            # Keyless (one partition per call, as the sticky partitioner does) or placed rows:
            # cut and encode the batches here, from the Arrow buffers, and append each as it is.
            target = partition if partition is not None else random.randrange(broker.partitions_for(topic))
            self._append(
                broker,
                topic,
                target,
                keys=None if key_col is None else as_binary(key_col),
                values=as_binary(value_col),
                sends=sends,
            )

    def _append(
        self,
        broker: RemoteBroker,
        topic: str,
        partition: int,
        *,
        keys: pa.Array | None,
        values: pa.Array,
        sends: _Window,
    ) -> None:
        """Cut the rows into batches of about ``batchBytes``; append each to ``topic[partition]``."""
        sizes = _lengths(values, len(values))
        if keys is not None:
            sizes += _lengths(keys, len(keys))
        limit = broker.max_message_bytes
        if limit is not None and len(sizes) and int(sizes.max()) > limit:
            raise RecordTooLargeError(int(sizes.max()), limit)
        codec = Compression.parse(self.options.compression)
        bounds = [0, *cut_points(sizes, self.options.batch_bytes), len(values)]
        for start, end in itertools.pairwise(bounds):
            batch = encode_rows(keys, values, start, end, codec)
            if broker.kafka_lane is not None:
                # One batch at a time through the Kafka lane costs both processes less CPU than a
                # window of gRPC calls (docs/benchmarks-notes.md, "The sink through the lane").
                sends.drain()
                broker.produce_batch_sync(topic, partition, batch)
            else:
                # One partition's batches may be in flight together: the stream appends them in order.
                # Sent from this thread on the client's synchronous stream: no hop to its event-loop thread.
                sends.add(broker.produce_batch_start(topic, partition, batch))


class _Window:
    """At most ``size`` batches in flight (``produce_batch_start`` handles, answers read in this thread).

    :meth:`add` takes a batch already sent, so ``size`` are in flight while it waits for the
    oldest answer, and ``size - 1`` while the caller encodes the next batch. The first failure
    is raised by the next add or drain.
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._pending: deque[PendingBatch] = deque()

    def add(self, call: PendingBatch) -> None:
        self._pending.append(call)
        while len(self._pending) >= self._size:
            self._pending.popleft().result()

    def drain(self) -> None:
        while self._pending:
            self._pending.popleft().result()

    def cancel(self) -> None:
        self._pending.clear()  # the connection closes next, ending their stream


def _check_reachable(options: SinkOptions) -> None:
    """Connect once on the driver so an unreachable daemon or missing topic fails at query start."""
    with connect(options.bootstrap, **options.credentials.connect_options()) as broker:
        if options.topic is not None:
            try:
                broker.describe_topic(options.topic)
            except UnknownTopicError:
                # The daemon may auto-create topics on produce; only say so if it refuses.
                broker.describe_topic(options.topic, create=True)


class BatchWriter(DataSourceArrowWriter):
    """``df.write.format("lkstream")``."""

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        check_sink_schema(schema, options)
        _check_reachable(options)
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        return _ArrowProducer(self.options).write(iterator)


class StreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("lkstream")`` (at-least-once, see the module docstring)."""

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        check_sink_schema(schema, options)
        _check_reachable(options)
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        return _ArrowProducer(self.options).write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to publish: rows were appended by the tasks themselves."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Appended rows cannot be taken back; a re-run micro-batch appends them again (at-least-once)."""
