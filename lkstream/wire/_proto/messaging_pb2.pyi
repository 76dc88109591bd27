from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ProduceRequest(_message.Message):
    __slots__ = ("topic", "key", "values", "partition", "record_batch")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    RECORD_BATCH_FIELD_NUMBER: _ClassVar[int]
    topic: str
    key: bytes
    values: _containers.RepeatedScalarFieldContainer[bytes]
    partition: int
    record_batch: bytes
    def __init__(self, topic: _Optional[str] = ..., key: _Optional[bytes] = ..., values: _Optional[_Iterable[bytes]] = ..., partition: _Optional[int] = ..., record_batch: _Optional[bytes] = ...) -> None: ...

class ProduceResponse(_message.Message):
    __slots__ = ("partition", "offsets", "base_offset", "last_offset")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    partition: int
    offsets: _containers.RepeatedScalarFieldContainer[int]
    base_offset: int
    last_offset: int
    def __init__(self, partition: _Optional[int] = ..., offsets: _Optional[_Iterable[int]] = ..., base_offset: _Optional[int] = ..., last_offset: _Optional[int] = ...) -> None: ...

class FetchRequest(_message.Message):
    __slots__ = ("topic", "partition", "offset", "max_bytes", "raw_batches", "group", "max_wait_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    RAW_BATCHES_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    max_bytes: int
    raw_batches: bool
    group: str
    max_wait_ms: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., max_bytes: _Optional[int] = ..., raw_batches: _Optional[bool] = ..., group: _Optional[str] = ..., max_wait_ms: _Optional[int] = ...) -> None: ...

class Record(_message.Message):
    __slots__ = ("offset", "key", "value", "ts", "headers", "partition")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TS_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    offset: int
    key: bytes
    value: bytes
    ts: int
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    partition: int
    def __init__(self, offset: _Optional[int] = ..., key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., ts: _Optional[int] = ..., headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ..., partition: _Optional[int] = ...) -> None: ...

class Header(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...

class FetchResponse(_message.Message):
    __slots__ = ("records", "record_batches", "high_watermark", "log_start_offset")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    RECORD_BATCHES_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[Record]
    record_batches: bytes
    high_watermark: int
    log_start_offset: int
    def __init__(self, records: _Optional[_Iterable[_Union[Record, _Mapping]]] = ..., record_batches: _Optional[bytes] = ..., high_watermark: _Optional[int] = ..., log_start_offset: _Optional[int] = ...) -> None: ...

class CommitRequest(_message.Message):
    __slots__ = ("group", "topic", "partition", "offset")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    partition: int
    offset: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class CommitResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class FetchCommittedRequest(_message.Message):
    __slots__ = ("group", "topic", "partitions")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class FetchCommittedResponse(_message.Message):
    __slots__ = ("offsets",)
    class OffsetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.ScalarMap[int, int]
    def __init__(self, offsets: _Optional[_Mapping[int, int]] = ...) -> None: ...

class OffsetsForTimestampRequest(_message.Message):
    __slots__ = ("topic", "partitions", "timestamp_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    timestamp_ms: int
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class OffsetsForTimestampResponse(_message.Message):
    __slots__ = ("offsets",)
    class OffsetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.ScalarMap[int, int]
    def __init__(self, offsets: _Optional[_Mapping[int, int]] = ...) -> None: ...

class CreateTopic(_message.Message):
    __slots__ = ("name", "partitions", "retention_ms", "retention_bytes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_BYTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: int
    retention_ms: int
    retention_bytes: int
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[int] = ..., retention_ms: _Optional[int] = ..., retention_bytes: _Optional[int] = ...) -> None: ...

class DeleteTopic(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListTopics(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeTopic(_message.Message):
    __slots__ = ("name", "create_if_missing")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CREATE_IF_MISSING_FIELD_NUMBER: _ClassVar[int]
    name: str
    create_if_missing: bool
    def __init__(self, name: _Optional[str] = ..., create_if_missing: _Optional[bool] = ...) -> None: ...

class PartitionInfo(_message.Message):
    __slots__ = ("partition", "log_start_offset", "next_offset", "high_watermark", "segment_count", "size_bytes", "active_segment_bytes")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_SEGMENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    partition: int
    log_start_offset: int
    next_offset: int
    high_watermark: int
    segment_count: int
    size_bytes: int
    active_segment_bytes: int
    def __init__(self, partition: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., next_offset: _Optional[int] = ..., high_watermark: _Optional[int] = ..., segment_count: _Optional[int] = ..., size_bytes: _Optional[int] = ..., active_segment_bytes: _Optional[int] = ...) -> None: ...

class TopicInfo(_message.Message):
    __slots__ = ("name", "partitions", "retention_ms", "retention_bytes", "partition_stats")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_BYTES_FIELD_NUMBER: _ClassVar[int]
    PARTITION_STATS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: int
    retention_ms: int
    retention_bytes: int
    partition_stats: _containers.RepeatedCompositeFieldContainer[PartitionInfo]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[int] = ..., retention_ms: _Optional[int] = ..., retention_bytes: _Optional[int] = ..., partition_stats: _Optional[_Iterable[_Union[PartitionInfo, _Mapping]]] = ...) -> None: ...

class AdminRequest(_message.Message):
    __slots__ = ("create_topic", "delete_topic", "list_topics", "describe_topic")
    CREATE_TOPIC_FIELD_NUMBER: _ClassVar[int]
    DELETE_TOPIC_FIELD_NUMBER: _ClassVar[int]
    LIST_TOPICS_FIELD_NUMBER: _ClassVar[int]
    DESCRIBE_TOPIC_FIELD_NUMBER: _ClassVar[int]
    create_topic: CreateTopic
    delete_topic: DeleteTopic
    list_topics: ListTopics
    describe_topic: DescribeTopic
    def __init__(self, create_topic: _Optional[_Union[CreateTopic, _Mapping]] = ..., delete_topic: _Optional[_Union[DeleteTopic, _Mapping]] = ..., list_topics: _Optional[_Union[ListTopics, _Mapping]] = ..., describe_topic: _Optional[_Union[DescribeTopic, _Mapping]] = ...) -> None: ...

class AdminResponse(_message.Message):
    __slots__ = ("topics", "topic")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    topic: TopicInfo
    def __init__(self, topics: _Optional[_Iterable[str]] = ..., topic: _Optional[_Union[TopicInfo, _Mapping]] = ...) -> None: ...

class HandshakeRequest(_message.Message):
    __slots__ = ("client_protocol_version", "client_name")
    CLIENT_PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    CLIENT_NAME_FIELD_NUMBER: _ClassVar[int]
    client_protocol_version: int
    client_name: str
    def __init__(self, client_protocol_version: _Optional[int] = ..., client_name: _Optional[str] = ...) -> None: ...

class HandshakeResponse(_message.Message):
    __slots__ = ("server_protocol_version", "min_client_protocol_version", "server_version", "max_message_bytes", "max_batch_bytes")
    SERVER_PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    MIN_CLIENT_PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_BYTES_FIELD_NUMBER: _ClassVar[int]
    server_protocol_version: int
    min_client_protocol_version: int
    server_version: str
    max_message_bytes: int
    max_batch_bytes: int
    def __init__(self, server_protocol_version: _Optional[int] = ..., min_client_protocol_version: _Optional[int] = ..., server_version: _Optional[str] = ..., max_message_bytes: _Optional[int] = ..., max_batch_bytes: _Optional[int] = ...) -> None: ...
