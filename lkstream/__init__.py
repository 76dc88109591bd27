"""LKSTREAM: a lightweight, file-backed event log with Kafka semantics.

Public names only; everything else lives in subpackages::

    from lkstream import Broker, Consumer, OffsetStore
    broker = lkstream.connect("127.0.0.1:9090")   # the same surface, served by the daemon
    with lkstream.kafka_server(persist_dir=d) as bootstrap: ...   # Kafka clients, in process
"""

from lkstream.broker.broker import Broker, TopicDescription
from lkstream.broker.partition import Partition
from lkstream.client.consumer import Consumer
from lkstream.client.delivery import Delivery, SyncDelivery
from lkstream.client.producer import Producer
from lkstream.client.remote import RemoteBroker, connect
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
from lkstream.security.tls import ClientTls
from lkstream.storage.offsets import OffsetStore

__version__ = "0.1.0"

from lkstream.kafka.inprocess import kafka_server

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
