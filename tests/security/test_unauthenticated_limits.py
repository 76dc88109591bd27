"""What a caller that never authenticates may hold (issue 28, findings 2 and 3).

Each test starts a real daemon with auth on (tests/security/conftest.py) and holds its sockets
the way an attacker would: raw TCP, ApiVersions every half second, TLS never started.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import time
import urllib.request

import grpc
import pytest

from lkstream.wire._proto import messaging_pb2 as pb
from lkstream.wire._proto import messaging_pb2_grpc as pb_grpc
from tests.integration.raw_sockets import (
    connect,
    ended,
    kafka_api_versions,
    read_kafka_response,
    wait_all_ended,
    wait_ended,
)
from tests.security.conftest import SecureDaemon, SecureFactory
from tests.security.kafka_raw import RawKafka

PASSWORD = "correct horse battery staple"
#: The daemon acts within seconds; a busy machine gets a generous bound.
DEADLINE_S = 15.0
MiB = 1024 * 1024


def test_a_kafka_client_that_only_asks_api_versions_is_closed_at_the_authentication_deadline(
    secure_daemon: SecureFactory,
) -> None:
    """Before: ApiVersions every 3 s reset the idle timer, so 128 such sockets held every slot for good."""
    daemon = secure_daemon(authentication_timeout_s=2, kafka_max_connections=4, kafka_idle_timeout_s=600)
    daemon.set_password("admin", PASSWORD)
    squatters = [connect(daemon.kafka_address) for _ in range(4)]
    started = time.monotonic()
    answered = 0
    try:
        open_ = list(squatters)
        while open_ and time.monotonic() - started < DEADLINE_S:
            for sock in list(open_):
                try:
                    sock.sendall(kafka_api_versions())
                    answered += read_kafka_response(sock, 1.0) == 7
                except OSError:
                    open_.remove(sock)
            time.sleep(0.5)
        took = time.monotonic() - started
        assert not open_, f"{len(open_)} sockets asking ApiVersions every 0.5 s stayed {took:.0f} s"
        assert answered >= 4  # ApiVersions is served before authentication; it just does not extend the deadline
        with RawKafka(daemon.kafka_address) as admin:  # a slot is free again: the super user logs in
            assert admin.login_scram("SCRAM-SHA-256", "admin", PASSWORD).error_code == 0
    finally:
        for sock in squatters:
            sock.close()


def test_an_authenticated_kafka_connection_is_not_cut_at_the_authentication_deadline(
    secure_daemon: SecureFactory,
) -> None:
    daemon = secure_daemon(authentication_timeout_s=1)
    daemon.set_password("admin", PASSWORD)
    with RawKafka(daemon.kafka_address) as admin:
        assert admin.login_scram("SCRAM-SHA-512", "admin", PASSWORD).error_code == 0
        time.sleep(2.5)
        assert admin.call(18, 3, client_software_name="t", client_software_version="1").error_code == 0


@pytest.mark.parametrize("listener", ["http", "kafka", "grpc"])
def test_a_socket_that_never_starts_tls_is_closed_at_the_handshake_timeout(
    secure_daemon: SecureFactory, listener: str
) -> None:
    """Before: asyncio's default of 60 s (HTTP, Kafka) and read_timeout_s (gRPC) held each such socket."""
    daemon = secure_daemon(tls=True, handshake_timeout_s=1)
    address = {
        "http": daemon.process.http_address,
        "kafka": daemon.kafka_address,
        "grpc": daemon.address,
    }[listener]
    with connect(address) as silent:
        took = wait_ended(silent, DEADLINE_S)
        assert took is not None and took < 8, f"{listener}: a socket that never sent a ClientHello stayed"
    with connect(address) as half:
        half.sendall(b"\x16\x03\x01\x00\xff")  # the start of a ClientHello, and no more
        assert wait_ended(half, DEADLINE_S) is not None, f"{listener}: a handshake stopped mid-way stayed"


def _announce(address: str, size: int) -> socket.socket:
    """A Kafka connection that announces a request of ``size`` bytes and sends nothing of it."""
    sock = connect(address)
    sock.sendall(struct.pack(">i", size))
    return sock


def _admitted_bytes(daemon: SecureDaemon) -> float:
    """``lk_admitted_bytes`` from /metrics (as the super user: the budget every listener shares)."""
    request = urllib.request.Request(
        f"{daemon.http_url}/metrics", headers={"Authorization": f"Bearer {daemon.admin_token}"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        text = answer.read().decode()
    (value,) = re.findall(r"^lk_admitted_bytes (\S+)$", text, re.MULTILINE)
    return float(value)


def test_kafka_sockets_that_never_log_in_hold_nothing_of_the_budget_produce_needs(
    secure_daemon: SecureFactory,
) -> None:
    """Before: each could announce up to 512 KiB from the shared budget; 112 of them held 56 MiB for 30 s
    and the super user's 10 KiB gRPC and HTTP produces were refused."""
    # The authentication deadline would end them all after a minute: this is about what they hold before.
    daemon = secure_daemon(
        broker={"max_admitted_bytes": 8 * MiB}, kafka_max_connections=64, authentication_timeout_s=60
    )
    large = [_announce(daemon.kafka_address, 512 * 1024) for _ in range(24)]  # 12 MiB if admitted
    small = [_announce(daemon.kafka_address, 4 * 1024) for _ in range(24)]  # within a SASL exchange's size
    try:
        assert wait_all_ended(large, 24, 5) == 24, "announcing 512 KiB before logging in was allowed"
        assert not any(ended(sock) for sock in small)  # read from their own budget, waiting for the rest
        assert _admitted_bytes(daemon) == 0
        metadata = (("authorization", f"Bearer {daemon.admin_token}"),)
        with grpc.insecure_channel(daemon.address) as channel:
            stub = pb_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]
            request = pb.ProduceRequest(topic="t", partition=0, values=[b"v" * 10_240])
            assert list(stub.Produce(request, metadata=metadata, timeout=10).offsets) == [0]  # no retry: at once
        body = json.dumps({"topic_partitions": [{"topic": "t", "records": ["x"]}]}).encode()
        produce = urllib.request.Request(
            f"{daemon.http_url}/produce",
            data=body,
            headers={"Authorization": f"Bearer {daemon.admin_token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(produce, timeout=10) as answer:
            assert answer.status == 200
    finally:
        for sock in large + small:
            sock.close()
