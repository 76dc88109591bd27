"""The HTTP JSON API's request and response models, and the conversions between them and the broker's values.

One set of pydantic models both validates requests (strict: no ``"1"`` for ``1``,
no unknown fields) and generates the OpenAPI document
(:mod:`lkstream.server.http.openapi`), so the document describes what the code
accepts. Responses are built as plain dicts for speed and serialised by
``pydantic_core.to_json``; the response models document them and the tests check
every answer against them (schemathesis). Records follow the one JSON record
shape of :mod:`lkstream.format.json_records`.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from typing import Annotated, Any, Final, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from lkstream.broker.partition import DEFAULT_FETCH_BYTES
from lkstream.broker.topics import TopicDescription
from lkstream.errors import InvalidArgumentError
from lkstream.format.codec import Record
from lkstream.format.json_records import bytes_to_json
from lkstream.server.http.errors import ApiError
from lkstream.storage.names import MAX_GROUP_ID_BYTES, MAX_NAME_LENGTH
from lkstream.storage.topics import MAX_PARTITIONS

M = TypeVar("M", bound=BaseModel)

API_VERSION: Final = "1"
#: Longest long poll a consume may ask for (the gRPC Fetch has the same bound).
MAX_WAIT_MS: Final = 60_000
#: Default ``max_bytes`` of a consume (all partitions) and ``partition_max_bytes`` (each).
DEFAULT_CONSUME_BYTES: Final = 4 * 1024 * 1024
DEFAULT_PARTITION_BYTES: Final = DEFAULT_FETCH_BYTES

TOPIC_PATTERN: Final = r"^[A-Za-z0-9._-]{1,249}$"
# Kafka's rule for group ids: any non-empty string (issue 24); the broker checks its UTF-8 size (400).
GROUP_PATTERN: Final = r"^[\s\S]+$"
# Exactly what base64.b64decode(validate=True) accepts: the alphabet, padded to 4.
BASE64_PATTERN: Final = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
MAX_INT32: Final = 2**31 - 1
MAX_INT64: Final = 2**63 - 1


class _Request(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class _Response(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _integral(value: object) -> object:
    """``5.0`` is the integer 5 in JSON Schema: accept it; ``5.5``, ``"5"`` and ``true`` stay errors."""
    if type(value) is float and value.is_integer():
        return int(value)
    return value


#: An integer field: strict (no strings, no booleans), but integral JSON numbers count as integers.
Int = Annotated[int, BeforeValidator(_integral)]

TopicName = Annotated[str, Field(pattern=TOPIC_PATTERN, max_length=MAX_NAME_LENGTH, description="A topic name.")]
GroupName = Annotated[
    str, Field(pattern=GROUP_PATTERN, max_length=MAX_GROUP_ID_BYTES, description="A group id (any non-empty string).")
]
PartitionId = Annotated[Int, Field(ge=0, le=MAX_PARTITIONS - 1, description="A partition number.")]
Offset = Annotated[Int, Field(ge=0, le=MAX_INT64)]


class Base64Value(_Request):
    """Arbitrary bytes, base64-encoded (standard alphabet, padded)."""

    base64: str = Field(pattern=BASE64_PATTERN, description="The bytes, base64-encoded.")


#: A key, value or header value: a UTF-8 string, or bytes as ``{"base64": ...}``.
Bytes = str | Base64Value


class HeaderIn(_Request):
    key: str = Field(description="Header name (UTF-8).")
    value: Bytes | None = Field(description="Header value; null for none.")


class RecordIn(_Request):
    """A record object (a bare string or base64 object is a value alone); what consume returns is accepted as is."""

    value: Bytes | None = Field(description="The value; null for a tombstone.")
    key: Bytes | None = Field(None, description="The key: picks the partition when none is given.")
    headers: list[HeaderIn] | dict[str, Bytes | None] = Field(
        default_factory=list, description="Headers, in order (names may repeat); or an object of name: value."
    )
    partition: PartitionId | None = Field(None, description="This record's partition (wins over the entry's).")
    topic: str | None = Field(None, description="Ignored: the entry's topic is the target (so records can be copied).")
    offset: Int | None = Field(None, description="Ignored: the broker assigns offsets.")
    timestamp: Int | None = Field(None, description="Ignored: records get the time they are produced.")


class ProduceEntry(_Request):
    topic: TopicName
    partition: PartitionId | None = Field(
        None, description="Target partition; omitted: keyed records hash, keyless ones share one partition."
    )
    records: list[str | Base64Value | RecordIn] = Field(
        min_length=1, description="Values (string or base64 object) or record objects."
    )


class ProduceRequest(_Request):
    """``POST /produce``."""

    topic_partitions: list[ProduceEntry] = Field(min_length=1)


class ErrorInfo(_Response):
    code: str = Field(description="Stable machine-readable code, e.g. unknown_topic, offset_out_of_range.")
    message: str
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    earliest: int | None = Field(None, description="Log start offset (offset_out_of_range).")
    latest: int | None = Field(None, description="High watermark (offset_out_of_range).")
    size: int | None = None
    limit: int | None = None
    details: list[dict[str, Any]] | None = Field(None, description="One entry per invalid field (invalid_request).")


class ErrorResponse(_Response):
    error: ErrorInfo


class RecordOffset(_Response):
    partition: int
    offset: int


class ProduceResult(_Response):
    """The outcome of one ``topic_partitions`` entry: offsets (one per record, in order) or an error."""

    topic: str
    partition: int | None = Field(description="The partition asked for (null: the partitioner chose).")
    offsets: list[RecordOffset] | None = None
    error: ErrorInfo | None = None


class ProduceResponse(_Response):
    results: list[ProduceResult]


class EventProduced(_Response):
    """``POST /produce/{partition}`` (seed 003): where the record went."""

    topic: str
    partition: int
    offset: int


class ProduceErrorResponse(ErrorResponse):
    """Every entry failed: ``error`` is the first entry's, ``results`` has each one's (absent for a bad request)."""

    results: list[ProduceResult] | None = None


class ConsumePartition(_Request):
    topic: TopicName
    partition: PartitionId | None = Field(None, description="Omitted: every partition of the topic.")
    fetch_offset: Offset | None = Field(
        None, description="First offset to return; omitted: the group's committed offset, else `reset`."
    )
    partition_max_bytes: Int | None = Field(None, ge=1, le=MAX_INT32, description="Batch bytes for this partition.")


class ConsumeRequest(_Request):
    """``POST /consume``: ``partitions``, or ``topic_partitions`` as seed 001 spells it (exactly one of them)."""

    # What the validator below checks, said in the schema too (schemathesis generates from it).
    model_config = ConfigDict(
        json_schema_extra={"oneOf": [{"required": ["partitions"]}, {"required": ["topic_partitions"]}]}
    )

    partitions: list[ConsumePartition] | None = Field(None, min_length=1)
    topic_partitions: list[ConsumePartition] | None = Field(
        None, min_length=1, description="Seed 001's name for `partitions`."
    )
    max_wait_ms: Int = Field(0, ge=0, le=MAX_WAIT_MS, description="Long poll: wait up to this for min_bytes.")
    min_bytes: Int = Field(1, ge=0, le=MAX_INT32, description="Answer at once when this many bytes are ready.")
    max_bytes: Int | None = Field(None, ge=1, le=MAX_INT32, description="Batch bytes over all partitions.")
    group: GroupName | None = Field(None, description="Consume as this group: committed offsets, then commit.")
    commit: bool = Field(True, description="With a group: commit the next offsets (false: peek).")
    reset: Literal["earliest", "latest"] = Field(
        "earliest", description="Where to start without fetch_offset and without a valid committed offset."
    )
    encoding: Literal["auto", "base64"] = Field(
        "auto", description="auto: strings when valid UTF-8, else base64 objects; base64: always base64."
    )

    @model_validator(mode="after")
    def _one_list(self) -> ConsumeRequest:
        if (self.partitions is None) == (self.topic_partitions is None):
            raise ValueError("give exactly one of partitions and topic_partitions (the same list, two spellings)")
        return self

    @property
    def wanted(self) -> list[ConsumePartition]:
        """The asked partitions, whichever spelling carried them."""
        return self.partitions or self.topic_partitions or []


class Base64Out(_Response):
    base64: str


BytesOut = str | Base64Out


class HeaderOut(_Response):
    key: str
    value: BytesOut | None


class RecordOut(_Response):
    offset: int
    timestamp: int = Field(description="Milliseconds since the epoch (create time).")
    key: BytesOut | None
    value: BytesOut | None
    headers: list[HeaderOut]


class PartitionRecords(_Response):
    topic: str
    partition: int
    fetch_offset: int = Field(description="Where this read started.")
    next_fetch_offset: int = Field(description="Ask for this next.")
    high_watermark: int
    log_start_offset: int
    records: list[RecordOut]


class ConsumeResponse(_Response):
    partitions: list[PartitionRecords]
    group: str | None = None
    committed: bool = Field(False, description="The group committed next_fetch_offset of each partition.")


def _config_text(value: object) -> object:
    """A config value given as a JSON number or boolean, as the string Kafka's configs take."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if isinstance(value, int | float) else value


#: A topic config value: a string as Kafka takes it ("compact", "3600000"); numbers and booleans are converted.
ConfigText = Annotated[str, BeforeValidator(_config_text)]
ConfigMap = dict[Annotated[str, Field(max_length=255)], ConfigText]


class CreateTopicRequest(_Request):
    """``POST /topics``; omitted settings take the broker's defaults."""

    name: TopicName
    partitions: Int | None = Field(None, ge=1, le=MAX_PARTITIONS)
    retention_ms: Int | None = Field(None, ge=-1, le=MAX_INT64, description="-1: keep forever.")
    retention_bytes: Int | None = Field(None, ge=-1, le=MAX_INT64, description="-1: no size limit.")
    configs: ConfigMap | None = Field(
        None, description='Kafka\'s topic configs by name, e.g. {"cleanup.policy": "compact"} (docs/kafka.md).'
    )


class AlterTopicConfigsRequest(_Request):
    """``PATCH /topics/{topic}/configs``: set and delete overrides (Kafka's IncrementalAlterConfigs)."""

    set: ConfigMap = Field(default_factory=dict, description="Configs to set.")
    delete: list[Annotated[str, Field(max_length=255)]] = Field(
        default_factory=list, max_length=256, description="Overrides to remove (back to the broker's default)."
    )
    validate_only: bool = Field(False, description="Check the change, apply nothing.")


class CreatePartitionsRequest(_Request):
    """``POST /topics/{topic}/partitions``: grow the topic to ``count`` partitions."""

    count: Int = Field(ge=1, le=MAX_PARTITIONS)
    validate_only: bool = False


class ConfigSynonymOut(_Response):
    name: str
    value: str
    source: str


class TopicConfigEntry(_Response):
    name: str
    value: str
    source: str = Field(description="DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG or DEFAULT_CONFIG.")
    type: str
    documentation: str
    synonyms: list[ConfigSynonymOut]


class TopicConfigs(_Response):
    topic: str
    configs: list[TopicConfigEntry]


class PartitionInfo(_Response):
    partition: int
    log_start_offset: int
    next_offset: int
    high_watermark: int
    segment_count: int
    size_bytes: int
    active_segment_bytes: int
    dirty_ratio: float | None = Field(
        None, description="Compacted topics: the share of the sealed bytes not cleaned yet (null otherwise)."
    )


class TopicInfo(_Response):
    name: str
    partitions: int
    retention_ms: int
    retention_bytes: int
    configs: dict[str, str] = Field(description="The topic's config overrides (Kafka's names).")
    partition_stats: list[PartitionInfo]


class RecordsBefore(_Request):
    """One partition of a DeleteRecords: its records below ``before`` go (-1: below the high watermark)."""

    partition: PartitionId
    before: Int = Field(ge=-1, le=MAX_INT64)


class DeleteRecordsRequest(_Request):
    """``POST /topics/{topic}/delete-records`` (Kafka's DeleteRecords)."""

    partitions: list[RecordsBefore] = Field(min_length=1, max_length=MAX_PARTITIONS)


class LowWatermark(_Response):
    partition: int
    low_watermark: int = Field(description="The partition's log start offset after the call.")


class DeleteRecordsResponse(_Response):
    topic: str
    partitions: list[LowWatermark]


class TopicList(_Response):
    topics: list[str]


class GroupPartition(_Response):
    topic: str
    partition: int
    committed_offset: int
    high_watermark: int | None = Field(description="Null when the partition no longer exists.")
    log_start_offset: int | None
    lag: int | None = Field(description="high_watermark - committed_offset (0 when ahead).")


class GroupOffsets(_Response):
    group: str
    partitions: list[GroupPartition]


_b64decode = base64.b64decode
_b64encode = base64.b64encode


def _in_bytes(value: str | Base64Value | None) -> bytes | None:
    if value is None:
        return None
    if type(value) is str:
        return value.encode()
    assert isinstance(value, Base64Value)
    return _b64decode(value.base64, validate=True)


def _record_item(item: RecordIn) -> tuple[Any, ...]:
    key, value = _in_bytes(item.key), _in_bytes(item.value)
    pairs = item.headers.items() if isinstance(item.headers, dict) else [(h.key, h.value) for h in item.headers]
    if not pairs:
        return (key, value)
    headers = [(name, _in_bytes(v)) for name, v in pairs]
    for name, _ in headers:
        name.encode()  # the C encoder would fail late on an unencodable name
    return (key, value, headers)


def produce_items(records: Iterable[str | Base64Value | RecordIn]) -> list[tuple[Any, ...]]:
    """Request records as the broker's ``(key, value[, headers])`` tuples."""
    return [item for _, items in produce_runs(records, None) for item in items]


def produce_runs(
    records: Iterable[str | Base64Value | RecordIn], partition: int | None
) -> list[tuple[int | None, list[tuple[Any, ...]]]]:
    """Records as ``[(partition, [(key, value[, headers])])]``: runs of consecutive records bound for one partition.

    A record's own ``partition`` wins over the entry's ``partition``; order is kept.
    """
    runs: list[tuple[int | None, list[tuple[Any, ...]]]] = []
    try:
        for item in records:
            kind = type(item)
            target = partition
            if kind is str:
                converted: tuple[Any, ...] = (None, item.encode())  # type: ignore[union-attr]
            elif kind is Base64Value:
                converted = (None, _b64decode(item.base64, validate=True))  # type: ignore[union-attr]
            else:
                assert isinstance(item, RecordIn)
                converted = _record_item(item)
                target = partition if item.partition is None else item.partition
            if runs and runs[-1][0] == target:
                runs[-1][1].append(converted)
            else:
                runs.append((target, [converted]))
    except (binascii.Error, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise InvalidArgumentError(f"invalid record: {exc}") from None
    return runs


def record_json(record: Record, force_base64: bool) -> dict[str, Any]:
    """A record in the one JSON record shape (:mod:`lkstream.format.json_records`), less topic and partition,
    which the enclosing partition object of a consume answer carries."""
    return {
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": bytes_to_json(record.key, force_base64),
        "value": bytes_to_json(record.value, force_base64),
        "headers": [{"key": k, "value": bytes_to_json(v, force_base64)} for k, v in record.headers],
    }


def topic_json(description: TopicDescription) -> dict[str, Any]:
    return {
        "name": description.name,
        "partitions": description.settings.partitions,
        "retention_ms": description.settings.retention_ms,
        "retention_bytes": description.settings.retention_bytes,
        "configs": description.configs.to_json(),
        "partition_stats": [
            {
                "partition": pid,
                "log_start_offset": s.log_start_offset,
                "next_offset": s.next_offset,
                "high_watermark": s.high_watermark,
                "segment_count": s.segment_count,
                "size_bytes": s.size_bytes,
                "active_segment_bytes": s.active_segment_bytes,
                "dirty_ratio": s.dirty_ratio,
            }
            for pid, s in enumerate(description.partitions)
        ],
    }


def parse_body(model: type[M], body: bytes) -> M:
    """Validate a JSON body; any problem becomes a 400 (``invalid_json`` or ``invalid_request``)."""
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        if any(e["type"] == "json_invalid" for e in errors):
            raise ApiError(400, "invalid_json", f"the body is not valid JSON: {errors[0]['msg']}") from None
        details = [{"loc": ".".join(str(p) for p in e["loc"]), "msg": e["msg"]} for e in errors[:20]]
        summary = "; ".join(f"{d['loc'] or 'body'}: {d['msg']}" for d in details[:5])
        raise ApiError(400, "invalid_request", f"invalid {model.__name__}: {summary}", details=details) from None
