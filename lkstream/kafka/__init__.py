"""The Kafka wire protocol: unmodified Kafka clients talk to LKSTREAM (see docs/kafka.md).

:class:`~lkstream.kafka.server.KafkaServer` serves one broker on an asyncio
loop; :func:`~lkstream.kafka.inprocess.kafka_server` runs one in a thread
for tests and notebooks. Modules: ``protocol`` (framing, headers, versions),
``hot`` (hand-written Produce/Fetch codecs), ``kio_codec`` (everything else),
``connection`` (one client), ``handlers/`` (one module per API area),
``security`` (principals, authorizer, SASL seams), ``errors`` (error codes).
May import the broker, ``lkstream.security``, ``lkstream.listeners`` and ``lkstream.format``;
never storage internals, the remote client or the gRPC contract (import contracts).
"""

from lkstream.kafka.context import ListenerSettings
from lkstream.kafka.inprocess import kafka_server
from lkstream.kafka.server import KafkaServer

__all__ = ["KafkaServer", "ListenerSettings", "kafka_server"]
