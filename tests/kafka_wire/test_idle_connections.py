"""Connections idle past the listener's idle timeout are closed (Kafka's connections.max.idle.ms)."""

from __future__ import annotations

import socket
import time

from lkstream import Broker
from lkstream.kafka.context import ListenerSettings
from lkstream.kafka.inprocess import KafkaServerThread
from tests.kafka_wire.test_fuzz import api_versions_works, request

IDLE_S = 0.5
DEADLINE_S = 10.0


def test_an_idle_connection_is_closed_and_a_busy_one_is_not(kafka_broker: Broker) -> None:
    runner = KafkaServerThread(kafka_broker, ListenerSettings(port=0, idle_timeout_s=IDLE_S))
    bootstrap = runner.start()
    host, port = bootstrap.rsplit(":", 1)
    try:
        busy = socket.create_connection((host, int(port)), timeout=DEADLINE_S)
        idle = socket.create_connection((host, int(port)), timeout=DEADLINE_S)
        started = time.monotonic()
        # The busy client asks something every IDLE_S / 2 and always gets its answer.
        while time.monotonic() - started < 3 * IDLE_S:
            busy.sendall(request(18, 0, b"", correlation=5))
            assert len(busy.recv(65536)) > 10
            time.sleep(IDLE_S / 2)
        assert idle.recv(1) == b""  # closed by the listener (recv would time out after DEADLINE_S)
        assert time.monotonic() - started < DEADLINE_S
        busy.close()
        idle.close()
        assert api_versions_works(bootstrap)  # new connections are served
    finally:
        runner.stop()
