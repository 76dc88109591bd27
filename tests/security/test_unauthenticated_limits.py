"""What a caller that never authenticates may hold (issue 28, findings 2 and 3).

Each test starts a real daemon with auth on (tests/security/conftest.py) and holds its sockets
the way an attacker would: raw TCP, ApiVersions every half second, TLS never started.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import threading
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


class Flood:
    """Sockets that never authenticate (never start TLS, never log in), from ``sources``, ``per_source`` on
    each of ``addresses``, reconnected whenever the daemon closes one, until :meth:`stop`."""

    def __init__(self, sources: list[str], addresses: list[str], per_source: int) -> None:
        self.targets = [(source, address) for source in sources for address in addresses]
        self.per_source = per_source
        self.opened = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._hold, args=t, daemon=True) for t in self.targets]

    def __enter__(self) -> Flood:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(10)

    def _hold(self, source: str, address: str) -> None:
        host, port = address.rsplit(":", 1)
        held: list[socket.socket] = []
        try:
            while not self._stop.is_set():
                held = [sock for sock in held if not ended(sock) or sock.close()]
                while len(held) < self.per_source:
                    sock = socket.socket()
                    sock.bind((source, 0))
                    sock.setblocking(False)
                    sock.connect_ex((host, int(port)))
                    held.append(sock)
                    self.opened += 1
                time.sleep(0.05)
        finally:
            for sock in held:
                sock.close()


def test_a_flood_of_unauthenticated_sockets_on_every_port_leaves_clients_and_probes_served(
    secure_daemon: SecureFactory,
) -> None:
    """Issue 28, "How it is checked": sockets that never authenticate on every port (Kafka, gRPC, HTTPS,
    admin) from two addresses, 20 per port each, against caps of 32; meanwhile an authenticated gRPC
    client, an authenticated Kafka producer and the admin listener's health probe are all served."""
    import ssl

    from confluent_kafka import Producer

    import lkstream

    daemon = secure_daemon(
        tls=True,
        admin_port=0,
        grpc_max_connections=32,
        http_max_connections=32,
        kafka_max_connections=32,
        max_connections_per_address=12,
        handshake_timeout_s=2,
        authentication_timeout_s=2,
    )
    assert daemon.pki is not None
    ca = str(daemon.pki.ca)
    daemon.set_password("admin", PASSWORD)
    context = ssl.create_default_context(cafile=ca)
    admin_address = daemon.process.admin_address
    ports = [daemon.kafka_address, daemon.address, daemon.process.http_address, admin_address]
    producer = Producer(
        {
            "bootstrap.servers": daemon.kafka_address,
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "admin",
            "sasl.password": PASSWORD,
            "ssl.ca.location": ca,
            "ssl.endpoint.identification.algorithm": "none",
        }
    )
    delivered: list[object] = []
    with lkstream.connect(daemon.address, token=daemon.admin_token, tls=ca) as client:
        client.create_topic("served", 1)
        producer.produce("served", b"before", on_delivery=lambda err, _: delivered.append(err))
        assert producer.flush(30) == 0 and delivered == [None]
        slowest = 0.0
        failures: list[str] = []
        with Flood(["127.0.0.2", "127.0.0.3"], ports, per_source=20) as flood:
            time.sleep(3)  # the flood holds what the limits let it hold
            deadline = time.monotonic() + 12
            n = 0
            while time.monotonic() < deadline:
                started = time.monotonic()
                try:
                    url = f"https://localhost:{admin_address.rsplit(':', 1)[1]}/healthz"
                    with urllib.request.urlopen(url, context=context, timeout=5) as probe:
                        assert probe.status == 200
                    client.produce_many_sync("served", [(None, f"grpc-{n}".encode())])
                    producer.produce("served", f"kafka-{n}".encode(), on_delivery=lambda e, _: delivered.append(e))
                    assert producer.flush(10) == 0
                except Exception as exc:  # every failure is collected and reported
                    failures.append(f"{type(exc).__name__}: {exc}"[:200])
                slowest = max(slowest, time.monotonic() - started)
                n += 1
                time.sleep(0.3)
        assert flood.opened > 4 * 40, "the flood did not keep reconnecting"
        assert not failures, failures
        assert all(err is None for err in delivered) and len(delivered) == n + 1
        assert slowest < 5.0, f"a round of probe, gRPC produce and Kafka produce took {slowest:.1f} s"
        assert client.bounds("served", 0)[1] == 2 * n + 1
