"""`lkstream topics ...` and `lkstream consume --group` against a real daemon subprocess."""

from __future__ import annotations

from pathlib import Path

import pytest

import lkstream
from lkstream.storage.offsets import OffsetStore
from tests.integration.conftest import DaemonProcess
from tests.integration.test_cli_daemon import lkstream_cli

pytestmark = pytest.mark.timeout(120)


def test_create_list_describe_delete(daemon: DaemonProcess) -> None:
    addr = daemon.address
    done = lkstream_cli(
        "topics", "create", "orders", "--bootstrap", addr, "--partitions", "3", "--retention-ms", "60000",
        "--retention-bytes", "1048576",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "created topic orders with 3 partitions" in done.stdout
    assert lkstream_cli("topics", "create", "audit", "--bootstrap", addr).returncode == 0

    done = lkstream_cli("topics", "list", "--bootstrap", addr)
    assert (done.returncode, done.stdout) == (0, "audit\norders\n"), done.stderr

    with lkstream.connect(addr) as broker:
        broker.produce_many_sync("orders", [(None, b"a"), (None, b"b")], partition=1)
    done = lkstream_cli("topics", "describe", "orders", "--bootstrap", addr)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "topic: orders partitions: 3 retention.ms: 60000 retention.bytes: 1048576"
    assert lines[1].split() == ["PARTITION", "LOG_START", "NEXT_OFFSET", "HIGH_WATERMARK", "SEGMENTS", "BYTES", "DIRTY"]
    rows = [line.split() for line in lines[2:5]]
    assert [r[:4] for r in rows] == [["0", "0", "0", "0"], ["1", "0", "2", "2"], ["2", "0", "0", "0"]]
    assert [r[6] for r in rows] == ["-", "-", "-"], "a topic that is not compacted has no dirty ratio"
    assert int(rows[1][5]) > 0
    assert len({len(line) for line in lines[1:5]}) == 1  # aligned columns
    # Then the configs off their defaults, with their sources.
    assert lines[5] == "" and lines[6].split() == ["CONFIG", "VALUE", "SOURCE"]
    assert [line.split() for line in lines[7:]] == [
        ["retention.bytes", "1048576", "DYNAMIC_TOPIC_CONFIG"],
        ["retention.ms", "60000", "DYNAMIC_TOPIC_CONFIG"],
    ]

    done = lkstream_cli("topics", "delete", "orders", "--bootstrap", addr)
    assert done.returncode == 2
    assert "--yes" in done.stderr
    done = lkstream_cli("topics", "delete", "orders", "--bootstrap", addr, "--yes")
    assert (done.returncode, done.stdout) == (0, "deleted topic orders\n"), done.stderr
    assert lkstream_cli("topics", "list", "--bootstrap", addr).stdout == "audit\n"


def test_unknown_topic_and_bad_usage(daemon: DaemonProcess) -> None:
    for args in (("describe", "nope"), ("delete", "nope", "--yes")):
        done = lkstream_cli("topics", *args, "--bootstrap", daemon.address)
        assert done.returncode == 1, done.stderr
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
        assert "NOT_FOUND" in done.stderr and "nope" in done.stderr
    assert lkstream_cli("topics", "create", "x", "--bootstrap", daemon.address).returncode == 0
    done = lkstream_cli("topics", "create", "x", "--bootstrap", daemon.address)
    assert done.returncode == 1 and "ALREADY_EXISTS" in done.stderr
    done = lkstream_cli("topics", "create", "y", "--bootstrap", daemon.address, "--partitions", "0")
    assert done.returncode == 2


def test_no_daemon_is_exit_1() -> None:
    done = lkstream_cli("topics", "list", "--bootstrap", "127.0.0.1:1")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr


def test_offline_list_and_describe_read_the_data_dir(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as broker:
        broker.create_topic("ticks", 2, retention_ms=5000)
        broker.produce_many_sync("ticks", [(None, f"v{i}".encode()) for i in range(5)], partition=0)
    data = str(daemon.data_dir)

    done = lkstream_cli("topics", "list", "--data-dir", data)
    assert (done.returncode, done.stdout) == (0, "ticks\n"), done.stderr
    done = lkstream_cli("topics", "describe", "ticks", "--data-dir", data)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("topic: ticks partitions: 2 retention.ms: 5000")
    rows = [line.split() for line in lines[2:4]]
    assert [r[:5] for r in rows] == [["0", "0", "5", "5", "1"], ["1", "0", "0", "0", "1"]]
    assert [line.split() for line in lines[5:]] == [
        ["CONFIG", "VALUE", "SOURCE"],
        ["retention.ms", "5000", "DYNAMIC_TOPIC_CONFIG"],
    ]

    done = lkstream_cli("topics", "describe", "nope", "--data-dir", data)
    assert done.returncode == 1 and "NOT_FOUND" in done.stderr
    assert lkstream_cli("topics", "list", "--data-dir", str(daemon.data_dir / "topics")).returncode == 2


def test_consume_group_commits_after_printing(daemon: DaemonProcess, tmp_path: Path) -> None:
    addr = daemon.address
    with lkstream.connect(addr) as broker:
        broker.produce_many_sync("g", [(None, f"m{i}".encode()) for i in range(5)])
    offsets = OffsetStore(str(daemon.data_dir))
    assert offsets.read_committed("cli", "g", 0) is None

    done = lkstream_cli("consume", "g", "--bootstrap", addr, "--group", "cli", "--max-messages", "3")
    assert (done.returncode, done.stdout) == (0, "m0\nm1\nm2\n"), done.stderr
    assert offsets.read_committed("cli", "g", 0) == 3

    # A member resumes at the committed offsets.
    done = lkstream_cli("consume", "g", "--bootstrap", addr, "--group", "cli")
    assert (done.returncode, done.stdout) == (0, "m3\nm4\n"), done.stderr
    assert offsets.read_committed("cli", "g", 0) == 5
    done = lkstream_cli("consume", "g", "--bootstrap", addr, "--group", "cli", "--from", "committed")
    assert (done.returncode, done.stdout) == (0, ""), done.stderr
    # A member starts where its group is: moving a group is `groups reset`'s job.
    done = lkstream_cli("consume", "g", "--bootstrap", addr, "--group", "cli", "--from", "3", "--max-messages", "1")
    assert done.returncode == 2 and "groups reset" in done.stderr, done.stderr
    assert offsets.read_committed("cli", "g", 0) == 5
    assert "--group" in lkstream_cli("consume", "--help").stdout


def test_a_group_that_never_committed_starts_at_the_log_start_per_partition(daemon: DaemonProcess) -> None:
    addr = daemon.address
    with lkstream.connect(addr) as broker:
        broker.create_topic("two", 2)
        broker.produce_many_sync("two", [(None, b"a0"), (None, b"a1")], partition=0)
        broker.produce_many_sync("two", [(None, b"b0"), (None, b"b1")], partition=1)
        broker.commit_offset("half", "two", 0, 1)
    done = lkstream_cli("consume", "two", "--bootstrap", addr, "--group", "half", "--from", "committed")
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == ["a1", "b0", "b1"]
    with lkstream.connect(addr) as broker:
        assert broker.committed_offsets("half", "two") == {0: 2, 1: 2}
    done = lkstream_cli("consume", "two", "--bootstrap", addr, "--from", "committed")
    assert done.returncode == 2 and "--group" in done.stderr
    assert "does not read" not in lkstream_cli("consume", "--help").stdout


def test_delete_records_moves_each_log_start_durably(daemon: DaemonProcess) -> None:
    """Issue 24: ``lkstream topics delete-records`` is Kafka's DeleteRecords over gRPC Admin."""
    addr = daemon.address
    with lkstream.connect(addr) as broker:
        broker.create_topic("purged", 2)
        broker.produce_many_sync("purged", [(None, f"{i}".encode()) for i in range(10)], partition=0)
        broker.produce_many_sync("purged", [(None, b"x")] * 3, partition=1)
    done = lkstream_cli("topics", "delete-records", "purged", "--before", "6", "--partition", "0", "--bootstrap", addr)
    assert done.returncode == 0, done.stderr
    assert [line.split() for line in done.stdout.splitlines()] == [["PARTITION", "LOG_START"], ["0", "6"]]
    done = lkstream_cli("topics", "delete-records", "purged", "--before", "-1", "--bootstrap", addr)
    assert [line.split() for line in done.stdout.splitlines()][1:] == [["0", "10"], ["1", "3"]], done.stderr
    done = lkstream_cli("topics", "delete-records", "purged", "--before", "99", "--bootstrap", addr)
    assert done.returncode == 1 and "OUT_OF_RANGE" in done.stderr, done.stderr
    with lkstream.connect(addr) as broker:
        assert [p.log_start_offset for p in broker.describe_topic("purged").partitions] == [10, 3]
        broker.produce_many_sync("purged", [(None, b"after")], partition=0)
        assert [r.value for r in broker.read_from("purged", 0, 10)] == [b"after"]
        with pytest.raises(lkstream.OffsetOutOfRangeError):
            broker.read_from("purged", 0, 9)


def test_topic_configs_from_the_command_line(daemon: DaemonProcess) -> None:
    """issue 24 / issue 26 item 3: --config, --if-not-exists, alter-config, add-partitions, describe with sources."""
    addr = daemon.address
    done = lkstream_cli(
        "topics", "create", "changelog", "--bootstrap", addr, "--partitions", "2",
        "--config", "cleanup.policy=compact", "--config", "segment.bytes=1048576",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = lkstream_cli("topics", "create", "changelog", "--bootstrap", addr, "--if-not-exists")
    assert (done.returncode, done.stdout) == (0, "topic changelog already exists; nothing changed\n"), done.stderr

    done = lkstream_cli(
        "topics", "alter-config", "changelog", "--bootstrap", addr, "--set", "min.cleanable.dirty.ratio=0.1",
        "--delete", "segment.bytes",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "topic changelog now has cleanup.policy=compact, min.cleanable.dirty.ratio=0.1\n"
    done = lkstream_cli("topics", "add-partitions", "changelog", "--bootstrap", addr, "--to", "4")
    assert (done.returncode, done.stdout) == (0, "topic changelog grew from 2 to 4 partitions\n"), done.stderr

    done = lkstream_cli("topics", "describe", "changelog", "--bootstrap", addr, "--all-configs")
    assert done.returncode == 0, done.stderr
    configs = {line.split()[0]: line.split()[1:] for line in done.stdout.split("CONFIG", 1)[1].splitlines()[1:]}
    assert configs["cleanup.policy"] == ["compact", "DYNAMIC_TOPIC_CONFIG"]
    assert configs["min.cleanable.dirty.ratio"] == ["0.1", "DYNAMIC_TOPIC_CONFIG"]
    assert configs["segment.ms"] == ["604800000", "DEFAULT_CONFIG"]
    assert "partitions: 4" in done.stdout.splitlines()[0]


@pytest.mark.parametrize(
    ("args", "status", "says"),
    [
        # Refused values are usage errors (exit 2), as every InvalidArgument of the CLI is.
        (("create", "t", "--config", "cleanup.policy=shred"), 2, "'shred' is not delete or compact"),
        (("create", "t", "--config", "min.insync.replicas=2"), 2, "one replica"),
        (("create", "t", "--config", "retention.ms"), 2, "NAME=VALUE"),
        (("alter-config", "t"), 2, "nothing to change"),
        (("add-partitions", "t", "--to", "1"), 2, "must be larger"),
    ],
)
def test_refused_topic_configs_say_why(daemon: DaemonProcess, args: tuple[str, ...], status: int, says: str) -> None:
    with lkstream.connect(daemon.address) as broker:
        if "t" not in broker.list_topics():
            broker.create_topic("t", 1)
    done = lkstream_cli("topics", *args, "--bootstrap", daemon.address)
    assert done.returncode == status, done.stderr
    assert says in done.stderr and "Traceback" not in done.stderr
