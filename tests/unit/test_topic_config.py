"""lkstream.storage.topic_config: Kafka's topic configs, parsed, validated, stored and described."""

from __future__ import annotations

from pathlib import Path

import pytest

from lkstream.config import BrokerConfig
from lkstream.errors import InvalidArgumentError, InvalidConfigError, UnsupportedConfigError
from lkstream.storage.topic_config import KEYS, ConfigSource, ConfigType, TopicConfig
from lkstream.storage.topic_config_keys import LONG_MAX, Handling


def test_no_overrides_take_lkstreams_broker_defaults_then_kafkas() -> None:
    effective = TopicConfig().effective(BrokerConfig.build({}))
    assert effective.cleanup_policy == frozenset({"delete"}) and effective.delete and not effective.compact
    assert effective.retention_ms == -1  # LKSTREAM's broker default: keep forever
    assert effective.segment_bytes == 64 * 1024 * 1024  # segment_max_bytes
    assert effective.max_message_bytes == 16 * 1024 * 1024  # max_batch_bytes
    assert effective.delete_retention_ms == 86_400_000
    assert effective.min_cleanable_dirty_ratio == 0.5
    assert (effective.min_compaction_lag_ms, effective.max_compaction_lag_ms) == (0, LONG_MAX)
    assert effective.segment_ms == 604_800_000
    assert (effective.compression_type, effective.compression_level) == ("producer", None)
    assert effective.message_timestamp_type == "CreateTime" and not effective.log_append_time


def test_overrides_win_over_the_broker_and_parse_as_kafka_does() -> None:
    configs = TopicConfig.parse(
        {
            "cleanup.policy": " compact , delete ",
            "retention.ms": "+3600000",
            "min.cleanable.dirty.ratio": "0.25",
            "compression.type": "zstd",
            "compression.zstd.level": "7",
            "message.timestamp.type": "LogAppendTime",
            "unclean.leader.election.enable": "TRUE",
        }
    )
    assert configs.overrides["cleanup.policy"] == ("compact", "delete")
    assert configs.overrides["unclean.leader.election.enable"] is True
    effective = configs.effective(BrokerConfig.build({"retention_ms": 5}))
    assert effective.cleanup_policy == frozenset({"compact", "delete"})
    assert effective.retention_ms == 3_600_000
    assert effective.min_cleanable_dirty_ratio == 0.25
    assert (effective.compression_type, effective.compression_level) == ("zstd", 7)
    assert effective.log_append_time
    assert configs.to_json()["cleanup.policy"] == "compact,delete"


def test_the_broker_configuration_supplies_defaults_for_every_topic() -> None:
    broker = BrokerConfig.build({"cleanup_policy": "compact", "compression_type": "lz4", "segment_ms": 1000})
    effective = TopicConfig().effective(broker)
    assert effective.compact and not effective.delete
    assert (effective.compression_type, effective.compression_level) == ("lz4", 9)
    assert effective.segment_ms == 1000


@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        ("retention.ms", str(10**30), "outside the range of a Java long"),  # issue 28, finding 11
        ("retention.ms", "-2", "at least -1"),
        ("retention.ms", "1e3", "not a whole number"),
        ("retention.ms", "1_000", "not a whole number"),
        ("retention.ms", "", "not a whole number"),
        ("segment.bytes", "1048575", "at least 1048576"),
        ("segment.bytes", str(2**31), "Java int"),
        ("min.cleanable.dirty.ratio", "1.5", "between 0 and 1"),
        ("min.cleanable.dirty.ratio", "nan", "not a decimal number"),
        ("max.compaction.lag.ms", "0", "at least 1"),
        ("min.compaction.lag.ms", "-1", "at least 0"),
        ("cleanup.policy", "compact,shred", "'shred' is not delete or compact"),
        ("cleanup.policy", "Compact", "is not delete or compact"),
        ("compression.type", "brotli", "must be one of"),
        ("message.timestamp.type", "logappendtime", "CreateTime, LogAppendTime"),
        ("unclean.leader.election.enable", "yes", "not a boolean"),
        ("compression.gzip.level", "0", "between 1 and 9 or -1"),
        ("leader.replication.throttled.replicas", "0:a", "partition:broker"),
        ("message.format.version", "latest", "Kafka version"),
    ],
)
def test_values_outside_kafkas_type_or_range_are_invalid_config(name: str, value: str, reason: str) -> None:
    with pytest.raises(InvalidConfigError, match=reason) as caught:
        TopicConfig.parse({name: value})
    assert not isinstance(caught.value, UnsupportedConfigError)
    assert (caught.value.name, caught.value.value) == (name, value)


def test_an_unknown_name_is_invalid_config_naming_it() -> None:
    with pytest.raises(InvalidConfigError, match=r"unknown topic config 'retention\.minutes'"):
        TopicConfig.parse({"retention.minutes": "5"})
    with pytest.raises(InvalidConfigError, match="needs a value"):
        TopicConfig.parse({"retention.ms": None})


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("min.insync.replicas", "2", "one replica"),
        ("preallocate", "true", "does not preallocate"),
        ("remote.storage.enable", "true", "no tiered"),
        ("local.retention.ms", "1000", "no tiered"),
        ("flush.messages", "1", "fsync_mode"),
        ("flush.ms", "1000", "fsync_mode"),
    ],
)
def test_known_configs_lkstream_cannot_honour_are_refused_saying_why(name: str, value: str, why: str) -> None:
    with pytest.raises(UnsupportedConfigError, match=f"LKSTREAM cannot honour topic config {name}=.*{why}"):
        TopicConfig.parse({name: value})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("min.insync.replicas", "1"),
        ("preallocate", "false"),
        ("remote.storage.enable", "false"),
        ("flush.messages", str(LONG_MAX)),
        ("unclean.leader.election.enable", "true"),
        ("follower.replication.throttled.replicas", "*"),
        ("message.downconversion.enable", "false"),
        ("segment.index.bytes", "4096"),
    ],
)
def test_values_a_single_node_honours_are_accepted(name: str, value: str) -> None:
    assert name in TopicConfig.parse({name: value}).overrides


def test_with_changes_sets_and_deletes_incrementally() -> None:
    base = TopicConfig.parse({"retention.ms": "1000", "cleanup.policy": "compact"})
    changed = base.with_changes(set={"retention.bytes": "5"}, delete=["retention.ms", "segment.ms"])
    assert changed.to_json() == {"cleanup.policy": "compact", "retention.bytes": "5"}
    assert base.to_json() == {"cleanup.policy": "compact", "retention.ms": "1000"}  # immutable
    with pytest.raises(InvalidConfigError, match="unknown topic config"):
        base.with_changes(delete=["nope"])
    with pytest.raises(InvalidConfigError, match="both set and deleted"):
        base.with_changes(set={"retention.ms": "1"}, delete=["retention.ms"])


def test_checked_refuses_combinations_and_limits_the_broker_sets() -> None:
    broker = BrokerConfig.build({"max_batch_bytes": 2 * 1024 * 1024})
    with pytest.raises(InvalidConfigError, match=r"min.compaction.lag.ms \(10\) is above max.compaction.lag.ms \(5\)"):
        TopicConfig.parse({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}).checked(broker)
    with pytest.raises(UnsupportedConfigError, match="max_batch_bytes"):
        TopicConfig.parse({"max.message.bytes": str(4 * 1024 * 1024)}).checked(broker)
    assert TopicConfig.parse({"max.message.bytes": "1000"}).checked(broker).max_message_bytes == 1000


def test_json_round_trip_and_garbage() -> None:
    configs = TopicConfig.parse({"min.cleanable.dirty.ratio": "0.1", "cleanup.policy": ""})
    assert TopicConfig.from_json(configs.to_json()) == configs
    assert configs.effective().cleanup_policy == frozenset()  # neither delete nor compact
    assert TopicConfig.from_json(None) == TopicConfig()
    with pytest.raises(InvalidConfigError):
        TopicConfig.from_json(["retention.ms"])


def test_describe_reports_sources_and_synonyms_as_kafka() -> None:
    broker = BrokerConfig.build({"retention_ms": 86_400_000})
    entries = {e.name: e for e in TopicConfig.parse({"cleanup.policy": "compact"}).describe(broker)}
    assert sorted(entries) == sorted(KEYS)
    policy = entries["cleanup.policy"]
    assert (policy.value, policy.source, policy.type) == ("compact", ConfigSource.DYNAMIC_TOPIC_CONFIG, ConfigType.LIST)
    assert [(s.name, s.value, s.source) for s in policy.synonyms] == [
        ("cleanup.policy", "compact", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ("log.cleanup.policy", "delete", ConfigSource.DEFAULT_CONFIG),
    ]
    retention = entries["retention.ms"]
    assert (retention.value, retention.source) == ("86400000", ConfigSource.STATIC_BROKER_CONFIG)
    assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
        ("log.retention.ms", "86400000", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.ms", "-1", ConfigSource.DEFAULT_CONFIG),
    ]
    assert entries["segment.bytes"].source is ConfigSource.DEFAULT_CONFIG and entries["segment.bytes"].is_default
    assert "[honoured]" in entries["retention.ms"].documentation


def test_every_key_has_a_doc_and_a_kafka_default_its_own_rules_accept() -> None:
    for key in KEYS.values():
        assert key.doc.endswith(".") and isinstance(key.handling, Handling)
        assert key.check is None or key.check(key.default) is None, key.name
        assert key.refuse is None or key.refuse(key.default) is None, key.name


def test_the_broker_configuration_validates_its_topic_defaults() -> None:
    with pytest.raises(InvalidArgumentError, match="cleanup_policy"):
        BrokerConfig.build({"cleanup_policy": "forever"})
    with pytest.raises(InvalidArgumentError, match="min_cleanable_dirty_ratio"):
        BrokerConfig.build({"min_cleanable_dirty_ratio": 2.0})


def test_docs_kafka_md_lists_every_topic_config_with_what_it_does_here() -> None:
    text = (Path(__file__).parents[2] / "docs" / "kafka.md").read_text()
    table = text.split("## Topic configs", 1)[1].split("\n## ", 1)[0]
    for name, key in KEYS.items():
        assert f"| `{name}` | {key.handling.value} |" in table, f"docs/kafka.md's topic config table lacks {name}"
