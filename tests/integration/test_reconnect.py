"""Clients outlive a daemon restart (issue 13, finding 4): followers and producers reconnect and miss nothing.

A real daemon subprocess is stopped with SIGTERM, and later killed with SIGKILL, and
started again on the same port and data directory, under a running
``lkstream consume --follow``, a running ``lkstream produce`` fed line by line, and
the Python ``Consumer``/``Producer`` over ``lkstream.connect``. Produce is
at-least-once: a request resent after the connection dropped may be appended twice,
so the checks are "every acknowledged value is there, offsets have no gaps", and
duplicates are allowed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest

import lkstream
from lkstream import Consumer, Producer
from tests.integration.conftest import REPO, DaemonProcess, RestartDaemon

pytestmark = pytest.mark.timeout(240)

DEADLINE_S = 60.0


def _env() -> dict[str, str]:
    values = dict(os.environ)
    values["PYTHONPATH"] = str(REPO) + os.pathsep + values.get("PYTHONPATH", "")
    return values


def _wait_for(what: str, condition: Callable[[], bool], deadline_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {deadline_s}s waiting for {what}")
        time.sleep(0.05)


def _printed(path: Path) -> list[dict[str, object]]:
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines if line.endswith("}")]


def _feed(stdin: IO[str], first: int, count: int) -> None:
    for n in range(first, first + count):
        stdin.write(f"v{n}\n")
        stdin.flush()
        time.sleep(0.002)


def _check_everything_arrived(rows: list[dict[str, object]], total: int, ends: dict[int, int]) -> None:
    assert {r["value"] for r in rows} >= {f"v{n}" for n in range(total)}
    by_partition: dict[int, list[int]] = {}
    for r in rows:
        by_partition.setdefault(int(str(r["partition"])), []).append(int(str(r["offset"])))
    for pid, end in ends.items():
        offsets = by_partition.get(pid, [])
        assert offsets == list(range(end)), f"partition {pid}: printed offsets are not 0..{end - 1} in order"


def test_cli_follower_and_producer_survive_a_sigterm_and_a_sigkill_restart(
    daemon: DaemonProcess, restart_daemon: RestartDaemon, tmp_path: Path
) -> None:
    with lkstream.connect(daemon.address) as client:
        client.create_topic("ticks", 2)
    printed = tmp_path / "follow.jsonl"
    cli = [sys.executable, "-m", "lkstream.cli"]
    with printed.open("w") as out:
        follower = subprocess.Popen(
            [*cli, "consume", "ticks", "--follow", "--output", "json", "--bootstrap", daemon.address],
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
        )
    producer = subprocess.Popen(
        [*cli, "produce", "ticks", "--bootstrap", daemon.address],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    assert producer.stdin is not None
    try:
        _feed(producer.stdin, 0, 100)
        _wait_for("the first 100 records", lambda: len(_printed(printed)) >= 100)

        assert daemon.terminate() == 0  # SIGTERM: a graceful stop
        _feed(producer.stdin, 100, 50)  # written while nothing listens
        current = restart_daemon(daemon)
        _feed(producer.stdin, 150, 50)
        _wait_for("200 records after the SIGTERM restart", lambda: len(_printed(printed)) >= 200)

        current.kill()  # SIGKILL
        _feed(producer.stdin, 200, 50)
        current = restart_daemon(current)
        _feed(producer.stdin, 250, 50)
        producer.stdin.close()
        assert producer.wait(DEADLINE_S) == 0, producer.stderr.read() if producer.stderr else ""
        assert producer.stdout is not None
        assert "300 records acknowledged" in producer.stdout.read()

        with lkstream.connect(current.address) as client:
            ends = {pid: s.high_watermark for pid, s in enumerate(client.describe_topic("ticks").partitions)}
        assert sum(ends.values()) >= 300
        _wait_for("every record appended", lambda: len(_printed(printed)) >= sum(ends.values()))
        _check_everything_arrived(_printed(printed), 300, ends)
        assert follower.poll() is None, "the follower keeps following"
    finally:
        for process in (producer, follower):
            if process.poll() is None:
                process.terminate()
                process.wait(20)
    assert follower.stderr is not None
    notes = follower.stderr.read()
    assert "lost the daemon at" in notes and "reconnected" in notes and "Traceback" not in notes


def test_python_consumer_and_producer_survive_a_sigkill_restart(
    daemon: DaemonProcess, restart_daemon: RestartDaemon
) -> None:
    address = daemon.address
    producing = lkstream.connect(address)
    consuming = lkstream.connect(address)
    try:
        producing.create_topic("py", 3)
        producer = Producer(producing, linger_ms=5)
        consumer = Consumer(consuming, group="readers")
        consumer.subscribe("py", from_committed=True)
        received: list[str] = []
        stop = threading.Event()

        def read() -> None:
            while not stop.is_set():
                received.extend((r.value or b"").decode() for r in consumer.poll(timeout=0.5))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        futures = [producer.send_sync("py", f"p{n}", key=f"k{n % 7}") for n in range(300)]
        producer.flush_sync()
        _wait_for("the first 300 records", lambda: len(received) >= 300)

        daemon.kill()  # SIGKILL
        later = [producer.send_sync("py", f"p{n}", key=f"k{n % 7}") for n in range(300, 400)]
        restarted = restart_daemon(daemon)
        producer.flush_sync()
        acknowledged = [f.result(DEADLINE_S) for f in futures + later]
        assert len(acknowledged) == 400
        _wait_for("every record after the restart", lambda: {f"p{n}" for n in range(400)} <= set(received))
        stop.set()
        reader.join(10)
        producer.close_sync()
        consumer.close()
        assert restarted.process is not None and restarted.process.poll() is None
    finally:
        producing.close()
        consuming.close()
