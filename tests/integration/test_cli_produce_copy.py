"""`lkstream produce` flags of rpk and kcat, and copying a topic (issue 26, items 2 and 3).

Real ``lkstream`` subprocesses against a real daemon on free loopback ports.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import lkstream
from lkstream.format.batch import parse_header
from lkstream.format.codec import Compression, encode_batch, iter_batches
from tests.integration.conftest import DaemonProcess
from tests.integration.test_cli_first_steps import one_error_line, run, shell

pytestmark = pytest.mark.timeout(240)


def _snapshot(client: lkstream.RemoteBroker, topic: str) -> list[list[tuple[object, ...]]]:
    """Every record of ``topic`` as (offset, timestamp, key, value, headers), partition by partition."""
    return [
        [
            (r.offset, r.timestamp, r.key, r.value, list(r.headers))
            for r in client.read_from(topic, pid, 0, max_msgs=10_000)
        ]
        for pid in range(client.partitions_for(topic))
    ]


def _seed(client: lkstream.RemoteBroker, topic: str) -> None:
    """A topic of three partitions whose records have old timestamps, headers, nulls and binary bytes."""
    client.create_topic(topic, 3, retention_ms=86_400_000)
    for pid in range(3):
        pairs = [(f"user-{pid}-{n}".encode(), None if n == 3 else bytes([n, 255]) + b"x") for n in range(5)]
        headers = [[("n", str(n).encode()), ("z", None)] for n in range(5)]
        # Old timestamps (2023): a copy that stamps "now" cannot pass for one that keeps them.
        timestamps = [1_700_000_000_000 + pid * 10 + n for n in range(5)]
        client.produce_batch_sync(topic, pid, encode_batch(pairs, headers=headers, timestamps=timestamps))


def test_topics_copy_makes_the_target_like_the_source_and_keeps_every_record(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as client:
        _seed(client, "orders")
        done = run("topics", "copy", "orders", "orders.copy", "--bootstrap", daemon.address)
        assert done.returncode == 0, done.stderr
        assert done.stdout == (
            "copied 15 records from orders (3 partitions) to orders.copy (created with 3 partitions; "
            "partition for partition, keys, values, headers and timestamps kept)\n"
        )
        assert _snapshot(client, "orders.copy") == _snapshot(client, "orders")
        assert client.describe_topic("orders.copy").settings.retention_ms == 86_400_000
        # Into an existing topic with too few partitions: refused before anything is copied.
        client.create_topic("narrow", 2)
        refused = run("topics", "copy", "orders", "narrow", "--bootstrap", daemon.address)
        assert refused.returncode == 1
        assert "'narrow' has 2 partitions and 'orders' has 3" in one_error_line(refused.stderr)
        assert _snapshot(client, "narrow") == [[], []]
        routed = run("topics", "copy", "orders", "narrow", "--repartition", "--bootstrap", daemon.address)
        assert routed.returncode == 0, routed.stderr
        assert "copied 15 records" in routed.stdout and "existing, 2 partitions; re-partitioned by key" in routed.stdout
        copied = [r for part in _snapshot(client, "narrow") for r in part]
        assert sorted((r[1], r[2]) for r in copied) == sorted(
            (r[1], r[2]) for p in _snapshot(client, "orders") for r in p
        )


def test_the_readme_pipe_copies_a_multi_partition_topic_with_its_timestamps(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    with lkstream.connect(daemon.address) as client:
        _seed(client, "src")
        client.create_topic("dst", 3)
        pipe = "set -o pipefail; lkstream consume src --output json | lkstream produce dst --json"
        done = shell(f"export LKSTREAM_BOOTSTRAP={daemon.address}; {pipe}", tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"15 records acknowledged by {daemon.address} (topic dst)\n"
        assert _snapshot(client, "dst") == _snapshot(client, "src")
        # A target with too few partitions: the one error line says what to do, and what was sent is counted.
        missing = shell(f"export LKSTREAM_BOOTSTRAP={daemon.address}; {pipe.replace('dst', 'fresh')}", tmp_path)
        assert missing.returncode == 1
        lines = missing.stderr.splitlines()
        assert lines[0] == "5 records acknowledged before the error", missing.stderr
        assert lines[1].startswith(
            "Error: INVALID_ARGUMENT: partition 1 does not exist in 'fresh' (it has 1 partition):"
        )
        assert "lkstream topics copy" in lines[1]


def test_produce_json_keeps_a_line_s_timestamp_and_stamps_the_others(daemon: DaemonProcess) -> None:
    lines = [{"value": "old", "timestamp": 1_600_000_000_000, "key": "k"}, {"value": "new"}]
    done = run(
        "produce", "t", "--json", "--bootstrap", daemon.address, stdin="".join(json.dumps(x) + "\n" for x in lines)
    )
    assert done.returncode == 0, done.stderr
    with lkstream.connect(daemon.address) as client:
        old, new = client.read_from("t", 0, 0)
    assert (old.value, old.timestamp, old.key) == (b"old", 1_600_000_000_000, b"k")
    assert new.value == b"new" and new.timestamp > 1_700_000_000_000


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_produce_compresses_with_kafka_s_codecs(daemon: DaemonProcess, codec: str) -> None:
    text = "".join(f"line {n} " + "abc" * 20 + "\n" for n in range(50))
    done = run("produce", f"z.{codec}", "-z", codec, "--bootstrap", daemon.address, stdin=text)
    assert done.returncode == 0, done.stderr
    with lkstream.connect(daemon.address) as client:
        raw = client.fetch(f"z.{codec}", 0, 0).data
        assert {parse_header(batch).compression for _, batch in iter_batches(raw)} == {Compression.parse(codec).value}
    back = run("consume", f"z.{codec}", "--bootstrap", daemon.address)
    assert back.stdout == text


def test_produce_takes_a_fixed_key_headers_and_short_flags(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as client:
        client.create_topic("flags", 2)
    done = run(
        "produce",
        "flags",
        "-k",
        "user-1",
        "-H",
        "source=cli",
        "-H",
        "v=2",
        "-p",
        "1",
        "--bootstrap",
        daemon.address,
        stdin="a\nb\n",
    )
    assert done.returncode == 0, done.stderr
    shown = run("consume", "flags", "-f", r"%p %k %s %h\n", "--bootstrap", daemon.address)
    assert shown.stdout == "1 user-1 a source=cli,v=2\n1 user-1 b source=cli,v=2\n"
    split = run("produce", "flags", "-K", ":", "--bootstrap", daemon.address, stdin="user-9:c\n")
    assert split.returncode == 0, split.stderr
    both = run("produce", "flags", "-K", ":", "-k", "x", "--bootstrap", daemon.address, stdin="a\n")
    assert both.returncode == 2 and "mutually exclusive" in both.stderr
    bad = run("produce", "flags", "-H", "novalue", "--bootstrap", daemon.address, stdin="a\n")
    assert bad.returncode == 2 and "is not NAME=VALUE" in bad.stderr


def test_errors_count_one_partition_in_the_singular(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as client:
        client.create_topic("one", 1)
    for args in (("produce", "one", "-p", "1"), ("consume", "one", "-p", "1")):
        done = run(*args, "--bootstrap", daemon.address, stdin="x\n")
        assert done.returncode == 1
        assert "partition 1 does not exist in 'one' (it has 1 partition)" in done.stderr, done.stderr
