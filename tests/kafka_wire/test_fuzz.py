"""Malformed Kafka frames get an error or a closed connection for that client only; nothing enters the log.

The schema-driven fuzzer (issue 28, "How it is checked") sends every API and version the listener
offers to a real daemon subprocess, honest and with each length, count and tagged-field section at
an extreme (tests/kafka_wire/frames.py), with a fixed seed; a well-behaved librdkafka producer keeps
producing beside it. benchmarks/soak/soak_abuse.py runs the same frames for longer.
"""

from __future__ import annotations

import logging
import random
import socket
import struct
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import lkstream
from lkstream import Broker
from lkstream.kafka.protocol import version_table
from tests.integration.conftest import DaemonFactory
from tests.kafka_wire.frames import Frame, variants
from tests.kafka_wire.test_request_bounds import OUTAGE_FRAME

#: The CI seed: every run sends the same frames; a failure names the frame, so it can be replayed.
SEED = 28
CLIENT_TOPIC = "fuzz-well-behaved"
#: How much the daemon's peak RSS may grow while the fuzzer runs (a claimed count of 2^32-2 asked for 34 GB).
RSS_GROWTH_BOUND_MB = 256


def request(api_key: int, version: int, body: bytes, correlation: int = 7) -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation, 4) + b"fuzz"
    if version >= 3 and api_key == 18:
        header += b"\x00"  # ApiVersions v3 uses request header v2 (tagged fields)
    frame = header + body
    return struct.pack(">i", len(frame)) + frame


def exchange(bootstrap: str, payload: bytes, timeout: float = 10) -> bytes:
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
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


def peak_rss_mb(pid: int) -> float:
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return int(status["VmHWM"].split()[0]) / 1024


def test_the_29_byte_frame_closes_its_connection_and_the_daemon_stays_up(start_daemon: DaemonFactory) -> None:
    """Issue 28, finding 1: this frame made the daemon abort (SIGABRT) before the bounds walk."""
    daemon = start_daemon()
    assert daemon.process is not None
    assert exchange(daemon.kafka_address, OUTAGE_FRAME) == b""
    served = api_versions_works(daemon.kafka_address)
    assert served and daemon.process.poll() is None, "".join(daemon.output[-20:])


def all_frames(seed: int) -> list[Frame]:
    rng = random.Random(seed)
    return [
        frame
        for api_key, (low, high) in sorted(version_table(topic_ids=True).items())
        for version in range(low, high + 1)
        for frame in variants(api_key, version, rng)
    ]


def test_every_api_and_version_with_lying_lengths_leaves_the_daemon_up_and_a_client_served(
    start_daemon: DaemonFactory,
) -> None:
    daemon = start_daemon()
    assert daemon.process is not None
    pid = daemon.process.pid
    with lkstream.connect(daemon.address) as client:
        client.create_topic(CLIENT_TOPIC, partitions=1)
    producer = Producer({"bootstrap.servers": daemon.kafka_address, "linger.ms": 0, "enable.idempotence": True})
    failures: list[KafkaError] = []
    start_rss = peak_rss_mb(pid)
    frames = all_frames(SEED)
    sent = 0
    for index, frame in enumerate(frames):
        exchange(daemon.kafka_address, frame.payload, timeout=5)
        alive = daemon.process.poll() is None
        assert alive, f"seed {SEED}, frame {index}: API {frame.api_key} v{frame.version}, {frame.lie}\n" + "".join(
            daemon.output[-30:]
        )
        if index % 50 == 0:
            producer.produce(CLIENT_TOPIC, value=str(sent).encode(), on_delivery=lambda e, _: e and failures.append(e))
            sent += 1
            producer.poll(0)
    assert producer.flush(30) == 0
    assert not failures, failures
    assert api_versions_works(daemon.kafka_address)
    growth = peak_rss_mb(pid) - start_rss
    assert growth < RSS_GROWTH_BOUND_MB, f"peak RSS grew {growth:.0f} MB over {len(frames)} frames"
    with lkstream.connect(daemon.address) as client:
        assert client.describe_topic(CLIENT_TOPIC).partitions[0].next_offset == sent  # each acked record once
        for topic in client.list_topics():
            if topic != CLIENT_TOPIC:  # every Produce the fuzzer sent carried garbage records: refused
                assert all(p.next_offset == 0 for p in client.describe_topic(topic).partitions), topic


# -- issue 28, finding 12: what a flood of bad frames writes to the log -------------------------------


def _kafka_log(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "lkstream.kafka" and r.levelno >= logging.INFO]


def test_a_flood_of_malformed_frames_logs_one_line_per_interval(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: about 140 bytes of log per bad frame, with no limit (200 frames, 200 lines)."""
    with caplog.at_level(logging.INFO, logger="lkstream.kafka"):
        for _ in range(200):
            exchange(kafka_bootstrap, OUTAGE_FRAME)
        assert api_versions_works(kafka_bootstrap)
    lines = _kafka_log(caplog)
    assert len(lines) == 1 and "topics: 4294967294 elements" in lines[0], lines


def test_a_client_that_leaves_is_not_logged_as_an_error(kafka_bootstrap: str, caplog: pytest.LogCaptureFixture) -> None:
    host, port = kafka_bootstrap.rsplit(":", 1)
    with caplog.at_level(logging.INFO, logger="lkstream.kafka"):
        for cut in (0, 2, 10):  # between requests, inside the size prefix, inside a request
            with socket.create_connection((host, int(port)), timeout=5) as sock:
                sock.sendall(request(18, 0, b"")[:cut])
        assert api_versions_works(kafka_bootstrap)  # the listener saw every close before it answers this
    assert _kafka_log(caplog) == []
