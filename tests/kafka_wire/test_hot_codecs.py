"""The hand-written Produce/Fetch codecs are byte-equal to kio's encoding of the same values."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from lkstream.kafka import kio_codec
from lkstream.kafka.hot import (
    FetchPartitionResult,
    ProducePartitionResult,
    encode_fetch_response,
    encode_produce_response,
    fetch_response_chunks,
    parse_produce_request,
)
from lkstream.kafka.protocol import ApiKey
from lkstream.storage.ranges import FileRange

names = st.text(alphabet="abcdefghij.-_", min_size=1, max_size=12)
i64 = st.integers(-1, 2**62)
codes = st.sampled_from([0, 1, 3, 10, 45])


@settings(max_examples=60, derandomize=True)
@given(
    version=st.integers(3, 12),  # 9+: flexible
    topics=st.lists(st.tuples(names, st.lists(st.tuples(st.integers(0, 99), codes, i64, i64), max_size=3)), max_size=3),
)
def test_produce_response_matches_kio(version: int, topics: list[tuple[str, list[tuple[int, int, int, int]]]]) -> None:
    ours = encode_produce_response(
        version,
        [(name, [ProducePartitionResult(p, c, base, start) for p, c, base, start in parts]) for name, parts in topics],
    )
    cls = kio_codec.response_type(ApiKey.PRODUCE, version)
    topic_cls = kio_codec.item_type(cls, "responses")
    part_cls = kio_codec.item_type(topic_cls, "partition_responses")
    theirs = kio_codec.encode(
        kio_codec.make(
            cls,
            responses=tuple(
                kio_codec.make(
                    topic_cls,
                    name=name,
                    partition_responses=tuple(
                        kio_codec.make(
                            part_cls,
                            index=p,
                            error_code=ErrorCode(c),
                            base_offset=base,
                            log_append_time=None,  # kio writes None as -1
                            log_start_offset=start,
                            record_errors=(),
                            error_message=None,
                        )
                        for p, c, base, start in parts
                    ),
                )
                for name, parts in topics
            ),
            throttle_time=datetime.timedelta(0),
        )
    )
    assert ours == theirs


@settings(max_examples=60, derandomize=True)
@given(
    version=st.integers(4, 12),  # 12: flexible
    topics=st.lists(
        st.tuples(
            names,
            st.lists(st.tuples(st.integers(0, 99), codes, i64, i64, st.none() | st.binary(max_size=40)), max_size=3),
        ),
        max_size=3,
    ),
)
def test_fetch_response_matches_kio(
    version: int, topics: list[tuple[str, list[tuple[int, int, int, int, bytes | None]]]]
) -> None:
    ours = encode_fetch_response(
        version, [(name, [FetchPartitionResult(*part) for part in parts]) for name, parts in topics]
    )
    assert ours == kio_fetch_response(version, topics)
    # Records of 64 KiB and more leave the joined buffer and are written as they are (chunks).
    big = [
        (name, [(p, c, h, ls, None if r is None else r * 3000) for p, c, h, ls, r in parts]) for name, parts in topics
    ]
    chunks = fetch_response_chunks(version, [(n, [FetchPartitionResult(*part) for part in ps]) for n, ps in big])
    assert b"".join(chunks) == kio_fetch_response(version, big)


def kio_fetch_response(version: int, topics: list[tuple[str, list[tuple[int, int, int, int, bytes | None]]]]) -> bytes:
    cls = kio_codec.response_type(ApiKey.FETCH, version)
    topic_cls = kio_codec.item_type(cls, "responses")
    part_cls = kio_codec.item_type(topic_cls, "partitions")
    return kio_codec.encode(
        kio_codec.make(
            cls,
            throttle_time=datetime.timedelta(0),
            error_code=ErrorCode.none,
            session_id=0,
            responses=tuple(
                kio_codec.make(
                    topic_cls,
                    topic=name,
                    partitions=tuple(
                        kio_codec.make(
                            part_cls,
                            partition_index=p,
                            error_code=ErrorCode(c),
                            high_watermark=hwm,
                            last_stable_offset=hwm,
                            log_start_offset=start,
                            aborted_transactions=None,
                            preferred_read_replica=-1,
                            records=records,
                        )
                        for p, c, hwm, start, records in parts
                    ),
                )
                for name, parts in topics
            ),
        )
    )


@settings(max_examples=60, derandomize=True)
@given(
    version=st.integers(3, 12),  # 9+: flexible
    acks=st.sampled_from([-1, 0, 1]),
    topics=st.lists(
        st.tuples(names, st.lists(st.tuples(st.integers(0, 99), st.none() | st.binary(max_size=40)), max_size=3)),
        max_size=3,
    ),
)
def test_produce_request_parser_reads_what_kio_writes(
    version: int, acks: int, topics: list[tuple[str, list[tuple[int, bytes | None]]]]
) -> None:
    cls = kio_codec.request_type(ApiKey.PRODUCE, version)
    topic_cls = kio_codec.item_type(cls, "topic_data")
    part_cls = kio_codec.item_type(topic_cls, "partition_data")
    encoded = kio_codec.encode(
        kio_codec.make(
            cls,
            transactional_id=None,
            acks=acks,
            timeout=datetime.timedelta(seconds=5),
            topic_data=tuple(
                kio_codec.make(
                    topic_cls,
                    name=name,
                    partition_data=tuple(kio_codec.make(part_cls, index=p, records=r) for p, r in parts),
                )
                for name, parts in topics
            ),
        )
    )
    parsed = parse_produce_request(b"prefix" + encoded, 6, flexible=version >= 9)
    assert (parsed.acks, parsed.timeout_ms, parsed.transactional_id) == (acks, 5000, None)
    assert [
        (n, [(p.partition, None if p.records is None else bytes(p.records)) for p in ps]) for n, ps in parsed.topics
    ] == [(n, list(ps)) for n, ps in topics]


@pytest.mark.parametrize("version", [4, 5, 11, 12])
def test_fetch_response_with_file_ranges_matches_kio(version: int, tmp_path: Path) -> None:
    """Records sent from their file (sendfile) sit between the same framing bytes as records in memory."""
    stored = [bytes([i]) * size for i, size in enumerate((10, 70_000, 3))]
    segment = tmp_path / "segment"
    segment.write_bytes(b"".join(stored))
    fd = os.open(segment, os.O_RDONLY)
    try:
        positions = [sum(len(s) for s in stored[:i]) for i in range(len(stored))]
        ranges = [
            FileRange(fd, at, len(s), str(segment), lambda: None) for at, s in zip(positions, stored, strict=True)
        ]
        topics = [("a", [(0, 0, 5, 0, stored[0]), (1, 0, 9, 0, stored[1])]), ("b", [(2, 0, 4, 1, stored[2])])]
        answers = [
            ("a", [FetchPartitionResult(0, 0, 5, 0, ranges[0]), FetchPartitionResult(1, 0, 9, 0, ranges[1])]),
            ("b", [FetchPartitionResult(2, 0, 4, 1, ranges[2])]),
        ]
        chunks = fetch_response_chunks(version, answers)
        assert sum(isinstance(chunk, FileRange) for chunk in chunks) == 3  # each range is its own chunk
        sent = b"".join(chunk.read() if isinstance(chunk, FileRange) else chunk for chunk in chunks)
        assert sent == kio_fetch_response(version, topics)
        assert encode_fetch_response(version, answers) == sent
    finally:
        os.close(fd)
