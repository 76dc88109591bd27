"""Every Kafka API the listener serves is refused without the right permission and allowed with it.

The cases are checked against the listener's handler table: an API without an entry in
:data:`~lkstream.kafka.security.API_ACCESS` and a case here fails
:func:`test_every_kafka_api_has_a_rule_and_cases`. Against a real daemon with TLS and
``auth: true`` (SASL_SSL), over one authenticated connection, each case is refused with
Kafka's error code (TOPIC_, GROUP_ or CLUSTER_AUTHORIZATION_FAILED, or what Kafka answers
instead) with each needed entry left out in turn, and admitted (no authorization error)
with all of them. The APIs of the SASL handshake need nothing and work before
authentication; nothing else does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

import lkstream
from lkstream.kafka.handlers import HANDLERS
from lkstream.kafka.protocol import ApiKey
from lkstream.kafka.security import API_ACCESS
from lkstream.security.acl import AclEntry
from lkstream.security.tls import ClientTls
from tests.integration.conftest import REPO
from tests.security.conftest import SecureDaemon, SecureFactory
from tests.security.kafka_raw import RawKafka

USER, PASSWORD = "alice", "alice-secret"
ORDERS = "orders"
TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED = (
    ErrorCode.topic_authorization_failed,
    ErrorCode.group_authorization_failed,
    ErrorCode.cluster_authorization_failed,
)
AUTHORIZATION_CODES = frozenset({TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED})


def acl(op: str, kind: str, name: str) -> AclEntry:
    return AclEntry.build(USER, op, kind, name)


@dataclass
class Case:
    api: int
    version: int
    values: dict[str, Any]
    #: Each needed entry, and the error code the request gets without it.
    needs: list[tuple[AclEntry, int]]
    label: str = ""
    #: A listing filtered by describe: `listed` appears only with the `shows` entry.
    listed: str | None = None
    shows: AclEntry | None = None


def batch() -> bytes:
    from lkstream.format.codec import encode_batch

    return bytes(encode_batch([(b"k", b"v")]))


def one_partition(topic: str, **partition: Any) -> list[dict[str, Any]]:
    return [{"name": topic, "partitions": [{"partition_index": 0, **partition}]}]


JOIN = {
    "session_timeout": 6000,
    "rebalance_timeout": 6000,
    "member_id": "",
    "protocol_type": "consumer",
    "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x00"}],
}

CASES: dict[int, list[Case]] = {
    ApiKey.PRODUCE: [
        Case(
            ApiKey.PRODUCE,
            8,
            {"acks": 1, "timeout": 5000, "topic_data": [{"name": ORDERS, "partition_data": [{"index": 0}]}]},
            [(acl("write", "topic", ORDERS), TOPIC_DENIED)],
            label="existing topic",
        ),
        Case(
            ApiKey.PRODUCE,
            8,
            {"acks": 1, "timeout": 5000, "topic_data": [{"name": "auto.kafka", "partition_data": [{"index": 0}]}]},
            [
                (acl("write", "topic", "auto.kafka"), TOPIC_DENIED),
                (acl("create", "topic", "auto.kafka"), ErrorCode.unknown_topic_or_partition),
            ],
            label="auto-created topic",
        ),
    ],
    ApiKey.FETCH: [
        Case(
            ApiKey.FETCH,
            11,
            {
                "replica_id": -1,
                "max_wait": 0,
                "min_bytes": 0,
                "max_bytes": 1 << 20,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": ORDERS,
                        "partitions": [
                            {
                                "partition": 0,
                                "fetch_offset": 0,
                                "current_leader_epoch": -1,
                                "log_start_offset": -1,
                                "partition_max_bytes": 1 << 20,
                            }
                        ],
                    }
                ],
            },
            [(acl("read", "topic", ORDERS), TOPIC_DENIED)],
        )
    ],
    ApiKey.LIST_OFFSETS: [
        Case(
            ApiKey.LIST_OFFSETS,
            7,
            {"replica_id": -1, "topics": one_partition(ORDERS, timestamp=-1, current_leader_epoch=-1)},
            [(acl("describe", "topic", ORDERS), TOPIC_DENIED)],
        )
    ],
    ApiKey.METADATA: [
        Case(
            ApiKey.METADATA,
            9,
            {"topics": [{"name": ORDERS}], "allow_auto_topic_creation": False},
            [(acl("describe", "topic", ORDERS), TOPIC_DENIED)],
            label="named topic",
        ),
        Case(
            ApiKey.METADATA,
            9,
            {"topics": [{"name": "auto.meta"}], "allow_auto_topic_creation": True},
            [
                (acl("describe", "topic", "auto.meta"), TOPIC_DENIED),
                (acl("create", "topic", "auto.meta"), ErrorCode.unknown_topic_or_partition),
            ],
            label="auto-creating a topic",
        ),
        Case(
            ApiKey.METADATA,
            9,
            {"topics": None, "allow_auto_topic_creation": False},
            [],
            label="all topics",
            listed=ORDERS,
            shows=acl("describe", "topic", ORDERS),
        ),
    ],
    ApiKey.OFFSET_COMMIT: [
        Case(
            ApiKey.OFFSET_COMMIT,
            8,
            {
                "group_id": "g2",
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "topics": one_partition(ORDERS, committed_offset=1, committed_leader_epoch=-1),
            },
            [(acl("read", "group", "g2"), GROUP_DENIED), (acl("read", "topic", ORDERS), TOPIC_DENIED)],
            label="standalone commit",
        ),
        Case(
            ApiKey.OFFSET_COMMIT,
            8,
            {
                "group_id": "g1",
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "topics": one_partition(ORDERS, committed_offset=0, committed_leader_epoch=-1),
            },
            [
                (acl("read", "group", "g1"), GROUP_DENIED),
                (acl("read", "topic", ORDERS), TOPIC_DENIED),
                (acl("admin", "cluster", "cluster"), CLUSTER_DENIED),
            ],
            label="standalone commit moving an offset back (a reset)",
        ),
    ],
    ApiKey.OFFSET_FETCH: [
        Case(
            ApiKey.OFFSET_FETCH,
            7,
            {"group_id": "g1", "topics": [{"name": ORDERS, "partition_indexes": [0]}]},
            [(acl("describe", "group", "g1"), GROUP_DENIED), (acl("describe", "topic", ORDERS), TOPIC_DENIED)],
        ),
        Case(
            ApiKey.OFFSET_FETCH,
            7,
            {"group_id": "g1", "topics": None},
            [(acl("describe", "group", "g1"), GROUP_DENIED)],
            label="all topics",
            listed=ORDERS,
            shows=acl("describe", "topic", ORDERS),
        ),
    ],
    ApiKey.FIND_COORDINATOR: [
        Case(ApiKey.FIND_COORDINATOR, 3, {"key": "g1", "key_type": 0}, [(acl("describe", "group", "g1"), GROUP_DENIED)])
    ],
    ApiKey.JOIN_GROUP: [
        Case(ApiKey.JOIN_GROUP, 7, {"group_id": "g3", **JOIN}, [(acl("read", "group", "g3"), GROUP_DENIED)])
    ],
    ApiKey.SYNC_GROUP: [
        Case(
            ApiKey.SYNC_GROUP,
            5,
            {"group_id": "g3", "generation_id": 1, "member_id": "m"},
            [(acl("read", "group", "g3"), GROUP_DENIED)],
        )
    ],
    ApiKey.HEARTBEAT: [
        Case(
            ApiKey.HEARTBEAT,
            4,
            {"group_id": "g3", "generation_id": 1, "member_id": "m"},
            [(acl("read", "group", "g3"), GROUP_DENIED)],
        )
    ],
    ApiKey.LEAVE_GROUP: [
        Case(
            ApiKey.LEAVE_GROUP,
            4,
            {"group_id": "g3", "members": [{"member_id": "m"}]},
            [(acl("read", "group", "g3"), GROUP_DENIED)],
        )
    ],
    ApiKey.DESCRIBE_GROUPS: [
        Case(ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["g1"]}, [(acl("describe", "group", "g1"), GROUP_DENIED)])
    ],
    ApiKey.LIST_GROUPS: [
        Case(ApiKey.LIST_GROUPS, 4, {"states_filter": []}, [], listed="g1", shows=acl("describe", "group", "g1"))
    ],
    ApiKey.DELETE_GROUPS: [
        Case(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["g4"]}, [(acl("delete", "group", "g4"), GROUP_DENIED)])
    ],
    ApiKey.CREATE_TOPICS: [
        Case(
            ApiKey.CREATE_TOPICS,
            6,
            {"topics": [{"name": "fresh", "num_partitions": 1, "replication_factor": -1}], "timeout": 5000},
            [(acl("create", "topic", "fresh"), TOPIC_DENIED)],
        )
    ],
    ApiKey.DELETE_TOPICS: [
        Case(
            ApiKey.DELETE_TOPICS,
            5,
            {"topic_names": ["doomed"], "timeout": 5000},
            [(acl("delete", "topic", "doomed"), TOPIC_DENIED)],
        )
    ],
    ApiKey.DELETE_RECORDS: [
        Case(
            ApiKey.DELETE_RECORDS,
            2,
            {"topics": [{"name": ORDERS, "partitions": [{"partition_index": 0, "offset": 0}]}], "timeout": 5000},
            [(acl("delete", "topic", ORDERS), TOPIC_DENIED)],
        )
    ],
    ApiKey.CREATE_PARTITIONS: [
        Case(
            ApiKey.CREATE_PARTITIONS,
            3,
            {"topics": [{"name": "grow", "count": 2}], "timeout": 5000},
            [(acl("create", "topic", "grow"), TOPIC_DENIED)],
        )
    ],
    ApiKey.INIT_PRODUCER_ID: [
        Case(
            ApiKey.INIT_PRODUCER_ID,
            4,
            {"transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1},
            [(acl("write", "topic", "any.topic"), CLUSTER_DENIED)],
        )
    ],
    ApiKey.DESCRIBE_CONFIGS: [
        Case(
            ApiKey.DESCRIBE_CONFIGS,
            4,
            {"resources": [{"resource_type": 2, "resource_name": ORDERS, "configuration_keys": None}]},
            [(acl("describe", "topic", ORDERS), TOPIC_DENIED)],
            label="topic",
        ),
        Case(
            ApiKey.DESCRIBE_CONFIGS,
            4,
            {"resources": [{"resource_type": 4, "resource_name": "0", "configuration_keys": None}]},
            [(acl("describe", "cluster", "cluster"), CLUSTER_DENIED)],
            label="broker",
        ),
    ],
    ApiKey.ALTER_CONFIGS: [
        Case(
            ApiKey.ALTER_CONFIGS,
            2,
            {
                "resources": [
                    {"resource_type": 2, "resource_name": ORDERS, "configs": [{"name": "retention.ms", "value": "-1"}]}
                ],
                "validate_only": True,
            },
            [(acl("alter_configs", "topic", ORDERS), TOPIC_DENIED)],
            label="topic",
        ),
        Case(
            ApiKey.ALTER_CONFIGS,
            2,
            {"resources": [{"resource_type": 4, "resource_name": "0", "configs": []}], "validate_only": True},
            [(acl("alter_configs", "cluster", "cluster"), CLUSTER_DENIED)],
            label="broker",
        ),
    ],
    ApiKey.INCREMENTAL_ALTER_CONFIGS: [
        Case(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            1,
            {
                "resources": [
                    {
                        "resource_type": 2,
                        "resource_name": ORDERS,
                        "configs": [{"name": "retention.ms", "config_operation": 0, "value": "-1"}],
                    }
                ],
                "validate_only": True,
            },
            [(acl("alter_configs", "topic", ORDERS), TOPIC_DENIED)],
            label="topic",
        ),
    ],
    ApiKey.DESCRIBE_CLUSTER: [Case(ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False}, [])],
    ApiKey.OFFSET_DELETE: [
        Case(
            ApiKey.OFFSET_DELETE,
            0,
            {"group_id": "g5", "topics": one_partition(ORDERS)},
            [(acl("delete", "group", "g5"), GROUP_DENIED), (acl("read", "topic", ORDERS), TOPIC_DENIED)],
        )
    ],
    ApiKey.LIST_PARTITION_REASSIGNMENTS: [
        Case(
            ApiKey.LIST_PARTITION_REASSIGNMENTS,
            0,
            {"timeout": 5000, "topics": None},
            [(acl("describe", "cluster", "cluster"), CLUSTER_DENIED)],
        )
    ],
    ApiKey.CONSUMER_GROUP_HEARTBEAT: [
        Case(
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            1,
            {
                "group_id": "g848",
                "member_id": "",
                "member_epoch": 0,
                "rebalance_timeout": 6000,
                "subscribed_topic_names": [ORDERS],
                "topic_partitions": [],
            },
            # As Kafka's KafkaApis: read on the group, then describe on every subscribed topic.
            [(acl("read", "group", "g848"), GROUP_DENIED), (acl("describe", "topic", ORDERS), TOPIC_DENIED)],
            label="joining with a subscription",
        ),
        Case(
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            1,
            {"group_id": "g848", "member_id": "someone", "member_epoch": 1, "rebalance_timeout": -1},
            [(acl("read", "group", "g848"), GROUP_DENIED)],
            label="heartbeat without a subscription",
        ),
    ],
    # Before authentication, and with no permission at all (run on a fresh connection).
    ApiKey.API_VERSIONS: [Case(ApiKey.API_VERSIONS, 3, {"client_software_name": "raw"}, [])],
    ApiKey.SASL_HANDSHAKE: [Case(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}, [])],
    ApiKey.SASL_AUTHENTICATE: [Case(ApiKey.SASL_AUTHENTICATE, 2, {}, [])],
}
PRE_AUTHENTICATION = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


def test_every_kafka_api_has_a_rule_and_cases() -> None:
    assert set(API_ACCESS) == set(HANDLERS), "every Kafka API needs an entry in lkstream.kafka.security.API_ACCESS"
    assert set(CASES) == set(HANDLERS), "every Kafka API needs cases in this matrix"


def error_codes(entity: Any) -> list[int]:
    """Every ``error_code`` in a response, nested ones included."""
    found: list[int] = []
    for field in dataclasses.fields(entity):
        value = getattr(entity, field.name)
        if field.name == "error_code":
            found.append(int(value))
        elif isinstance(value, tuple):
            found += [code for item in value if dataclasses.is_dataclass(item) for code in error_codes(item)]
    return found


def send(kafka: RawKafka, case: Case) -> Any:
    values = dict(case.values)
    if case.api == ApiKey.PRODUCE:
        values["topic_data"] = [
            {"name": t["name"], "partition_data": [{"index": 0, "records": batch()}]} for t in values["topic_data"]
        ]
    return kafka.call(case.api, case.version, **values)


@pytest.fixture
def matrix(secure_daemon: SecureFactory) -> Iterator[tuple[SecureDaemon, RawKafka]]:
    daemon = secure_daemon(tls=True)
    assert daemon.pki is not None
    with lkstream.connect(daemon.address, token=daemon.admin_token, tls=ClientTls(str(daemon.pki.ca))) as admin:
        for topic in (ORDERS, "doomed", "grow"):
            admin.create_topic(topic, 1)
        admin.produce_many_sync(ORDERS, [(None, b"first")])
        admin.commit_offsets("g1", {(ORDERS, 0): 1})
        admin.commit_offsets("g5", {(ORDERS, 0): 1})  # OffsetDelete's group: a group Kafka would know
    daemon.set_password(USER, PASSWORD)
    with RawKafka(daemon.kafka_address, tls_ca=str(daemon.pki.ca)) as kafka:
        assert kafka.login_plain(USER, PASSWORD).error_code == 0
        yield daemon, kafka


def all_cases() -> list[Case]:
    return [case for cases in CASES.values() for case in cases if case.api not in PRE_AUTHENTICATION]


def test_every_kafka_api_is_refused_without_its_permissions_and_allowed_with_them(
    matrix: tuple[SecureDaemon, RawKafka],
) -> None:
    daemon, kafka = matrix
    for case in all_cases():
        what = f"API {case.api} v{case.version} {case.label}".strip()
        needed = [entry for entry, _ in case.needs]
        for missing, code in case.needs:
            daemon.set_acls(*[entry for entry in needed if entry != missing])
            codes = error_codes(send(kafka, case))
            assert code in codes, f"{what} without {missing.describe()}: {codes}, expected {code}"
        daemon.set_acls(*needed)
        response = send(kafka, case)
        assert not AUTHORIZATION_CODES & set(error_codes(response)), f"{what} with {needed}: {response}"
        if case.listed is not None and case.shows is not None:
            assert case.listed not in repr(response), f"{what} lists {case.listed} without {case.shows.describe()}"
            daemon.set_acls(*needed, case.shows)
            assert case.listed in repr(send(kafka, case)), what
    daemon.set_acls()


def test_the_sasl_apis_need_no_permission_and_nothing_else_works_before_them(
    matrix: tuple[SecureDaemon, RawKafka],
) -> None:
    daemon, _ = matrix
    assert daemon.pki is not None
    with RawKafka(daemon.kafka_address, tls_ca=str(daemon.pki.ca)) as fresh:
        assert fresh.call(ApiKey.API_VERSIONS, 3, client_software_name="raw").error_code == 0
        assert fresh.handshake("PLAIN").error_code == 0
        assert fresh.authenticate(f"\0{USER}\0{PASSWORD}".encode()).error_code == 0
    with RawKafka(daemon.kafka_address, tls_ca=str(daemon.pki.ca)) as anonymous, pytest.raises(ConnectionError):
        anonymous.call(ApiKey.METADATA, 9, topics=None)


def test_a_super_user_may_call_every_api(matrix: tuple[SecureDaemon, RawKafka]) -> None:
    daemon, _ = matrix
    assert daemon.pki is not None
    daemon.set_password("admin", "admin-secret")
    with RawKafka(daemon.kafka_address, tls_ca=str(daemon.pki.ca)) as kafka:
        assert kafka.login_plain("admin", "admin-secret").error_code == 0
        for case in all_cases():
            codes = error_codes(send(kafka, case))
            assert not AUTHORIZATION_CODES & set(codes), f"{case.api} {case.label}: {codes}"


def test_docs_table_names_every_kafka_api() -> None:
    text = (REPO / "docs" / "kafka.md").read_text()
    table = text.split("### What each API needs", 1)[1].split("###", 1)[0]
    for api in HANDLERS:
        assert f"({api})" in table, f"docs/kafka.md does not say what API key {api} needs"
