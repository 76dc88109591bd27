"""An in-process Kafka-compatible server for tests and notebooks: ``lkstream.kafka_server``.

::

    with lkstream.kafka_server(persist_dir=tmp_path) as bootstrap:
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})

It opens a :class:`~lkstream.Broker` (or uses the one given), runs a
:class:`~lkstream.kafka.server.KafkaServer` on its own event loop in its own
thread on an ephemeral loopback port, and on exit stops the listener, then
closes the broker it opened (final fsync, ``LOCK`` released).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from lkstream.broker.broker import Broker
from lkstream.kafka.context import ListenerSettings
from lkstream.kafka.server import KafkaServer

_START_TIMEOUT_S = 30.0


class KafkaServerThread:
    """A :class:`KafkaServer` on a private event loop thread. ``start()``/``stop()``; thread-safe."""

    def __init__(self, broker: Broker, settings: ListenerSettings | None = None) -> None:
        self.server = KafkaServer(broker, settings or ListenerSettings(port=0))
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="lkstream-kafka", daemon=True)
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def bootstrap(self) -> str:
        return self.server.bootstrap

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self.server.start())
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self.server.stop())
        self._loop.close()

    def start(self) -> str:
        self._thread.start()
        if not self._ready.wait(_START_TIMEOUT_S):
            raise TimeoutError("the in-process Kafka listener did not start")
        if self._error is not None:
            raise self._error
        return self.bootstrap

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)


@contextlib.contextmanager
def kafka_server(
    broker: Broker | None = None, *, host: str = "127.0.0.1", port: int = 0, **broker_settings: Any
) -> Iterator[str]:
    """Serve Kafka's protocol in this process; yields ``host:port`` for ``bootstrap.servers``.

    Give a ``broker`` to serve, or :class:`~lkstream.BrokerConfig` settings
    (``persist_dir=...`` at least) for one opened and closed here.
    """
    owned = broker is None
    if broker is None:
        broker = Broker(**broker_settings)
    elif broker_settings:
        raise TypeError("pass either a broker or broker settings, not both")
    runner = KafkaServerThread(broker, ListenerSettings(host=host, port=port))
    try:
        yield runner.start()
    finally:
        runner.stop()
        if owned:
            broker.close()
