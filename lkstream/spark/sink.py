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
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

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
from lkstream.errors import InvalidArgumentError, RecordTooLargeError, UnknownTopicError
from lkstream.format.codec import Compression, encode_batch
from lkstream.spark.options import SinkOptions

# Bytes a record adds to a batch beyond its key and value (varint framing, a rough upper bound).
RECORD_OVERHEAD: Final = 24


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


class _ArrowProducer:
    """Appends Arrow record batches of sink rows to the daemon (one connection per task)."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, batches: Iterator[pa.RecordBatch]) -> Written:
        opts = self.options
        total = 0
        with connect(
            opts.bootstrap,
            batch_bytes=opts.batch_bytes,
            compression=opts.compression,
            **opts.credentials.connect_options(),
        ) as broker:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                names = batch.schema.names
                values = _as_bytes(batch.column(names.index("value")))
                keys = _as_bytes(batch.column(names.index("key"))) if "key" in names else [None] * len(values)
                headers: list[Any] | None = None
                if "headers" in names:
                    headers = [
                        [(h["key"], h["value"]) for h in hs] if hs else []
                        for hs in batch.column(names.index("headers")).to_pylist()
                    ]
                topics = (
                    [opts.topic] * len(values)
                    if opts.topic is not None
                    else batch.column(names.index("topic")).to_pylist()
                )
                parts = batch.column(names.index("partition")).to_pylist() if "partition" in names else None
                groups: dict[tuple[str, int | None], list[int]] = {}
                if parts is None and len(set(topics)) == 1:
                    groups[(topics[0], None)] = list(range(len(values)))
                else:
                    for i, topic in enumerate(topics):
                        groups.setdefault((topic, None if parts is None else parts[i]), []).append(i)
                for (topic, partition), rows in groups.items():
                    if topic is None:
                        raise InvalidArgumentError("a row of the lkstream sink has a null topic")
                    if headers is not None:
                        records: list[Any] = [(keys[i], values[i], headers[i]) for i in rows]
                        broker.produce_many_sync(topic, records, partition=partition)
                    elif partition is None and any(keys[i] is not None for i in rows):
                        # Keyed rows: the client routes each key with murmur2, as every producer does.
                        broker.produce_many_sync(topic, [(keys[i], values[i]) for i in rows])
                    else:
                        # Keyless (one partition per call, as the sticky partitioner does) or placed rows:
                        # encode the batches here and append them as they are.
                        target = partition if partition is not None else random.randrange(broker.partitions_for(topic))
                        self._append(broker, topic, target, [(keys[i], values[i]) for i in rows])
                    total += len(rows)
        return Written(total)

    def _append(self, broker: RemoteBroker, topic: str, partition: int, pairs: list[tuple[Any, Any]]) -> None:
        """Encode ``pairs`` into batches of about ``batchBytes`` and append each to ``topic[partition]``."""
        limit = broker.max_message_bytes
        codec = Compression.parse(self.options.compression)
        start, size = 0, 0
        for i, (key, value) in enumerate(pairs):
            record = (len(key) if key else 0) + (len(value) if value else 0)
            if limit is not None and record > limit:
                raise RecordTooLargeError(record, limit)
            size += record + RECORD_OVERHEAD
            if size >= self.options.batch_bytes:
                broker.produce_batch_sync(topic, partition, encode_batch(pairs[start : i + 1], compression=codec))
                start, size = i + 1, 0
        if start < len(pairs):
            broker.produce_batch_sync(topic, partition, encode_batch(pairs[start:], compression=codec))


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
