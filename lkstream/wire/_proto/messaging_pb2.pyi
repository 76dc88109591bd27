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
    __slots__ = ("partition", "offsets", "base_offset", "last_offset", "error")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    partition: int
    offsets: _containers.RepeatedScalarFieldContainer[int]
    base_offset: int
    last_offset: int
    error: ErrorStatus
    def __init__(self, partition: _Optional[int] = ..., offsets: _Optional[_Iterable[int]] = ..., base_offset: _Optional[int] = ..., last_offset: _Optional[int] = ..., error: _Optional[_Union[ErrorStatus, _Mapping]] = ...) -> None: ...

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
    __slots__ = ("records", "record_batches", "high_watermark", "log_start_offset", "error", "next_offset")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    RECORD_BATCHES_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[Record]
    record_batches: bytes
    high_watermark: int
    log_start_offset: int
    error: ErrorStatus
    next_offset: int
    def __init__(self, records: _Optional[_Iterable[_Union[Record, _Mapping]]] = ..., record_batches: _Optional[bytes] = ..., high_watermark: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., error: _Optional[_Union[ErrorStatus, _Mapping]] = ..., next_offset: _Optional[int] = ...) -> None: ...

class ErrorStatus(_message.Message):
    __slots__ = ("code", "message", "error_class", "detail")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ERROR_CLASS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    error_class: str
    detail: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., error_class: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class CommitRequest(_message.Message):
    __slots__ = ("group", "topic", "partition", "offset", "member_id", "generation")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    partition: int
    offset: int
    member_id: str
    generation: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., member_id: _Optional[str] = ..., generation: _Optional[int] = ...) -> None: ...

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
    __slots__ = ("name", "partitions", "retention_ms", "retention_bytes", "configs", "validate_only")
    class ConfigsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_BYTES_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: int
    retention_ms: int
    retention_bytes: int
    configs: _containers.ScalarMap[str, str]
    validate_only: bool
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[int] = ..., retention_ms: _Optional[int] = ..., retention_bytes: _Optional[int] = ..., configs: _Optional[_Mapping[str, str]] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class AlterTopicConfigs(_message.Message):
    __slots__ = ("name", "set", "delete", "validate_only")
    class SetEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    SET_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    name: str
    set: _containers.ScalarMap[str, str]
    delete: _containers.RepeatedScalarFieldContainer[str]
    validate_only: bool
    def __init__(self, name: _Optional[str] = ..., set: _Optional[_Mapping[str, str]] = ..., delete: _Optional[_Iterable[str]] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class CreatePartitions(_message.Message):
    __slots__ = ("name", "count", "validate_only")
    NAME_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    name: str
    count: int
    validate_only: bool
    def __init__(self, name: _Optional[str] = ..., count: _Optional[int] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class ConfigSynonym(_message.Message):
    __slots__ = ("name", "value", "source")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    source: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ..., source: _Optional[str] = ...) -> None: ...

class TopicConfigEntry(_message.Message):
    __slots__ = ("name", "value", "source", "type", "documentation", "synonyms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTATION_FIELD_NUMBER: _ClassVar[int]
    SYNONYMS_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    source: str
    type: str
    documentation: str
    synonyms: _containers.RepeatedCompositeFieldContainer[ConfigSynonym]
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ..., source: _Optional[str] = ..., type: _Optional[str] = ..., documentation: _Optional[str] = ..., synonyms: _Optional[_Iterable[_Union[ConfigSynonym, _Mapping]]] = ...) -> None: ...

class DeleteTopic(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListTopics(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeTopic(_message.Message):
    __slots__ = ("name", "create_if_missing", "include_config_entries")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CREATE_IF_MISSING_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_CONFIG_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    name: str
    create_if_missing: bool
    include_config_entries: bool
    def __init__(self, name: _Optional[str] = ..., create_if_missing: _Optional[bool] = ..., include_config_entries: _Optional[bool] = ...) -> None: ...

class PartitionInfo(_message.Message):
    __slots__ = ("partition", "log_start_offset", "next_offset", "high_watermark", "segment_count", "size_bytes", "active_segment_bytes", "dirty_ratio")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_SEGMENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    DIRTY_RATIO_FIELD_NUMBER: _ClassVar[int]
    partition: int
    log_start_offset: int
    next_offset: int
    high_watermark: int
    segment_count: int
    size_bytes: int
    active_segment_bytes: int
    dirty_ratio: float
    def __init__(self, partition: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., next_offset: _Optional[int] = ..., high_watermark: _Optional[int] = ..., segment_count: _Optional[int] = ..., size_bytes: _Optional[int] = ..., active_segment_bytes: _Optional[int] = ..., dirty_ratio: _Optional[float] = ...) -> None: ...

class TopicInfo(_message.Message):
    __slots__ = ("name", "partitions", "retention_ms", "retention_bytes", "partition_stats", "configs", "config_entries")
    class ConfigsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_BYTES_FIELD_NUMBER: _ClassVar[int]
    PARTITION_STATS_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: int
    retention_ms: int
    retention_bytes: int
    partition_stats: _containers.RepeatedCompositeFieldContainer[PartitionInfo]
    configs: _containers.ScalarMap[str, str]
    config_entries: _containers.RepeatedCompositeFieldContainer[TopicConfigEntry]
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[int] = ..., retention_ms: _Optional[int] = ..., retention_bytes: _Optional[int] = ..., partition_stats: _Optional[_Iterable[_Union[PartitionInfo, _Mapping]]] = ..., configs: _Optional[_Mapping[str, str]] = ..., config_entries: _Optional[_Iterable[_Union[TopicConfigEntry, _Mapping]]] = ...) -> None: ...

class AdminRequest(_message.Message):
    __slots__ = ("create_topic", "delete_topic", "list_topics", "describe_topic", "alter_topic_configs", "create_partitions", "delete_records")
    CREATE_TOPIC_FIELD_NUMBER: _ClassVar[int]
    DELETE_TOPIC_FIELD_NUMBER: _ClassVar[int]
    LIST_TOPICS_FIELD_NUMBER: _ClassVar[int]
    DESCRIBE_TOPIC_FIELD_NUMBER: _ClassVar[int]
    ALTER_TOPIC_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    CREATE_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    DELETE_RECORDS_FIELD_NUMBER: _ClassVar[int]
    create_topic: CreateTopic
    delete_topic: DeleteTopic
    list_topics: ListTopics
    describe_topic: DescribeTopic
    alter_topic_configs: AlterTopicConfigs
    create_partitions: CreatePartitions
    delete_records: DeleteRecords
    def __init__(self, create_topic: _Optional[_Union[CreateTopic, _Mapping]] = ..., delete_topic: _Optional[_Union[DeleteTopic, _Mapping]] = ..., list_topics: _Optional[_Union[ListTopics, _Mapping]] = ..., describe_topic: _Optional[_Union[DescribeTopic, _Mapping]] = ..., alter_topic_configs: _Optional[_Union[AlterTopicConfigs, _Mapping]] = ..., create_partitions: _Optional[_Union[CreatePartitions, _Mapping]] = ..., delete_records: _Optional[_Union[DeleteRecords, _Mapping]] = ...) -> None: ...

class DeleteRecords(_message.Message):
    __slots__ = ("topic", "before")
    class BeforeEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    before: _containers.ScalarMap[int, int]
    def __init__(self, topic: _Optional[str] = ..., before: _Optional[_Mapping[int, int]] = ...) -> None: ...

class AdminResponse(_message.Message):
    __slots__ = ("topics", "topic", "low_watermarks")
    class LowWatermarksEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    LOW_WATERMARKS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    topic: TopicInfo
    low_watermarks: _containers.ScalarMap[int, int]
    def __init__(self, topics: _Optional[_Iterable[str]] = ..., topic: _Optional[_Union[TopicInfo, _Mapping]] = ..., low_watermarks: _Optional[_Mapping[int, int]] = ...) -> None: ...

class HandshakeRequest(_message.Message):
    __slots__ = ("client_protocol_version", "client_name")
    CLIENT_PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    CLIENT_NAME_FIELD_NUMBER: _ClassVar[int]
    client_protocol_version: int
    client_name: str
    def __init__(self, client_protocol_version: _Optional[int] = ..., client_name: _Optional[str] = ...) -> None: ...

class HandshakeResponse(_message.Message):
    __slots__ = ("server_protocol_version", "min_client_protocol_version", "server_version", "max_message_bytes", "max_batch_bytes", "streams", "kafka_lane_address", "kafka_lane_tls", "kafka_lane_sasl")
    SERVER_PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    MIN_CLIENT_PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_BYTES_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    KAFKA_LANE_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    KAFKA_LANE_TLS_FIELD_NUMBER: _ClassVar[int]
    KAFKA_LANE_SASL_FIELD_NUMBER: _ClassVar[int]
    server_protocol_version: int
    min_client_protocol_version: int
    server_version: str
    max_message_bytes: int
    max_batch_bytes: int
    streams: _containers.RepeatedScalarFieldContainer[str]
    kafka_lane_address: str
    kafka_lane_tls: bool
    kafka_lane_sasl: bool
    def __init__(self, server_protocol_version: _Optional[int] = ..., min_client_protocol_version: _Optional[int] = ..., server_version: _Optional[str] = ..., max_message_bytes: _Optional[int] = ..., max_batch_bytes: _Optional[int] = ..., streams: _Optional[_Iterable[str]] = ..., kafka_lane_address: _Optional[str] = ..., kafka_lane_tls: _Optional[bool] = ..., kafka_lane_sasl: _Optional[bool] = ...) -> None: ...

class TopicPartitions(_message.Message):
    __slots__ = ("topic", "partitions")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class JoinGroupRequest(_message.Message):
    __slots__ = ("group", "topics", "member_id", "instance_id", "assignor", "session_timeout_ms", "rebalance_timeout_ms", "client_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    ASSIGNOR_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    member_id: str
    instance_id: str
    assignor: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    def __init__(self, group: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ..., member_id: _Optional[str] = ..., instance_id: _Optional[str] = ..., assignor: _Optional[str] = ..., session_timeout_ms: _Optional[int] = ..., rebalance_timeout_ms: _Optional[int] = ..., client_id: _Optional[str] = ...) -> None: ...

class JoinGroupResponse(_message.Message):
    __slots__ = ("member_id", "generation", "assignor", "rebalanced")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    ASSIGNOR_FIELD_NUMBER: _ClassVar[int]
    REBALANCED_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    generation: int
    assignor: str
    rebalanced: bool
    def __init__(self, member_id: _Optional[str] = ..., generation: _Optional[int] = ..., assignor: _Optional[str] = ..., rebalanced: _Optional[bool] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("group", "member_id", "generation", "released", "max_wait_ms")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    generation: int
    released: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    max_wait_ms: int
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ..., generation: _Optional[int] = ..., released: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ..., max_wait_ms: _Optional[int] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("generation", "owned", "revoke", "assigned", "stable")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    OWNED_FIELD_NUMBER: _ClassVar[int]
    REVOKE_FIELD_NUMBER: _ClassVar[int]
    ASSIGNED_FIELD_NUMBER: _ClassVar[int]
    STABLE_FIELD_NUMBER: _ClassVar[int]
    generation: int
    owned: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    revoke: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    assigned: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    stable: bool
    def __init__(self, generation: _Optional[int] = ..., owned: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ..., revoke: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ..., assigned: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ..., stable: _Optional[bool] = ...) -> None: ...

class SyncGroupRequest(_message.Message):
    __slots__ = ("group", "member_id", "generation", "released")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    generation: int
    released: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ..., generation: _Optional[int] = ..., released: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ...) -> None: ...

class SyncGroupResponse(_message.Message):
    __slots__ = ("generation", "assignment")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    generation: int
    assignment: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    def __init__(self, generation: _Optional[int] = ..., assignment: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ...) -> None: ...

class LeaveGroupRequest(_message.Message):
    __slots__ = ("group", "member_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ...) -> None: ...

class LeaveGroupResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PartitionOffset(_message.Message):
    __slots__ = ("topic", "partition", "offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class CommitOffsetsRequest(_message.Message):
    __slots__ = ("group", "member_id", "generation", "offsets")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    group: str
    member_id: str
    generation: int
    offsets: _containers.RepeatedCompositeFieldContainer[PartitionOffset]
    def __init__(self, group: _Optional[str] = ..., member_id: _Optional[str] = ..., generation: _Optional[int] = ..., offsets: _Optional[_Iterable[_Union[PartitionOffset, _Mapping]]] = ...) -> None: ...

class CommitOffsetsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeGroupRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class GroupMember(_message.Message):
    __slots__ = ("member_id", "instance_id", "client_id", "client_host", "topics", "owned", "target", "generation")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_HOST_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    OWNED_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    instance_id: str
    client_id: str
    client_host: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    owned: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    target: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    generation: int
    def __init__(self, member_id: _Optional[str] = ..., instance_id: _Optional[str] = ..., client_id: _Optional[str] = ..., client_host: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ..., owned: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ..., target: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ..., generation: _Optional[int] = ...) -> None: ...

class PartitionLag(_message.Message):
    __slots__ = ("topic", "partition", "has_committed", "committed", "high_watermark", "lag_messages", "lag_seconds", "owner")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    HAS_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LAG_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    LAG_SECONDS_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    has_committed: bool
    committed: int
    high_watermark: int
    lag_messages: int
    lag_seconds: float
    owner: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., has_committed: _Optional[bool] = ..., committed: _Optional[int] = ..., high_watermark: _Optional[int] = ..., lag_messages: _Optional[int] = ..., lag_seconds: _Optional[float] = ..., owner: _Optional[str] = ...) -> None: ...

class DescribeGroupResponse(_message.Message):
    __slots__ = ("group", "state", "generation", "assignor", "members", "partitions")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    ASSIGNOR_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    group: str
    state: str
    generation: int
    assignor: str
    members: _containers.RepeatedCompositeFieldContainer[GroupMember]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionLag]
    def __init__(self, group: _Optional[str] = ..., state: _Optional[str] = ..., generation: _Optional[int] = ..., assignor: _Optional[str] = ..., members: _Optional[_Iterable[_Union[GroupMember, _Mapping]]] = ..., partitions: _Optional[_Iterable[_Union[PartitionLag, _Mapping]]] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GroupListing(_message.Message):
    __slots__ = ("group", "state", "members")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    group: str
    state: str
    members: int
    def __init__(self, group: _Optional[str] = ..., state: _Optional[str] = ..., members: _Optional[int] = ...) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[GroupListing]
    def __init__(self, groups: _Optional[_Iterable[_Union[GroupListing, _Mapping]]] = ...) -> None: ...

class ResetOffsetsRequest(_message.Message):
    __slots__ = ("group", "topic", "partitions", "earliest", "latest", "offset", "timestamp_ms")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    EARLIEST_FIELD_NUMBER: _ClassVar[int]
    LATEST_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    earliest: bool
    latest: bool
    offset: int
    timestamp_ms: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ..., earliest: _Optional[bool] = ..., latest: _Optional[bool] = ..., offset: _Optional[int] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class ResetOffsetsResponse(_message.Message):
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

class DeleteGroupRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class DeleteGroupResponse(_message.Message):
    __slots__ = ("offsets_removed",)
    OFFSETS_REMOVED_FIELD_NUMBER: _ClassVar[int]
    offsets_removed: int
    def __init__(self, offsets_removed: _Optional[int] = ...) -> None: ...

class DescribeClusterRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeClusterResponse(_message.Message):
    __slots__ = ("server_version", "protocol_version", "grpc_address", "http_address", "kafka_address", "data_dir", "data_bytes", "topics", "partitions", "groups", "auto_create_topics", "default_partitions", "uptime_s", "tls", "auth")
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    HTTP_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    KAFKA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DATA_DIR_FIELD_NUMBER: _ClassVar[int]
    DATA_BYTES_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    AUTO_CREATE_TOPICS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    TLS_FIELD_NUMBER: _ClassVar[int]
    AUTH_FIELD_NUMBER: _ClassVar[int]
    server_version: str
    protocol_version: int
    grpc_address: str
    http_address: str
    kafka_address: str
    data_dir: str
    data_bytes: int
    topics: int
    partitions: int
    groups: int
    auto_create_topics: bool
    default_partitions: int
    uptime_s: float
    tls: bool
    auth: bool
    def __init__(self, server_version: _Optional[str] = ..., protocol_version: _Optional[int] = ..., grpc_address: _Optional[str] = ..., http_address: _Optional[str] = ..., kafka_address: _Optional[str] = ..., data_dir: _Optional[str] = ..., data_bytes: _Optional[int] = ..., topics: _Optional[int] = ..., partitions: _Optional[int] = ..., groups: _Optional[int] = ..., auto_create_topics: _Optional[bool] = ..., default_partitions: _Optional[int] = ..., uptime_s: _Optional[float] = ..., tls: _Optional[bool] = ..., auth: _Optional[bool] = ...) -> None: ...
