"""Every length and count of a request is checked before a decoder allocates (issue 28, finding 1).

kio's reader reserved a claimed array length before reading it: the 29-byte Metadata v9 frame
below made the daemon abort (SIGABRT, "memory allocation of 34359738352 bytes failed"). Without
lkstream.kafka.bounds, the tests that decode lying frames in this process abort it the same way.
"""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.static.primitive import Records

from lkstream.kafka import kio_codec
from lkstream.kafka.bounds import LyingRequestError, check_request, min_size, request_walk, walk_source
from lkstream.kafka.hot import parse_produce_request
from lkstream.kafka.protocol import ApiKey, FrameError, parse_request_header, version_table
from tests.kafka_wire.frames import EXTREMES, RequestBuilder, Site, assemble, header_tokens

st.register_type_strategy(Records, st.binary(max_size=64).map(Records))
SERVED = version_table(topic_ids=True)
SERVED_VERSIONS = [(api, v) for api, (low, high) in sorted(SERVED.items()) for v in range(low, high + 1)]
#: The frame of the outage: size prefix, Metadata v9 header (client id "lkfuz", no tags), a compact
#: topics array claiming 2^32-2 elements, then the three booleans and the empty tag section.
OUTAGE_FRAME = bytes.fromhex("00000019000300090000000700056c6b66757a00ffffffff0f00000000")


def decode(api_key: int, version: int, frame: bytes, offset: int) -> None:
    """What the listener does with a request body: the hand-written Produce codec, kio for the rest."""
    if api_key == ApiKey.PRODUCE:
        parse_produce_request(frame, offset, flexible=version >= 9)
    else:
        kio_codec.decode_request(api_key, version, frame, offset)


def test_the_29_byte_metadata_frame_is_refused_before_kio_reads_it() -> None:
    assert len(OUTAGE_FRAME) == 29
    frame = OUTAGE_FRAME[4:]
    header = parse_request_header(frame, SERVED)
    with pytest.raises(LyingRequestError, match="topics: 4294967294 elements"):
        kio_codec.decode_request(ApiKey.METADATA, 9, frame, header.body_offset)


@pytest.mark.parametrize(("api_key", "version"), SERVED_VERSIONS)
def test_every_served_request_version_has_a_walk_or_no_array(api_key: int, version: int) -> None:
    walk = request_walk(api_key, version)
    source = walk_source(load_request_schema(api_key, version))
    assert (walk is None) == ("count" not in source)


def test_a_claimed_count_is_held_to_the_smallest_element_size() -> None:
    # DeleteTopics v1: an array of int16-length strings (2 bytes at least each), then a timeout.
    body = struct.pack(">i", 4) + b"\x00\x00" + struct.pack(">i", 1000)
    with pytest.raises(LyingRequestError, match="4 elements of at least 2 bytes claimed, 6 bytes left"):
        check_request(ApiKey.DELETE_TOPICS, 1, body, 0)
    assert min_size(load_request_schema(ApiKey.DELETE_TOPICS, 1)) == 4 + 4


@pytest.mark.parametrize(
    ("api_key", "version", "body"),
    [
        (ApiKey.METADATA, 1, struct.pack(">i", 2**31 - 1)),  # legacy array: kio reserved 16 GB of address space
        (ApiKey.DELETE_TOPICS, 4, b"\x02" + bytes.fromhex("ffffffff0f")),  # a nested compact string
        (ApiKey.OFFSET_COMMIT, 8, b"\x02g\x00\x00\x00\x00\x01m\x01\x02t" + bytes.fromhex("ffffffff0f")),
        (ApiKey.FETCH, 12, b"\x00" * 25 + b"\x01\x01" + bytes.fromhex("ffffffff0f")),  # forgotten topics
        (ApiKey.FETCH, 12, b"\x00" * 25 + b"\x01\x01\x01" + b"\x01\x00" + bytes.fromhex("ffffffff0f")),  # a tag's size
    ],
)
def test_lying_counts_anywhere_in_a_request_are_refused(api_key: int, version: int, body: bytes) -> None:
    with pytest.raises(LyingRequestError):
        kio_codec.decode_request(api_key, version, body, 0)


def test_a_known_tagged_field_must_fit_inside_its_own_size() -> None:
    # Fetch v12's cluster_id (tag 0) whose string claims 5 bytes inside a 2-byte tag.
    prefix = b"\x00" * 25 + b"\x01\x01\x01"
    body = prefix + b"\x01\x00\x02\x06x" + b"abcdef"
    with pytest.raises(LyingRequestError, match="cluster_id"):
        check_request(ApiKey.FETCH, 12, body, 0)


@pytest.mark.parametrize(("api_key", "version"), SERVED_VERSIONS)
def test_every_site_of_every_request_at_every_extreme_is_refused_or_decoded(api_key: int, version: int) -> None:
    """The production path (walk, then decode) on each length, count and tag section of a random
    request set to each extreme: it refuses with a FrameError or decodes; it never aborts."""
    rng = random.Random(f"{api_key}/{version}")
    tokens = header_tokens(api_key, version, 7) + RequestBuilder(rng).entity(load_request_schema(api_key, version))
    sites = [token for token in tokens if isinstance(token, Site)]
    refused = 0
    for index, site in enumerate(sites):
        for lie in EXTREMES[site.kind]:
            frame = assemble(tokens, index, lie)[4:]
            try:
                header = parse_request_header(frame, SERVED)
                decode(api_key, version, frame, header.body_offset)
            except FrameError:
                refused += 1
    assert refused > 0


@settings(max_examples=3, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
@pytest.mark.parametrize(("api_key", "version"), SERVED_VERSIONS)
def test_an_honest_request_walks_to_its_exact_end(api_key: int, version: int, data: st.DataObject) -> None:
    """No frame a real client sends is refused: the walk of any kio-encoded request ends at its last byte."""
    walk = request_walk(api_key, version)
    if walk is None:
        return
    entity = data.draw(st.from_type(load_request_schema(api_key, version)))
    body = b"\xee" + kio_codec.encode(entity)
    assert walk(body, 1, len(body)) == len(body)
