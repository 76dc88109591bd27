"""A consumer-group member PROCESS is SIGKILLed mid-stream; the survivor takes over from the last commit.

Two real consumer processes (``group_member_child.py``) join one group on a
real daemon and split a 4-partition topic. Once the victim has committed
progress, it is SIGKILLed (no leave, no final commit). The coordinator removes
it after its session timeout (1.5 s); the survivor is granted its partitions
and resumes from the committed offsets. Checked, per partition:

* no record is skipped: victim and survivor together handled every offset;
* the survivor started each taken-over partition exactly at the offset the
  group had committed when the victim died;
* duplicates (offsets handled by both) all lie at or after that commit, i.e.
  they are records the victim handled after its last commit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import lkstream
from lkstream.client.remote import RemoteBroker
from tests.integration.conftest import REPO, DaemonProcess

pytestmark = pytest.mark.timeout(180)

CHILD = str(Path(__file__).with_name("group_member_child.py"))
TOPIC = "jobs"
GROUP = "workers"
PARTITIONS = 4
PER_PARTITION = 400
SESSION_TIMEOUT_MS = 1500
DEADLINE_S = 60.0


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProcess]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    config = tmp_path / "daemon.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "persist_dir": str(tmp_path / "data"),
                # The members' 1.5 s session is below Kafka's 6 s minimum: the broker allows it here.
                "group_min_session_timeout_ms": 1000,
                "server": {"grpc_port": 0, "http_port": 0, "kafka_port": 0},
            }
        )
    )
    process = DaemonProcess(config, tmp_path / "data", env).start()
    yield process
    process.terminate()


class Member:
    """One child process and the lines it appended to its output file."""

    def __init__(self, address: str, out: Path, stderr: Path, env: dict[str, str]) -> None:
        self.out = out
        self._stderr = open(stderr, "wb")  # noqa: SIM115 (closed in stop())
        self.stderr_path = stderr
        self.proc = subprocess.Popen(
            [
                sys.executable,
                CHILD,
                "--address",
                address,
                "--group",
                GROUP,
                "--topic",
                TOPIC,
                "--out",
                str(out),
                "--session-timeout-ms",
                str(SESSION_TIMEOUT_MS),
                "--heartbeat-interval-ms",
                "300",
                "--commit-interval-ms",
                "100",
                "--delay-ms",
                "3",
            ],
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            env=env,
        )

    def lines(self) -> list[list[str]]:
        if not self.out.exists():
            return []
        text = self.out.read_text()
        # Each line is one write(); a kill can only lose whole lines, but be strict anyway.
        return [line.split() for line in text.splitlines() if line]

    def handled(self) -> dict[int, list[int]]:
        by_pid: dict[int, list[int]] = defaultdict(list)
        for cols in self.lines():
            if cols[0] == "H":
                by_pid[int(cols[1])].append(int(cols[2]))
        return by_pid

    def assignments(self) -> list[dict[int, int]]:
        """Each on_assigned call: {partition: start position}."""
        out = []
        for cols in self.lines():
            if cols[0] == "A":
                pairs = cols[1:]
                out.append({int(pairs[i]): int(pairs[i + 1]) for i in range(0, len(pairs), 2)})
        return out

    def member_id(self) -> str | None:
        return next((cols[1] for cols in self.lines() if cols[0] == "J"), None)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._stderr.close()

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-3000:]


def _wait_until(check: object, what: str, members: list[Member]) -> None:
    assert callable(check)
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        for m in members:
            if m.proc.poll() is not None and m.proc.returncode != -signal.SIGKILL:
                raise AssertionError(f"a member exited (rc={m.proc.returncode}):\n{m.stderr()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}:\n" + "\n".join(m.stderr() for m in members))
        time.sleep(0.02)


def _owned_by(admin: RemoteBroker, member_id: str | None) -> set[int]:
    for m in admin.describe_group(GROUP).members:
        if m.member_id == member_id:
            return {pid for _, pid in m.owned}
    return set()


def test_sigkilled_member_loses_its_partitions_and_the_survivor_resumes_from_the_last_commit(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    admin = lkstream.connect(daemon.address)
    members: list[Member] = []
    try:
        admin.create_topic(TOPIC, PARTITIONS)
        for start in range(0, PER_PARTITION, 20):  # small batches: reads interleave the partitions
            for pid in range(PARTITIONS):
                batch = [(None, b"job-%d" % i) for i in range(start, start + 20)]
                admin.produce_many_sync(TOPIC, batch, partition=pid)
        victim = Member(daemon.address, tmp_path / "victim.txt", tmp_path / "victim.err", daemon.env)
        members.append(victim)
        _wait_until(lambda: victim.member_id() is not None, "the victim to join", members)
        survivor = Member(daemon.address, tmp_path / "survivor.txt", tmp_path / "survivor.err", daemon.env)
        members.append(survivor)
        _wait_until(lambda: survivor.member_id() is not None, "the survivor to join", members)

        # Both own half of the topic, and the victim committed progress on its half.
        _wait_until(
            lambda: len(_owned_by(admin, victim.member_id())) == 2 and len(_owned_by(admin, survivor.member_id())) == 2,
            "the split",
            members,
        )
        victim_pids = sorted(_owned_by(admin, victim.member_id()))
        # Commits made by the victim *after* the split (not just the ones of the handover).
        at_split = {p: admin.committed_offsets(GROUP, TOPIC).get(p, 0) for p in victim_pids}
        _wait_until(
            lambda: all(admin.committed_offsets(GROUP, TOPIC).get(p, 0) >= at_split[p] + 30 for p in victim_pids),
            "commits by the victim",
            members,
        )
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(timeout=30)
        # The victim is dead: nothing changes these until the survivor owns the partitions (after the timeout).
        committed_at_death = {p: admin.committed_offsets(GROUP, TOPIC)[p] for p in victim_pids}
        assert all(o < PER_PARTITION for o in committed_at_death.values()), "the kill was not mid-stream"

        def everything_handled() -> bool:
            both = [victim.handled(), survivor.handled()]
            return all(set(range(PER_PARTITION)) <= {o for h in both for o in h.get(p, [])} for p in range(PARTITIONS))

        _wait_until(everything_handled, "the survivor to handle every remaining record", members)
        took_over = [a for a in survivor.assignments() if set(a) & set(victim_pids)]
        assert took_over, "the survivor never got the victim's partitions"

        victim_handled, survivor_handled = victim.handled(), survivor.handled()
        for pid in victim_pids:
            start = next(a[pid] for a in took_over if pid in a)
            assert start == committed_at_death[pid], (pid, start, committed_at_death)
            theirs = victim_handled[pid]
            ours = survivor_handled[pid]
            assert ours == list(range(start, PER_PARTITION))  # resumed at the commit, in order, nothing skipped
            assert theirs == list(range(len(theirs)))  # the victim read its part in order from 0
            duplicates = set(theirs) & set(ours)
            assert all(o >= committed_at_death[pid] for o in duplicates)
            assert len(theirs) >= committed_at_death[pid]  # it committed only what it had handled
        for pid in sorted(set(range(PARTITIONS)) - set(victim_pids)):
            # The survivor's own partitions moved from the victim (alone at first) in a graceful rebalance:
            # commit before revoke, so each record was handled exactly once.
            assert sorted(victim_handled.get(pid, []) + survivor_handled[pid]) == list(range(PER_PARTITION))
    finally:
        for m in members:
            m.stop()
        admin.close()
