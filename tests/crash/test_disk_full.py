"""Disk full: a produce on a full filesystem fails cleanly and the broker recovers when space returns.

Each test mounts its own 2 MiB tmpfs (root only; skipped with the reason
otherwise), fills it with a filler file and records until a produce fails, and
checks the contract:

* the failure is ``DiskFullError`` (a ``StorageError``, retriable) whose message
  says the disk is full and names the file;
* nothing acknowledged earlier is damaged: the open broker still serves it, and
  so does a broker reopened on the full disk;
* the broker stays usable for reads, and a produce retried while still full
  fails the same way without moving the log;
* once the filler is deleted, appends resume at the log's next offset.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from lkstream import Broker, DiskFullError, StorageError

from ._support import Seed

TOPIC = "full"
TMPFS_SIZE = "2m"
FILLER_BYTES = 512 * 1024


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A fresh, small tmpfs mounted for this test and always unmounted afterwards."""
    mount_point = tmp_path / "tmpfs"
    mount_point.mkdir()
    # A real ENOSPC needs a small filesystem of our own, and mounting one needs root. CI and
    # developer machines here run as root; elsewhere these tests cannot create the condition.
    if os.geteuid() != 0:
        pytest.skip("disk-full tests mount a tmpfs, which needs root")
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a {TMPFS_SIZE} tmpfs at {mount_point}: {result.stderr.strip()}")
    try:
        yield mount_point
    finally:
        done = subprocess.run(["umount", str(mount_point)], capture_output=True, check=False)
        if done.returncode != 0:  # something still holds a file open: detach it anyway
            subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, check=False)


def open_broker(data_dir: Path, mode: str) -> Broker:
    return Broker(
        persist_dir=str(data_dir),
        fsync_mode=mode,
        partitions=1,
        segment_max_bytes=256 * 1024,
        index_interval_bytes=4096,
    )


def read_everything(broker: Broker) -> dict[int, tuple[bytes | None, bytes | None]]:
    part = broker.partition(TOPIC, 0)
    offset, end, out = part.log_start_offset, part.high_watermark, {}
    while offset < end:
        records = part.read_from(offset)
        assert records, f"nothing read at {offset} below {end}"
        for record in records:
            out[record.offset] = (record.key, record.value)
        offset = records[-1].offset + 1
    return out


def make_records(seed: Seed, first: int, count: int, size: int = 8000) -> list[tuple[bytes, bytes]]:
    rng = seed.sub(first).rng()
    return [
        (f"k{n}".encode(), f"{n}:".encode() + rng.randbytes(rng.randint(size // 2, size)))
        for n in range(first, first + count)
    ]


class Attempts:
    """Every record ever sent, acknowledged or not, by key; and the acknowledged ones by offset."""

    def __init__(self) -> None:
        self.sent: dict[bytes, bytes] = {}
        self.acked: dict[int, tuple[bytes, bytes]] = {}
        self.next_n = 0

    def produce(self, broker: Broker, seed: Seed, count: int, size: int) -> None:
        records = make_records(seed, self.next_n, count, size)
        self.next_n += count
        self.sent.update(records)
        results = broker.produce_many_sync(TOPIC, records)
        for (_, offset), record in zip(results, records, strict=True):
            self.acked[offset] = record

    def check(self, broker: Broker, seed: Seed) -> dict[int, tuple[bytes | None, bytes | None]]:
        """Acked records intact; anything else in the log is a whole record that was sent, in order."""
        got = read_everything(broker)
        assert {o: got[o] for o in self.acked if o in got} == self.acked and set(self.acked) <= set(got), (
            f"acknowledged data changed {seed}"
        )
        last_n = -1
        for offset in sorted(got):
            key, value = got[offset]
            assert key in self.sent and self.sent[key] == value, f"offset {offset} holds bytes never sent {seed}"
            n = int(key[1:])  # type: ignore[index]
            assert n > last_n, f"offset {offset}: record {n} after {last_n} {seed}"
            last_n = n
        return got


def fill_until_full(broker: Broker, seed: Seed, attempts: Attempts) -> DiskFullError:
    """Produce until even a one-record produce of a few bytes fails; return the last error.

    Big batches first, then smaller ones, so the disk ends up full to the last
    page and every writer (segment, index, checkpoint, rotation) meets ENOSPC.
    """
    last: DiskFullError | None = None
    for count, size in [(8, 8000), (1, 8000), (1, 1000), (1, 100), (1, 10)]:
        for _ in range(10_000):
            try:
                attempts.produce(broker, seed, count, size)
            except DiskFullError as exc:
                last = exc
                break
        else:
            raise AssertionError(f"the {TMPFS_SIZE} disk never filled up {seed}")
    assert last is not None
    return last


@pytest.mark.parametrize("mode", ["sync", "group"])
def test_produce_on_a_full_disk_fails_cleanly_and_resumes_when_space_is_freed(
    mode: str, tmpfs: Path, crash_seed: Seed
) -> None:
    data_dir = tmpfs / "data"
    filler = tmpfs / "filler"
    filler.write_bytes(os.urandom(FILLER_BYTES))
    attempts = Attempts()

    broker = open_broker(data_dir, mode)
    try:
        error = fill_until_full(broker, crash_seed, attempts)
        assert attempts.acked, f"nothing fit on the disk before it was full {crash_seed}"

        # The error: typed, retriable, and it says what happened and where.
        assert isinstance(error, StorageError), crash_seed
        assert error.retriable, crash_seed
        assert error.errno in (errno.ENOSPC, errno.EDQUOT), f"errno {error.errno} {crash_seed}"
        assert "disk full" in str(error), f"unclear message: {error} {crash_seed}"
        assert error.path and error.path.startswith(str(data_dir)), f"no path in {error!r} {crash_seed}"

        # The broker stays usable for reads and serves everything acknowledged, unchanged.
        # (A produce that failed in sync mode may have left whole batches that were written
        # but not fsynced when the failure was reported: they must hold exactly what was sent.)
        attempts.check(broker, crash_seed)
        part = broker.partition(TOPIC, 0)

        # Still full: a retry fails the same way and does not move the log. A few bytes may
        # have been freed meanwhile (a failed metadata write cleans up its tmp file), so a
        # retry or two can still fit; the disk must be full again within a few attempts.
        for _ in range(100):
            next_before = part.stats().next_offset
            try:
                attempts.produce(broker, crash_seed, 1, 10)
            except DiskFullError:
                break
        else:
            raise AssertionError(f"the disk never filled up again {crash_seed}")
        assert part.stats().next_offset == next_before, f"a failed produce moved the log {crash_seed}"
    finally:
        broker.close()

    # Nothing was damaged on disk: a broker reopened on the still-full disk serves it all.
    with open_broker(data_dir, mode) as broker:
        [recovery] = broker.recoveries
        assert recovery.truncated_bytes == 0, f"{recovery} {crash_seed}"
        attempts.check(broker, crash_seed)
        next_before = broker.partition(TOPIC, 0).stats().next_offset

        # Free space: appends resume right where the log ends.
        filler.unlink()
        attempts.produce(broker, crash_seed, 8, 8000)
        new_offsets = sorted(o for o in attempts.acked if o >= next_before)
        assert new_offsets == list(range(next_before, next_before + 8)), f"{new_offsets} {crash_seed}"
        attempts.check(broker, crash_seed)

    with open_broker(data_dir, mode) as broker:
        attempts.check(broker, crash_seed)


def test_disk_full_without_restart_resumes_in_the_same_broker(tmpfs: Path, crash_seed: Seed) -> None:
    """The same broker object keeps working after ENOSPC: no reopen needed once space returns."""
    data_dir = tmpfs / "data"
    filler = tmpfs / "filler"
    filler.write_bytes(os.urandom(FILLER_BYTES))
    attempts = Attempts()
    with open_broker(data_dir, "sync") as broker:
        fill_until_full(broker, crash_seed, attempts)
        part = broker.partition(TOPIC, 0)
        filler.unlink()
        # In sync mode a batch written before its fsync failed becomes durable with the next
        # successful round; appends go after it, never over it.
        next_before = part.stats().next_offset
        attempts.produce(broker, crash_seed, 4, 8000)
        new_offsets = sorted(o for o in attempts.acked if o >= next_before)
        assert new_offsets == list(range(next_before, next_before + 4)), f"{new_offsets} {crash_seed}"
        attempts.check(broker, crash_seed)
    with open_broker(data_dir, "sync") as broker:
        assert broker.recoveries[0].truncated_bytes == 0, crash_seed
        attempts.check(broker, crash_seed)
