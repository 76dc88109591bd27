"""Malformed Kafka frames get an error or a closed connection for that client only; nothing enters the log."""

from __future__ import annotations

import socket
import struct

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lkstream import Broker


def request(api_key: int, version: int, body: bytes, correlation: int = 7) -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation, 4) + b"fuzz"
    if version >= 3 and api_key == 18:
        header += b"\x00"  # ApiVersions v3 uses request header v2 (tagged fields)
    frame = header + body
    return struct.pack(">i", len(frame)) + frame


def exchange(bootstrap: str, payload: bytes) -> bytes:
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def api_versions_works(bootstrap: str) -> bool:
    answer = exchange(bootstrap, request(18, 0, b"", correlation=99))
    return len(answer) > 10 and struct.unpack_from(">ih", answer, 4) == (99, 0)


def test_an_unknown_api_key_gets_an_error_response_not_a_closed_socket(kafka_bootstrap: str) -> None:
    answer = exchange(kafka_bootstrap, request(999, 0, b""))
    assert struct.unpack(">iih", answer) == (6, 7, 35)


def test_an_unsupported_api_versions_version_is_answered_in_the_v0_layout(kafka_bootstrap: str) -> None:
    answer = exchange(kafka_bootstrap, request(18, 9, b""))
    size, correlation, code, count = struct.unpack_from(">iihi", answer)
    assert (correlation, code) == (7, 35) and count > 10 and size == len(answer) - 4


def test_an_oversized_length_prefix_closes_only_that_connection(kafka_bootstrap: str) -> None:
    assert exchange(kafka_bootstrap, struct.pack(">i", 2**31 - 1) + b"x" * 100) == b""
    assert api_versions_works(kafka_bootstrap)


@settings(
    max_examples=120, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    api_key=st.sampled_from([0, 1, 2, 3, 8, 9, 10, 11, 12, 14, 18, 19, 22, 32]),
    version=st.integers(-1, 20),
    body=st.binary(max_size=200),
    cut=st.integers(0, 40),
)
@example(
    api_key=0,
    version=8,
    body=b"\xff\xff\x00\x01\x00\x00\x13\x88\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x10"
    + b"\x00" * 16,
    cut=0,
)
def test_garbage_requests_never_stop_the_listener_or_reach_the_log(  # noqa: PLR0917 (hypothesis arguments)
    kafka_bootstrap: str, kafka_broker: Broker, api_key: int, version: int, body: bytes, cut: int
) -> None:
    payload = request(api_key, version, body)
    exchange(kafka_bootstrap, payload[: len(payload) - cut] if cut else payload)
    assert api_versions_works(kafka_bootstrap)
    assert all(kafka_broker.describe_topic(t).partitions[0].next_offset == 0 for t in kafka_broker.list_topics())
