"""How far a streaming query is behind the log: Kafka's ``*OffsetsBehindLatest`` metrics, for the lkstream source.

Spark's Kafka source reports, in each progress's ``metrics``, how many offsets its
partitions are behind the latest ones: ``avgOffsetsBehindLatest``,
``maxOffsetsBehindLatest`` and ``minOffsetsBehindLatest``. PySpark 4.3's Python data
source API has no hook for a source's metrics, nor for the ``description`` progress
shows (the JVM's ``PythonMicroBatchStream`` implements neither ``ReportsSourceMetrics``
nor ``toString``): for every Python source Spark prints ``metrics: {}`` and
``PythonMicroBatchStream...@hash``. What the lkstream source does report is
``latestOffset`` (through ``reportLatestOffset``) beside ``endOffset``, and the three
metrics follow from the two exactly as Kafka's source computes them:

* :func:`offsets_behind_latest` takes one source's progress (a ``SourceProgress`` or the
  dict of ``query.lastProgress["sources"][i]``) and returns the topics and the metrics;
* :class:`LagListener` (``spark.streams.addListener(LagListener())``) logs them for every
  progress of every query, under the logger ``lkstream.spark``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

log = logging.getLogger("lkstream.spark")


@dataclass(frozen=True)
class OffsetsBehind:
    """One source's lag after a micro-batch: per partition, latest offset minus the offset read up to."""

    topics: tuple[str, ...]
    avg: float
    max: int
    min: int

    def as_metrics(self) -> dict[str, str]:
        """The three metrics as Kafka's source puts them in a progress's ``metrics`` (strings)."""
        return {
            "avgOffsetsBehindLatest": str(self.avg),
            "maxOffsetsBehindLatest": str(self.max),
            "minOffsetsBehindLatest": str(self.min),
        }


def _offsets(raw: object) -> dict[tuple[str, int], int] | None:
    """``{"topic": {"0": 12}}`` (a JSON string or the parsed object) as ``{(topic, 0): 12}``; None otherwise."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return None
    if not isinstance(raw, Mapping):
        return None
    out: dict[tuple[str, int], int] = {}
    for topic, parts in raw.items():
        if not isinstance(parts, Mapping):
            return None
        for pid, offset in parts.items():
            if not isinstance(offset, int) or not str(pid).lstrip("-").isdigit():
                return None
            out[(str(topic), int(pid))] = offset
    return out


def _field(source: Any, name: str) -> object:
    return source.get(name) if isinstance(source, Mapping) else getattr(source, name, None)


def offsets_behind_latest(source: Any) -> OffsetsBehind | None:
    """Kafka's three lag metrics of one source's progress, or None when it carries no per-partition offsets.

    ``source`` is a ``pyspark.sql.streaming.listener.SourceProgress`` or one entry of a progress
    dict's ``sources``. As Kafka's source: the partitions are those of ``latestOffset``, a partition
    missing from ``endOffset`` counts from 0, and a partition ahead of latest counts as 0 behind.
    """
    latest = _offsets(_field(source, "latestOffset"))
    end = _offsets(_field(source, "endOffset"))
    if not latest or end is None:
        return None
    behind = [max(0, high - end.get(tp, 0)) for tp, high in latest.items()]
    topics = tuple(sorted({topic for topic, _ in latest}))
    return OffsetsBehind(topics, sum(behind) / len(behind), max(behind), min(behind))


class LagListener(StreamingQueryListener):
    """Logs, after each micro-batch, how far each source with per-partition offsets is behind the latest ones."""

    def onQueryStarted(self, event: Any) -> None:
        """Nothing to report before the first micro-batch."""

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        for source in progress.sources:
            lag = offsets_behind_latest(source)
            if lag is not None:
                log.info(
                    "query %s, lkstream[%s]: avgOffsetsBehindLatest=%s maxOffsetsBehindLatest=%d "
                    "minOffsetsBehindLatest=%d",
                    progress.name or progress.id,
                    ",".join(lag.topics),
                    lag.avg,
                    lag.max,
                    lag.min,
                )

    def onQueryIdle(self, event: Any) -> None:
        """Nothing new was read."""

    def onQueryTerminated(self, event: Any) -> None:
        """Nothing to report."""
