"""LKSTREAM: a lightweight, file-backed event log with Kafka semantics.

Public names only; everything else lives in subpackages::

    from lkstream import Broker, Consumer, OffsetStore
    broker = lkstream.connect("127.0.0.1:9090")   # the same surface, served by the daemon
    with lkstream.kafka_server(persist_dir=d) as bootstrap: ...   # Kafka clients, in process
"""

import importlib
from typing import TYPE_CHECKING, Any

from lkstream.errors import (
    AuthenticationError,
    AuthorizationError,
    BackpressureError,
    BrokerClosedError,
    BrokerUnavailableError,
    CorruptRecordError,
    DataDirLockedError,
    DiskFullError,
    FencedInstanceError,
    GroupError,
    GroupNotEmptyError,
    GroupSubscribedToTopicError,
    InconsistentGroupProtocolError,
    InvalidArgumentError,
    LkstreamError,
    NotPartitionOwnerError,
    OffsetOutOfRangeError,
    OffsetRegressionError,
    PartitionLimitError,
    ProtocolVersionError,
    RebalanceInProgressError,
    RecordTooLargeError,
    StaleGenerationError,
    StorageAccessError,
    StorageError,
    TooManyOpenFilesError,
    TopicExistsError,
    UnknownAssignorError,
    UnknownGroupError,
    UnknownMemberError,
    UnknownTopicError,
)

__version__ = "0.1.0"

if TYPE_CHECKING:
    from lkstream.broker.broker import Broker
    from lkstream.broker.partition import Partition
    from lkstream.broker.topics import TopicDescription
    from lkstream.client.consumer import Consumer
    from lkstream.client.delivery import Delivery, SyncDelivery
    from lkstream.client.producer import Producer
    from lkstream.client.remote import RemoteBroker, connect
    from lkstream.config import BrokerConfig
    from lkstream.format.codec import Compression, Record
    from lkstream.kafka.inprocess import kafka_server
    from lkstream.security.tls import ClientTls
    from lkstream.storage.offsets import OffsetStore

#: Every public name but the errors (one small module, imported at once) is imported on first
#: use, so a process loads only the part it touches: a Spark worker that reads a data directory
#: needs the format and the read-only reader, never the embedded broker (0.3-0.6 s of imports in
#: each Python process Spark starts, docs/benchmarks-notes.md, "Imports"); an embedding
#: application never loads the gRPC client (grpc, protobuf), TLS material or the Kafka listener
#: (kio), about 60,000 objects the garbage collector would otherwise walk in every full
#: collection and 25-30 MB of memory (issue 14 phase 2).
_LAZY = {
    "Broker": "lkstream.broker.broker",
    "BrokerConfig": "lkstream.config",
    "ClientTls": "lkstream.security.tls",
    "Compression": "lkstream.format.codec",
    "Consumer": "lkstream.client.consumer",
    "Delivery": "lkstream.client.delivery",
    "OffsetStore": "lkstream.storage.offsets",
    "Partition": "lkstream.broker.partition",
    "Producer": "lkstream.client.producer",
    "Record": "lkstream.format.codec",
    "RemoteBroker": "lkstream.client.remote",
    "SyncDelivery": "lkstream.client.delivery",
    "TopicDescription": "lkstream.broker.topics",
    "connect": "lkstream.client.remote",
    "kafka_server": "lkstream.kafka.inprocess",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'lkstream' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "AuthenticationError",
    "AuthorizationError",
    "BackpressureError",
    "Broker",
    "BrokerClosedError",
    "BrokerConfig",
    "BrokerUnavailableError",
    "ClientTls",
    "Compression",
    "Consumer",
    "CorruptRecordError",
    "DataDirLockedError",
    "Delivery",
    "DiskFullError",
    "FencedInstanceError",
    "GroupError",
    "GroupNotEmptyError",
    "GroupSubscribedToTopicError",
    "InconsistentGroupProtocolError",
    "InvalidArgumentError",
    "LkstreamError",
    "NotPartitionOwnerError",
    "OffsetOutOfRangeError",
    "OffsetRegressionError",
    "OffsetStore",
    "Partition",
    "PartitionLimitError",
    "Producer",
    "ProtocolVersionError",
    "RebalanceInProgressError",
    "Record",
    "RecordTooLargeError",
    "RemoteBroker",
    "StaleGenerationError",
    "StorageAccessError",
    "StorageError",
    "SyncDelivery",
    "TooManyOpenFilesError",
    "TopicDescription",
    "TopicExistsError",
    "UnknownAssignorError",
    "UnknownGroupError",
    "UnknownMemberError",
    "UnknownTopicError",
    "__version__",
    "connect",
    "kafka_server",
]
