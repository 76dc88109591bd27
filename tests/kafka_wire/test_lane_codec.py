"""The client's Produce v8 codec (lkstream.wire.kafka_lane) against the listener's parser and kio."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lkstream.client.remote.kafka_lane import requests_of
from lkstream.kafka import kio_codec
from lkstream.kafka.hot import (
    FetchPartitionResult,
    ProducePartitionResult,
    encode_fetch_response,
    encode_produce_response,
    parse_produce_request,
)
from lkstream.kafka.protocol import ApiKey, parse_request_header, read_frame_size
from lkstream.wire.kafka_lane import (
    FETCH_VERSION,
    MAX_ANSWER_BYTES,
    PRODUCE_VERSION,
    AnswerError,
    answer_size,
    correlation_of,
    fetch_request,
    parse_answer,
    parse_fetch_answer,
    produce_request,
)

names = st.text(alphabet="abcdefghij.-_", min_size=1, max_size=12)
batches = st.lists(
    st.tuples(st.integers(0, 999), st.binary(min_size=1, max_size=300)), max_size=4, unique_by=lambda b: b[0]
)


@settings(max_examples=60, derandomize=True)
@given(correlation=st.integers(0, 2**31 - 1), topic=names, parts=batches, timeout_ms=st.integers(0, 2**31 - 1))
def test_a_request_reads_back_through_the_listeners_parser_and_kio(
    correlation: int, topic: str, parts: list[tuple[int, bytes]], timeout_ms: int
) -> None:
    frame = b"".join(produce_request(correlation, topic, parts, timeout_ms))
    assert read_frame_size(frame[:4], len(frame)) == len(frame) - 4
    header = parse_request_header(frame[4:])
    assert (header.api_key, header.api_version, header.correlation_id) == (ApiKey.PRODUCE, 8, correlation)
    assert not header.flexible
    ours = parse_produce_request(frame[4:], header.body_offset)
    assert (ours.transactional_id, ours.acks, ours.timeout_ms) == (None, -1, timeout_ms)
    assert ours.topics == [
        (topic, [type(p)(pid, bytearray(b)) for p, (pid, b) in zip(ours.topics[0][1], parts, strict=True)])
    ]
    theirs = kio_codec.decode_request(ApiKey.PRODUCE, PRODUCE_VERSION, frame[4:], header.body_offset)
    (topic_data,) = theirs.topic_data
    assert topic_data.name == topic
    assert [(p.index, p.records) for p in topic_data.partition_data] == parts


def _answer(correlation: int, body: bytes) -> bytes:
    return struct.pack(">i", correlation) + body


@settings(max_examples=60, derandomize=True)
@given(
    correlation=st.integers(0, 2**31 - 1),
    topic=names,
    parts=st.lists(
        st.tuples(st.integers(0, 999), st.sampled_from([0, 3, 7, 10]), st.integers(-1, 2**62), st.none() | names),
        max_size=4,
        unique_by=lambda p: p[0],
    ),
)
def test_an_answer_encoded_by_the_listener_is_read_back(
    correlation: int, topic: str, parts: list[tuple[int, int, int, str | None]]
) -> None:
    results = [ProducePartitionResult(pid, code, base, 0, message) for pid, code, base, message in parts]
    frame = _answer(correlation, encode_produce_response(PRODUCE_VERSION, [("other", []), (topic, results)]))
    assert correlation_of(frame) == correlation
    answers = parse_answer(frame, topic)
    assert {pid: (a.partition, a.error_code, a.base_offset, a.error_message) for pid, a in answers.items()} == {
        pid: (pid, code, base, message) for pid, code, base, message in parts
    }


def test_a_malformed_or_oversized_answer_is_refused() -> None:
    frame = _answer(1, encode_produce_response(PRODUCE_VERSION, [("t", [ProducePartitionResult(0, 0, 5, 0)])]))
    assert parse_answer(frame, "t")[0].base_offset == 5
    for cut in (6, 12, len(frame) - 1):
        with pytest.raises(AnswerError, match="cut short"):
            parse_answer(frame[:cut], "t")
    assert answer_size(struct.pack(">i", 40)) == 40
    for size in (MAX_ANSWER_BYTES + 1, -1, 0):
        with pytest.raises(AnswerError, match="at most"):
            answer_size(struct.pack(">i", size))


def test_requests_are_cut_at_the_request_size_a_larger_batch_alone() -> None:
    parts = [(0, b"a" * 40), (1, b"b" * 40), (2, b"c" * 100), (3, b"d" * 10)]
    assert requests_of(parts, 100) == [[parts[0], parts[1]], [parts[2]], [parts[3]]]
    assert requests_of(parts, 1000) == [parts]
    assert requests_of([], 100) == []


@settings(max_examples=60, derandomize=True)
@given(
    correlation=st.integers(0, 2**31 - 1),
    topic=names,
    partition=st.integers(0, 999),
    offset=st.integers(0, 2**62),
    max_bytes=st.integers(1, 2**31 - 1),
)
def test_a_fetch_request_reads_back_through_kio(
    correlation: int, topic: str, partition: int, offset: int, max_bytes: int
) -> None:
    frame = fetch_request(correlation, topic, partition, offset, max_bytes)
    assert read_frame_size(frame[:4], len(frame)) == len(frame) - 4
    header = parse_request_header(frame[4:])
    assert (header.api_key, header.api_version, header.correlation_id) == (ApiKey.FETCH, 5, correlation)
    request = kio_codec.decode_request(ApiKey.FETCH, FETCH_VERSION, frame[4:], header.body_offset)
    assert (request.replica_id, request.max_wait.total_seconds(), request.min_bytes, request.max_bytes) == (
        -1,
        0,
        0,
        max_bytes,
    )
    ((name, (part,)),) = [(t.topic, t.partitions) for t in request.topics]
    assert (name, part.partition, part.fetch_offset, part.partition_max_bytes) == (topic, partition, offset, max_bytes)


@settings(max_examples=60, derandomize=True)
@given(
    topic=names,
    parts=st.lists(
        st.tuples(
            st.integers(0, 99),
            st.sampled_from([0, 1, 3]),
            st.integers(-1, 2**62),
            st.integers(-1, 2**62),
            st.none() | st.binary(max_size=300),
        ),
        min_size=1,
        max_size=4,
        unique_by=lambda p: p[0],
    ),
)
def test_a_fetch_answer_encoded_by_the_listener_is_read_back(
    topic: str, parts: list[tuple[int, int, int, int, bytes | None]]
) -> None:
    body = encode_fetch_response(FETCH_VERSION, [("other", []), (topic, [FetchPartitionResult(*p) for p in parts])])
    frame = _answer(7, body)
    for pid, code, high, start, records in parts:
        answer = parse_fetch_answer(frame, topic, pid)
        assert (answer.error_code, answer.high_watermark, answer.log_start_offset, answer.records) == (
            code,
            high,
            start,
            records or b"",
        )
    with pytest.raises(AnswerError, match="without"):
        parse_fetch_answer(frame, topic, 1000)
    with pytest.raises(AnswerError, match="cut short"):
        parse_fetch_answer(frame[:-1], topic, parts[0][0])
