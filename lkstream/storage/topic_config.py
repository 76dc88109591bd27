"""A topic's configs: Kafka's names and values, validated in one place, stored with the topic.

Every surface (embedded API, gRPC, HTTP, the Kafka listener, the CLI) receives topic configs as
Kafka names them, with string values (``{"cleanup.policy": "compact", "retention.ms": "3600000"}``),
and hands them to :meth:`TopicConfig.parse`; the broker keeps the result with the topic and every
layer reads the values it needs from :meth:`TopicConfig.effective`.

* :class:`TopicConfig` is a topic's **overrides**: immutable, typed (``overrides`` maps each name to
  its typed value: ``int``, ``float``, ``bool``, ``str`` or, for lists, a ``tuple`` of ``str``).
  :meth:`~TopicConfig.parse` refuses a name Kafka does not know and a value outside the config's
  type or range with :class:`~lkstream.errors.InvalidConfigError` (Kafka's INVALID_CONFIG), and a
  known config at a value LKSTREAM cannot honour with :class:`~lkstream.errors.UnsupportedConfigError`,
  whose message says why. :meth:`~TopicConfig.with_changes` applies an alter (set and delete, as
  Kafka's IncrementalAlterConfigs does); :meth:`~TopicConfig.to_json` / :meth:`~TopicConfig.from_json`
  are the form kept in ``topic.json`` (Kafka's canonical strings).
* :class:`EffectiveTopicConfig` is what applies: each value is the topic's override, else the
  broker's default (a :class:`~lkstream.config.BrokerConfig` field such as ``retention_ms``), else
  Kafka's default. :meth:`TopicConfig.checked` also refuses combinations (``min.compaction.lag.ms``
  above ``max.compaction.lag.ms``; ``max.message.bytes`` above the broker's ``max_batch_bytes``).
* :meth:`TopicConfig.describe` lists every config with its value, its source
  (:class:`ConfigSource`: DYNAMIC_TOPIC_CONFIG for an override, STATIC_BROKER_CONFIG when the broker's
  configuration sets the default, DEFAULT_CONFIG otherwise) and its synonyms, as Kafka's
  DescribeConfigs reports them.

The names, types, ranges and what LKSTREAM does with each config are the table in
:mod:`lkstream.storage.topic_config_keys`. Plain Python, no I/O: the storage layer
(:mod:`lkstream.storage.topics`) persists the overrides atomically with the topic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from lkstream.errors import InvalidConfigError, UnsupportedConfigError
from lkstream.storage.topic_config_keys import (
    CLEANUP_COMPACT,
    CLEANUP_DELETE,
    KEYS,
    LOG_APPEND_TIME,
    LONG_MAX,
    BadValue,
    ConfigKey,
    ConfigType,
    Handling,
    render,
)

if TYPE_CHECKING:
    from lkstream.config import BrokerConfig

__all__ = [
    "KEYS",
    "NO_OVERRIDES",
    "ConfigEntry",
    "ConfigKey",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "EffectiveTopicConfig",
    "Handling",
    "TopicConfig",
]


class ConfigSource(IntEnum):
    """Where a value comes from (Kafka's DescribeConfigs ``config_source``)."""

    DYNAMIC_TOPIC_CONFIG = 1
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


@dataclass(frozen=True)
class ConfigSynonym:
    """One place a value could come from, most specific first (Kafka's DescribeConfigs synonyms)."""

    name: str
    value: str
    source: ConfigSource


@dataclass(frozen=True)
class ConfigEntry:
    """One config as DescribeConfigs reports it. Topic configs are never read-only or sensitive."""

    name: str
    value: str
    source: ConfigSource
    type: ConfigType
    documentation: str
    synonyms: tuple[ConfigSynonym, ...]

    @property
    def is_default(self) -> bool:
        return self.source is ConfigSource.DEFAULT_CONFIG


@dataclass(frozen=True)
class EffectiveTopicConfig:
    """The configs that apply to a topic: its overrides over the broker's defaults over Kafka's.

    Built by :meth:`TopicConfig.effective`; every layer that honours a config reads it here.
    ``compression_level`` is the level configured for ``compression_type``'s codec (None for
    ``producer`` and ``uncompressed``). The two timestamp bounds already fold in Kafka 3's
    ``message.timestamp.difference.max.ms``.
    """

    cleanup_policy: frozenset[str]
    retention_ms: int
    retention_bytes: int
    segment_bytes: int
    segment_ms: int
    segment_jitter_ms: int
    delete_retention_ms: int
    min_cleanable_dirty_ratio: float
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    max_message_bytes: int
    message_timestamp_type: str
    message_timestamp_before_max_ms: int
    message_timestamp_after_max_ms: int
    compression_type: str
    compression_level: int | None
    index_interval_bytes: int

    @property
    def delete(self) -> bool:
        """Whether retention removes old segments (``delete`` in ``cleanup.policy``)."""
        return CLEANUP_DELETE in self.cleanup_policy

    @property
    def compact(self) -> bool:
        """Whether the cleaner compacts the topic (``compact`` in ``cleanup.policy``)."""
        return CLEANUP_COMPACT in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        """Whether the broker stamps each batch with its append time (``message.timestamp.type``)."""
        return self.message_timestamp_type == LOG_APPEND_TIME


#: ``EffectiveTopicConfig`` attribute -> the config it reads (the rest are derived below).
_ATTRIBUTES: Final[dict[str, str]] = {
    "retention_ms": "retention.ms",
    "retention_bytes": "retention.bytes",
    "segment_bytes": "segment.bytes",
    "segment_ms": "segment.ms",
    "segment_jitter_ms": "segment.jitter.ms",
    "delete_retention_ms": "delete.retention.ms",
    "min_cleanable_dirty_ratio": "min.cleanable.dirty.ratio",
    "min_compaction_lag_ms": "min.compaction.lag.ms",
    "max_compaction_lag_ms": "max.compaction.lag.ms",
    "max_message_bytes": "max.message.bytes",
    "message_timestamp_type": "message.timestamp.type",
    "compression_type": "compression.type",
    "index_interval_bytes": "index.interval.bytes",
}
_LEVELS: Final = {"gzip": "compression.gzip.level", "lz4": "compression.lz4.level", "zstd": "compression.zstd.level"}


def _unknown(name: str) -> InvalidConfigError:
    return InvalidConfigError(name, None, f"unknown topic config {name!r}: Kafka has no topic config of that name")


def _parse_one(name: object, text: object) -> Any:
    """The typed value of one config, or the error that refuses it."""
    if not isinstance(name, str):
        raise InvalidConfigError(str(name), None, f"a topic config name must be a string, not {name!r}")
    key = KEYS.get(name)
    if key is None:
        raise _unknown(name)
    if text is None:
        raise InvalidConfigError(name, None, f"topic config {name!r} needs a value (to remove an override, delete it)")
    if not isinstance(text, str):
        raise InvalidConfigError(name, None, f"topic config {name!r} takes its value as a string, not {text!r}")
    try:
        value = key.parse(text)
    except BadValue as exc:
        raise InvalidConfigError(name, text, str(exc)) from None
    why = key.refuse(value) if key.refuse is not None else None
    if why is not None:
        raise UnsupportedConfigError(name, text, why)
    return value


def _broker_default(key: ConfigKey, broker: BrokerConfig | None) -> tuple[Any, ConfigSource]:
    """The broker-wide value of ``key`` and its source (Kafka's default when the broker has no such field)."""
    if key.broker_field is None or broker is None:
        return key.default, ConfigSource.DEFAULT_CONFIG
    value = getattr(broker, key.broker_field)
    if isinstance(value, str) and key.type is not ConfigType.STRING:
        value = key.parse(value)  # validated by BrokerConfig with the same rules
    explicit = key.broker_field in broker.model_fields_set
    return value, ConfigSource.STATIC_BROKER_CONFIG if explicit else ConfigSource.DEFAULT_CONFIG


@dataclass(frozen=True)
class TopicConfig:
    """A topic's config overrides (Kafka's names, typed values); immutable and hashable.

    Build one with :meth:`parse` (or :meth:`from_json`); ``TopicConfig()`` has no overrides.
    """

    items: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def parse(cls, raw: Mapping[str, str | None]) -> TopicConfig:
        """Validate Kafka-named string configs; raise :class:`InvalidConfigError` (or its
        :class:`UnsupportedConfigError`) for the first one refused."""
        return cls(tuple(sorted((name, _parse_one(name, text)) for name, text in raw.items())))

    @property
    def overrides(self) -> Mapping[str, Any]:
        """``{name: typed value}`` of the configs set on the topic (read-only)."""
        return MappingProxyType(dict(self.items))

    def to_json(self) -> dict[str, str]:
        """``{name: value}`` as Kafka's canonical strings (what ``topic.json`` keeps and surfaces show)."""
        return {name: render(value) for name, value in self.items}

    @classmethod
    def from_json(cls, raw: object) -> TopicConfig:
        """Read what :meth:`to_json` wrote; :class:`InvalidConfigError` if it is not such a mapping."""
        if raw is None:
            return cls()
        if not isinstance(raw, dict):
            raise InvalidConfigError("configs", None, f"stored topic configs must be a mapping, not {raw!r}")
        return cls.parse(raw)

    def with_changes(self, set: Mapping[str, str | None] | None = None, delete: Iterable[str] = ()) -> TopicConfig:
        """These overrides with ``set`` applied and ``delete`` removed (Kafka's incremental alter).

        Deleting a config that is not overridden is not an error (Kafka answers success), but
        its name must be a config Kafka knows; a name both set and deleted is refused.
        """
        changes = TopicConfig.parse(set or {}).overrides
        removed = frozenset(delete)
        for name in removed:
            if name not in KEYS:
                raise _unknown(name)
            if name in changes:
                raise InvalidConfigError(name, None, f"topic config {name!r} is both set and deleted in one change")
        merged = {name: value for name, value in self.items if name not in removed}
        merged.update(changes)
        return TopicConfig(tuple(sorted(merged.items())))

    def value(self, name: str, broker: BrokerConfig | None = None) -> Any:
        """The typed value of config ``name`` that applies: the override, else the broker's, else Kafka's."""
        overrides = dict(self.items)
        if name in overrides:
            return overrides[name]
        return _broker_default(KEYS[name], broker)[0]

    def effective(self, broker: BrokerConfig | None = None) -> EffectiveTopicConfig:
        """Every value that applies to the topic (see :class:`EffectiveTopicConfig`); never raises."""
        values = {attribute: self.value(name, broker) for attribute, name in _ATTRIBUTES.items()}
        difference = self.value("message.timestamp.difference.max.ms", broker)
        overrides = dict(self.items)
        bounds = {
            f"message_timestamp_{side}_max_ms": overrides.get(f"message.timestamp.{side}.max.ms", difference)
            for side in ("before", "after")
        }
        codec = values["compression_type"]
        level = self.value(_LEVELS[codec], broker) if codec in _LEVELS else None
        return EffectiveTopicConfig(
            cleanup_policy=frozenset(self.value("cleanup.policy", broker)),
            compression_level=level,
            **values,
            **bounds,
        )

    def checked(self, broker: BrokerConfig) -> EffectiveTopicConfig:
        """:meth:`effective`, refusing combinations Kafka refuses and limits the broker cannot exceed.

        Called by the broker on every create and alter (not when a topic is opened: a broker
        restarted with a smaller ``max_batch_bytes`` keeps serving the topic, within both limits).
        """
        effective = self.effective(broker)
        if effective.min_compaction_lag_ms > effective.max_compaction_lag_ms:
            raise InvalidConfigError(
                "min.compaction.lag.ms",
                str(effective.min_compaction_lag_ms),
                f"min.compaction.lag.ms ({effective.min_compaction_lag_ms}) is above max.compaction.lag.ms "
                f"({effective.max_compaction_lag_ms})",
            )
        overrides = dict(self.items)
        if "max.message.bytes" in overrides and effective.max_message_bytes > broker.max_batch_bytes:
            raise UnsupportedConfigError(
                "max.message.bytes",
                str(effective.max_message_bytes),
                f"it is above the broker's max_batch_bytes ({broker.max_batch_bytes}), which bounds the memory of "
                "every request; raise max_batch_bytes in the broker's configuration first",
            )
        return effective

    def describe(self, broker: BrokerConfig | None = None) -> list[ConfigEntry]:
        """Every topic config with its value, source and synonyms, sorted by name (DescribeConfigs)."""
        overrides = dict(self.items)
        entries = []
        for name, key in sorted(KEYS.items()):
            synonyms: list[ConfigSynonym] = []
            if name in overrides:
                synonyms.append(ConfigSynonym(name, render(overrides[name]), ConfigSource.DYNAMIC_TOPIC_CONFIG))
            broker_value, source = _broker_default(key, broker)
            if key.synonym is not None:
                if source is ConfigSource.STATIC_BROKER_CONFIG:
                    synonyms.append(ConfigSynonym(key.synonym, render(broker_value), source))
                default = _broker_default(key, None)[0] if key.broker_field is None else _field_default(key)
                synonyms.append(ConfigSynonym(key.synonym, render(default), ConfigSource.DEFAULT_CONFIG))
            first = synonyms[0] if synonyms else ConfigSynonym(name, render(broker_value), source)
            entries.append(ConfigEntry(name, first.value, first.source, key.type, _documentation(key), tuple(synonyms)))
        return entries


def _field_default(key: ConfigKey) -> Any:
    """The default of ``key``'s :class:`BrokerConfig` field (LKSTREAM's broker default)."""
    from lkstream.config import BrokerConfig  # the model's defaults only: no instance, no I/O

    assert key.broker_field is not None
    value = BrokerConfig.model_fields[key.broker_field].default
    return key.parse(value) if isinstance(value, str) and key.type is not ConfigType.STRING else value


def _documentation(key: ConfigKey) -> str:
    return f"{key.doc} [{key.handling.value}]"


#: Long.MAX_VALUE, Kafka's "no limit" for several configs.
UNLIMITED: Final = LONG_MAX
#: A topic without config overrides.
NO_OVERRIDES: Final = TopicConfig()
