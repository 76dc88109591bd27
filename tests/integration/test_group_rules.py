"""Issue 24 and issue 28 (finding 5) on the daemon's gRPC and HTTP surfaces: the group rules every
surface shares with the Kafka listener (tests/kafka_wire/test_kafka_group_rules.py).

* any non-empty group id is a group, through gRPC (RemoteBroker, the Consumer) and HTTP
  (group consume, ``GET /groups/{group}`` percent-encoded);
* a join's session timeout outside the broker's bounds is refused (InvalidSessionTimeoutError,
  INVALID_ARGUMENT) and a group beyond its size is refused (GroupMaxSizeReachedError);
* LKSTREAM's own commit rules stay (documented in docs/groups.md): an offset above the high
  watermark and a member's commit backward are refused there, while Kafka clients may.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

import lkstream
from lkstream import Consumer, OffsetOutOfRangeError
from lkstream.errors import GroupMaxSizeReachedError, InvalidSessionTimeoutError
from tests.integration.conftest import DaemonFactory
from tests.integration.http_support import Api

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]

GROUP_IDS = ["with space", "a/b:c@d", "double__under_", "ünïcödé", "g" * 300]


def test_kafka_group_ids_work_through_grpc_and_http(start_daemon: DaemonFactory) -> None:
    daemon = start_daemon()
    api = Api(daemon.http_address)
    with lkstream.connect(daemon.address) as broker:
        broker.create_topic("ids", 1)
        broker.produce_many_sync("ids", [(None, b"a"), (None, b"b")])
        for group in GROUP_IDS:
            consumer = Consumer(broker, group=group, auto_offset_reset="earliest", auto_commit=False)
            consumer.subscribe("ids")
            got = []
            while len(got) < 2:
                got += [r.value for r in consumer.poll(timeout=1.0)]
            consumer.commit()
            consumer.close()
            assert broker.describe_group(group).state.value == "Empty", group  # its offsets keep it listed
            reply = api.get("/groups/" + urllib.parse.quote(group, safe=""))
            assert reply.status == 200, (group, reply.body)
            assert reply.body["group"] == group
            assert [(row["partition"], row["committed_offset"]) for row in reply.body["partitions"]] == [(0, 2)]
        listed = {g.group for g in broker.list_groups()}
        assert set(GROUP_IDS) <= listed
        consumed = api.consume({"topic": "ids", "partition": 0}, group="http group/ü")
        assert consumed.status == 200, consumed.body
        assert broker.describe_group("http group/ü").state.value == "Empty"  # it committed


def test_session_bounds_and_group_size_are_enforced_over_grpc(start_daemon: DaemonFactory) -> None:
    daemon = start_daemon(group_max_size=2)
    with lkstream.connect(daemon.address) as broker:
        broker.create_topic("bounded", 1)
        for session_ms in (100, 1_800_001):
            with pytest.raises(InvalidSessionTimeoutError, match="outside the broker's bounds"):
                broker.join_group("g", ["bounded"], session_timeout_ms=session_ms)
        broker.join_group("g", ["bounded"], session_timeout_ms=6_000)
        broker.join_group("g", ["bounded"], session_timeout_ms=1_800_000)
        with pytest.raises(GroupMaxSizeReachedError):
            broker.join_group("g", ["bounded"])


def test_lkstream_commits_keep_their_own_rules(start_daemon: DaemonFactory) -> None:
    daemon = start_daemon()
    with lkstream.connect(daemon.address) as broker:
        broker.create_topic("strict", 1)
        with pytest.raises(OffsetOutOfRangeError):  # a gRPC commit past the log end (Kafka clients may)
            broker.commit_offsets("strict-group", {("strict", 0): 1})
        broker.commit_offsets("strict-group", {("strict", 0): 0})
        assert broker.describe_group("strict-group").state.value == "Empty"


def test_the_cli_shows_any_group_id_without_letting_it_drive_the_terminal(start_daemon: DaemonFactory) -> None:
    daemon = start_daemon()
    group = "evil\x1b[2Jgroup\nforged line"  # a Kafka group id may hold control characters
    with lkstream.connect(daemon.address) as broker:
        broker.create_topic("shown", 1)
        broker.produce_many_sync("shown", [(None, b"a")])
        broker.commit_offsets(group, {("shown", 0): 1})
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "lkstream.cli", "groups", "list", "--bootstrap", daemon.address],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert "evil\\x1b[2Jgroup\\nforged line" in done.stdout
    assert "\x1b" not in done.stdout and "forged line" not in done.stdout.replace("\\nforged line", "")
