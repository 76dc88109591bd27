"""What the framework tests share: producing words, reading and altering topic configs, counting a topic's records
(confluent-kafka)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

DEADLINE_S = 60.0
WORDS = ("apple", "pear", "fig")


def create_topic(bootstrap: str, name: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions)])[name].result(DEADLINE_S)


def produce_words(bootstrap: str, topic: str, count: int) -> None:
    """``count`` records cycling through :data:`WORDS`, keyed by the word."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        word = WORDS[i % len(WORDS)]
        producer.produce(topic, key=word, value=word)
    assert producer.flush(DEADLINE_S) == 0


def topic_configs(bootstrap: str) -> dict[str, dict[str, str]]:
    """``{topic: {config: value}}`` of every topic's overrides (DescribeConfigs over the Kafka protocol)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = list(admin.list_topics(timeout=DEADLINE_S).topics)
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, n) for n in names])
    out = {}
    for resource, future in described.items():
        entries = future.result(DEADLINE_S)
        out[resource.name] = {k: e.value for k, e in entries.items() if e.source == 1}  # DYNAMIC_TOPIC_CONFIG
    return out


def run(python: Path, script: Path, *args: str, timeout: float = 120.0) -> dict[str, int]:
    """Run a framework script to its end; the JSON object it printed last."""
    done = subprocess.run(
        [str(python), str(script), *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def alter_topic_configs(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    """Set ``configs`` on ``topic`` (IncrementalAlterConfigs, SET) over the Kafka protocol."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET) for name, value in configs.items()]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
    next(iter(admin.incremental_alter_configs([resource]).values())).result(DEADLINE_S)


def count_records(bootstrap: str, topic: str) -> int:
    """How many records a Kafka consumer reads from ``topic``'s earliest offsets to its ends (all partitions)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    partitions = admin.list_topics(topic, timeout=DEADLINE_S).topics[topic].partitions
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"count-{time.monotonic_ns()}"})
    try:
        assigned = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions]
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), DEADLINE_S)[1] for p in partitions}
        consumer.assign(assigned)
        count, quiet_since = 0, time.monotonic()
        # A position stops at a partition's last record when the records after it were cleaned
        # away (nothing to fetch there, as against Kafka): 2 quiet seconds end the read as well.
        while time.monotonic() - quiet_since < 2:
            positions = consumer.position([TopicPartition(topic, p) for p in partitions])
            if all(tp.offset >= ends[tp.partition] or ends[tp.partition] == 0 for tp in positions):
                break
            message = consumer.poll(0.2)
            if message is None:
                continue
            assert message.error() is None, message.error()
            count, quiet_since = count + 1, time.monotonic()
    finally:
        consumer.close()
    return count
