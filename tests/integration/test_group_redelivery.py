"""Issue 12, finding 12: a group member that commits after each poll never gets a record twice.

Three consumer processes join one group with ``auto_commit=False`` and call
``commit()`` right after handling each ``poll()``. Without a crash, no record
may be delivered twice: ``commit()`` must commit what the application handled
even if a revocation is pending, and rebalance callbacks run only inside
``poll()`` (as in Kafka's clients). The scenario is repeated, each round with a
new group over the same records.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import lkstream
from tests.integration.conftest import REPO, DaemonProcess

CHILD = REPO / "tests" / "integration" / "poll_commit_member.py"
PARTITIONS = 6
PER_PARTITION = 400
ROUNDS = 3
DEADLINE_S = 120.0


def _delivered(outs: list[Path]) -> Counter[tuple[int, int]]:
    seen: Counter[tuple[int, int]] = Counter()
    for out in outs:
        if out.exists():
            for line in out.read_text().splitlines():
                _, pid, offset = line.split()
                seen[(int(pid), int(offset))] += 1
    return seen


def _round(daemon: DaemonProcess, tmp_path: Path, group: str) -> Counter[tuple[int, int]]:
    stop = tmp_path / f"{group}.stop"
    outs = [tmp_path / f"{group}-{n}.out" for n in range(3)]
    children = []
    try:
        for out in outs:
            cmd = [sys.executable, str(CHILD), "--address", daemon.address, "--group", group, "--topic", "t"]
            cmd += ["--out", str(out), "--stop", str(stop)]
            children.append(subprocess.Popen(cmd, env=daemon.env, cwd=REPO))
            time.sleep(0.4)  # staggered joins: each one rebalances a group that is consuming
        deadline = time.monotonic() + DEADLINE_S
        while len(_delivered(outs)) < PARTITIONS * PER_PARTITION:
            assert time.monotonic() < deadline, f"round {group}: only {len(_delivered(outs))} records delivered"
            assert all(c.poll() is None for c in children), "a consumer process died"
            time.sleep(0.1)
        stop.touch()
        for child in children:
            assert child.wait(30) == 0, f"a consumer of {group} failed"
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    return _delivered(outs)


def test_members_committing_after_each_poll_never_receive_a_record_twice(daemon: DaemonProcess, tmp_path: Path) -> None:
    with lkstream.connect(daemon.address) as broker:
        broker.create_topic("t", PARTITIONS)
        for pid in range(PARTITIONS):
            broker.produce_many_sync("t", [(None, b"v" * 100)] * PER_PARTITION, partition=pid)
    for n in range(ROUNDS):
        seen = _round(daemon, tmp_path, f"g{n}")
        twice = sorted(tp for tp, count in seen.items() if count > 1)
        assert not twice, f"round {n}: {len(twice)} records delivered twice without a crash, e.g. {twice[:10]}"
        assert len(seen) == PARTITIONS * PER_PARTITION
