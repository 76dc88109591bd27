"""Kafka's config and cluster admin APIs (issue 24) through the admin clients people use.

confluent-kafka's AdminClient (librdkafka) and kafka-python's KafkaAdminClient create topics with
configs, describe them (sources, synonyms, documentation), alter them incrementally and whole,
describe the broker and the cluster, and meet Kafka's errors: INVALID_CONFIG for unknown names,
bad values and values LKSTREAM cannot honour, nothing changed by validate_only.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import KafkaAdminClient

from lkstream import Broker

DEADLINE_S = 30.0
TOPIC = ConfigResource.Type.TOPIC
BROKER = ConfigResource.Type.BROKER


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _create(admin: AdminClient, name: str, configs: dict[str, str], *, validate_only: bool = False) -> None:
    admin.create_topics([NewTopic(name, 1, config=configs)], validate_only=validate_only)[name].result(DEADLINE_S)


def _describe(admin: AdminClient, kind: Any, name: str, **kw: Any) -> dict[str, Any]:
    result: dict[str, Any] = admin.describe_configs([ConfigResource(kind, name)], **kw)
    return next(iter(result.values())).result(DEADLINE_S)  # type: ignore[no-any-return]


def _error(future: Any) -> KafkaError:
    with pytest.raises(KafkaException) as caught:
        future.result(DEADLINE_S)
    error: KafkaError = caught.value.args[0]
    return error


def test_create_with_compaction_configs_and_describe_them(kafka_bootstrap: str, kafka_broker: Broker) -> None:
    admin = _admin(kafka_bootstrap)
    _create(admin, "changelog", {"cleanup.policy": "compact", "segment.bytes": "1048576", "retention.ms": "-1"})
    assert kafka_broker.topic_config("changelog").compact
    described = _describe(admin, TOPIC, "changelog")
    policy = described["cleanup.policy"]
    assert (policy.value, policy.source, policy.is_read_only) == (
        "compact",
        ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
        False,
    )
    assert [(s.name, s.value) for s in policy.synonyms.values()] == [
        ("cleanup.policy", "compact"),
        ("log.cleanup.policy", "delete"),
    ]
    assert described["min.cleanable.dirty.ratio"].value == "0.5"
    assert described["min.cleanable.dirty.ratio"].source == ConfigSource.DEFAULT_CONFIG.value
    assert described["max.message.bytes"].value == str(kafka_broker.config.max_batch_bytes)


def test_create_refuses_what_kafka_refuses_and_what_lkstream_cannot_honour(
    kafka_bootstrap: str, kafka_broker: Broker
) -> None:
    admin = _admin(kafka_bootstrap)
    cases = {
        "unknown": {"cleanup.polcy": "compact"},
        "too-big": {"retention.ms": str(10**30)},  # issue 28, finding 11
        "ratio": {"min.cleanable.dirty.ratio": "2"},
        "isr": {"min.insync.replicas": "2"},
    }
    for name, configs in cases.items():
        future = admin.create_topics([NewTopic(name, 1, config=configs)])[name]
        error = _error(future)
        assert error.code() == KafkaError.INVALID_CONFIG, (name, error)
    assert "one replica" in str(_error(admin.create_topics([NewTopic("isr", 1, config=cases["isr"])])["isr"]))
    _create(admin, "dry", {"cleanup.policy": "compact"}, validate_only=True)
    assert kafka_broker.list_topics() == []


def test_incremental_alter_sets_deletes_appends_and_subtracts(kafka_bootstrap: str, kafka_broker: Broker) -> None:
    admin = _admin(kafka_bootstrap)
    _create(admin, "t", {"retention.ms": "60000"})
    resource = ConfigResource(
        TOPIC,
        "t",
        incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
            ConfigEntry("segment.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
        ],
    )
    next(iter(admin.incremental_alter_configs([resource]).values())).result(DEADLINE_S)
    assert kafka_broker.describe_topic("t").configs.to_json() == {
        "cleanup.policy": "delete,compact",
        "segment.ms": "3600000",
    }
    subtract = ConfigResource(
        TOPIC,
        "t",
        incremental_configs=[ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT)],
    )
    next(iter(admin.incremental_alter_configs([subtract]).values())).result(DEADLINE_S)
    effective = kafka_broker.topic_config("t")
    assert effective.cleanup_policy == frozenset({"compact"}) and effective.segment_ms == 3_600_000


def test_incremental_alter_errors_change_nothing(kafka_bootstrap: str, kafka_broker: Broker) -> None:
    admin = _admin(kafka_bootstrap)
    _create(admin, "t", {"retention.ms": "60000"})
    bad = [
        ConfigEntry("retention.ms", "-7", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", "5", incremental_operation=AlterConfigOpType.APPEND),  # not a list
        ConfigEntry("no.such.config", "5", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("preallocate", "true", incremental_operation=AlterConfigOpType.SET),
    ]
    for entry in bad:
        future = next(
            iter(admin.incremental_alter_configs([ConfigResource(TOPIC, "t", incremental_configs=[entry])]).values())
        )
        assert _error(future).code() == KafkaError.INVALID_CONFIG, entry
    missing = ConfigResource(
        TOPIC,
        "nope",
        incremental_configs=[ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)],
    )
    assert _error(next(iter(admin.incremental_alter_configs([missing]).values()))).code() == (
        KafkaError.UNKNOWN_TOPIC_OR_PART
    )
    dry = ConfigResource(
        TOPIC, "t", incremental_configs=[ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)]
    )
    next(iter(admin.incremental_alter_configs([dry], validate_only=True).values())).result(DEADLINE_S)
    assert kafka_broker.describe_topic("t").configs.to_json() == {"retention.ms": "60000"}


def test_legacy_alter_configs_replaces_every_override(kafka_bootstrap: str, kafka_broker: Broker) -> None:
    admin = _admin(kafka_bootstrap)
    _create(admin, "t", {"retention.ms": "60000", "cleanup.policy": "compact"})
    resource = ConfigResource(TOPIC, "t", set_config={"retention.bytes": "1048576"})
    next(iter(admin.alter_configs([resource]).values())).result(DEADLINE_S)
    assert kafka_broker.describe_topic("t").configs.to_json() == {"retention.bytes": "1048576"}


def test_broker_configs_are_described_and_read_only(kafka_bootstrap: str, kafka_broker: Broker) -> None:
    admin = _admin(kafka_bootstrap)
    described = _describe(admin, BROKER, "0")
    host, port = kafka_bootstrap.rsplit(":", 1)
    assert described["advertised.listeners"].value == f"PLAINTEXT://{host}:{port}"
    assert described["listeners"].value.startswith("PLAINTEXT://")
    assert (described["broker.id"].value, described["node.id"].value) == ("0", "0")
    assert described["log.dirs"].value == kafka_broker.persist_dir
    assert described["log.retention.ms"].value == "-1"
    assert described["log.cleanup.policy"].value == "delete"
    assert all(entry.is_read_only for entry in described.values())
    change = ConfigResource(
        BROKER,
        "0",
        incremental_configs=[ConfigEntry("log.retention.ms", "1", incremental_operation=AlterConfigOpType.SET)],
    )
    error = _error(next(iter(admin.incremental_alter_configs([change]).values())))
    assert error.code() == KafkaError.INVALID_REQUEST and "dynamically" in error.str()


def test_describe_cluster_and_grow_a_topic(kafka_bootstrap: str, kafka_broker: Broker) -> None:
    admin = _admin(kafka_bootstrap)
    cluster = admin.describe_cluster().result(DEADLINE_S)
    assert cluster.cluster_id == "lkstream" and [n.id for n in cluster.nodes] == [0] and cluster.controller.id == 0
    _create(admin, "grow", {"cleanup.policy": "compact"})
    admin.create_partitions([NewPartitions("grow", 3)])["grow"].result(DEADLINE_S)
    assert kafka_broker.partitions_for("grow") == 3 and kafka_broker.topic_config("grow").compact


def test_kafka_python_admin_describes_and_alters(kafka_bootstrap: str, kafka_broker: Broker) -> None:
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        _create(_admin(kafka_bootstrap), "kp", {"cleanup.policy": "compact"})
        modified = admin.describe_configs([KpConfigResource("TOPIC", "kp")])
        assert modified["topic"]["kp"]["cleanup.policy"]["value"] == "compact"
        result = admin.alter_configs([KpConfigResource("TOPIC", "kp", configs={"retention.ms": "120000"})])
        assert result == {"topic": {"kp": "OK"}}
        assert kafka_broker.describe_topic("kp").configs.to_json() == {
            "cleanup.policy": "compact",
            "retention.ms": "120000",
        }
        assert admin.list_partition_reassignments() == {}
        admin.reset_configs([KpConfigResource("TOPIC", "kp", configs=["retention.ms"])])
        assert kafka_broker.describe_topic("kp").configs.to_json() == {"cleanup.policy": "compact"}
    finally:
        admin.close()
