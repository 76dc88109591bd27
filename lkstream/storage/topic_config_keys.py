"""Kafka's topic configs, one :class:`ConfigKey` each: type, range, default, broker synonym, and what LKSTREAM does.

This table is the one place a topic config's name, type and allowed values are defined;
:mod:`lkstream.storage.topic_config` parses and reports configs with it, and docs/kafka.md
lists the same names (a test compares them). Types, ranges and defaults are Kafka's
(its ``LogConfig``), with three deliberate differences, each written in the key's ``doc``:

* defaults that come from the broker are LKSTREAM's broker defaults (``retention_ms`` is
  -1, keep forever; ``segment_max_bytes`` is 64 MiB; ``max_batch_bytes`` 16 MiB);
* ``message.timestamp.after.max.ms`` defaults to unlimited, as in Kafka 3.x (Kafka 4 has one hour);
* a value LKSTREAM cannot honour is refused (:class:`~lkstream.errors.UnsupportedConfigError`,
  saying why) where Kafka would accept it; nothing is accepted and then ignored.

Each key is in one of three groups (:class:`Handling`): honoured by the broker or storage
(the log cleaner and time-based rolling among them); accepted because a single node behaves
as Kafka does whatever the value (replication throttles, unclean leader election,
down-conversion); or accepted only at the value LKSTREAM has (``preallocate=false``,
``min.insync.replicas=1``, no tiered storage, no per-topic flush).

Values are parsed as Kafka's ``ConfigDef`` parses strings: surrounding whitespace (Java's
``trim``) is dropped; LONG and INT are decimal integers within a Java long / int; DOUBLE a
decimal number; BOOLEAN ``true`` or ``false`` in any case; LIST comma-separated, each item
trimmed; STRING values are case-sensitive, as Kafka's ``ValidString`` is.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Any, Final

LONG_MAX: Final = 2**63 - 1
LONG_MIN: Final = -(2**63)
INT_MAX: Final = 2**31 - 1
INT_MIN: Final = -(2**31)

CLEANUP_DELETE: Final = "delete"
CLEANUP_COMPACT: Final = "compact"
CREATE_TIME: Final = "CreateTime"
LOG_APPEND_TIME: Final = "LogAppendTime"
#: ``compression.type`` values: a codec, ``uncompressed``, or ``producer`` (keep the producer's codec).
COMPRESSION_TYPES: Final = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


class ConfigType(IntEnum):
    """Kafka's ``ConfigType`` (DescribeConfigs v3+ ``config_type``)."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7


class Handling(Enum):
    """What LKSTREAM does with a config (docs/kafka.md groups the table by it)."""

    HONOURED = "honoured"
    SAME_ON_ONE_NODE = "accepted: one node behaves as Kafka whatever the value"
    ONLY_LKSTREAM_VALUE = "accepted only at the value LKSTREAM has"


class BadValue(ValueError):
    """A value that does not parse or is out of range; the message says which rule it broke."""


_JAVA_BLANKS: Final = "".join(chr(c) for c in range(33))  # what Java's String.trim() removes
_INTEGER: Final = re.compile(r"[+-]?[0-9]+\Z")
_DECIMAL: Final = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\Z")
_VERSION: Final = re.compile(r"[0-9]+\.[0-9]+(\.[0-9]+)?(-IV[0-9]+)?\Z")
_REPLICA: Final = re.compile(r"[0-9]+:[0-9]+\Z")


def _integer(text: str, low: int, high: int, what: str) -> int:
    trimmed = text.strip(_JAVA_BLANKS)
    if not _INTEGER.match(trimmed):
        raise BadValue(f"not a whole number ({what})")
    value = int(trimmed)
    if not low <= value <= high:
        raise BadValue(f"outside the range of a {what} ({low}..{high})")
    return value


def parse_long(text: str) -> int:
    return _integer(text, LONG_MIN, LONG_MAX, "Java long")


def parse_int(text: str) -> int:
    return _integer(text, INT_MIN, INT_MAX, "Java int")


def parse_double(text: str) -> float:
    trimmed = text.strip(_JAVA_BLANKS)
    if not _DECIMAL.match(trimmed):
        raise BadValue("not a decimal number")
    value = float(trimmed)
    if value in (float("inf"), float("-inf")):
        raise BadValue("outside the range of a Java double")
    return value


def parse_boolean(text: str) -> bool:
    trimmed = text.strip(_JAVA_BLANKS).lower()
    if trimmed not in ("true", "false"):
        raise BadValue("not a boolean (true or false)")
    return trimmed == "true"


def parse_string(text: str) -> str:
    return text.strip(_JAVA_BLANKS)


def parse_list(text: str) -> tuple[str, ...]:
    trimmed = text.strip(_JAVA_BLANKS)
    return () if not trimmed else tuple(item.strip(_JAVA_BLANKS) for item in trimmed.split(","))


PARSERS: Final[dict[ConfigType, Callable[[str], Any]]] = {
    ConfigType.BOOLEAN: parse_boolean,
    ConfigType.STRING: parse_string,
    ConfigType.INT: parse_int,
    ConfigType.LONG: parse_long,
    ConfigType.DOUBLE: parse_double,
    ConfigType.LIST: parse_list,
}


def render(value: Any) -> str:
    """A typed value as Kafka writes it in DescribeConfigs (lists comma-joined, booleans lower case)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple | frozenset):
        return ",".join(value)
    return str(value)


# -- checks: None when the value is allowed, else why not ----------------------------------------------


Check = Callable[[Any], "str | None"]


def _at_least(low: int | float) -> Check:
    return lambda v: None if v >= low else f"must be at least {low}"


def _between(low: int | float, high: int | float) -> Check:
    return lambda v: None if low <= v <= high else f"must be between {low} and {high}"


def _one_of(*allowed: str) -> Check:
    return lambda v: None if v in allowed else f"must be one of {', '.join(allowed)}"


def _level(low: int, high: int, *extra: int) -> Check:
    return lambda v: (
        None
        if low <= v <= high or v in extra
        else f"must be between {low} and {high}" + (f" or {', '.join(map(str, extra))}" if extra else "")
    )


def _cleanup_policy(items: tuple[str, ...]) -> str | None:
    bad = [item for item in items if item not in (CLEANUP_DELETE, CLEANUP_COMPACT)]
    return f"{', '.join(map(repr, bad))} is not delete or compact" if bad else None


def _throttled_replicas(items: tuple[str, ...]) -> str | None:
    if items == ("*",) or all(_REPLICA.match(item) for item in items):
        return None
    return "must be empty, * or a list of partition:broker pairs"


def _version(value: str) -> str | None:
    return None if _VERSION.match(value) else "must be a Kafka version such as 3.0-IV1"


def _only(allowed: Any, why: str) -> Check:
    return lambda v: None if v == allowed else why


_NO_TIERING: Final = "LKSTREAM has no tiered (remote) storage"
_FLUSH: Final = (
    "LKSTREAM forces data to disk by the broker's fsync_mode, fsync_interval_ms and fsync_group_bytes "
    "(docs/durability.md), not per topic; leave flush.* at Kafka's default (9223372036854775807)"
)


_FLUSH_DOC: Final = (
    "Only Kafka's default (never forced): when data reaches the disk is the broker's fsync_mode, fsync_interval_ms "
    "and fsync_group_bytes (docs/durability.md)."
)


@dataclass(frozen=True)
class ConfigKey:
    """One topic config.

    ``default`` is Kafka's default, used when ``broker_field`` (the :class:`~lkstream.config.BrokerConfig`
    field holding the broker-wide default) is None. ``synonym`` is Kafka's broker-level name of the same
    setting (``log.retention.ms``), reported as a DescribeConfigs synonym. ``check`` refuses values
    outside Kafka's range (INVALID_CONFIG); ``refuse`` values LKSTREAM cannot honour, saying why.
    """

    name: str
    type: ConfigType
    default: Any
    handling: Handling
    doc: str
    broker_field: str | None = None
    synonym: str | None = None
    check: Check | None = None
    refuse: Check | None = None

    def parse(self, text: str) -> Any:
        """The typed value of ``text``; :class:`BadValue` if it does not parse or is out of Kafka's range."""
        value = PARSERS[self.type](text)
        problem = self.check(value) if self.check is not None else None
        if problem is not None:
            raise BadValue(problem)
        return value


def _key(name: str, type_: ConfigType, default: Any, handling: Handling, doc: str, **kw: Any) -> ConfigKey:
    return ConfigKey(name, type_, default, handling, doc, **kw)


_H, _S, _O = Handling.HONOURED, Handling.SAME_ON_ONE_NODE, Handling.ONLY_LKSTREAM_VALUE
_LONG, _INT, _DOUBLE, _BOOL, _STR, _LIST = (
    ConfigType.LONG,
    ConfigType.INT,
    ConfigType.DOUBLE,
    ConfigType.BOOLEAN,
    ConfigType.STRING,
    ConfigType.LIST,
)

KEYS: Final[dict[str, ConfigKey]] = {
    k.name: k
    for k in (
        _key("cleanup.policy", _LIST, (CLEANUP_DELETE,), _H,
             "delete: retention removes old segments; compact: the cleaner keeps the latest record of each key; "
             "both: both; empty: neither (nothing is ever removed).",
             broker_field="cleanup_policy", synonym="log.cleanup.policy", check=_cleanup_policy),
        _key("compression.type", _STR, "producer", _H,
             "producer keeps each batch as the producer compressed it; a codec (or uncompressed) makes the broker "
             "recompress every batch that arrives with another codec.",
             broker_field="compression_type", synonym="compression.type", check=_one_of(*COMPRESSION_TYPES)),
        _key("compression.gzip.level", _INT, -1, _H, "gzip level the broker recompresses with (-1: zlib's default).",
             synonym="compression.gzip.level", check=_level(1, 9, -1)),
        _key("compression.lz4.level", _INT, 9, _H, "lz4 level the broker recompresses with.",
             synonym="compression.lz4.level", check=_level(1, 17)),
        _key("compression.zstd.level", _INT, 3, _H, "zstd level the broker recompresses with.",
             synonym="compression.zstd.level", check=_level(-131072, 22)),
        _key("delete.retention.ms", _LONG, 86_400_000, _H,
             "How long the cleaner keeps a tombstone (a null value) of a compacted topic, counted from when its "
             "segment was sealed.",
             broker_field="delete_retention_ms", synonym="log.cleaner.delete.retention.ms", check=_at_least(0)),
        _key("file.delete.delay.ms", _LONG, 60_000, _S,
             "Kafka waits this long before removing a deleted segment so that reads in flight finish; LKSTREAM's "
             "readers keep an open segment readable after its removal, so the files go at once.",
             synonym="log.segment.delete.delay.ms", check=_at_least(0)),
        _key("flush.messages", _LONG, LONG_MAX, _O, _FLUSH_DOC,
             synonym="log.flush.interval.messages", check=_at_least(1), refuse=_only(LONG_MAX, _FLUSH)),
        _key("flush.ms", _LONG, LONG_MAX, _O, _FLUSH_DOC,
             synonym="log.flush.interval.ms", check=_at_least(0), refuse=_only(LONG_MAX, _FLUSH)),
        _key("follower.replication.throttled.replicas", _LIST, (), _S,
             "Replication throttle; a single node has no followers to throttle.", check=_throttled_replicas),
        _key("index.interval.bytes", _INT, 4096, _H,
             "Bytes of segment data between sparse index entries (segments created after a change).",
             broker_field="index_interval_bytes", synonym="log.index.interval.bytes", check=_at_least(0)),
        _key("leader.replication.throttled.replicas", _LIST, (), _S,
             "Replication throttle; a single node has no followers to throttle.", check=_throttled_replicas),
        _key("local.retention.bytes", _LONG, -2, _O, "Tiered storage only: " + _NO_TIERING + ".",
             synonym="log.local.retention.bytes", check=_at_least(-2), refuse=_only(-2, _NO_TIERING)),
        _key("local.retention.ms", _LONG, -2, _O, "Tiered storage only: " + _NO_TIERING + ".",
             synonym="log.local.retention.ms", check=_at_least(-2), refuse=_only(-2, _NO_TIERING)),
        _key("max.compaction.lag.ms", _LONG, LONG_MAX, _H,
             "The longest a record may stay uncompacted; the cleaner cleans a log whose oldest dirty record is older.",
             broker_field="max_compaction_lag_ms", synonym="log.cleaner.max.compaction.lag.ms", check=_at_least(1)),
        _key("max.message.bytes", _INT, 1_048_588, _H,
             "Largest record batch a producer may append, after compression (MESSAGE_TOO_LARGE); at most the "
             "broker's max_batch_bytes.",
             broker_field="max_batch_bytes", synonym="message.max.bytes", check=_at_least(0)),
        _key("message.downconversion.enable", _BOOL, True, _S,
             "Kafka 3 down-converts for old fetch versions; LKSTREAM serves Fetch v4+ only, which needs none.",
             synonym="log.message.downconversion.enable"),
        _key("message.format.version", _STR, "3.0-IV1", _S,
             "Deprecated by Kafka 3 and ignored there as here: every batch is the v2 format.",
             synonym="log.message.format.version", check=_version),
        _key("message.timestamp.after.max.ms", _LONG, LONG_MAX, _H,
             "With CreateTime, a batch whose newest timestamp is further than this ahead of the broker's clock is "
             "refused (INVALID_TIMESTAMP). Unlimited by default, as in Kafka 3.",
             synonym="log.message.timestamp.after.max.ms", check=_at_least(0)),
        _key("message.timestamp.before.max.ms", _LONG, LONG_MAX, _H,
             "With CreateTime, a batch holding a timestamp further than this behind the broker's clock is refused "
             "(INVALID_TIMESTAMP).",
             synonym="log.message.timestamp.before.max.ms", check=_at_least(0)),
        _key("message.timestamp.difference.max.ms", _LONG, LONG_MAX, _H,
             "Kafka 3's older name for both bounds above; used for each one that is not set itself.",
             synonym="log.message.timestamp.difference.max.ms", check=_at_least(0)),
        _key("message.timestamp.type", _STR, CREATE_TIME, _H,
             "CreateTime keeps the producer's timestamps; LogAppendTime makes the broker stamp each batch with its "
             "clock at append.",
             broker_field="message_timestamp_type", synonym="log.message.timestamp.type",
             check=_one_of(CREATE_TIME, LOG_APPEND_TIME)),
        _key("min.cleanable.dirty.ratio", _DOUBLE, 0.5, _H,
             "The cleaner cleans a compacted log once this share of it is not yet cleaned.",
             broker_field="min_cleanable_dirty_ratio", synonym="log.cleaner.min.cleanable.ratio",
             check=_between(0, 1)),
        _key("min.compaction.lag.ms", _LONG, 0, _H,
             "The cleaner leaves a segment alone until it was sealed this long ago (so every record stays "
             "uncompacted at least this long).",
             broker_field="min_compaction_lag_ms", synonym="log.cleaner.min.compaction.lag.ms", check=_at_least(0)),
        _key("min.insync.replicas", _INT, 1, _O,
             "A single node holds one replica of each partition, so 1 is the only value every acks=all write "
             "can meet.",
             synonym="min.insync.replicas", check=_at_least(1),
             refuse=_only(1, "a single node holds one replica of each partition: with more than 1 every acks=all "
                             "write would fail with NOT_ENOUGH_REPLICAS")),
        _key("preallocate", _BOOL, False, _O, "LKSTREAM does not preallocate segment files.",
             synonym="log.preallocate", refuse=_only(False, "LKSTREAM does not preallocate segment files")),
        _key("remote.log.copy.disable", _BOOL, False, _O, "Tiered storage only: " + _NO_TIERING + ".",
             refuse=_only(False, _NO_TIERING)),
        _key("remote.log.delete.on.disable", _BOOL, False, _O, "Tiered storage only: " + _NO_TIERING + ".",
             refuse=_only(False, _NO_TIERING)),
        _key("remote.storage.enable", _BOOL, False, _O, "Tiered storage only: " + _NO_TIERING + ".",
             refuse=_only(False, _NO_TIERING)),
        _key("retention.bytes", _LONG, -1, _H,
             "With cleanup.policy delete: the oldest sealed segments of a partition go while the rest still hold "
             "this many bytes; negative: no limit.",
             broker_field="retention_bytes", synonym="log.retention.bytes"),
        _key("retention.ms", _LONG, 604_800_000, _H,
             "With cleanup.policy delete: a sealed segment whose newest record is older than this goes; -1: kept "
             "forever (the broker default, retention_ms, is -1).",
             broker_field="retention_ms", synonym="log.retention.ms", check=_at_least(-1)),
        _key("segment.bytes", _INT, 1_073_741_824, _H,
             "A partition rolls to a new segment past this size (a larger batch gets a segment of its own).",
             broker_field="segment_max_bytes", synonym="log.segment.bytes", check=_at_least(1024 * 1024)),
        _key("segment.index.bytes", _INT, 10_485_760, _S,
             "Kafka preallocates index files of this size and rolls when one fills; LKSTREAM's sparse index grows "
             "with its segment, so segments roll by segment.bytes and segment.ms only.",
             synonym="log.index.size.max.bytes", check=_at_least(4)),
        _key("segment.jitter.ms", _LONG, 0, _H, "A random amount up to this is taken off segment.ms for each segment.",
             synonym="log.roll.jitter.ms", check=_at_least(0)),
        _key("segment.ms", _LONG, 604_800_000, _H,
             "A partition rolls to a new segment once its active segment is this old, so a quiet tail becomes "
             "sealed (cleanable, deletable).",
             broker_field="segment_ms", synonym="log.roll.ms", check=_at_least(1)),
        _key("unclean.leader.election.enable", _BOOL, False, _S,
             "A single node has no other replica to elect, clean or unclean.",
             synonym="unclean.leader.election.enable"),
    )
}  # fmt: skip
