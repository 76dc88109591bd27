"""Options of the ``lkstream`` Spark data source, parsed and checked on the driver.

The names mirror Spark's Kafka source (``subscribe``, ``startingOffsets``,
``maxOffsetsPerTrigger``, ...) so switching a query from Kafka changes the
format name only: Kafka's own names (``kafka.bootstrap.servers``, ``kafka.*``
tuning) are taken as :mod:`lkstream.spark.kafka_options` says. Everything is
validated here, when the query is planned, so a typo is one clear
:class:`~lkstream.errors.InvalidArgumentError` on the driver instead of a stack
trace from a Spark worker.

Offsets in JSON options follow Kafka's conventions: ``{"topic": {"0": 23}}``,
with ``-2`` meaning earliest and ``-1`` latest.

A daemon with access control (docs/security.md) takes ``token`` (a bearer token; Spark
redacts options named like it in its UI and logs) and TLS: ``tlsCa`` (a CA file),
``tls=true`` (the system's CAs), ``tlsCert``/``tlsKey`` (a client certificate) and
``tlsServerName``. Files are read where the connection is made, the driver and every
executor, as Kafka's ``kafka.ssl.truststore.location`` is: put them where both see them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from lkstream.errors import InvalidArgumentError
from lkstream.spark.kafka_options import duration_ms, kafka_aliases

if TYPE_CHECKING:
    from lkstream.security.tls import ClientTls

EARLIEST: Final = -2
LATEST: Final = -1

#: Options Spark itself may put in the map (``load(path)``, ``save(path)``, a checkpoint).
_SPARK_OPTIONS: Final = frozenset({"path", "checkpointlocation", "queryname"})

#: How to reach a daemon with access control (both the source and the sink take them).
CREDENTIAL_OPTIONS: Final = frozenset({"token", "tls", "tlsca", "tlscert", "tlskey", "tlsservername"})

SOURCE_OPTIONS: Final = frozenset(
    {
        *CREDENTIAL_OPTIONS,
        "bootstrap",
        "path",
        "subscribe",
        "subscribepattern",
        "assign",
        "startingoffsets",
        "endingoffsets",
        "startingoffsetsbytimestamp",
        "endingoffsetsbytimestamp",
        "startingtimestamp",
        "endingtimestamp",
        "maxoffsetspertrigger",
        "minoffsetspertrigger",
        "maxtriggerdelay",
        "startingoffsetsbytimestampstrategy",
        "maxrecordsperpartition",
        "minpartitions",
        "failondataloss",
        "includeheaders",
        "fetchmaxbytes",
    }
)
SINK_OPTIONS: Final = frozenset({*CREDENTIAL_OPTIONS, "bootstrap", "topic", "compression", "batchbytes"})

DEFAULT_FETCH_MAX_BYTES: Final = 4 * 1024 * 1024
#: Kafka's default ``maxTriggerDelay``: how long ``minOffsetsPerTrigger`` may hold a micro-batch back.
DEFAULT_MAX_TRIGGER_DELAY_MS: Final = 15 * 60 * 1000
#: ``startingOffsetsByTimestampStrategy``: with no record at or after the time, fail, or start at the end.
TIMESTAMP_STRATEGIES: Final = ("error", "latest")


@dataclass(frozen=True)
class Credentials:
    """What a daemon with access control asks of a client: a token and TLS settings (all optional)."""

    token: str | None = None
    tls: ClientTls | None = None

    def connect_options(self) -> dict[str, object]:
        """Keyword arguments of ``lkstream.connect``."""
        return {"token": self.token, "tls": self.tls}

    def __repr__(self) -> str:  # the token never reaches a log line or a Spark plan
        return f"Credentials(token={'***' if self.token else None}, tls={self.tls!r})"


@dataclass(frozen=True)
class Access:
    """Where the log is: a daemon address (``bootstrap``, with its credentials) or a data directory (``path``)."""

    bootstrap: str | None = None
    path: str | None = None
    credentials: Credentials = field(default_factory=Credentials)

    def describe(self) -> str:
        return f"daemon {self.bootstrap}" if self.bootstrap else f"data directory {self.path}"


@dataclass(frozen=True)
class Subscription:
    """Which topics: exactly one of a topic list, a pattern, or explicit partitions."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assign: tuple[tuple[str, int], ...] = ()

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        if self.assign:
            return any(t == topic for t, _ in self.assign)
        return topic in self.topics


# {"topic": {partition: offset-or-timestamp}} or one of the words "earliest" / "latest".
OffsetSpec = str | dict[str, dict[int, int]]


@dataclass(frozen=True)
class SourceOptions:
    """The parsed options of the source (batch and streaming)."""

    access: Access
    subscription: Subscription
    starting: OffsetSpec = "earliest"
    ending: OffsetSpec = "latest"
    starting_by_timestamp: dict[str, dict[int, int]] | None = None
    ending_by_timestamp: dict[str, dict[int, int]] | None = None
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    starting_timestamp_strategy: str = "error"
    max_records_per_partition: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    fetch_max_bytes: int = DEFAULT_FETCH_MAX_BYTES
    extra: dict[str, str] = field(default_factory=dict)
    #: Kafka options that were given and are ignored (they only tune Kafka's own consumer).
    ignored: tuple[str, ...] = ()

    def describe(self) -> str:
        """What the query reads, for logs and progress: ``lkstream[orders,clicks] daemon 127.0.0.1:9090``."""
        sub = self.subscription
        what = ",".join(sub.topics) if sub.topics else sub.pattern or ",".join(f"{t}-{p}" for t, p in sub.assign)
        return f"lkstream[{what}] {self.access.describe()}"


@dataclass(frozen=True)
class SinkOptions:
    """The parsed options of the sink."""

    bootstrap: str
    topic: str | None = None
    compression: str | None = None
    batch_bytes: int = 1024 * 1024
    credentials: Credentials = field(default_factory=Credentials)


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _reject_unknown(opts: dict[str, str], known: frozenset[str], what: str) -> None:
    unknown = sorted(k for k in opts if k not in known and k not in _SPARK_OPTIONS)
    if unknown:
        raise InvalidArgumentError(
            f"unknown {what} option(s) {', '.join(unknown)}; known options are {', '.join(sorted(known))}"
        )


def _int(opts: dict[str, str], name: str, *, minimum: int) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise InvalidArgumentError(f"option {name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise InvalidArgumentError(f"option {name} must be >= {minimum}, got {value}")
    return value


def _bool(opts: dict[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "1", "yes"):
        return True
    if raw.strip().lower() in ("false", "0", "no"):
        return False
    raise InvalidArgumentError(f"option {name} must be true or false, got {raw!r}")


def _partition_map(raw: str, name: str) -> dict[str, dict[int, int]]:
    """Parse ``{"topic": {"0": 23, "1": -1}}`` into ``{topic: {0: 23, 1: -1}}``."""
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidArgumentError(f"option {name} is not valid JSON ({exc.msg}): {raw!r}") from None
    if not isinstance(parsed, dict):
        raise InvalidArgumentError(f'option {name} must be a JSON object like {{"topic": {{"0": 23}}}}, got {raw!r}')
    out: dict[str, dict[int, int]] = {}
    for topic, parts in parsed.items():
        if not isinstance(parts, dict):
            raise InvalidArgumentError(f"option {name}: the value of topic {topic!r} must be an object")
        out[topic] = {}
        for pid, value in parts.items():
            try:
                partition = int(pid)
            except ValueError:
                raise InvalidArgumentError(f"option {name}: partition {pid!r} of {topic!r} is not a number") from None
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidArgumentError(f"option {name}: {topic}[{partition}] must be an integer, got {value!r}")
            out[topic][partition] = value
    return out


def _offsets(opts: dict[str, str], name: str, default: str, *, allow: tuple[str, ...]) -> OffsetSpec:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    word = raw.strip().lower()
    if word in allow:
        return word
    if not raw.strip().startswith("{"):
        raise InvalidArgumentError(f"option {name} must be {' or '.join(allow)} or a JSON object, got {raw!r}")
    spec = _partition_map(raw, name)
    for topic, parts in spec.items():
        for pid, offset in parts.items():
            if offset < EARLIEST or (offset == EARLIEST and "earliest" not in allow):
                raise InvalidArgumentError(f"option {name}: {topic}[{pid}] has invalid offset {offset}")
    return spec


def _credentials(opts: dict[str, str]) -> Credentials:
    """``token`` and the TLS options; a certificate needs its key, and TLS options need TLS."""
    ca, cert, key, name = (opts.get(k) or None for k in ("tlsca", "tlscert", "tlskey", "tlsservername"))
    use_tls = _bool(opts, "tls", default=any((ca, cert, key, name)))
    if not use_tls and any((ca, cert, key, name)):
        raise InvalidArgumentError("options tlsCa, tlsCert, tlsKey and tlsServerName need TLS: drop tls=false")
    if (cert is None) != (key is None):
        raise InvalidArgumentError("a client certificate needs both options tlsCert and tlsKey")
    if not use_tls:
        return Credentials(token=opts.get("token") or None)
    # Imported here: the security package (ACLs, users, SASL) is not needed by a log without TLS.
    from lkstream.security.tls import ClientTls

    tls = ClientTls(ca_file=ca, cert_file=cert, key_file=key, server_name=name)
    return Credentials(token=opts.get("token") or None, tls=tls)


def _access(opts: dict[str, str]) -> Access:
    bootstrap, path = opts.get("bootstrap"), opts.get("path")
    if bool(bootstrap) == bool(path):
        raise InvalidArgumentError(
            "set exactly one of the options bootstrap (a daemon address, host:port) "
            "and path (a data directory, read-only)"
        )
    credentials = _credentials(opts)
    if path and (credentials.token or credentials.tls):
        raise InvalidArgumentError("options token and tls* are for a daemon (bootstrap), not a data directory")
    return Access(bootstrap=bootstrap or None, path=path or None, credentials=credentials)


def _subscription(opts: dict[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k)]
    if len(given) != 1:
        raise InvalidArgumentError("set exactly one of the options subscribe, subscribePattern and assign")
    if given[0] == "subscribe":
        topics = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not topics:
            raise InvalidArgumentError("option subscribe names no topic")
        return Subscription(topics=topics)
    if given[0] == "subscribepattern":
        try:
            re.compile(opts["subscribepattern"])
        except re.error as exc:
            raise InvalidArgumentError(f"option subscribePattern is not a valid regular expression: {exc}") from None
        return Subscription(pattern=opts["subscribepattern"])
    raw = opts["assign"]
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidArgumentError(f"option assign is not valid JSON ({exc.msg}): {raw!r}") from None
    if not isinstance(parsed, dict) or not parsed:
        raise InvalidArgumentError(f'option assign must be a JSON object like {{"topic": [0, 1]}}, got {raw!r}')
    pairs: list[tuple[str, int]] = []
    for topic, parts in parsed.items():
        if not isinstance(parts, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in parts):
            raise InvalidArgumentError(f"option assign: topic {topic!r} must map to a list of partition numbers")
        pairs.extend((topic, p) for p in parts)
    return Subscription(assign=tuple(sorted(set(pairs))))


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate the reader options; raises :class:`InvalidArgumentError` naming the bad option."""
    opts, ignored = kafka_aliases(_lower(options), what="lkstream source")
    _reject_unknown(opts, SOURCE_OPTIONS, "lkstream source")
    access = _access(opts)
    subscription = _subscription(opts)
    if streaming:
        for name in ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp"):
            if name.lower() in opts:
                raise InvalidArgumentError(f"option {name} is for batch queries only (spark.read)")
    else:
        for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
            if name.lower() in opts:
                raise InvalidArgumentError(f"option {name} is for streaming queries only (spark.readStream)")
    starting = _offsets(opts, "startingOffsets", "latest" if streaming else "earliest", allow=("earliest", "latest"))
    if not streaming and isinstance(starting, str) and starting == "latest":
        raise InvalidArgumentError("option startingOffsets=latest is not allowed in a batch query (as in Kafka)")
    ending = _offsets(opts, "endingOffsets", "latest", allow=("latest",))
    starting_ts = opts.get("startingoffsetsbytimestamp")
    ending_ts = opts.get("endingoffsetsbytimestamp")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in TIMESTAMP_STRATEGIES:
        raise InvalidArgumentError(
            f"option startingOffsetsByTimestampStrategy must be error or latest, got {strategy!r}"
        )
    min_per_trigger = _int(opts, "minOffsetsPerTrigger", minimum=0)
    max_per_trigger = _int(opts, "maxOffsetsPerTrigger", minimum=1)
    if min_per_trigger is not None and max_per_trigger is not None and min_per_trigger > max_per_trigger:
        raise InvalidArgumentError(
            f"option minOffsetsPerTrigger ({min_per_trigger}) is above maxOffsetsPerTrigger ({max_per_trigger})"
        )
    delay = opts.get("maxtriggerdelay")
    return SourceOptions(
        access=access,
        subscription=subscription,
        starting=starting,
        ending=ending,
        starting_by_timestamp=_partition_map(starting_ts, "startingOffsetsByTimestamp") if starting_ts else None,
        ending_by_timestamp=_partition_map(ending_ts, "endingOffsetsByTimestamp") if ending_ts else None,
        starting_timestamp=_int(opts, "startingTimestamp", minimum=0),
        ending_timestamp=_int(opts, "endingTimestamp", minimum=0),
        max_offsets_per_trigger=max_per_trigger,
        min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=DEFAULT_MAX_TRIGGER_DELAY_MS if delay is None else duration_ms(delay, "maxTriggerDelay"),
        starting_timestamp_strategy=strategy,
        max_records_per_partition=_int(opts, "maxRecordsPerPartition", minimum=1),
        min_partitions=_int(opts, "minPartitions", minimum=1),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        include_headers=_bool(opts, "includeHeaders", False),
        fetch_max_bytes=_int(opts, "fetchMaxBytes", minimum=1024) or DEFAULT_FETCH_MAX_BYTES,
        ignored=tuple(ignored),
    )


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Validate the writer options; the sink writes through a daemon (``bootstrap``) only."""
    opts, _ = kafka_aliases(_lower(options), what="lkstream sink")
    if "path" in opts and "bootstrap" not in opts:
        raise InvalidArgumentError(
            "the lkstream sink writes through a daemon: set option bootstrap (the path option is read-only)"
        )
    _reject_unknown(opts, SINK_OPTIONS, "lkstream sink")
    bootstrap = opts.get("bootstrap")
    if not bootstrap:
        raise InvalidArgumentError("the lkstream sink needs option bootstrap (a daemon address, host:port)")
    return SinkOptions(
        bootstrap=bootstrap,
        topic=opts.get("topic") or None,
        compression=opts.get("compression") or None,
        batch_bytes=_int(opts, "batchBytes", minimum=1024) or 1024 * 1024,
        credentials=_credentials(opts),
    )
