"""Consumer groups through a real daemon: remote members split a topic; ``lkstream groups`` describes and resets.

The CLI runs in-process (click's CliRunner on the real ``lkstream`` command
group) against the daemon subprocess, so its tables and exit codes are the ones
an operator sees.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

import lkstream
from lkstream import Consumer
from lkstream.cli import groups as _groups_cli  # noqa: F401  (registers `lkstream groups` before the lead does)
from lkstream.cli.base import cli
from lkstream.client.remote import RemoteBroker
from tests.integration.conftest import DaemonProcess

pytestmark = pytest.mark.timeout(120)

TOPIC = "orders"
DEADLINE_S = 20.0


def _wait_until(check: object, what: str) -> None:
    assert callable(check)
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class PollingMember:
    """A remote consumer (own connection) polled by its own thread."""

    def __init__(self, address: str, name: str, **options: object) -> None:
        self.broker: RemoteBroker = lkstream.connect(address)
        self.consumer = Consumer(
            self.broker,
            group="billing",
            heartbeat_interval_ms=300,
            auto_commit_interval_ms=100,
            client_id=name,
            **options,  # type: ignore[arg-type]
        )
        self.handled: list[tuple[int, int]] = []
        self.owned: list[tuple[str, int]] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.consumer.subscribe(TOPIC)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                records = self.consumer.poll(timeout=0.1)
                with self.lock:
                    self.handled.extend((r.partition, r.offset) for r in records)
                    self.owned = self.consumer.assignment()
        except BaseException as exc:
            self.error = exc

    def assignment(self) -> list[tuple[str, int]]:
        with self.lock:
            return list(self.owned)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(DEADLINE_S)
        self.consumer.close()
        self.broker.close()
        assert self.error is None, self.error


@pytest.fixture
def admin(daemon: DaemonProcess) -> Iterator[RemoteBroker]:
    with lkstream.connect(daemon.address) as broker:
        broker.create_topic(TOPIC, 4)
        yield broker


def _run_cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_two_remote_consumers_split_a_topic_and_describe_shows_them(daemon: DaemonProcess, admin: RemoteBroker) -> None:
    for pid in range(4):
        admin.produce_many_sync(TOPIC, [(None, f"{pid}-{i}".encode()) for i in range(25)], partition=pid)
    a = PollingMember(daemon.address, "alpha")
    b = PollingMember(daemon.address, "beta")
    try:
        everything = {(TOPIC, p) for p in range(4)}
        _wait_until(
            lambda: len(a.assignment()) == 2 and set(a.assignment()) | set(b.assignment()) == everything,
            "the two members to split the topic",
        )
        _wait_until(lambda: len(a.handled) + len(b.handled) >= 100, "every record")
        # Auto-commit catches up with what was handled.
        _wait_until(lambda: admin.committed_offsets("billing", TOPIC) == dict.fromkeys(range(4), 25), "the commits")
        with a.lock, b.lock:
            handled = sorted(a.handled + b.handled)
        assert handled == [(p, o) for p in range(4) for o in range(25)]  # each record once, none lost

        code, out = _run_cli("groups", "describe", "billing", "--bootstrap", daemon.address)
        assert code == 0, out
        assert "state: Stable" in out
        assert "assignor: range" in out
        assert "members: 2" in out
        a_id = a.consumer.membership.member_id if a.consumer.membership else ""
        a_line = next(line for line in out.splitlines() if line.strip().startswith(a_id))
        assert "alpha" in a_line
        assert f"{TOPIC}[{','.join(str(p) for _, p in sorted(a.assignment()))}]" in a_line
        lag_lines = [line.split() for line in out.splitlines() if line.strip().startswith(TOPIC)]
        assert len(lag_lines) == 4
        for cols in lag_lines:
            _topic, _pid, committed, high, lag, lag_s, owner = cols
            assert (committed, high, lag, lag_s) == ("25", "25", "0", "0.000")
            assert owner in {a_id, b.consumer.membership.member_id if b.consumer.membership else ""}

        code, out = _run_cli("groups", "list", "--bootstrap", daemon.address)
        assert code == 0, out
        assert ["billing", "Stable", "2"] in [line.split() for line in out.splitlines()]

        # An operator reset is refused while the group has live members: exit 1, one clear line.
        code, out = _run_cli(
            "groups", "reset", "billing", "--topic", TOPIC, "--to-earliest", "--bootstrap", daemon.address
        )
        assert code == 1
        assert "live member" in out and "stop its consumers first" in out
        assert admin.committed_offsets("billing", TOPIC) == dict.fromkeys(range(4), 25)
    finally:
        a.close()
        b.close()

    # Both left: the group is Empty, keeps its offsets, and can be reset.
    code, out = _run_cli("groups", "describe", "billing", "--bootstrap", daemon.address)
    assert code == 0, out
    assert "state: Empty" in out
    code, out = _run_cli(
        "groups",
        "reset",
        "billing",
        "--topic",
        TOPIC,
        "--partition",
        "1",
        "--to-offset",
        "10",
        "--bootstrap",
        daemon.address,
    )
    assert code == 0, out
    assert [TOPIC, "1", "25", "10"] in [line.split() for line in out.splitlines()]  # old and new offset
    assert admin.committed_offsets("billing", TOPIC) == {0: 25, 1: 10, 2: 25, 3: 25}
    code, out = _run_cli("groups", "reset", "billing", "--topic", TOPIC, "--to-earliest", "--bootstrap", daemon.address)
    assert code == 0, out
    assert admin.committed_offsets("billing", TOPIC) == dict.fromkeys(range(4), 0)

    # A new member resumes from the reset offsets and reports lag until it catches up.
    code, out = _run_cli("groups", "describe", "billing", "--bootstrap", daemon.address)
    lag_lines = [line.split() for line in out.splitlines() if line.strip().startswith(TOPIC)]
    assert [cols[4] for cols in lag_lines] == ["25"] * 4
    assert all(float(cols[5]) > 0 for cols in lag_lines)


def test_lag_and_timestamp_reset_through_the_cli(daemon: DaemonProcess, admin: RemoteBroker) -> None:
    admin.produce_many_sync(TOPIC, [(None, b"old")] * 5, partition=0)
    time.sleep(0.05)
    boundary_ms = int(time.time() * 1000)
    time.sleep(0.05)
    admin.produce_many_sync(TOPIC, [(None, b"new")] * 3, partition=0)
    code, out = _run_cli(
        "groups",
        "reset",
        "audit",
        "--topic",
        TOPIC,
        "--partition",
        "0",
        "--to-timestamp",
        str(boundary_ms),
        "--bootstrap",
        daemon.address,
    )
    assert code == 0, out
    assert admin.committed_offsets("audit", TOPIC) == {0: 5}
    code, out = _run_cli("groups", "describe", "audit", "--bootstrap", daemon.address)
    assert code == 0, out
    row = next(line.split() for line in out.splitlines() if line.split()[:2] == [TOPIC, "0"])
    assert row[2:5] == ["5", "8", "3"]


def test_groups_cli_errors(daemon: DaemonProcess, admin: RemoteBroker) -> None:
    code, out = _run_cli("groups", "describe", "nobody", "--bootstrap", daemon.address)
    assert code == 1
    assert "NOT_FOUND" in out and "nobody" in out
    code, out = _run_cli("groups", "reset", "g", "--topic", TOPIC, "--bootstrap", daemon.address)
    assert code == 2
    assert "exactly one of" in out
    code, out = _run_cli(
        "groups", "reset", "g", "--topic", TOPIC, "--to-latest", "--to-offset", "1", "--bootstrap", daemon.address
    )
    assert code == 2
    code, out = _run_cli("groups", "reset", "g", "--topic", "missing", "--to-latest", "--bootstrap", daemon.address)
    assert code == 1
    assert "NOT_FOUND" in out
    code, out = _run_cli("groups", "list", "--bootstrap", "127.0.0.1:1")
    assert code == 1
