"""A topic whose partitions were built at their first use survives SIGKILL (issue 12, finding 9).

A child process creates a topic of many partitions, writes acknowledged records (``sync``
mode) to a few of them and is SIGKILLed; the restarted broker must open every partition (the
never-used ones empty), with every acknowledged record, and take new writes everywhere.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from lkstream import Broker

PARTITIONS = 300
USED = {7: 5, 123: 3, 299: 1}  # partition -> acknowledged records

CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from lkstream import Broker
    broker = Broker(persist_dir=sys.argv[1], fsync_mode="sync", max_partitions=1000)
    broker.create_topic("wide", {partitions})
    for pid, count in {used}.items():
        for i in range(count):
            broker.produce_many_sync("wide", [(None, f"{{pid}}-{{i}}".encode())], partition=pid)
    print("acknowledged", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
).format(partitions=PARTITIONS, used=USED)


def test_lazily_built_partitions_keep_every_acknowledged_record_across_sigkill(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    data = tmp_path / "data"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(data)],
        capture_output=True,
        text=True,
        env=subprocess_env,
        timeout=120,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert "acknowledged" in done.stdout
    with Broker(persist_dir=str(data), max_partitions=1000) as broker:
        stats = broker.describe_topic("wide").partitions
        assert len(stats) == PARTITIONS
        assert {pid: s.high_watermark for pid, s in enumerate(stats) if s.high_watermark} == USED
        for pid, count in USED.items():
            assert [r.value for r in broker.read_from("wide", pid, 0)] == [f"{pid}-{i}".encode() for i in range(count)]
        assert broker.produce_many_sync("wide", [(None, b"after")], partition=0) == [(0, 0)]
        assert broker.produce_many_sync("wide", [(None, b"after")], partition=7) == [(7, 5)]
