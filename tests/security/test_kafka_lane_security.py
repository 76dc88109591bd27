"""The Kafka lane of a secured daemon: TLS as the gRPC channel has it, the token with SASL OAUTHBEARER.

Which path a call took is read from the outside (the client's connections to the listener's
port in /proc/net/tcp, the daemon's per-surface counters) and the records read back; what a
refused call raises is compared with the same call through gRPC alone (``kafka_lane=False``).
"""

from __future__ import annotations

import asyncio
import time

import pytest

import lkstream
from lkstream.errors import AuthenticationError, AuthorizationError
from lkstream.security.acl import AclEntry
from lkstream.security.tls import ClientTls
from lkstream.wire._proto import messaging_pb2 as pb
from tests.integration.raw_sockets import established_connections
from tests.security.conftest import SecureDaemon, SecureFactory

USER = "ingest"
TOPIC = "ticks"
DEADLINE_S = 10.0


def grant_topic(daemon: SecureDaemon, user: str, *operations: str) -> None:
    daemon.grant(*(AclEntry.build(user, operation, "topic", TOPIC) for operation in operations))


def client_tls(daemon: SecureDaemon) -> ClientTls | None:
    return None if daemon.pki is None else ClientTls(str(daemon.pki.ca))


@pytest.mark.parametrize("tls", [False, True], ids=["sasl-plaintext-loopback", "sasl-ssl"])
def test_a_client_with_a_token_produces_and_fetches_through_the_secured_lane(
    secure_daemon: SecureFactory, tls: bool
) -> None:
    daemon = secure_daemon(tls=tls)
    with lkstream.connect(daemon.address, token=daemon.admin_token, tls=client_tls(daemon)) as admin:
        admin.create_topic(TOPIC, 2)
    grant_topic(daemon, USER, "write", "read")
    token = daemon.token(USER)
    with lkstream.connect(daemon.address, token=token, tls=client_tls(daemon)) as broker:
        assert broker.kafka_lane is not None
        before = established_connections(broker.kafka_lane)
        sent = broker.produce_many_sync(TOPIC, [(f"k{i % 5}", f"v{i}".encode()) for i in range(100)])
        assert established_connections(broker.kafka_lane) > before  # the call went to the listener

        async def produce_async() -> list[tuple[int, int]]:
            return await broker.produce_many(TOPIC, [(f"k{i % 5}", f"a{i}".encode()) for i in range(100)])

        sent_async = asyncio.run(produce_async())
        # The event loop's own connection, authenticated too (left open with its closed loop until the next).
        assert established_connections(broker.kafka_lane) == before + 2
        with lkstream.connect(
            daemon.address, token=daemon.admin_token, tls=client_tls(daemon), kafka_lane=False
        ) as reference:
            for results, prefix in ((sent, "v"), (sent_async, "a")):
                for index, (pid, offset) in enumerate(results):
                    (record,) = reference.read_from(TOPIC, pid, offset, max_bytes=1024)[:1]
                    assert record.value == f"{prefix}{index}".encode()
            for pid in range(2):
                # The lane's fetch answers what gRPC answers, byte for byte.
                assert broker.fetch(TOPIC, pid, 0) == reference.fetch(TOPIC, pid, 0)


def test_a_missing_permission_raises_what_grpc_raises(secure_daemon: SecureFactory) -> None:
    daemon = secure_daemon()
    with lkstream.connect(daemon.address, token=daemon.admin_token) as admin:
        admin.create_topic(TOPIC, 1)
    grant_topic(daemon, USER, "read")  # no write
    token = daemon.token(USER)
    raised = []
    for lane in (True, False):
        with lkstream.connect(daemon.address, token=token, kafka_lane=lane) as broker:
            assert (broker.kafka_lane is not None) == lane
            with pytest.raises(AuthorizationError) as refused:
                broker.produce_many_sync(TOPIC, [(None, b"x")])
            raised.append(str(refused.value))
    assert raised[0] == raised[1]
    with lkstream.connect(daemon.address, token=daemon.admin_token) as admin:
        assert admin.fetch(TOPIC, 0, 0).high_watermark == 0


def test_a_revoked_token_stops_the_lane_as_it_stops_grpc(secure_daemon: SecureFactory) -> None:
    daemon = secure_daemon()  # the users file is read again on every call
    with lkstream.connect(daemon.address, token=daemon.admin_token) as admin:
        admin.create_topic(TOPIC, 1)
    grant_topic(daemon, USER, "write")
    token = daemon.token(USER)
    with lkstream.connect(daemon.address, token=token) as broker:
        assert broker.produce_many_sync(TOPIC, [(None, b"before")]) == [(0, 0)]
        assert established_connections(broker.kafka_lane or "") == 1  # the lane's connection, open
        daemon.remove_token(USER, token)
        with pytest.raises(AuthenticationError):
            broker.produce_many_sync(TOPIC, [(None, b"after")])
        deadline = time.monotonic() + DEADLINE_S
        while established_connections(broker.kafka_lane or "") and time.monotonic() < deadline:
            time.sleep(0.05)  # the listener closed the connection the token authenticated
        assert established_connections(broker.kafka_lane or "") == 0
    with lkstream.connect(daemon.address, token=daemon.admin_token) as admin:
        assert admin.fetch(TOPIC, 0, 0).high_watermark == 1  # nothing after the revocation


def test_the_lane_is_used_only_as_securely_as_the_grpc_channel(secure_daemon: SecureFactory) -> None:
    """Every combination of the client's TLS and token with what a listener wants (Handshake's fields)."""
    open_daemon, plain, secured = secure_daemon(auth=False), secure_daemon(), secure_daemon(tls=True)
    loopback, remote = "127.0.0.1:9092", "10.1.2.3:9092"
    with (
        lkstream.connect(open_daemon.address) as anonymous,
        lkstream.connect(plain.address, token=plain.admin_token) as with_token,
        lkstream.connect(secured.address, token=secured.admin_token, tls=client_tls(secured)) as over_tls,
    ):
        cases = [
            # client, listener address, listener TLS, listener SASL -> (TLS used, token sent), None: no lane
            (anonymous, loopback, False, False, (False, None)),
            (anonymous, loopback, False, True, None),  # SASL wanted, no token to send
            (anonymous, loopback, True, False, None),  # TLS wanted, the client has none
            (with_token, loopback, False, False, (False, None)),  # auth off: the token is not needed
            (with_token, loopback, False, True, (False, plain.admin_token)),
            (with_token, remote, False, True, None),  # a token in plaintext beyond this host
            (over_tls, loopback, False, False, None),  # a TLS client never goes plaintext
            (over_tls, remote, True, True, (True, secured.admin_token)),
        ]
        for client, address, tls, sasl, expected in cases:
            offer = pb.HandshakeResponse(kafka_lane_address=address, kafka_lane_tls=tls, kafka_lane_sasl=sasl)
            security = client._lane_security(address, offer)
            got = None if security is None else (security.tls is not None, security.token)
            assert got == expected, (address, tls, sasl)
        assert anonymous.kafka_lane is not None and with_token.kafka_lane is not None
        assert over_tls.kafka_lane == secured.kafka_address  # the advertised address, named in the certificate
