"""Auto-creation has a budget per caller, and the partition limit says its name (issue 28, finding 6).

50 Kafka Metadata requests naming 100 new topics each created 4,096 topics in 5.8 s and used
up ``max_partitions``; every later create then failed with INVALID_TOPIC_EXCEPTION (Kafka) or
INVALID_ARGUMENT (gRPC), which does not say that a limit was reached. Here a real daemon gets
the same storm: the storming caller is throttled (THROTTLING_QUOTA_EXCEEDED, RESOURCE_EXHAUSTED,
HTTP 429), another caller is not, and the limit is POLICY_VIOLATION / RESOURCE_EXHAUSTED / 409
with a message naming ``max_partitions`` on every surface.
"""

from __future__ import annotations

import time

import grpc
import pytest
from kio.schema.errors import ErrorCode

import lkstream
from lkstream import PartitionLimitError
from lkstream.errors import AutoCreateThrottledError
from lkstream.kafka.protocol import ApiKey
from lkstream.security.acl import AclEntry
from lkstream.wire._proto import messaging_pb2 as pb
from tests.integration.conftest import DaemonFactory
from tests.integration.http_support import Api
from tests.security.conftest import SecureFactory, secure_daemon
from tests.security.kafka_raw import RawKafka

__all__ = ["secure_daemon"]  # the fixture, for the storm test with principals

BURST = 20
RATE_PER_S = 2


def metadata(kafka: RawKafka, names: list[str]) -> dict[str, int]:
    """A Metadata v9 request that may auto-create ``names``: ``{name: error code}``."""
    answer = kafka.call(
        ApiKey.METADATA,
        9,
        topics=[{"name": name} for name in names],
        allow_auto_topic_creation=True,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    return {t.name: int(t.error_code) for t in answer.topics}


def login(daemon: object, user: str) -> RawKafka:
    kafka = RawKafka(daemon.kafka_address, client_id=user)  # type: ignore[attr-defined]
    answer = kafka.login_scram("SCRAM-SHA-256", user, f"{user}-password")
    assert answer.error_code == 0
    return kafka


def test_a_metadata_storm_is_throttled_per_principal_and_others_still_auto_create(
    secure_daemon: SecureFactory,
) -> None:
    daemon = secure_daemon(broker={"auto_create_partitions_burst": BURST, "auto_create_partitions_per_s": RATE_PER_S})
    for user in ("storm", "calm"):
        daemon.set_password(user, f"{user}-password")
        daemon.grant(AclEntry.build(user, "all", "topic", f"{user}.", pattern="prefix"))
    started = time.monotonic()
    with login(daemon, "storm") as storm:
        answers: dict[str, int] = {}
        for request in range(50):  # the storm: 50 requests of 100 new names
            answers.update(metadata(storm, [f"storm.{request}.{i}" for i in range(100)]))
    elapsed = time.monotonic() - started
    created = [name for name, code in answers.items() if code == 0]
    throttled = [name for name, code in answers.items() if code == ErrorCode.throttling_quota_exceeded]
    assert len(created) + len(throttled) == 5000, {c for c in answers.values()}
    assert BURST <= len(created) <= BURST + RATE_PER_S * (elapsed + 1)
    with lkstream.connect(daemon.address, token=daemon.admin_token) as admin:
        assert len(admin.list_topics()) == len(created)
    with login(daemon, "calm") as calm:  # another principal has a budget of its own
        assert metadata(calm, ["calm.a", "calm.b"]) == {"calm.a": 0, "calm.b": 0}


def test_grpc_and_http_auto_creates_are_throttled_with_retry_advice(start_daemon: DaemonFactory) -> None:
    daemon = start_daemon(auto_create_partitions_burst=2, auto_create_partitions_per_s=1)
    with grpc.insecure_channel(daemon.address) as channel:
        produce = channel.unary_unary("/lkstream.Broker/Produce", response_deserializer=pb.ProduceResponse.FromString)
        for name in ("g.a", "g.b"):
            produce(pb.ProduceRequest(topic=name, values=[b"v"]).SerializeToString(), timeout=10)
        with pytest.raises(grpc.RpcError) as refused:
            produce(pb.ProduceRequest(topic="g.c", values=[b"v"]).SerializeToString(), timeout=10)
        assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "auto_create_partitions_per_s=1" in refused.value.details()
    with lkstream.connect(daemon.address, retries=0) as client:
        with pytest.raises(AutoCreateThrottledError) as caught:
            client.produce_many_sync("g.d", [(None, b"v")])
        assert caught.value.retry_after_ms > 0
        assert "g.d" not in client.list_topics()
    answer = Api(daemon.http_address).post(
        "/produce", {"topic_partitions": [{"topic": "h.a", "records": [{"value": "v"}]}]}
    )
    assert answer.status == 429, answer.body
    assert answer.error_code == "auto_create_throttled"
    assert int(answer.headers["Retry-After"]) >= 1
    time.sleep(2.5)  # the budget refills
    with lkstream.connect(daemon.address, retries=0) as client:
        assert client.produce_many_sync("g.d", [(None, b"v")]) == [(0, 0)]


def test_the_partition_limit_is_a_clear_refusal_on_every_surface(start_daemon: DaemonFactory) -> None:
    daemon = start_daemon(max_partitions=3, partitions=1)
    with lkstream.connect(daemon.address) as client:
        client.create_topic("full", 3)
        with pytest.raises(PartitionLimitError, match=r"partition limit reached.*max_partitions is 3"):
            client.create_topic("more", 1)
        with pytest.raises(PartitionLimitError, match="max_partitions"):
            client.produce_many_sync("auto.more", [(None, b"v")])
    with grpc.insecure_channel(daemon.address) as channel:
        admin = channel.unary_unary("/lkstream.Broker/Admin", response_deserializer=pb.AdminResponse.FromString)
        request = pb.AdminRequest(create_topic=pb.CreateTopic(name="more", partitions=1))
        with pytest.raises(grpc.RpcError) as refused:
            admin(request.SerializeToString(), timeout=10)
        assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    answer = Api(daemon.http_address).post("/topics", {"name": "more", "partitions": 1})
    assert answer.status == 409, answer.body
    assert answer.error_code == "partition_limit" and "max_partitions" in answer.body["error"]["message"]
    with RawKafka(daemon.kafka_address) as kafka:
        assert metadata(kafka, ["auto.kafka"]) == {"auto.kafka": ErrorCode.policy_violation}
        created = kafka.call(
            ApiKey.CREATE_TOPICS,
            4,
            topics=[{"name": "more", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
            timeout=10_000,
            validate_only=False,
        )
        assert created.topics[0].error_code == ErrorCode.policy_violation
        assert "max_partitions" in created.topics[0].error_message
