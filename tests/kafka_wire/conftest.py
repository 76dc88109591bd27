"""Kafka-protocol tests: an in-process listener per test (lkstream.testing), the real daemon where needed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lkstream import Broker
from lkstream.kafka.context import ListenerSettings
from lkstream.kafka.inprocess import KafkaServerThread
from lkstream.testing import kafka_bootstrap, kafka_broker
from tests.integration.conftest import start_daemon

__all__ = ["kafka_bootstrap", "kafka_broker", "name_only_bootstrap", "start_daemon"]


@pytest.fixture
def name_only_bootstrap(kafka_broker: Broker) -> Iterator[str]:
    """A listener over ``kafka_broker`` with the topic-id switch off (no KIP-848, Metadata up to v9)."""
    runner = KafkaServerThread(kafka_broker, ListenerSettings(port=0, topic_ids=False))
    try:
        yield runner.start()
    finally:
        runner.stop()
