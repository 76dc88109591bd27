"""Spark's Kafka option names, as the ``lkstream`` source and sink take them.

A query moving from ``format("kafka")`` keeps its options. Each Kafka option is one of:

* **the same here**: ``kafka.bootstrap.servers`` is ``bootstrap`` (one daemon address);
  ``kafka.compression.type`` is the sink's ``compression``; the rest of Kafka's source
  options with a meaning here (``minOffsetsPerTrigger``, ``maxTriggerDelay``,
  ``startingOffsetsByTimestampStrategy``, ``maxRecordsPerPartition``...) are parsed in
  :mod:`lkstream.spark.options`;
* **ignored, with a logged warning**: options that only tune Kafka's own consumer or
  producer (``kafka.group.id``, ``groupIdPrefix``, ``kafkaConsumer.pollTimeoutMs``,
  ``fetchOffset.*`` and every other ``kafka.*``): there is no Kafka consumer to tune, and
  the source keeps no consumer group (Spark's checkpoint holds the offsets, as for Kafka);
* **refused**: Kafka's security options (``kafka.security.protocol``, ``kafka.ssl.*``,
  ``kafka.sasl.*``). Ignoring them could connect in plaintext a query meant to use TLS;
  the error names this source's ``tls``, ``tlsCa``, ``tlsCert``, ``tlsKey`` and ``token``.

Options arrive lowercased (Spark's option maps are case-insensitive). Pure functions.
"""

from __future__ import annotations

import logging
import re
from typing import Final

from lkstream.errors import InvalidArgumentError

log = logging.getLogger("lkstream.spark")

BOOTSTRAP_ALIAS: Final = "kafka.bootstrap.servers"
COMPRESSION_ALIAS: Final = "kafka.compression.type"
#: Kafka source options that only tune Kafka's consumer (besides every other ``kafka.*``).
CONSUMER_TUNING: Final = frozenset(
    {"groupidprefix", "kafkaconsumer.polltimeoutms", "fetchoffset.numretries", "fetchoffset.retryintervalms"}
)
_SECURITY: Final = re.compile(r"^kafka\.(security\.protocol|ssl\..*|sasl\..*)$")
_DURATION: Final = re.compile(r"^(\d+)\s*(us|ms|s|sec|secs|m|min|mins|h|hour|hours|d|day|days)?$")
_UNIT_MS: Final = {
    "us": 0.001, "ms": 1, "s": 1000, "sec": 1000, "secs": 1000, "m": 60_000, "min": 60_000, "mins": 60_000,
    "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000, "d": 86_400_000, "day": 86_400_000, "days": 86_400_000,
}  # fmt: skip


def kafka_aliases(opts: dict[str, str], *, what: str) -> tuple[dict[str, str], list[str]]:
    """``opts`` with Kafka's names turned into this source's or sink's, and the names it ignores.

    Refuses Kafka's security options and a Kafka alias given beside this source's own name.
    Ignored names are logged once here, as a warning.
    """
    out = dict(opts)
    refused = sorted(name for name in out if _SECURITY.match(name))
    if refused:
        raise InvalidArgumentError(
            f"option(s) {', '.join(refused)} configure Kafka's own client: the {what} connects with TLS through "
            "its options tls, tlsCa, tlsCert, tlsKey and tlsServerName, and authenticates with token "
            "(docs/spark.md, 'Where the data comes from')"
        )
    _alias(out, BOOTSTRAP_ALIAS, "bootstrap")
    if "bootstrap" in out and "," in out["bootstrap"]:
        raise InvalidArgumentError(
            f"option bootstrap ({BOOTSTRAP_ALIAS}) names several addresses ({out['bootstrap']}): "
            "an LKSTREAM daemon is one address, host:port of its gRPC port"
        )
    if what == "lkstream sink":
        _alias(out, COMPRESSION_ALIAS, "compression")
    ignored = sorted(name for name in out if name in CONSUMER_TUNING or name.startswith("kafka."))
    for name in ignored:
        del out[name]
    if ignored:
        log.warning(
            "the %s ignores option(s) %s: they tune Kafka's own client, which it does not use (its offsets live in "
            "Spark's checkpoint, as Kafka's do; docs/spark.md lists every Kafka option)",
            what,
            ", ".join(ignored),
        )
    return out, ignored


def _alias(opts: dict[str, str], kafka_name: str, own_name: str) -> None:
    if kafka_name not in opts:
        return
    if own_name in opts:
        raise InvalidArgumentError(f"options {own_name} and {kafka_name} are the same option: set one of them")
    opts[own_name] = opts.pop(kafka_name)


def duration_ms(raw: str, name: str) -> int:
    """Spark's duration strings (``15m``, ``30s``, ``500ms``; a bare number is milliseconds) in ms."""
    match = _DURATION.match(raw.strip().lower())
    if match is None:
        raise InvalidArgumentError(f"option {name} must be a duration like 15m, 30s or 500ms, got {raw!r}")
    return int(int(match.group(1)) * _UNIT_MS[match.group(2) or "ms"])
