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

import importlib
import os
import shutil
import subprocess
import sys
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from lkstream.spark.progress import LagListener, OffsetsBehind, offsets_behind_latest
    from lkstream.spark.source import DataLossError, OffsetRange

FORMAT = "lkstream"

#: Public names of the source, imported on first use: Spark unpickles this package in every
#: Python process it starts for the format (planning, reading, writing), and each should load
#: only the side it runs: a read task never needs the sink (asyncio, the gRPC client).
_LAZY = {
    "DataLossError": "lkstream.spark.source",
    "OffsetRange": "lkstream.spark.source",
    "LagListener": "lkstream.spark.progress",
    "OffsetsBehind": "lkstream.spark.progress",
    "offsets_behind_latest": "lkstream.spark.progress",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'lkstream.spark' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "FORMAT",
    "DataLossError",
    "LagListener",
    "LkstreamDataSource",
    "OffsetRange",
    "OffsetsBehind",
    "arrow_schema",
    "offsets_behind_latest",
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

    # The reader and writer classes are imported where they are made (see _LAZY).
    def reader(self, schema: StructType) -> DataSourceReader:
        from lkstream.spark.source import BatchReader

        return BatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from lkstream.spark.source import StreamReader, UnplannableStream

        try:
            return StreamReader(parse_source_options(self.options, streaming=True))
        except Exception as exc:  # raised again, as it is, by the reader's first call
            return UnplannableStream(exc)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise InvalidArgumentError(
                "the lkstream sink appends only: use mode('append'), a log cannot be overwritten"
            )
        from lkstream.spark.sink import BatchWriter

        return BatchWriter(parse_sink_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from lkstream.spark.sink import StreamWriter

        return StreamWriter(parse_sink_options(self.options), schema)


def register(spark: Any, *, check_workers: bool = True) -> None:
    """Register the ``lkstream`` format with ``spark`` (a ``SparkSession``), with workers that can run it.

    Spark runs the source and sink in Python worker processes started with the
    interpreter ``PYSPARK_PYTHON`` names (``spark.pyspark.python``), ``python3`` from
    ``PATH`` when neither is set, which is rarely the virtualenv lkstream is
    installed in (a ``ModuleNotFoundError: crc32c`` on the first task). So, before
    registering, when ``check_workers`` is on:

    * if the workers' interpreter is this one, nothing to do;
    * if neither ``PYSPARK_PYTHON`` nor ``spark.pyspark.python`` was set and the
      session is local (``local``, ``local[N]``), the workers of this format (and of
      the session's Python UDFs) get this interpreter, ``sys.executable``;
    * otherwise the named interpreter is asked to import lkstream, and if it
      cannot, :class:`InvalidArgumentError` says what failed and what to set.

    A cluster's executors run elsewhere and are not checked: install lkstream there.
    """
    if check_workers:
        _check_worker_python(spark.sparkContext)
    spark.dataSource.register(LkstreamDataSource)


#: What a worker must import: the package and the C extensions it needs.
_WORKER_IMPORTS = "import crc32c, lkstream.spark"
_WORKER_CHECK_TIMEOUT_S = 60.0


def _check_worker_python(context: Any) -> None:
    worker = str(getattr(context, "pythonExec", "") or "python3")
    if _same_interpreter(worker):
        return
    local = str(context.master).startswith("local")
    chosen = os.environ.get("PYSPARK_PYTHON") or context.getConf().get("spark.pyspark.python")
    if local and not chosen:
        # pyspark reads sc.pythonExec when a Python function (this data source, a UDF) is
        # registered, so workers started from now on run this interpreter.
        context.pythonExec = sys.executable
        return
    if not local:
        return
    problem = _import_problem(worker)
    if problem is not None:
        raise InvalidArgumentError(
            f"Spark's Python workers run {worker!r}, which cannot import lkstream ({problem}): set PYSPARK_PYTHON "
            f"(or spark.pyspark.python) to an interpreter where lkstream is installed, e.g. {sys.executable}, "
            "before the SparkSession starts (docs/spark.md, 'Python workers')"
        )


def _same_interpreter(worker: str) -> bool:
    found = shutil.which(worker) or worker
    return os.path.realpath(found) == os.path.realpath(sys.executable) and os.path.dirname(
        os.path.abspath(found)
    ) == os.path.dirname(os.path.abspath(sys.executable))


def _import_problem(worker: str) -> str | None:
    """Why ``worker`` cannot import lkstream's Spark code, or None if it can."""
    try:
        done = subprocess.run(
            [worker, "-c", _WORKER_IMPORTS],
            capture_output=True,
            text=True,
            timeout=_WORKER_CHECK_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"it does not run: {exc}"
    if done.returncode == 0:
        return None
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    return lines[-1] if lines else f"exit status {done.returncode}"
