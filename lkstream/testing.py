"""Test helpers for projects that use LKSTREAM or Kafka clients: a pytest fixture with a Kafka-compatible server.

A project that starts a Docker Kafka (or testcontainers) for its tests can use
this instead: the fixture serves Kafka's protocol from this process on a free
loopback port, with its own data directory, and stops it afterwards::

    # conftest.py
    pytest_plugins = ["lkstream.testing"]

    # test_orders.py
    def test_order_is_published(kafka_bootstrap):
        producer = confluent_kafka.Producer({"bootstrap.servers": kafka_bootstrap})
        ...

``kafka_bootstrap`` is the ``host:port`` string; ``kafka_broker`` is the
:class:`~lkstream.Broker` behind it (to inspect what arrived without a Kafka
client). Both are function-scoped: every test starts from an empty log.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lkstream.broker.broker import Broker
from lkstream.kafka.inprocess import kafka_server


@pytest.fixture
def kafka_broker(tmp_path: Path) -> Iterator[Broker]:
    """An embedded broker over a fresh data directory (closed after the test)."""
    with Broker(persist_dir=str(tmp_path / "lkstream-data")) as broker:
        yield broker


@pytest.fixture
def kafka_bootstrap(kafka_broker: Broker) -> Iterator[str]:
    """``host:port`` of a Kafka-compatible server over :func:`kafka_broker`, for ``bootstrap.servers``."""
    with kafka_server(kafka_broker) as bootstrap:
        yield bootstrap
