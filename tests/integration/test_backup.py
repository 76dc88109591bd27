"""``lkstream backup`` under a live produce load, then ``restore`` and ``verify`` (issue 13, finding 7).

A real daemon subprocess takes keyed records from a producer thread (and group
commits) while ``lkstream backup`` copies its data directory; then the backup is
restored into a fresh directory, ``lkstream verify`` must exit 0, and every record
up to the offsets the backup states must be there, equal to what the producer got
acknowledged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import lkstream
from lkstream import Broker
from lkstream.storage.backup import MANIFEST
from tests.integration.conftest import REPO, DaemonFactory

pytestmark = pytest.mark.timeout(240)


def lkstream_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "lkstream.cli", *args], capture_output=True, text=True, timeout=120, check=False, env=env
    )


class Load:
    """Keyed records into ``load`` (3 partitions) from a thread, plus group commits; remembers what was acked."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.acked: dict[tuple[int, int], bytes] = {}
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Load:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self.errors, self.errors

    def _run(self) -> None:
        try:
            with lkstream.connect(self.address) as client:
                n = 0
                while not self._stop.is_set():
                    batch = [(f"k{(n + i) % 11}", f"value-{n + i:07d}".encode()) for i in range(50)]
                    for (pid, offset), (_, value) in zip(client.produce_many_sync("load", batch), batch, strict=True):
                        self.acked[(pid, offset)] = value
                    client.commit_offset("readers", "load", n % 3, 0)
                    n += 50
        except BaseException as exc:  # reported by stop()
            self.errors.append(exc)


def _check_restored(
    restored: Path, ends: dict[tuple[str, int], tuple[int, int]], load: Load, before: dict[tuple[int, int], bytes]
) -> None:
    with Broker(persist_dir=str(restored)) as broker:
        for pid in range(3):
            start, end = ends[("load", pid)]
            assert start == 0
            # Everything acknowledged before the backup started is in it.
            assert end >= 1 + max(o for (p, o) in before if p == pid)
            records = []
            while len(records) < end:
                records += broker.read_from("load", pid, len(records))
            assert [r.offset for r in records] == list(range(end))
            assert [r.value for r in records] == [load.acked[(pid, o)] for o in range(end)]
            assert broker.describe_topic("load").partitions[pid].next_offset == end
        assert broker.offset_store.read_committed("readers", "load", 0) == 0


def test_backup_under_load_restores_every_acknowledged_record_up_to_the_stated_offsets(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    # Small segments: the backup sees sealed segments, a roll or two while it copies, and an active tail.
    daemon = start_daemon(segment_max_bytes=64 * 1024, fsync_mode="group")
    with lkstream.connect(daemon.address) as client:
        client.create_topic("load", 3)
        client.create_topic("idle", 1)  # an empty partition is backed up too
    load = Load(daemon.address).start()
    deadline = time.monotonic() + 60
    while len(load.acked) < 20_000 and time.monotonic() < deadline:
        time.sleep(0.05)
    before = dict(load.acked)
    backup = tmp_path / "backup"
    done = lkstream_cli("backup", str(daemon.data_dir), str(backup))
    acked_during = len(load.acked) - len(before)
    load.stop()
    assert done.returncode == 0, done.stderr
    assert acked_during > 0, "the producer kept writing while the backup ran"

    manifest = json.loads((backup / MANIFEST).read_text())
    ends = {(p["topic"], p["partition"]): (p["log_start_offset"], p["end_offset"]) for p in manifest["partitions"]}
    assert ends[("idle", 0)] == (0, 0)
    assert manifest["committed_offsets"] == 3
    table = [line.split() for line in done.stdout.splitlines()]
    assert table[0] == ["TOPIC", "PARTITION", "START", "END", "SEGMENTS", "BYTES"]
    assert {(r[0], int(r[1])): (int(r[2]), int(r[3])) for r in table[1:]} == ends
    assert all(int(r[4]) > 1 for r in table[1:] if r[0] == "load"), "sealed segments and an active one"

    restored = tmp_path / "restored"
    done = lkstream_cli("restore", str(backup), str(restored))
    assert done.returncode == 0, done.stderr
    done = lkstream_cli("verify", str(restored))
    assert done.returncode == 0, done.stdout
    assert "0 errors, 0 warnings" in done.stdout, done.stdout
    _check_restored(restored, ends, load, before)


def test_restore_refuses_a_non_empty_target_and_backup_refuses_a_non_empty_dest(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    daemon = start_daemon()
    with lkstream.connect(daemon.address) as client:
        client.produce_many_sync("t", [(None, b"x")])
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "keep.txt").write_text("mine")
    done = lkstream_cli("backup", str(daemon.data_dir), str(occupied))
    assert done.returncode == 2 and "refusing to back up into" in done.stderr
    backup = tmp_path / "b"
    assert lkstream_cli("backup", str(daemon.data_dir), str(backup)).returncode == 0
    done = lkstream_cli("restore", str(backup), str(occupied))
    assert done.returncode == 2 and "refusing to restore into" in done.stderr and "not empty" in done.stderr
    assert (occupied / "keep.txt").read_text() == "mine"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert lkstream_cli("restore", str(backup), str(empty)).returncode == 0
    assert not (empty / MANIFEST).exists()
    done = lkstream_cli("restore", str(daemon.data_dir), str(tmp_path / "x"))
    assert done.returncode == 2 and "is not an lkstream backup" in done.stderr
