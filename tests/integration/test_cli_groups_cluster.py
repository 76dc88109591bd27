"""`lkstream groups delete`, `groups reset --dry-run` and `lkstream cluster info` (issue 26, item 3).

Real ``lkstream`` subprocesses against a real daemon on free loopback ports; a Kafka
client's group (kafka-python) for the delete that Kafka's DeleteGroups also serves.
"""

from __future__ import annotations

import json
import time

import pytest
from kafka.admin import KafkaAdminClient

import lkstream
from lkstream.client.consumer import Consumer
from tests.integration.conftest import DaemonProcess
from tests.integration.test_cli_first_steps import one_error_line, run

pytestmark = pytest.mark.timeout(180)


def _table(stdout: str) -> list[list[str]]:
    return [line.split() for line in stdout.splitlines()]


def test_reset_dry_run_shows_old_and_new_offsets_and_commits_nothing(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as client:
        client.create_topic("r", 2)
        client.produce_many_sync("r", [(None, b"x")] * 5, partition=0)
        client.produce_many_sync("r", [(None, b"y")] * 3, partition=1)
        client.commit_offset("billing", "r", 0, 4)
    dry = run("groups", "reset", "billing", "--topic", "r", "--to-earliest", "--dry-run", "--bootstrap", daemon.address)
    assert dry.returncode == 0, dry.stderr
    assert _table(dry.stdout) == [
        ["TOPIC", "PARTITION", "OLD_OFFSET", "NEW_OFFSET"],
        ["r", "0", "4", "0"],
        ["r", "1", "-", "0"],
    ]
    assert "dry run, nothing committed" in dry.stderr
    with lkstream.connect(daemon.address) as client:
        assert client.committed_offsets("billing", "r") == {0: 4}
    done = run("groups", "reset", "billing", "--topic", "r", "--to-latest", "--bootstrap", daemon.address)
    assert _table(done.stdout)[1:] == [["r", "0", "4", "5"], ["r", "1", "-", "3"]]
    with lkstream.connect(daemon.address) as client:
        assert client.committed_offsets("billing", "r") == {0: 5, 1: 3}
    out_of_range = run(
        "groups", "reset", "billing", "--topic", "r", "--to-offset", "9", "--dry-run", "--bootstrap", daemon.address
    )
    assert out_of_range.returncode == 1 and "OUT_OF_RANGE" in out_of_range.stderr
    by_time = run(
        "groups",
        "reset",
        "billing",
        "--topic",
        "r",
        "--to-timestamp",
        "-1h",
        "--dry-run",
        "--bootstrap",
        daemon.address,
    )
    assert _table(by_time.stdout)[1:] == [["r", "0", "5", "0"], ["r", "1", "3", "0"]], by_time.stderr


def test_reset_dry_run_is_refused_like_the_reset_while_the_group_has_members(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as client:
        client.produce_many_sync("live", [(None, b"x")])
        member = Consumer(client, group="busy")
        member.subscribe("live")
        try:
            for dry in ([], ["--dry-run"]):
                done = run(
                    "groups", "reset", "busy", "--topic", "live", "--to-earliest", *dry, "--bootstrap", daemon.address
                )
                assert done.returncode == 1
                assert one_error_line(done.stderr).startswith("Error: FAILED_PRECONDITION: cannot reset offsets")
        finally:
            member.close()


def test_groups_delete_forgets_a_group_and_refuses_a_live_one(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as client:
        client.create_topic("d", 2)
        client.produce_many_sync("d", [(None, b"x")] * 3, partition=0)
        used = run("consume", "d", "--group", "old", "--bootstrap", daemon.address)  # a member that left
        assert used.returncode == 0, used.stderr
        member = Consumer(client, group="live")
        member.subscribe("d")
        try:
            refused = run("groups", "delete", "live", "--bootstrap", daemon.address)
            assert refused.returncode == 1
            assert one_error_line(refused.stderr).startswith("Error: FAILED_PRECONDITION: cannot delete the group")
        finally:
            member.close()
        deleted = run("groups", "delete", "old", "--bootstrap", daemon.address)
        assert (deleted.returncode, deleted.stdout) == (0, "deleted group old (2 committed offsets removed)\n")
        assert "old" not in [g.group for g in client.list_groups()]
        assert client.committed_offsets("old", "d") == {}
        again = run("groups", "delete", "old", "--bootstrap", daemon.address)
        assert again.returncode == 1
        assert one_error_line(again.stderr) == (
            "Error: NOT_FOUND: group 'old' does not exist (no members, no committed offsets)"
        )


def test_kafka_delete_groups_still_deletes_what_groups_delete_deletes(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as client:
        client.produce_many_sync("k", [(None, b"x")])
        client.commit_offset("via-kafka", "k", 0, 1)
    admin = KafkaAdminClient(bootstrap_servers=daemon.kafka_address, request_timeout_ms=20_000)
    try:
        results = dict(admin.delete_groups(["via-kafka", "never-was"]))
    finally:
        admin.close()
    assert results == {"via-kafka": "OK", "never-was": "GroupIdNotFoundError"}
    with lkstream.connect(daemon.address) as client:
        assert "via-kafka" not in [g.group for g in client.list_groups()]


def test_cluster_info_names_the_listeners_version_and_data(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as client:
        client.create_topic("a", 3)
        client.produce_many_sync("a", [(None, b"x" * 100)] * 10, partition=0)
        client.commit_offset("g", "a", 0, 5)
    started = time.monotonic()
    done = run("cluster", "info", "--bootstrap", daemon.address)
    assert done.returncode == 0, done.stderr
    facts = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    assert facts["grpc"] == daemon.address
    assert facts["http"] == daemon.http_address
    assert facts["kafka"] == daemon.kafka_address
    assert facts["version"] == lkstream.__version__ and facts["protocol"] == "1"
    assert facts["topics"] == "1" and facts["partitions"] == "3" and facts["groups"] == "1"
    assert facts["data_dir"] == str(daemon.data_dir)
    assert int(facts["data_bytes"].split()[0]) > 1000
    assert facts["auto_create_topics"] == "yes (1 partition each)"
    assert (facts["tls"], facts["auth"]) == ("off", "off")
    as_json = json.loads(run("cluster", "info", "--json", "--bootstrap", daemon.address).stdout)
    assert as_json["kafka_address"] == daemon.kafka_address and as_json["partitions"] == 3
    assert time.monotonic() - started < 60
