"""Simulated power loss on the in-memory file seam (``faulty.FaultyDisk``).

SIGKILL cannot show what ``group`` mode risks, because the kernel keeps the
page cache. A power loss does not: whatever was written after the last fsync
may vanish, be cut mid-batch, turn to zeros or garbage. These tests drive a
``PartitionLog`` the way the broker does (append = acknowledged in group mode;
``flush`` = the group commit), pull the plug at a seeded random moment, recover
on the same simulated disk and check the contract:

* nothing that was fsynced is lost (everything below the durable offset at the
  moment of the crash survives, byte for byte);
* the loss is bounded by what was not yet fsynced: under the group-commit
  policy "fsync once ``group_bytes`` are waiting", fewer than ``group_bytes``
  of acknowledged data;
* what survives is a prefix of what was acknowledged: no hole, no foreign
  byte, and no torn or corrupt batch is ever served (everything is decoded and
  the simulated files are validated byte for byte);
* new appends continue at the offset right after the last surviving record.

``sync`` mode is checked the same way through the real ``GroupCommitter``:
there, every acknowledged record survives a power loss.
"""

from __future__ import annotations

import contextlib
import random
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from lkstream.errors import StorageError
from lkstream.format.batch import check_batch
from lkstream.format.codec import decode_batches, encode_batch
from lkstream.storage.clock import ManualClock
from lkstream.storage.durability import FsyncMode, GroupCommitter
from lkstream.storage.log import LogConfig, PartitionLog
from lkstream.storage.segment import SEGMENT_SUFFIX, parse_segment_name

from ._support import Seed
from .faulty import CRASH_MODES, FaultyDisk


@dataclass
class Acked:
    """The acknowledged log: records by offset, and the byte size of each batch."""

    records: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)
    batches: list[tuple[int, int, int]] = field(default_factory=list)  # (base, next, size)

    @property
    def next_offset(self) -> int:
        return self.batches[-1][1] if self.batches else 0

    def add(self, base: int, pairs: list[tuple[bytes, bytes]], size: int) -> None:
        assert base == self.next_offset, f"append at {base}, expected {self.next_offset}"
        for i, pair in enumerate(pairs):
            self.records[base + i] = pair
        self.batches.append((base, base + len(pairs), size))

    def truncate(self, next_offset: int) -> None:
        self.batches = [b for b in self.batches if b[1] <= next_offset]
        assert self.next_offset == next_offset, f"{next_offset} is not a batch boundary of the acked log"
        self.records = {o: r for o, r in self.records.items() if o < next_offset}

    def bytes_from(self, offset: int) -> int:
        return sum(size for base, _, size in self.batches if base >= offset)


def make_batch(rng: random.Random, first: int) -> tuple[bytearray, list[tuple[bytes, bytes]]]:
    pairs = [
        (f"k{n}".encode(), f"{n}:".encode() + rng.randbytes(rng.randint(0, 400)))
        for n in range(first, first + rng.randint(1, 12))
    ]
    return encode_batch(pairs, timestamp_ms=1_700_000_000_000 + first), pairs


def open_log(directory: Path, disk: FaultyDisk, config: LogConfig, clock: ManualClock) -> PartitionLog:
    return PartitionLog(str(directory), "t", 0, config, clock=clock, file_factory=disk.open)


def check_log(log: PartitionLog, acked: Acked, disk: FaultyDisk, context: str) -> None:
    """Read and decode everything; compare with ``acked``; validate the simulated files."""
    offset, end = log.log_start_offset, log.next_offset
    assert offset == 0, context
    while offset < end:
        result = log.read(offset, 16 * 1024)
        records = decode_batches(result.data, "t", 0, offset)
        assert records, f"no record at {offset} below {end} {context}"
        for record in records:
            assert record.offset == offset, f"gap: {record.offset} after {offset - 1} {context}"
            assert (record.key, record.value) == acked.records[offset], f"offset {offset} differs {context}"
            offset += 1
    expected = 0
    paths = log.segment_paths()
    for path in paths:
        base = parse_segment_name(Path(path).name)[0]  # type: ignore[index]
        assert base == expected, f"{path} does not continue at {expected} {context}"
        data, pos = disk.content(path), 0
        if path == paths[-1]:
            # Bytes past the active segment's logical end (a failed append whose rollback
            # failed) are overwritten by the next append or cut by recovery; sealed
            # segments are never validated again, so they must hold nothing of the kind.
            data = data[: log.stats().active_segment_bytes]
        while pos < len(data):
            header = check_batch(data, pos)
            assert header.base_offset == expected, f"{path}@{pos}: offset {header.base_offset} {context}"
            expected, pos = header.next_offset, pos + header.size
    assert expected == end, f"files end at offset {expected}, log says {end} {context}"


def random_config(rng: random.Random) -> tuple[LogConfig, int]:
    config = LogConfig(
        segment_max_bytes=rng.choice([4096, 16384, 1 << 20]),
        index_interval_bytes=rng.choice([0, 512, 4096]),
        checkpoint_interval_ms=rng.choice([1, 300, 5000]),
    )
    group_bytes = rng.choice([1024, 8192, 65536])
    return config, group_bytes


def produce_group_mode(
    log: PartitionLog, rng: random.Random, acked: Acked, clock: ManualClock, group_bytes: int
) -> None:
    """Append as the broker does in ``group`` mode: acknowledged on return, fsynced by policy.

    The policy is the group committer's: fsync as soon as ``group_bytes`` are
    waiting, and sometimes earlier (the interval timer firing).
    """
    for _ in range(rng.randint(0, 80)):
        batch, pairs = make_batch(rng, acked.next_offset)
        size = len(batch)
        result = log.append(batch)
        acked.add(result.base_offset, pairs, size)
        clock.advance(rng.randint(0, 40))
        group_commit(log, rng, acked, group_bytes)


def group_commit(log: PartitionLog, rng: random.Random, acked: Acked, group_bytes: int) -> None:
    if acked.bytes_from(log.durable_next_offset) >= group_bytes or rng.random() < 0.15:
        log.flush()


@pytest.mark.parametrize("mode", [*CRASH_MODES, "mixed"])
def test_power_loss_in_group_mode_loses_only_unsynced_data(mode: str, crash_seed: Seed, tmp_path: Path) -> None:
    for scenario in range(25):
        seed = crash_seed.sub(scenario)
        rng = seed.rng()
        disk = FaultyDisk(rng.randrange(2**32))
        config, group_bytes = random_config(rng)
        clock = ManualClock()
        directory = tmp_path / f"s{scenario}"
        log = open_log(directory, disk, config, clock)
        acked = Acked()
        for generation in range(3):
            context = f"(scenario {scenario}, generation {generation}, {config}, group_bytes={group_bytes}) {seed}"
            produce_group_mode(log, rng, acked, clock, group_bytes)
            durable = log.durable_next_offset
            unsynced_bytes = acked.bytes_from(durable)
            assert unsynced_bytes < group_bytes, f"the policy let {unsynced_bytes} bytes wait {context}"
            crashed = disk.crash(None if mode == "mixed" else mode)
            log = open_log(directory, disk, config, clock)
            survived = log.next_offset
            assert survived >= durable, (
                f"fsynced data lost: durable up to offset {durable}, recovered up to {survived}; "
                f"crash {crashed} recovery {log.recovery} {context}"
            )
            assert survived <= acked.next_offset, f"recovered {survived} past the acked {acked.next_offset} {context}"
            lost_bytes = acked.bytes_from(survived)
            assert lost_bytes <= unsynced_bytes < group_bytes, context
            acked.truncate(survived)
            check_log(log, acked, disk, context)
            # Appends continue right after the last surviving record.
            batch, pairs = make_batch(rng, survived)
            size = len(batch)
            assert log.append(batch).base_offset == survived, context
            acked.add(survived, pairs, size)
            group_commit(log, rng, acked, group_bytes)
            check_log(log, acked, disk, context)
        log.close()
        reopened = open_log(directory, disk, config, clock)
        assert reopened.recovery.truncated_bytes == 0, f"a clean close left a tail to cut {seed}"
        check_log(reopened, acked, disk, f"after a clean close {seed}")
        reopened.close()


def test_power_loss_with_failed_writes_and_failed_rollbacks(crash_seed: Seed, tmp_path: Path) -> None:
    """Appends that fail mid-write (disk full), sometimes without a successful rollback.

    A failed append is not acknowledged and must leave the log appendable at the
    same offset; whatever torn bytes stay behind in the files must never be
    served, neither before nor after a power loss and recovery.
    """
    for scenario in range(20):
        seed = crash_seed.sub(scenario)
        rng = seed.rng()
        disk = FaultyDisk(rng.randrange(2**32), append_fault_rate=0.08, rollback_fault_rate=0.5)
        config, _ = random_config(rng)
        clock = ManualClock()
        directory = tmp_path / f"s{scenario}"
        log = open_log(directory, disk, config, clock)
        acked = Acked()
        for generation in range(3):
            context = f"(scenario {scenario}, generation {generation}, {config}) {seed}"
            for _ in range(rng.randint(1, 80)):
                batch, pairs = make_batch(rng, acked.next_offset)
                size = len(batch)
                try:
                    result = log.append(batch)
                except StorageError:
                    assert log.next_offset == acked.next_offset, f"a failed append moved the log {context}"
                    continue
                acked.add(result.base_offset, pairs, size)
                if rng.random() < 0.2:
                    with contextlib.suppress(StorageError):  # a failed fsync: simply not durable yet
                        log.flush()
            check_log(log, acked, disk, f"before the crash {context}")
            durable = log.durable_next_offset
            disk.crash(rng.choice([None, "drop", "torn"]))
            disk.append_fault_rate = 0.0  # recovery itself runs on a healthy disk here
            log = open_log(directory, disk, config, clock)
            disk.append_fault_rate = 0.08
            assert durable <= log.next_offset <= acked.next_offset, f"{log.recovery} {context}"
            acked.truncate(log.next_offset)
            check_log(log, acked, disk, f"after recovery {context}")
        disk.append_fault_rate = 0.0
        log.close()


class _SyncAcks:
    """The highest offset acknowledged by the committer (callbacks run on its thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = 0

    def callback(self, next_offset: int):  # type: ignore[no-untyped-def]
        def done(error: BaseException | None) -> None:
            if error is None:
                with self._lock:
                    self._next = max(self._next, next_offset)

        return done

    @property
    def acked_next(self) -> int:
        with self._lock:
            return self._next


def test_power_loss_in_sync_mode_keeps_every_acknowledged_record(crash_seed: Seed, tmp_path: Path) -> None:
    """Through the real group-commit thread: a batch acknowledged in sync mode survives power loss."""
    for scenario in range(8):
        seed = crash_seed.sub(scenario)
        rng = seed.rng()
        disk = FaultyDisk(rng.randrange(2**32))
        config, _ = random_config(rng)
        directory = tmp_path / f"s{scenario}"
        clock = ManualClock()
        log = open_log(directory, disk, config, clock)
        committer = GroupCommitter(FsyncMode.SYNC)
        produced = Acked()
        acks = _SyncAcks()
        for _ in range(rng.randint(20, 150)):
            batch, pairs = make_batch(rng, produced.next_offset)
            size = len(batch)
            result = log.append(batch)
            produced.add(result.base_offset, pairs, size)
            committer.when_durable(log, result.last_offset + 1, acks.callback(result.last_offset + 1))
        disk.crash()  # the committer thread may be mid-round: whatever it has not fsynced is at risk
        committer.forget(log)
        committer.close()  # its last round fails on the dead device: those batches stay unacknowledged
        acked = acks.acked_next
        log = open_log(directory, disk, config, clock)
        assert log.next_offset >= acked, f"acknowledged up to {acked}, recovered {log.next_offset} {seed}"
        produced.truncate(log.next_offset)
        check_log(log, produced, disk, str(seed))
        log.close()


def test_power_loss_under_the_real_group_committer(crash_seed: Seed, tmp_path: Path) -> None:
    """Group mode with the committer thread running: fsynced data survives, the rest is a clean prefix."""
    for scenario in range(8):
        seed = crash_seed.sub(scenario)
        rng = seed.rng()
        disk = FaultyDisk(rng.randrange(2**32))
        config, group_bytes = random_config(rng)
        directory = tmp_path / f"s{scenario}"
        log = open_log(directory, disk, config, ManualClock())
        committer = GroupCommitter(FsyncMode.GROUP, interval_ms=rng.choice([1, 5]), group_bytes=group_bytes)
        acked = Acked()
        for _ in range(rng.randint(20, 200)):
            batch, pairs = make_batch(rng, acked.next_offset)
            size = len(batch)
            result = log.append(batch)
            acked.add(result.base_offset, pairs, size)
            committer.written(log, size)
        durable = log.durable_next_offset  # a lower bound: the mark moves only after the fsync
        disk.crash()
        committer.forget(log)
        committer.close()
        log = open_log(directory, disk, config, ManualClock())
        assert durable <= log.next_offset <= acked.next_offset, f"{log.recovery} {seed}"
        acked.truncate(log.next_offset)
        check_log(log, acked, disk, str(seed))
        assert log.append(make_batch(rng, log.next_offset)[0]).base_offset == acked.next_offset, seed
        log.close()


class _BlockingLog:
    """A Flushable whose flush blocks until released: holds the committer thread mid-round."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def flush(self) -> int:
        self.entered.set()
        assert self.release.wait(10), "test did not release the committer"
        return 2**62


def test_sync_ack_needs_an_fsync_even_for_a_log_forgotten_meanwhile(crash_seed: Seed, tmp_path: Path) -> None:
    """``forget()`` (partition close, topic delete) must not turn pending sync waiters into acks.

    Regression: the round flushed only logs still in the dirty set, and a waiter
    whose log was not flushed got ``callback(None)``: an acknowledgement with no
    fsync behind it, lost by a power loss.
    """
    disk = FaultyDisk(crash_seed.value)
    log = open_log(tmp_path / "p", disk, LogConfig(), ManualClock())
    committer = GroupCommitter(FsyncMode.SYNC)
    blocker = _BlockingLog()
    try:
        committer.when_durable(blocker, 0, lambda error: None)
        assert blocker.entered.wait(10), crash_seed
        # The committer thread is inside a round; this waiter waits for the next one.
        batch, _ = make_batch(crash_seed.rng(), 0)
        result = log.append(batch)
        outcome: list[BaseException | None] = []
        done = threading.Event()
        committer.when_durable(log, result.last_offset + 1, lambda error: (outcome.append(error), done.set()))
        committer.forget(log)
        blocker.release.set()
        assert done.wait(10), crash_seed
    finally:
        blocker.release.set()
        committer.close()
    if outcome == [None]:
        at_risk = disk.unsynced_bytes(SEGMENT_SUFFIX)
        assert at_risk == 0, f"acknowledged without an fsync: {at_risk} bytes at risk {crash_seed}"
    disk.crash("drop")
    reopened = open_log(tmp_path / "p", disk, LogConfig(), ManualClock())
    if outcome == [None]:
        assert reopened.next_offset == result.last_offset + 1, f"an acknowledged batch was lost {crash_seed}"
