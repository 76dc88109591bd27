"""LKSTREAM: a lightweight, file-backed event log with Kafka semantics.

Public names only; everything else lives in subpackages::

    from lkstream import Broker, Consumer, OffsetStore
"""

from lkstream.broker.broker import Broker, TopicDescription
from lkstream.broker.partition import Partition
from lkstream.client.consumer import Consumer
from lkstream.config import BrokerConfig
from lkstream.errors import (
    BackpressureError,
    BrokerClosedError,
    CorruptRecordError,
    DataDirLockedError,
    DiskFullError,
    InvalidArgumentError,
    LkstreamError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    StorageError,
    TopicExistsError,
    UnknownTopicError,
)
from lkstream.format.codec import Compression, Record
from lkstream.storage.offsets import OffsetStore

__version__ = "0.1.0"

__all__ = [
    "BackpressureError",
    "Broker",
    "BrokerClosedError",
    "BrokerConfig",
    "Compression",
    "Consumer",
    "CorruptRecordError",
    "DataDirLockedError",
    "DiskFullError",
    "InvalidArgumentError",
    "LkstreamError",
    "OffsetOutOfRangeError",
    "OffsetStore",
    "Partition",
    "Record",
    "RecordTooLargeError",
    "StorageError",
    "TopicDescription",
    "TopicExistsError",
    "UnknownTopicError",
    "__version__",
]
