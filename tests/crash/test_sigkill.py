"""SIGKILL crash tests: a real producer process killed at random, then the log recovered.

The rule under test (docs/durability.md): **a SIGKILLed broker loses nothing it
acknowledged, in any fsync mode.**

* ``sync``: a produce returns only after its batch was fsynced, so the record
  is on disk before the child prints its acknowledgement.
* ``group``: a produce returns once the batch is ``write(2)``-n into the page
  cache, and the fsync follows later. SIGKILL ends the process, not the
  kernel: the page cache belongs to the kernel and still reaches the disk, so
  every acknowledged record survives here too. What group mode can lose is
  only what a *power loss* or kernel crash takes before the next fsync; that
  is simulated with the in-memory file seam in ``test_power_loss.py``.

Each round starts ``producer_child.py`` on the same data directory (so later
rounds recover logs that earlier rounds left crashed), reads a random number of
acknowledgements from its stdout, SIGKILLs it, then reopens the directory in
this process and checks, per partition: every acknowledged record is at its
acknowledged offset with identical key and value; records are in production
order with no gap; everything decodes; the segment files hold no invalid byte;
and a new append lands at the offset right after the last surviving record.
Some rounds skip the check so that the next child opens a crashed directory
itself (its recovery is then checked in a later round).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from lkstream import Broker
from lkstream.storage.names import partition_dir_name

from ._support import ChildProducer, LogModel, Seed, check_segment_files, child_args, read_partition
from .producer_child import TOPIC, make_record, parse_value

PARTITIONS = 2
MAX_BATCH = 8  # records per produce call in the child
CHILD_DEADLINE_S = 30.0


def verify_recovered(
    data_dir: str, mode: str, model: LogModel, run_seed: int, seed: Seed, *, segment_max_bytes: int = 64 << 20
) -> None:
    """Reopen ``data_dir`` and check everything the model knows; append one record per partition."""
    with Broker(
        persist_dir=data_dir, fsync_mode=mode, partitions=PARTITIONS, segment_max_bytes=segment_max_bytes
    ) as broker:
        if TOPIC not in broker.list_topics():
            assert not model.acked, f"topic missing although {len(model.acked)} records were acknowledged {seed}"
            return
        for recovery in broker.recoveries:
            assert recovery.report.valid_bytes >= 0, seed
        for pid in range(PARTITIONS):
            records = read_partition(broker, TOPIC, pid, str(seed))
            check_partition(records, pid, model, run_seed, seed)
            part = broker.partition(TOPIC, pid)
            last = records[-1].offset if records else part.log_start_offset - 1
            assert part.stats().next_offset == last + 1, f"p{pid}: next offset {part.stats()} after {last} {seed}"
            model.max_n += 1
            key, value = make_record(run_seed, model.max_n)
            [(p, offset)] = broker.produce_many_sync(TOPIC, [(key, value)], partition=pid)
            assert (p, offset) == (pid, last + 1), f"new append at {(p, offset)}, not {(pid, last + 1)} {seed}"
            model.acked[(pid, offset)] = model.max_n
            [record] = broker.read_from(TOPIC, pid, offset)
            assert (record.key, record.value) == (key, value), seed
    for pid in range(PARTITIONS):
        check_segment_files(str(Path(data_dir, "topics", TOPIC, partition_dir_name(pid))), str(seed))


def check_partition(records: list, pid: int, model: LogModel, run_seed: int, seed: Seed) -> None:
    by_offset = {}
    previous_n = -1
    for i, record in enumerate(records):
        if i:
            assert record.offset == records[i - 1].offset + 1, f"p{pid}: gap before offset {record.offset} {seed}"
        record_seed, n = parse_value(record.value)
        assert record_seed == run_seed, seed
        assert (record.key, record.value) == make_record(run_seed, n), f"p{pid}@{record.offset}: wrong bytes {seed}"
        assert n > previous_n, f"p{pid}@{record.offset}: record {n} after {previous_n}: out of order {seed}"
        previous_n = n
        by_offset[record.offset] = n
        model.max_n = max(model.max_n, n)
    for (p, offset), n in sorted(model.acked.items()):
        if p != pid:
            continue
        assert offset in by_offset, (
            f"acknowledged record {n} at p{pid}@{offset} was lost; log holds offsets "
            f"{min(by_offset, default=None)}..{max(by_offset, default=None)} {seed}"
        )
        assert by_offset[offset] == n, f"p{pid}@{offset}: holds record {by_offset[offset]}, acked {n} {seed}"


def run_child(
    tmp_path: Path,
    env: dict[str, str],
    data_dir: str,
    mode: str,
    *,
    run_seed: int,
    seed: Seed,
    model: LogModel,
    kill_after: int | None,
    **kwargs: object,
) -> int:
    """Run one child; SIGKILL it after ``kill_after`` acks (None: it kills itself). Return its exit code."""
    start = model.max_n + 1
    args = child_args(data_dir, mode, run_seed, seed.value, start, max_batch=MAX_BATCH, **kwargs)  # type: ignore[arg-type]
    deadline = time.monotonic() + CHILD_DEADLINE_S
    with ChildProducer(args, env, tmp_path / f"stderr-{seed.value}.txt") as child:
        child.wait_ready(deadline)
        if kill_after is None:
            child.read_to_eof(deadline)
        else:
            child.read_acks(kill_after, deadline)
    # The context manager SIGKILLed and reaped the child and collected every line it wrote.
    model.add(child.acks)
    # The child's last produce call may be in the log without an ack (at most MAX_BATCH records
    # past its last ack, or past its start): skip those numbers so every record stays unique.
    model.max_n = max(model.max_n, start - 1) + MAX_BATCH
    assert child.proc.returncode == -9, f"child exit code {child.proc.returncode}: {child.stderr()} {seed}"
    return len(child.acks)


@pytest.mark.parametrize("mode", ["sync", "group"])
def test_sigkill_at_random_loses_no_acknowledged_record(
    mode: str, crash_seed: Seed, tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    data_dir = str(tmp_path / "data")
    rng = crash_seed.rng()
    run_seed = rng.randrange(1000)
    model = LogModel()
    rounds = 12  # x2 modes: 24 kills
    # The same check holds in both modes: sync acks follow the fsync, and group acks follow a
    # write(2) whose data SIGKILL cannot take back (it is in the kernel's page cache, not ours).
    for round_ in range(rounds):
        seed = crash_seed.sub(round_)
        kill_after = rng.choice([0, 1, rng.randint(2, 40), rng.randint(40, 250)])
        run_child(
            tmp_path,
            subprocess_env,
            data_dir,
            mode,
            run_seed=run_seed,
            seed=seed,
            model=model,
            kill_after=kill_after,
        )
        # Now and then the next child recovers the crashed directory itself; the last round always checks.
        if round_ == rounds - 1 or rng.random() < 0.75:
            verify_recovered(data_dir, mode, model, run_seed, seed)
    assert len(model.acked) > rounds, f"too little was produced to mean anything {crash_seed}"


@pytest.mark.parametrize("mode", ["sync", "group"])
def test_sigkill_at_random_with_tiny_segments(
    mode: str, crash_seed: Seed, tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    """Segments of 4 KiB roll every few batches, so random kills often land in or near a rotation."""
    data_dir = str(tmp_path / "data")
    rng = crash_seed.rng()
    run_seed = rng.randrange(1000)
    model = LogModel()
    for round_ in range(5):
        seed = crash_seed.sub(round_)
        run_child(
            tmp_path,
            subprocess_env,
            data_dir,
            mode,
            run_seed=run_seed,
            seed=seed,
            model=model,
            kill_after=rng.randint(20, 300),
            segment_max_bytes=4096,
        )
        verify_recovered(data_dir, mode, model, run_seed, seed, segment_max_bytes=4096)
    segments = list(Path(data_dir, "topics", TOPIC).glob("part*/*.seg"))
    assert len(segments) > 2 * PARTITIONS, f"expected rotations, found {len(segments)} segments {crash_seed}"


ROTATION_STAGES = ["roll-start", "roll-sealed", "roll-new-files", "roll-checkpoint-tmp", "roll-done"]


@pytest.mark.parametrize("stage", ROTATION_STAGES)
@pytest.mark.parametrize("mode", ["sync", "group"])
def test_sigkill_inside_segment_rotation(
    mode: str, stage: str, crash_seed: Seed, tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    """The child SIGKILLs itself at a fixed step of a rotation; recovery must keep every ack."""
    data_dir = str(tmp_path / "data")
    rng = crash_seed.rng()
    run_seed = rng.randrange(1000)
    model = LogModel()
    # Warm up without crashing inside a roll, so the crash hits a log with sealed segments.
    run_child(
        tmp_path,
        subprocess_env,
        data_dir,
        mode,
        run_seed=run_seed,
        seed=crash_seed.sub("warm"),
        model=model,
        kill_after=rng.randint(30, 80),
        segment_max_bytes=4096,
    )
    seed = crash_seed.sub(stage)
    run_child(
        tmp_path,
        subprocess_env,
        data_dir,
        mode,
        run_seed=run_seed,
        seed=seed,
        model=model,
        kill_after=None,
        segment_max_bytes=4096,
        die_at=stage,
        die_on_roll=rng.randint(1, 3),
    )
    partition_dirs = sorted(Path(data_dir, "topics", TOPIC).glob("part*"))
    strays = [p.name for d in partition_dirs for p in d.glob("*.tmp")]
    if stage == "roll-checkpoint-tmp":
        assert strays == ["checkpoint.meta.tmp"], f"the crash should leave a half-written tmp file {seed}"
    with Broker(persist_dir=data_dir, fsync_mode=mode, partitions=PARTITIONS, segment_max_bytes=4096) as broker:
        swept = [name for r in broker.recoveries for name in r.swept_files]
        assert sorted(swept) == sorted(strays), f"recovery swept {swept}, strays were {strays} {seed}"
    assert not [p for d in partition_dirs for p in d.glob("*.tmp")], seed
    verify_recovered(data_dir, mode, model, run_seed, seed, segment_max_bytes=4096)


@pytest.mark.parametrize("stage", ["topic-partitions", "topic-meta"])
def test_sigkill_while_creating_a_topic_leaves_no_half_topic(
    stage: str, crash_seed: Seed, tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    """A crash while the first produce auto-creates the topic: the next open must work and the
    topic must either not exist or have all its partitions (it used to fail to open, or to adopt
    the topic with fewer partitions)."""
    data_dir = str(tmp_path / "data")
    model = LogModel()
    run_child(
        tmp_path,
        subprocess_env,
        data_dir,
        "sync",
        run_seed=7,
        seed=crash_seed,
        model=model,
        kill_after=None,
        die_at=stage,
    )
    assert not model.acked, crash_seed
    with Broker(persist_dir=data_dir, fsync_mode="sync", partitions=PARTITIONS) as broker:
        assert TOPIC not in broker.list_topics(), f"a half-created topic is visible {crash_seed}"
        assert broker.produce_many_sync(TOPIC, [(b"k", b"v")], partition=1) == [(1, 0)], crash_seed
        assert broker.partitions_for(TOPIC) == PARTITIONS, crash_seed
    assert not list(Path(data_dir, "trash").iterdir()), f"the staging directory was not swept {crash_seed}"
