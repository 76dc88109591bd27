"""A streaming query killed with SIGKILL mid-stream and restarted from its checkpoint writes every record once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import lkstream
from tests.integration.conftest import DaemonProcess
from tests.spark.conftest import spark_env

DRIVER = Path(__file__).with_name("stream_driver.py")
COMMITTED_BEFORE_KILL = 2


def _committed_batches(output: Path) -> int:
    meta = output / "_spark_metadata"
    return len([p for p in meta.iterdir() if p.name.isdigit()]) if meta.is_dir() else 0


def _driver(args: list[str]) -> subprocess.Popen[bytes]:
    # Its own session, so the kill takes the driver, its JVM and Python workers together.
    return subprocess.Popen(
        [sys.executable, str(DRIVER), *args],
        env=spark_env(),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def test_killed_and_restarted_query_writes_every_record_exactly_once(
    spark: Any, spark_daemon: DaemonProcess, tmp_path: Path, topic_name: str
) -> None:
    total_first, total_second = 4000, 1000
    with lkstream.connect(spark_daemon.address) as client:
        client.create_topic(topic_name, partitions=2)
        for i in range(0, total_first, 500):
            client.produce_many_sync(topic_name, [(b"k%d" % j, b"v%d" % j) for j in range(i, i + 500)])
        checkpoint, output = tmp_path / "checkpoint", tmp_path / "out"
        args = [spark_daemon.address, topic_name, str(checkpoint), str(output)]

        first = _driver([*args, "run"])
        try:
            deadline = time.monotonic() + 120
            while _committed_batches(output) < COMMITTED_BEFORE_KILL:
                assert first.poll() is None, first.stderr.read().decode()[-3000:] if first.stderr else ""
                assert time.monotonic() < deadline, "the query committed too few micro-batches in 120 s"
                time.sleep(0.2)
            os.killpg(first.pid, signal.SIGKILL)
        finally:
            if first.poll() is None:
                os.killpg(first.pid, signal.SIGKILL)
            first.wait()
        committed_at_kill = _committed_batches(output)
        assert committed_at_kill * 500 < total_first, "the first run finished before it was killed"

        for i in range(total_first, total_first + total_second, 500):
            client.produce_many_sync(topic_name, [(b"k%d" % j, b"v%d" % j) for j in range(i, i + 500)])

    second = _driver([*args, "drain"])
    _, err = second.communicate(timeout=180)
    assert second.returncode == 0, err.decode()[-3000:]

    rows = spark.read.parquet(str(output)).collect()
    seen = [(r["partition"], r["offset"]) for r in rows]
    assert len(seen) == len(set(seen)), "a record was written twice"
    values = sorted(int(r["value"][1:]) for r in rows)
    assert values == list(range(total_first + total_second))
