"""Kafka-protocol tests: an in-process listener per test (lkstream.testing), the real daemon where needed."""

from __future__ import annotations

from lkstream.testing import kafka_bootstrap, kafka_broker
from tests.integration.conftest import start_daemon

__all__ = ["kafka_bootstrap", "kafka_broker", "start_daemon"]
