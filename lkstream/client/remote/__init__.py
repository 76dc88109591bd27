"""The remote client: the embedded broker's surface over the daemon's gRPC port (and its Kafka lane).

``lkstream.connect(address)`` returns a :class:`RemoteBroker`; its roles live in one module each
(calls, produce, waits, groups, streams, the Kafka lane, wire helpers). May import the client layer,
``lkstream.wire``, ``lkstream.security`` (client TLS) and ``lkstream.format``; never ``lkstream.server``.
"""

from lkstream.client.remote.broker import RemoteBroker, connect

__all__ = ["RemoteBroker", "connect"]
