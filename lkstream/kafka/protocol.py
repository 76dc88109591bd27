"""Kafka protocol framing, request headers and the supported-version table (sans I/O).

Every Kafka request and response is a frame: a 4-byte big-endian size, then
that many bytes. A request body starts with a header::

    request header v1 (non-flexible APIs)     request header v2 (flexible APIs)
    int16  api_key                            int16  api_key
    int16  api_version                        int16  api_version
    int32  correlation_id                     int32  correlation_id
    string client_id (int16 length, -1 null)  string client_id (int16 length, not compact)
                                              tagged fields (uvarint count, then tag/size/bytes)

A response starts with the correlation id (header v0), followed for flexible
versions by an empty tagged-field section (header v1: one zero byte), except
ApiVersions, whose response header is always v0 so that a client can read the
answer to a version it guessed (KIP-511).

Which versions are flexible is Kafka's per-API schema fact; it is read from
``kio``'s generated schema classes (``__flexible__``), not restated here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import cache
from typing import Final

from kio.index import load_request_schema

from lkstream.errors import InvalidArgumentError

_SIZE: Final = struct.Struct(">i")
_HEADER_FIXED: Final = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
_CORRELATION: Final = struct.Struct(">ii")  # frame size, correlation id

#: The largest request frame a connection accepts unless configured otherwise (Kafka's socket.request.max.bytes).
DEFAULT_MAX_FRAME_BYTES: Final = 100 * 1024 * 1024


class ApiKey:
    """Kafka API keys this listener serves (the numbers are Kafka's)."""

    PRODUCE: Final = 0
    FETCH: Final = 1
    LIST_OFFSETS: Final = 2
    METADATA: Final = 3
    OFFSET_COMMIT: Final = 8
    OFFSET_FETCH: Final = 9
    FIND_COORDINATOR: Final = 10
    JOIN_GROUP: Final = 11
    HEARTBEAT: Final = 12
    LEAVE_GROUP: Final = 13
    SYNC_GROUP: Final = 14
    DESCRIBE_GROUPS: Final = 15
    LIST_GROUPS: Final = 16
    SASL_HANDSHAKE: Final = 17
    API_VERSIONS: Final = 18
    CREATE_TOPICS: Final = 19
    DELETE_TOPICS: Final = 20
    DELETE_RECORDS: Final = 21
    INIT_PRODUCER_ID: Final = 22
    DESCRIBE_CONFIGS: Final = 32
    ALTER_CONFIGS: Final = 33
    SASL_AUTHENTICATE: Final = 36
    CREATE_PARTITIONS: Final = 37
    DELETE_GROUPS: Final = 42
    INCREMENTAL_ALTER_CONFIGS: Final = 44
    LIST_PARTITION_REASSIGNMENTS: Final = 46
    OFFSET_DELETE: Final = 47
    DESCRIBE_CLUSTER: Final = 60
    CONSUMER_GROUP_HEARTBEAT: Final = 68


#: ``api_key: (min_version, max_version)`` answered in ApiVersions without the topic-id overlay
#: below: every API stays under the versions that name topics by id (Fetch 13, Produce 13,
#: Metadata 10, DeleteTopics 6, CreateTopics 7); see docs/kafka.md. Produce 9-12 and Fetch 12
#: are flexible versions, encoded by hand like the older ones (lkstream.kafka.hot).
SUPPORTED_VERSIONS: Final[dict[int, tuple[int, int]]] = {
    ApiKey.PRODUCE: (3, 12),
    ApiKey.FETCH: (4, 12),
    ApiKey.LIST_OFFSETS: (1, 7),
    ApiKey.METADATA: (0, 9),
    ApiKey.OFFSET_COMMIT: (2, 8),
    ApiKey.OFFSET_FETCH: (1, 7),
    ApiKey.FIND_COORDINATOR: (0, 3),
    ApiKey.JOIN_GROUP: (0, 7),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 4),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 4),
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.CREATE_TOPICS: (2, 6),
    ApiKey.DELETE_TOPICS: (1, 5),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.DESCRIBE_CLUSTER: (0, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.OFFSET_DELETE: (0, 0),
}


#: What a listener with ``ListenerSettings.topic_ids`` (the default) adds: Metadata with topic ids
#: (v10-12) and KIP-848's ConsumerGroupHeartbeat, whose assignments name topics by id. Produce and
#: Fetch stay below their topic-id versions (13) either way: their hand-written codecs address
#: topics by name.
TOPIC_ID_VERSIONS: Final[dict[int, tuple[int, int]]] = {
    ApiKey.METADATA: (0, 12),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
}


def version_table(*, topic_ids: bool) -> dict[int, tuple[int, int]]:
    """The versions a listener answers in ApiVersions and serves."""
    return {**SUPPORTED_VERSIONS, **TOPIC_ID_VERSIONS} if topic_ids else dict(SUPPORTED_VERSIONS)


class FrameError(InvalidArgumentError):
    """A frame or request header that cannot be parsed: the connection is closed (nothing else can be read)."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str
    flexible: bool
    body_offset: int  # where the request body starts in the frame


def is_supported(api_key: int, api_version: int, versions: dict[int, tuple[int, int]] = SUPPORTED_VERSIONS) -> bool:
    bounds = versions.get(api_key)
    return bounds is not None and bounds[0] <= api_version <= bounds[1]


@cache
def is_flexible(api_key: int, api_version: int) -> bool:
    """Whether ``api_version`` of ``api_key`` uses compact encodings and tagged fields (Kafka's schema)."""
    try:
        schema = load_request_schema(api_key, api_version)
    except Exception:  # an API or version kio does not know: Kafka's flexible versions all postdate kio's tables
        return False
    return bool(schema.__flexible__)


def read_frame_size(prefix: bytes, max_frame_bytes: int) -> int:
    """The size announced by a 4-byte prefix; :class:`FrameError` if negative or above the limit."""
    (size,) = _SIZE.unpack(prefix)
    if size < _HEADER_FIXED.size or size > max_frame_bytes:
        raise FrameError(f"request frame of {size} bytes is outside 8..{max_frame_bytes}")
    return int(size)


def parse_request_header(
    frame: bytes | bytearray | memoryview, versions: dict[int, tuple[int, int]] = SUPPORTED_VERSIONS
) -> RequestHeader:
    """Parse the header at the start of ``frame`` (the bytes after the size prefix)."""
    if len(frame) < _HEADER_FIXED.size:
        raise FrameError(f"request header cut short: {len(frame)} bytes")
    api_key, api_version, correlation_id, client_len = _HEADER_FIXED.unpack_from(frame, 0)
    pos = _HEADER_FIXED.size
    client_id = ""
    if client_len > 0:
        if pos + client_len > len(frame):
            raise FrameError("request header: client_id runs past the frame")
        client_id = bytes(frame[pos : pos + client_len]).decode("utf-8", "replace")
        pos += client_len
    elif client_len < -1:
        raise FrameError(f"request header: bad client_id length {client_len}")
    flexible = is_supported(api_key, api_version, versions) and is_flexible(api_key, api_version)
    if flexible:
        pos = skip_tagged_fields(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, flexible, pos)


def read_uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """An unsigned varint at ``pos``: ``(value, next position)``."""
    value, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise FrameError("varint runs past the frame")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise FrameError("varint longer than 5 bytes")


def skip_tagged_fields(buf: bytes | bytearray | memoryview, pos: int) -> int:
    if pos < len(buf) and buf[pos] == 0:  # the usual case: no tagged fields
        return pos + 1
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise FrameError("tagged field runs past the frame")
    return pos


def response_header(correlation_id: int, body_size: int, *, flexible: bool) -> bytes:
    """Size prefix plus response header for a body of ``body_size`` bytes."""
    if flexible:
        return _CORRELATION.pack(body_size + 5, correlation_id) + b"\x00"
    return _CORRELATION.pack(body_size + 4, correlation_id)


def response_is_flexible(api_key: int, api_version: int) -> bool:
    """Response header v1 for flexible versions; ApiVersions always answers with header v0."""
    return api_key != ApiKey.API_VERSIONS and is_flexible(api_key, api_version)
