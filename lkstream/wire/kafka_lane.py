"""The client's half of the Kafka exchanges of the lane: Produce v8, Fetch v5 and the SASL requests, and their answers.

The remote client's lane (:mod:`lkstream.client.remote.kafka_lane`) sends the batches of
a produce call to the daemon's Kafka listener as one Produce request, and reads a
blocking fetch there. Only these exchanges are needed, so they are written here by
hand (``kio`` builds a request in pure Python and copies the records; this costs one
``struct`` pack per partition and no copy of a batch). The listener's own codecs
(:mod:`lkstream.kafka.hot`) and ``kio`` check them in the tests.

Layouts (Kafka's ``RequestHeader.json`` v1, ``ProduceRequest.json`` and
``ProduceResponse.json`` v8, ``FetchRequest.json`` and ``FetchResponse.json`` v5, classic
encodings: int16-length strings, int32-length arrays and bytes; every frame starts with
its size, int32)::

    produce request:  api_key int16 (0), api_version int16 (8), correlation_id int32,
                      client_id string?, transactional_id string? (null), acks int16 (-1),
                      timeout_ms int32, [topic string, [partition int32, records bytes]]
    produce answer:   correlation_id int32,
                      [topic string, [partition int32, error_code int16, base_offset int64,
                      log_append_time_ms int64, log_start_offset int64,
                      [batch_index int32, batch_index_error_message string?], error_message string?]],
                      throttle_time_ms int32
    fetch request:    api_key int16 (1), api_version int16 (5), correlation_id int32, client_id string?,
                      replica_id int32 (-1), max_wait_ms int32 (0), min_bytes int32 (0),
                      max_bytes int32, isolation_level int8 (0),
                      [topic string, [partition int32, fetch_offset int64, log_start_offset int64 (-1),
                      partition_max_bytes int32]]
    fetch answer:     correlation_id int32, throttle_time_ms int32,
                      [topic string, [partition int32, error_code int16, high_watermark int64,
                      last_stable_offset int64, log_start_offset int64,
                      [producer_id int64, first_offset int64]?, records bytes?]]
    sasl handshake:   api_key int16 (17), api_version int16 (1), correlation_id int32, client_id string?,
                      mechanism string (OAUTHBEARER)
    its answer:       correlation_id int32, error_code int16, [mechanism string]
    sasl authenticate: api_key int16 (36), api_version int16 (1), correlation_id int32, client_id string?,
                      auth_bytes bytes (RFC 7628: ``n,,\x01auth=Bearer <token>\x01\x01``)
    its answer:       correlation_id int32, error_code int16, error_message string?, auth_bytes bytes,
                      session_lifetime_ms int64

Produce v8 is the first version whose answer carries the broker's ``error_message``; Fetch
v5 the first with ``log_start_offset``. The client raises from neither: a refused batch or
a failed fetch goes again through gRPC, whose answer carries the error's class and fields.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

_Item = TypeVar("_Item")

PRODUCE_API_KEY: Final = 0
PRODUCE_VERSION: Final = 8
FETCH_API_KEY: Final = 1
FETCH_VERSION: Final = 5
SASL_HANDSHAKE_API_KEY: Final = 17
SASL_AUTHENTICATE_API_KEY: Final = 36
SASL_VERSION: Final = 1
OAUTHBEARER: Final = "OAUTHBEARER"
CLIENT_ID: Final = "lkstream-python"
#: A Produce answer is a few dozen bytes a partition; a frame announcing more is not one.
MAX_ANSWER_BYTES: Final = 1024 * 1024
#: A Fetch answer's bytes beyond its records (headers, topic name, partition fields).
FETCH_ANSWER_OVERHEAD: Final = 64 * 1024

_HEADER: Final = struct.Struct(">ihhih")  # size, api_key, api_version, correlation_id, client_id length
_BODY_START: Final = struct.Struct(">hhii")  # transactional_id (-1: null), acks, timeout_ms, topic count
_PARTITION: Final = struct.Struct(">ii")  # partition, records length
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_ANSWER_PART: Final = struct.Struct(">ihqqq")  # partition, error_code, base_offset, log_append_time, log_start
_FETCH_BODY: Final = struct.Struct(">iiiibi")  # replica_id, max_wait_ms, min_bytes, max_bytes, isolation, topics
_FETCH_PART: Final = struct.Struct(">iiqqi")  # partition count (1), partition, fetch_offset, log_start, max bytes
_FETCHED_PART: Final = struct.Struct(">ihqqq")  # partition, error_code, high_watermark, last_stable, log_start


class AnswerError(Exception):
    """The listener's answer cannot be read as the answer asked for (a bug, or not our daemon)."""


@dataclass(frozen=True, slots=True)
class PartitionAnswer:
    partition: int
    error_code: int
    base_offset: int
    error_message: str | None


def produce_request(
    correlation_id: int, topic: str, batches: Sequence[tuple[int, bytes | bytearray]], timeout_ms: int
) -> list[bytes | bytearray]:
    """The request's frame as chunks to write in order: the fields, and each batch as it is (not copied).

    ``batches`` are ``(partition, v2 batch)``, each partition at most once (Kafka answers one
    result per partition of a request).
    """
    client_id = CLIENT_ID.encode()
    name = topic.encode()
    body = _BODY_START.pack(-1, -1, timeout_ms, 1) + _I16.pack(len(name)) + name + _I32.pack(len(batches))
    chunks: list[bytes | bytearray] = []
    size = _HEADER.size - 4 + len(client_id) + len(body)  # the size field counts the bytes after it
    for partition, batch in batches:
        chunks.append(_PARTITION.pack(partition, len(batch)))
        chunks.append(batch)
        size += _PARTITION.size + len(batch)
    head = _HEADER.pack(size, PRODUCE_API_KEY, PRODUCE_VERSION, correlation_id, len(client_id)) + client_id + body
    return [head, *chunks]


def answer_size(prefix: bytes | bytearray | memoryview, limit: int = MAX_ANSWER_BYTES) -> int:
    """The size of the answer frame whose first four bytes are ``prefix`` (checked against ``limit``)."""
    (size,) = _I32.unpack_from(prefix)
    if not 4 <= size <= limit:
        raise AnswerError(f"an answer of {size} bytes (at most {limit})")
    return int(size)


def correlation_of(frame: bytes | bytearray | memoryview) -> int:
    """The correlation id an answer frame (without its size field) starts with."""
    return int(_I32.unpack_from(frame)[0])


def parse_answer(frame: bytes | bytearray | memoryview, topic: str) -> dict[int, PartitionAnswer]:
    """The per-partition results of an answer frame (without its size field) to a request for ``topic``."""
    view = memoryview(frame)
    try:
        found, pos = _topic_partitions(view, 4, _produced_partition)  # after the correlation id
        _I32.unpack_from(view, pos)  # throttle_time_ms, the last field
        _check_end(view, pos + 4, "Produce")
    except (struct.error, UnicodeDecodeError) as exc:
        raise AnswerError(f"a Produce answer cut short or malformed: {exc}") from None
    return {answer.partition: answer for name, answer in found if name == topic}


def _produced_partition(view: memoryview, pos: int) -> tuple[PartitionAnswer, int]:
    partition, code, base, _append_time, _log_start = _ANSWER_PART.unpack_from(view, pos)
    pos += _ANSWER_PART.size
    (record_errors,) = _I32.unpack_from(view, pos)
    pos += 4
    for _ in range(max(record_errors, 0)):
        _, pos = _string(view, pos + 4)  # batch_index, its message
    message, pos = _string(view, pos)
    return PartitionAnswer(partition, code, base, message), pos


def _topic_partitions(
    view: memoryview, pos: int, read_partition: Callable[[memoryview, int], tuple[_Item, int]]
) -> tuple[list[tuple[str | None, _Item]], int]:
    """``[topic string, [partition]]`` at ``pos``: each partition read by ``read_partition``, with its topic."""
    found: list[tuple[str | None, _Item]] = []
    (topics,) = _I32.unpack_from(view, pos)
    pos += 4
    for _ in range(topics):
        name, pos = _string(view, pos)
        (parts,) = _I32.unpack_from(view, pos)
        pos += 4
        for _ in range(parts):
            item, pos = read_partition(view, pos)
            found.append((name, item))
    return found, pos


def _check_end(view: memoryview, end: int, what: str) -> None:
    if end != len(view):
        raise AnswerError(f"a {what} answer of {len(view)} bytes has {len(view) - end} bytes past its end")


def _string(view: memoryview, pos: int) -> tuple[str | None, int]:
    (size,) = _I16.unpack_from(view, pos)
    pos += 2
    if size < 0:
        return None, pos
    if pos + size > len(view):
        raise struct.error("string past the end of the frame")
    return bytes(view[pos : pos + size]).decode(), pos + size


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    error_code: int
    high_watermark: int
    log_start_offset: int
    records: bytes


def fetch_request(correlation_id: int, topic: str, partition: int, offset: int, max_bytes: int) -> bytes:
    """One partition's Fetch from ``offset``, answered at once (``max_wait_ms`` 0, ``min_bytes`` 0)."""
    name = topic.encode()
    body = (
        _FETCH_BODY.pack(-1, 0, 0, max_bytes, 0, 1)
        + _I16.pack(len(name))
        + name
        + _FETCH_PART.pack(1, partition, offset, -1, max_bytes)
    )
    return _request(FETCH_API_KEY, FETCH_VERSION, correlation_id, body)


def parse_fetch_answer(frame: bytes | bytearray | memoryview, topic: str, partition: int) -> FetchAnswer:
    """The answer for ``topic[partition]`` in a Fetch answer frame (without its size field)."""
    view = memoryview(frame)
    try:
        found, pos = _topic_partitions(view, 8, _fetched_partition)  # after the correlation id, throttle_time_ms
        _check_end(view, pos, "Fetch")
    except (struct.error, UnicodeDecodeError) as exc:
        raise AnswerError(f"a Fetch answer cut short or malformed: {exc}") from None
    for name, (pid, answer) in found:
        if name == topic and pid == partition:
            return answer
    raise AnswerError(f"a Fetch answer without {topic}[{partition}]")


def _fetched_partition(view: memoryview, pos: int) -> tuple[tuple[int, FetchAnswer], int]:
    pid, code, high_watermark, _stable, log_start = _FETCHED_PART.unpack_from(view, pos)
    pos += _FETCHED_PART.size
    (aborted,) = _I32.unpack_from(view, pos)
    pos += 4 + 16 * max(aborted, 0)  # producer_id, first_offset: none here (no transactions)
    (size,) = _I32.unpack_from(view, pos)
    pos += 4
    if size > len(view) - pos:
        raise struct.error("records past the end of the frame")
    records = bytes(view[pos : pos + max(size, 0)])
    return (pid, FetchAnswer(code, high_watermark, log_start, records)), pos + max(size, 0)


def sasl_handshake_request(correlation_id: int, mechanism: str = OAUTHBEARER) -> bytes:
    """SaslHandshake v1 naming ``mechanism`` (the SASL bytes then travel in SaslAuthenticate requests)."""
    name = mechanism.encode()
    return _request(SASL_HANDSHAKE_API_KEY, SASL_VERSION, correlation_id, _I16.pack(len(name)) + name)


def oauthbearer_request(correlation_id: int, token: str) -> bytes:
    """SaslAuthenticate v1 carrying ``token`` as an OAUTHBEARER client response (RFC 7628 section 3.1)."""
    message = b"n,,\x01auth=Bearer " + token.encode() + b"\x01\x01"
    return _request(SASL_AUTHENTICATE_API_KEY, SASL_VERSION, correlation_id, _I32.pack(len(message)) + message)


def _request(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    """A whole request frame: its size, the v1 request header, ``body``."""
    client_id = CLIENT_ID.encode()
    size = _HEADER.size - 4 + len(client_id) + len(body)
    return _HEADER.pack(size, api_key, version, correlation_id, len(client_id)) + client_id + body


def sasl_refusal(frame: bytes | bytearray | memoryview, authenticate: bool) -> str | None:
    """Why a SaslHandshake (``authenticate`` False) or SaslAuthenticate answer frame refuses, or None."""
    view = memoryview(frame)
    try:
        (code,) = _I16.unpack_from(view, 4)  # after the correlation id
        message = _string(view, 6)[0] if authenticate else None
    except (struct.error, UnicodeDecodeError) as exc:
        raise AnswerError(f"a SASL answer cut short or malformed: {exc}") from None
    if code == 0:
        return None
    return f"error {code}" + (f": {message}" if message else "")
