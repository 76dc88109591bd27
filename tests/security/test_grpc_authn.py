"""Authentication and TLS on a real daemon: tokens, revocation without restart, plaintext refused, mTLS."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

import lkstream
from lkstream import AuthenticationError, AuthorizationError, BrokerUnavailableError, ClientTls, Consumer
from lkstream.errors import InvalidArgumentError
from lkstream.security.acl import AclEntry
from lkstream.wire._proto import messaging_pb2 as pb
from tests.integration.conftest import REPO
from tests.integration.raw_sockets import established_connections
from tests.security.certs import make_pki
from tests.security.conftest import SecureFactory


def test_connect_without_or_with_a_bad_token_fails_at_once(secure_daemon: SecureFactory) -> None:
    daemon = secure_daemon()
    with pytest.raises(AuthenticationError, match="authentication required"):
        lkstream.connect(daemon.address, retries=0)
    with pytest.raises(AuthenticationError, match="unknown or revoked"):
        lkstream.connect(daemon.address, token="lkst_0badc0de_" + "A" * 43, retries=0)


def test_health_stays_open_and_reflection_needs_a_principal(secure_daemon: SecureFactory) -> None:
    daemon = secure_daemon()
    with grpc.insecure_channel(daemon.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        answer = health.Check(health_pb2.HealthCheckRequest(service="lkstream.Broker"), timeout=5)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        ask = reflection_pb2.ServerReflectionRequest(list_services="")
        with pytest.raises(grpc.RpcError) as refused:
            list(reflection.ServerReflectionInfo(iter([ask]), timeout=5))
        assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
        metadata = (("authorization", f"Bearer {daemon.admin_token}"),)
        answers = list(reflection.ServerReflectionInfo(iter([ask]), timeout=5, metadata=metadata))
        assert "lkstream.Broker" in {s.name for s in answers[0].list_services_response.service}


def test_a_consumer_group_works_end_to_end_with_exactly_its_acls(secure_daemon: SecureFactory) -> None:
    daemon = secure_daemon()
    with lkstream.connect(daemon.address, token=daemon.admin_token) as admin:
        admin.create_topic("ticks", 2)
    producer_token, consumer_token = daemon.token("producer"), daemon.token("consumer")
    daemon.grant(
        AclEntry.build("producer", "write", "topic", "ticks"),
        AclEntry.build("consumer", "read", "topic", "ticks"),
        AclEntry.build("consumer", "read", "group", "readers"),
    )
    with lkstream.connect(daemon.address, token=producer_token) as producer:
        producer.produce_many_sync("ticks", [(f"k{i}", f"v{i}".encode()) for i in range(20)])
        with pytest.raises(AuthorizationError, match="'producer' is not allowed to read topic 'ticks'"):
            producer.fetch("ticks", 0, 0)
        assert producer.list_topics() == ["ticks"]  # write implies describe
    with lkstream.connect(daemon.address, token=consumer_token) as remote:
        consumer = Consumer(remote, group="readers", auto_commit=False)
        consumer.subscribe("ticks")
        seen: list[bytes] = []
        while len(seen) < 20:
            records = consumer.poll(timeout=10)
            assert records, f"stalled after {len(seen)} records"
            seen.extend(r.value or b"" for r in records)
        consumer.commit()
        consumer.close()
        assert sorted(seen) == sorted(f"v{i}".encode() for i in range(20))
        with pytest.raises(AuthorizationError, match="write topic 'ticks'"):
            remote.produce_many_sync("ticks", [(None, b"x")])
        with pytest.raises(AuthorizationError, match="admin the cluster"):
            remote.reset_offsets("readers", "ticks", to="earliest")


def test_revocations_apply_to_a_running_daemon_without_restart(secure_daemon: SecureFactory) -> None:
    daemon = secure_daemon()
    token = daemon.token("svc")
    daemon.grant(
        AclEntry.build("svc", "all", "topic", "jobs.", pattern="prefix"),
        AclEntry.build("svc", "create", "cluster", "cluster"),
    )
    with lkstream.connect(daemon.address, token=token) as client:
        client.create_topic("jobs.a", 1)
        client.produce_many_sync("jobs.a", [(None, b"1")])
        daemon.set_acls()  # every grant gone
        with pytest.raises(AuthorizationError):
            client.produce_many_sync("jobs.a", [(None, b"2")])
        daemon.remove_token("svc", token)
        with pytest.raises(AuthenticationError, match="unknown or revoked"):
            client.list_topics()


def test_a_revoked_token_stops_working_on_the_clients_open_streams(secure_daemon: SecureFactory) -> None:
    daemon = secure_daemon()
    token = daemon.token("svc")
    daemon.grant(
        AclEntry.build("svc", "all", "topic", "live.", pattern="prefix"),
        AclEntry.build("svc", "create", "cluster", "cluster"),
    )
    with lkstream.connect(daemon.address, token=token) as client:
        client.create_topic("live.a", 1)
        assert client.produce_many_sync("live.a", [(None, b"1")]) == [(0, 0)]  # opens the ProduceStream
        assert client.fetch("live.a", 0, 0).high_watermark == 1  # opens the FetchStream
        daemon.remove_token("svc", token)
        with pytest.raises(AuthenticationError, match="unknown or revoked"):
            client.produce_many_sync("live.a", [(None, b"2")])  # the same streams, still open
        with pytest.raises(AuthenticationError, match="unknown or revoked"):
            client.fetch("live.a", 0, 0)
    with lkstream.connect(daemon.address, token=daemon.admin_token) as admin:
        assert admin.bounds("live.a", 0) == (0, 1), "a produce with a revoked token was appended"


def test_a_revoked_token_is_refused_when_the_client_reopens_a_stream_the_daemon_ended(
    secure_daemon: SecureFactory,
) -> None:
    daemon = secure_daemon(grpc_idle_timeout_s=0.5)
    token = daemon.token("svc")
    daemon.grant(AclEntry.build("svc", "all", "topic", "live.", pattern="prefix"))
    with lkstream.connect(daemon.address, token=daemon.admin_token) as admin:
        admin.create_topic("live.b", 1)
    with lkstream.connect(daemon.address, token=token) as client:
        assert client.produce_many_sync("live.b", [(None, b"1")]) == [(0, 0)]
        daemon.remove_token("svc", token)
        deadline = time.monotonic() + 20
        while established_connections(daemon.address) > 0:  # the idle stream ended, then its connection
            assert time.monotonic() < deadline, "the client's idle stream was not ended"
            time.sleep(0.05)
        started = time.monotonic()
        with pytest.raises(AuthenticationError, match="unknown or revoked"):
            client.produce_many_sync("live.b", [(None, b"2")])  # a new stream, refused when it opens
        assert time.monotonic() - started < 10, "the refusal was retried as if the daemon were unavailable"


async def _never_sent() -> AsyncIterator[bytes]:
    """A call's request messages that never come (the client opened the call and stopped)."""
    await asyncio.Event().wait()
    yield b""  # pragma: no cover - never reached


def test_unauthenticated_calls_are_refused_before_they_can_hold_the_admission_budget(
    secure_daemon: SecureFactory,
) -> None:
    # The smallest budget the daemon takes: one silent Produce's reserved estimate (1 MiB) would fill it.
    daemon = secure_daemon(broker={"max_admitted_bytes": 1024 * 1024}, read_timeout_s=2)
    token = daemon.token("svc")
    daemon.grant(AclEntry.build("svc", "all", "topic", "held.", pattern="prefix"))
    with lkstream.connect(daemon.address, token=daemon.admin_token) as admin:
        admin.create_topic("held.a", 1)

    async def scenario() -> list[BaseException | None]:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            produce = channel.stream_unary(
                "/lkstream.Broker/Produce", response_deserializer=pb.ProduceResponse.FromString
            )
            silent = [asyncio.ensure_future(produce(_never_sent(), timeout=30)) for _ in range(8)]
            await asyncio.sleep(0.5)  # the calls reached the daemon, none sent its message
            with lkstream.connect(daemon.address, token=token, retries=1) as client:
                value = b"v" * 200_000  # record data: it needs room beside whatever the silent calls hold
                assert await client.produce_many("held.a", [(None, value)]) == [(0, 0)]
            done, pending = await asyncio.wait(silent, timeout=20)
            for call in pending:
                call.cancel()
            return [call.exception() for call in done] + [None] * len(pending)

    refusals = asyncio.run(scenario())
    codes = [error.code() if isinstance(error, grpc.aio.AioRpcError) else error for error in refusals]
    assert codes == [grpc.StatusCode.UNAUTHENTICATED] * 8


def test_tls_daemon_serves_a_client_trusting_its_ca_and_refuses_plaintext(secure_daemon: SecureFactory) -> None:
    daemon = secure_daemon(tls=True)
    assert daemon.pki is not None
    with lkstream.connect(daemon.address, token=daemon.admin_token, tls=str(daemon.pki.ca)) as client:
        client.create_topic("secure", 1)
        client.produce_many_sync("secure", [(None, b"over tls")])
        assert client.read_from("secure", 0, 0)[0].value == b"over tls"
    # A plaintext client never completes a handshake: it is refused before any RPC runs.
    with pytest.raises(BrokerUnavailableError, match="does the daemon use TLS"):
        lkstream.connect(daemon.address, connect_timeout=3, retries=0)
    channel = grpc.insecure_channel(daemon.address)
    try:
        with pytest.raises(grpc.RpcError) as refused:
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=3)
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
    finally:
        channel.close()


def test_tls_client_refuses_a_server_it_does_not_trust(secure_daemon: SecureFactory, tmp_path: Path) -> None:
    daemon = secure_daemon(tls=True)
    stranger = make_pki(tmp_path / "other", name="other")
    with pytest.raises(BrokerUnavailableError):
        lkstream.connect(daemon.address, token=daemon.admin_token, tls=str(stranger.ca), connect_timeout=3, retries=0)


def test_mutual_tls_requires_a_client_certificate_from_the_ca(secure_daemon: SecureFactory, tmp_path: Path) -> None:
    daemon = secure_daemon(tls=True, client_ca=True)
    pki = daemon.pki
    assert pki is not None
    with pytest.raises(BrokerUnavailableError):
        lkstream.connect(daemon.address, token=daemon.admin_token, tls=str(pki.ca), connect_timeout=3, retries=0)
    stranger = make_pki(tmp_path / "other", name="other")
    wrong = ClientTls(ca_file=str(pki.ca), cert_file=str(stranger.client_cert), key_file=str(stranger.client_key))
    with pytest.raises(BrokerUnavailableError):
        lkstream.connect(daemon.address, token=daemon.admin_token, tls=wrong, connect_timeout=3, retries=0)
    right = ClientTls(ca_file=str(pki.ca), cert_file=str(pki.client_cert), key_file=str(pki.client_key))
    with lkstream.connect(daemon.address, token=daemon.admin_token, tls=right) as client:
        assert client.list_topics() == []


def test_client_refuses_to_send_a_token_in_plaintext_beyond_loopback() -> None:
    with pytest.raises(InvalidArgumentError, match="plaintext"):
        lkstream.connect("192.0.2.1:9090", token="lkst_x")


def run_server(tmp_path: Path, server: dict[str, object]) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "exposed.yml"
    config.write_text(yaml.safe_dump({"persist_dir": str(tmp_path / "data"), "server": server}))
    return subprocess.run(
        [sys.executable, "-m", "lkstream.grpc_server", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )


@pytest.mark.parametrize(
    ("server", "missing"),
    [
        (
            {"grpc_host": "0.0.0.0", "http_port": 0},
            "server.tls_cert_file and server.tls_key_file and server.auth: true",
        ),
        ({"http_host": "::", "grpc_port": 0, "auth": True}, "server.tls_cert_file and server.tls_key_file"),
    ],
)
def test_start_refuses_a_non_loopback_listener_without_tls_and_auth(
    tmp_path: Path, server: dict[str, object], missing: str
) -> None:
    done = run_server(tmp_path, server)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "refusing to listen beyond this host" in lines[0] and missing in lines[0], done.stderr
    assert not (tmp_path / "data").exists()  # refused before anything started


def test_start_refuses_a_key_that_does_not_match_the_certificate(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    server = {
        "grpc_port": 0,
        "http_port": 0,
        "tls_cert_file": str(pki.server_cert),
        "tls_key_file": str(pki.client_key),
    }
    done = run_server(tmp_path, server)
    assert done.returncode == 2 and "server.tls_cert_file / server.tls_key_file" in done.stderr, done.stderr


def test_start_refuses_a_users_file_that_does_not_parse(tmp_path: Path) -> None:
    users = tmp_path / "users.json"
    users.write_text("{not json")
    done = run_server(tmp_path, {"grpc_port": 0, "http_port": 0, "auth": True, "users_file": str(users)})
    assert done.returncode == 2 and str(users) in done.stderr, done.stderr
