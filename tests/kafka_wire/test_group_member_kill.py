"""Two Kafka-client members of a group and an LKSTREAM Consumer of another group share a topic on the
daemon; one Kafka member is SIGKILLed: the other takes its partition over within the session timeout,
reads on from the dead member's last commit (nothing lost), and the LKSTREAM group is undisturbed.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

import lkstream
from lkstream import Consumer
from tests.integration.conftest import REPO, DaemonFactory

CHILD = Path(__file__).with_name("kafka_member_child.py")
SESSION_MS = 6_000
HEARTBEAT_S = SESSION_MS / 10 / 1000  # the child's heartbeat.interval.ms
DEADLINE_S = 60.0
PER_ROUND = 100  # records per partition and round


class Member:
    """One child process and the events it printed."""

    def __init__(self, name: str, bootstrap: str) -> None:
        self.name = name
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.process = subprocess.Popen(
            [sys.executable, str(CHILD), bootstrap, "shared", "kafka-members", str(SESSION_MS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.assignments: list[tuple[float, list[int]]] = []
        self.seqs: set[int] = set()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.events.put(json.loads(line))

    def drain(self) -> None:
        while True:
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                return
            if event["event"] == "assigned":
                self.assignments.append((event["t"], event["partitions"]))
            elif event["event"] == "record":
                self.seqs.add(event["seq"])

    def owns(self) -> list[int]:
        return self.assignments[-1][1] if self.assignments else []

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


def wait_until(condition: Any, what: str, members: list[Member], timeout: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for member in members:
            member.drain()
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}: {[(m.name, m.owns(), len(m.seqs)) for m in members]}")


def produce_round(bootstrap: str, first: int) -> set[int]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    seqs = set(range(first, first + 2 * PER_ROUND))
    for seq in sorted(seqs):
        producer.produce("shared", value=str(seq).encode(), partition=seq % 2)
    assert producer.flush(DEADLINE_S) == 0
    return seqs


def test_a_sigkilled_kafka_member_is_replaced_within_the_session_timeout(start_daemon: DaemonFactory) -> None:
    daemon = start_daemon()
    bootstrap = next(line for line in daemon.output if "kafka=" in line).split("kafka=", 1)[1].split()[0]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic("shared", 2)]).values():
        future.result(DEADLINE_S)
    produced = produce_round(bootstrap, 0)

    lk_read: list[int] = []
    stop_lk = threading.Event()
    remote = lkstream.connect(daemon.address)
    lk_consumer = Consumer(remote, group="lk-readers", session_timeout_ms=SESSION_MS, heartbeat_interval_ms=500)
    lk_consumer.subscribe("shared")

    def read_lkstream() -> None:
        while not stop_lk.is_set():
            lk_read.extend(int(r.value) for r in lk_consumer.poll(0.2))

    lk_thread = threading.Thread(target=read_lkstream, daemon=True)
    lk_thread.start()
    a, b = Member("a", bootstrap), Member("b", bootstrap)
    try:
        wait_until(
            lambda: sorted(a.owns() + b.owns()) == [0, 1] and a.seqs | b.seqs == produced,
            "both members to share the topic and read the first round",
            [a, b],
        )
        victim, survivor = (a, b) if a.owns() else (b, a)
        victim.process.send_signal(signal.SIGKILL)
        killed_at = time.time()
        victim.process.wait(10)
        produced |= produce_round(bootstrap, 2 * PER_ROUND)
        wait_until(lambda: survivor.owns() == [0, 1], "the survivor to take both partitions", [survivor])
        takeover_s = next(t for t, parts in survivor.assignments if parts == [0, 1] and t > killed_at) - killed_at
        # The coordinator drops the dead member SESSION_MS after its last heartbeat (sent within
        # HEARTBEAT_S before the kill); the survivor learns it at its next heartbeat and rejoins.
        assert takeover_s < SESSION_MS / 1000 + HEARTBEAT_S + 1.0, takeover_s
        wait_until(lambda: victim.seqs | survivor.seqs == produced, "every record to be read", [survivor])
        deadline = time.monotonic() + DEADLINE_S
        while set(lk_read) != produced and time.monotonic() < deadline:
            time.sleep(0.05)
        assert set(lk_read) == produced  # the LKSTREAM group read everything, whatever the Kafka group did
        assert len(lk_read) == len(produced)  # and nothing twice: its group never rebalanced
        described = admin.describe_consumer_groups(["kafka-members"])["kafka-members"].result(DEADLINE_S)
        assert [len(m.assignment.topic_partitions) for m in described.members] == [2]
    finally:
        stop_lk.set()
        lk_thread.join(10)
        lk_consumer.close()
        remote.close()
        a.stop()
        b.stop()
