"""LKSTREAM: a lightweight, file-backed event log with Kafka semantics.

Public names only; everything else lives in subpackages::

    from lkstream import Broker, Consumer, OffsetStore
    broker = lkstream.connect("127.0.0.1:9090")   # the same surface, served by the daemon
    with lkstream.kafka_server(persist_dir=d) as bootstrap: ...   # Kafka clients, in process
"""

import importlib
from typing import TYPE_CHECKING, Any

from lkstream.broker.broker import Broker, TopicDescription
from lkstream.broker.partition import Partition
from lkstream.client.consumer import Consumer
from lkstream.client.delivery import Delivery, SyncDelivery
from lkstream.client.producer import Producer
from lkstream.config import BrokerConfig
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
    UnknownMemberError,
    UnknownTopicError,
)
from lkstream.format.codec import Compression, Record
from lkstream.storage.offsets import OffsetStore

__version__ = "0.1.0"

if TYPE_CHECKING:
    from lkstream.client.remote import RemoteBroker, connect
    from lkstream.kafka.inprocess import kafka_server
    from lkstream.security.tls import ClientTls

#: Surfaces an embedded application may never use, imported on first use: the gRPC client
#: (grpc, protobuf), TLS material and the Kafka listener (kio) hold about 60,000 objects the
#: garbage collector would otherwise walk in every full collection of an embedding process,
#: and 25-30 MB of its memory (docs/benchmarks.md, issue 14 phase 2).
_LAZY = {
    "ClientTls": "lkstream.security.tls",
    "RemoteBroker": "lkstream.client.remote",
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
    "UnknownMemberError",
    "UnknownTopicError",
    "__version__",
    "connect",
    "kafka_server",
]
