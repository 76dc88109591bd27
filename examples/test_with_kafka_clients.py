"""A project's test that needs a Kafka broker, served by LKSTREAM in process (no Docker).

Run: pytest examples/test_with_kafka_clients.py
"""

from __future__ import annotations

from confluent_kafka import Consumer, Producer

from lkstream import Broker

pytest_plugins = ["lkstream.testing"]


def publish_order(bootstrap: str, order_id: str, total: int) -> None:
    """The code under test: it only knows Kafka's client API."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    producer.produce("orders", key=order_id.encode(), value=str(total).encode())
    assert producer.flush(10) == 0


def test_an_order_is_published_once_with_its_key(kafka_bootstrap: str, kafka_broker: Broker) -> None:
    publish_order(kafka_bootstrap, "o-1", 12)
    records = kafka_broker.read_from("orders", 0, 0)
    assert [(r.key, r.value) for r in records] == [(b"o-1", b"12")]


def test_a_consumer_group_reads_it(kafka_bootstrap: str) -> None:
    publish_order(kafka_bootstrap, "o-2", 30)
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "billing", "auto.offset.reset": "earliest"})
    consumer.subscribe(["orders"])
    try:
        message = None
        for _ in range(40):
            message = consumer.poll(0.5)
            if message is not None:
                break
        assert message is not None and message.error() is None
        assert (message.key(), message.value()) == (b"o-2", b"30")
    finally:
        consumer.close()
