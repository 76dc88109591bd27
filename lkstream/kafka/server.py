"""The Kafka listener: an asyncio TCP server speaking Kafka's protocol over one :class:`~lkstream.Broker`.

``KafkaServer(broker, settings)``; ``await start()`` binds (port 0 picks a
free port, see :attr:`port`), ``await stop()`` closes the listener and every
connection. At most ``settings.max_connections`` connections are open at once
(a :class:`~lkstream.listeners.CappedListener`), at most
``settings.max_connections_per_address`` from one address; one more is closed right
after accept (and logged once a minute). A TLS handshake must finish within
``settings.handshake_timeout_s``.

Security (docs/kafka.md, "Security"): with ``settings.ssl_context`` the listener
speaks TLS; with ``settings.sasl`` every connection must authenticate before any
API but ApiVersions and SASL; ``settings.authorizer`` decides each request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from lkstream.broker.broker import Broker
from lkstream.kafka import kio_codec
from lkstream.kafka.connection import Connection
from lkstream.kafka.context import ListenerSettings, ServerState
from lkstream.kafka.metadata_cache import MetadataCache
from lkstream.kafka.protocol import version_table
from lkstream.kafka.topic_ids import TopicIds
from lkstream.kafka.writer import SendStats
from lkstream.listeners import ConnectionCap, listen

log = logging.getLogger("lkstream.kafka")


class KafkaServer:
    """A Kafka-protocol listener for one broker. Runs on the event loop that calls :meth:`start`."""

    def __init__(self, broker: Broker, settings: ListenerSettings | None = None) -> None:
        self.broker = broker
        self.settings = settings or ListenerSettings()
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], tuple[Connection, asyncio.StreamWriter]] = {}
        self._state: ServerState | None = None
        #: Open connections, at most ``settings.max_connections`` (counted from accept to close, TLS included).
        self.connections = ConnectionCap(
            "kafka", self.settings.max_connections, self.settings.max_connections_per_address
        )
        #: Stored bytes Fetch answers sent, by path (sendfile or copied).
        self.send_stats = SendStats()

    @property
    def port(self) -> int:
        """The bound port (after :meth:`start`)."""
        if self._server is None or not self._server.sockets:
            raise RuntimeError("the Kafka listener is not started")
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def advertised_host(self) -> str:
        return self.settings.advertised_host or self.settings.host

    @property
    def bootstrap(self) -> str:
        """``host:port`` for a client's ``bootstrap.servers``."""
        return f"{self.advertised_host}:{self.port}"

    async def start(self) -> None:
        versions = version_table(topic_ids=self.settings.topic_ids)
        # kio imports a schema module on the first request of each API version; doing that inside a
        # request would stall every connection of the loop. Done here, before the port is bound (a
        # few hundred milliseconds, once per process), in a thread so that the loop stays free.
        await asyncio.to_thread(kio_codec.warm_up, versions)
        sock = listen(self.settings.host, self.settings.port, self.connections)
        try:
            tls = self.settings.ssl_context
            handshake_timeout = self.settings.handshake_timeout_s if tls is not None else None
            self._server = await asyncio.start_server(
                self._accept, sock=sock, ssl=tls, ssl_handshake_timeout=handshake_timeout
            )
        except BaseException:
            sock.close()
            raise
        self._state = ServerState(
            broker=self.broker,
            settings=self.settings,
            groups=self.broker.classic_groups,
            metadata=MetadataCache(lambda: self.broker.topics_version),
            advertised_host=self.advertised_host,
            advertised_port=self.port,
            versions=versions,
            topic_ids=TopicIds(self.broker),
            send_stats=self.send_stats,
        )

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop accepting; answer the requests already read within ``grace_s``, then close every connection.

        What is still unanswered after the grace is cancelled (its client sees the connection close).
        """
        if self._server is None:
            return
        self._server.close()
        deadline = asyncio.get_running_loop().time() + grace_s
        for connection, _ in list(self._connections.values()):
            connection.drain(deadline)
        if self._connections:
            await asyncio.wait(set(self._connections), timeout=grace_s + 1.0)
        # Closing the transports ends what is left (cancelling the handler tasks of
        # asyncio.start_server would make asyncio log the cancellation as an error).
        for _, writer in list(self._connections.values()):
            writer.transport.abort()
        if self._connections:
            await asyncio.wait(set(self._connections), timeout=5.0)
        with contextlib.suppress(Exception):
            await self._server.wait_closed()
        self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._state is None:  # accepted while stopping
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        connection = Connection(self._state, reader, writer)
        self._connections[task] = (connection, writer)
        try:
            await connection.serve()
        finally:
            self._connections.pop(task, None)
