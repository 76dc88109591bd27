"""The broker resource of DescribeConfigs: the keys Kafka clients and tools read, as this node has them.

Kafka reports a broker's configs under its id (``"0"`` here). Clients and tools read a few of
them to decide things: ``advertised.listeners`` and ``listeners`` (where to connect),
``broker.id`` / ``node.id``, ``log.dirs``, the topic defaults (``log.retention.ms``,
``log.cleanup.policy``, ``message.max.bytes`` ...), replication factors (1: one node) and the
group session bounds. Every value is read-only, as a static (``server.properties``) config of
Kafka's is: LKSTREAM's broker settings come from its configuration file, environment and flags
(docs/operations.md), so AlterConfigs on the broker answers INVALID_REQUEST, as Kafka does for
a config it cannot update dynamically.

Sources: STATIC_BROKER_CONFIG for a :class:`~lkstream.config.BrokerConfig` field the broker's
configuration set, DEFAULT_CONFIG for the others and for fixed facts of a single node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from lkstream.kafka.context import NODE_ID
from lkstream.storage.topic_config import KEYS, ConfigSource, ConfigType
from lkstream.storage.topic_config_keys import render

if TYPE_CHECKING:
    from lkstream.config import BrokerConfig
    from lkstream.kafka.context import RequestContext


@dataclass(frozen=True)
class BrokerEntry:
    name: str
    value: str
    source: ConfigSource
    type: ConfigType
    documentation: str


#: Kafka broker configs that are a topic config's default: broker name -> topic config.
_TOPIC_DEFAULTS: Final = {key.synonym: key for key in KEYS.values() if key.synonym and key.broker_field}

#: Facts of a single node, the same whatever the configuration: (name, value, type, what it means here).
_FIXED: Final = (
    ("default.replication.factor", "1", ConfigType.INT, "One node: every partition has one replica."),
    ("offsets.topic.replication.factor", "1", ConfigType.SHORT, "Committed offsets live in the offsets journal."),
    ("transaction.state.log.replication.factor", "1", ConfigType.SHORT, "No transactions yet."),
    ("min.insync.replicas", "1", ConfigType.INT, "One replica: acks=all is met by the leader alone."),
    ("unclean.leader.election.enable", "false", ConfigType.BOOLEAN, "One node: no leader elections."),
    ("process.roles", "broker,controller", ConfigType.LIST, "The one node is broker and controller."),
    ("group.min.session.timeout.ms", "6000", ConfigType.INT, "Shortest consumer session timeout (Kafka's)."),
    ("group.max.session.timeout.ms", "1800000", ConfigType.INT, "Longest consumer session timeout (Kafka's)."),
    ("group.initial.rebalance.delay.ms", "0", ConfigType.INT, "No initial rebalance delay (docs/kafka.md)."),
    ("delete.topic.enable", "true", ConfigType.BOOLEAN, "DeleteTopics is served."),
)


def broker_entries(ctx: RequestContext) -> list[BrokerEntry]:
    """Every broker config this node reports, sorted by name."""
    config = ctx.broker.config
    listener = _listener(ctx)
    advertised = f"{listener.split('://')[0]}://{ctx.server.advertised_host}:{ctx.server.advertised_port}"
    static, default = ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG
    # The listener is the daemon's server.kafka_* settings: static, as Kafka's server.properties.
    entries = [
        BrokerEntry("broker.id", str(NODE_ID), default, ConfigType.INT, "The id of this node."),
        BrokerEntry("node.id", str(NODE_ID), default, ConfigType.INT, "The id of this node."),
        BrokerEntry("listeners", listener, static, ConfigType.LIST, "Where the Kafka listener is bound."),
        BrokerEntry(
            "advertised.listeners", advertised, static, ConfigType.LIST, "What Metadata tells clients to connect to."
        ),
        BrokerEntry(
            "log.dirs", ctx.broker.persist_dir, _source(config, "persist_dir"), ConfigType.LIST, "persist_dir."
        ),
        BrokerEntry(
            "log.dir", ctx.broker.persist_dir, _source(config, "persist_dir"), ConfigType.STRING, "persist_dir."
        ),
        BrokerEntry(
            "num.partitions", str(config.partitions), _source(config, "partitions"), ConfigType.INT, "partitions."
        ),
        BrokerEntry(
            "auto.create.topics.enable",
            render(config.auto_create_topics),
            _source(config, "auto_create_topics"),
            ConfigType.BOOLEAN,
            "auto_create_topics.",
        ),
        *(BrokerEntry(name, value, default, kind, doc) for name, value, kind, doc in _FIXED),
    ]
    for name, key in _TOPIC_DEFAULTS.items():
        assert key.broker_field is not None
        value = getattr(config, key.broker_field)
        entries.append(
            BrokerEntry(name, render(value), _source(config, key.broker_field), key.type, f"{key.broker_field}.")
        )
    return sorted(entries, key=lambda e: e.name)


def _source(config: BrokerConfig, field: str) -> ConfigSource:
    return ConfigSource.STATIC_BROKER_CONFIG if field in config.model_fields_set else ConfigSource.DEFAULT_CONFIG


def _listener(ctx: RequestContext) -> str:
    settings = ctx.server.settings
    tls = settings.ssl_context is not None
    sasl = settings.sasl is not None
    protocol = {(False, False): "PLAINTEXT", (True, False): "SSL", (False, True): "SASL_PLAINTEXT"}.get(
        (tls, sasl), "SASL_SSL"
    )
    return f"{protocol}://{settings.host}:{ctx.server.advertised_port}"
