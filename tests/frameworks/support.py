"""What the framework tests share: producing words and reading a topic's configs with confluent-kafka."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

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
