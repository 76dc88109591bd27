"""LKSTREAM as a PySpark data source: Structured Streaming and batch, source and sink.

::

    import lkstream.spark
    lkstream.spark.register(spark)
    df = (spark.readStream.format("lkstream")
          .option("bootstrap", "127.0.0.1:9090")      # or .option("path", "/data/lkstream")
          .option("subscribe", "market.ticks")
          .load())                                     # Spark's Kafka source schema

Built on PySpark's Python Data Source API (:mod:`pyspark.sql.datasource`,
PySpark 4.2+). Options mirror Spark's Kafka source; see
:mod:`lkstream.spark.options` and docs/spark.md for guarantees. This package is
an integration layer: it uses only the public client (``lkstream.connect``),
the read-only storage reader and the batch codec.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from lkstream.errors import InvalidArgumentError
from lkstream.spark.arrow import arrow_schema, spark_ddl
from lkstream.spark.options import parse_sink_options, parse_source_options
from lkstream.spark.sink import BatchWriter, StreamWriter
from lkstream.spark.source import BatchReader, DataLossError, OffsetRange, StreamReader

FORMAT = "lkstream"

__all__ = [
    "FORMAT",
    "DataLossError",
    "LkstreamDataSource",
    "OffsetRange",
    "arrow_schema",
    "register",
]


class LkstreamDataSource(DataSource):
    """The ``lkstream`` format. Options are validated when a reader or writer is made (on the driver)."""

    def __init__(self, options: MutableMapping[str, str]) -> None:
        super().__init__(options)

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _include_headers(self) -> bool:
        raw = {k.lower(): v for k, v in self.options.items()}.get("includeheaders", "false")
        return str(raw).strip().lower() in ("true", "1", "yes")

    def schema(self) -> str:
        return spark_ddl(self._include_headers())

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise InvalidArgumentError(
                "the lkstream sink appends only: use mode('append'), a log cannot be overwritten"
            )
        return BatchWriter(parse_sink_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return StreamWriter(parse_sink_options(self.options), schema)


def register(spark: Any) -> None:
    """Register the ``lkstream`` format with ``spark`` (a ``SparkSession``)."""
    spark.dataSource.register(LkstreamDataSource)
