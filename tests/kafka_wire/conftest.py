"""Kafka-protocol tests: an in-process listener per test (lkstream.testing), the real daemon where needed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lkstream import Broker
from lkstream.kafka.context import ListenerSettings
from lkstream.kafka.inprocess import KafkaServerThread
from lkstream.testing import kafka_bootstrap, kafka_broker
from tests.integration.conftest import start_daemon

__all__ = ["kafka_bootstrap", "kafka_broker", "start_daemon", "topic_id_bootstrap"]


@pytest.fixture
def topic_id_bootstrap(kafka_broker: Broker) -> Iterator[str]:
    """A listener over ``kafka_broker`` with the topic-id switch on (KIP-848, Metadata v10-12)."""
    runner = KafkaServerThread(kafka_broker, ListenerSettings(port=0, topic_ids=True))
    try:
        yield runner.start()
    finally:
        runner.stop()
