"""A producer process for the SIGKILL crash tests (run as a script, killed by the test).

It opens a :class:`lkstream.Broker` on ``--dir`` and produces numbered records
``n = start, start+1, ...`` in small batches, forever. After every
``produce_many_sync`` call returns it prints one line per record::

    A <partition> <offset> <n>

and flushes stdout, so every line the parent reads is an acknowledged record.
The first line is ``READY`` once the broker is open (recovery done).

Record contents are a pure function of ``(run_seed, n)`` (:func:`make_record`)
so the parent can check what it reads back without being told.

``--die-at STAGE --die-on-roll N`` makes the process SIGKILL itself at a fixed
point inside the N-th segment rotation of this process, to hit windows a
random kill would rarely reach:

``roll-start``          before the active segment is sealed
``roll-sealed``         after the old segment was fsynced, before the new files exist
``roll-new-files``      after the new .seg/.idx were created, before the directory fsync
``roll-checkpoint-tmp`` in the checkpoint write: tmp file written, not yet renamed
``roll-done``           after the rotation, before the batch that caused it is appended

and ``--die-at`` ``topic-partitions`` / ``topic-meta`` kill it while the first
produce auto-creates the topic: after the first partition directory was made,
or with ``topic.json`` half written.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys

TOPIC = "crash"


def make_record(run_seed: int, n: int) -> tuple[bytes, bytes]:
    """The key and value of record ``n``: deterministic, of varying length."""
    key = f"k{n % 5}".encode()
    pad = (n * 7919 + run_seed) % 180
    value = f"{run_seed}:{n}:".encode() + bytes([0x61 + n % 26]) * pad
    return key, value


def parse_value(value: bytes) -> tuple[int, int]:
    """``(run_seed, n)`` encoded in a value made by :func:`make_record`."""
    seed, n, _ = value.split(b":", 2)
    return int(seed), int(n)


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _install_rotation_crash(stage: str, on_roll: int) -> None:
    """Patch the storage layer so that this process kills itself inside rotation ``on_roll``."""
    from lkstream.storage import checkpoint as checkpoint_mod
    from lkstream.storage import log as log_mod

    state = {"rolls": 0, "armed": False}
    original_roll = log_mod.PartitionLog._roll
    original_new_segment = log_mod.PartitionLog._new_segment
    original_fsync_dir = log_mod.fsync_dir
    original_atomic_write = checkpoint_mod.atomic_write

    def roll(self):  # type: ignore[no-untyped-def]
        state["rolls"] += 1
        state["armed"] = state["rolls"] == on_roll
        if state["armed"] and stage == "roll-start":
            _die()
        try:
            result = original_roll(self)
        finally:
            armed, state["armed"] = state["armed"], False
        if armed and stage == "roll-done":
            _die()
        return result

    def new_segment(self, base_offset):  # type: ignore[no-untyped-def]
        if state["armed"] and stage == "roll-sealed":
            _die()
        return original_new_segment(self, base_offset)

    def fsync_dir(path):  # type: ignore[no-untyped-def]
        if state["armed"] and stage == "roll-new-files":
            _die()
        return original_fsync_dir(path)

    def atomic_write(path, data):  # type: ignore[no-untyped-def]
        if state["armed"] and stage == "roll-checkpoint-tmp":
            with open(path + ".tmp", "wb") as f:
                f.write(data[: len(data) // 2])
                f.flush()
                os.fsync(f.fileno())
            _die()
        return original_atomic_write(path, data)

    log_mod.PartitionLog._roll = roll  # type: ignore[method-assign]
    log_mod.PartitionLog._new_segment = new_segment  # type: ignore[method-assign]
    log_mod.fsync_dir = fsync_dir  # type: ignore[assignment]
    checkpoint_mod.atomic_write = atomic_write  # type: ignore[assignment]


def _install_topic_create_crash(stage: str) -> None:
    """Patch the topic store so that this process kills itself while creating a topic."""
    from lkstream.storage import topics as topics_mod

    state = {"armed": False}
    original_create = topics_mod.TopicStore.create
    original_partition_dir_name = topics_mod.partition_dir_name
    original_atomic_write = topics_mod.atomic_write

    def create(self, topic, *args, **kwargs):  # type: ignore[no-untyped-def]
        state["armed"] = True
        return original_create(self, topic, *args, **kwargs)

    def partition_dir_name(pid):  # type: ignore[no-untyped-def]
        if state["armed"] and stage == "topic-partitions" and pid == 1:
            _die()
        return original_partition_dir_name(pid)

    def atomic_write(path, data):  # type: ignore[no-untyped-def]
        if state["armed"] and stage == "topic-meta":
            with open(path + ".tmp", "wb") as f:
                f.write(data[: len(data) // 2])
            _die()
        return original_atomic_write(path, data)

    topics_mod.TopicStore.create = create  # type: ignore[method-assign]
    topics_mod.partition_dir_name = partition_dir_name  # type: ignore[assignment]
    topics_mod.atomic_write = atomic_write  # type: ignore[assignment]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--mode", choices=["sync", "group", "none"], required=True)
    parser.add_argument("--run-seed", type=int, required=True, help="fixes record contents")
    parser.add_argument("--seed", type=int, required=True, help="fixes batch sizes")
    parser.add_argument("--start", type=int, default=0, help="first record number")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--segment-max-bytes", type=int, default=64 * 1024 * 1024)
    parser.add_argument("--max-batch", type=int, default=8, help="records per produce call, at most")
    parser.add_argument("--die-at", default="")
    parser.add_argument("--die-on-roll", type=int, default=1)
    args = parser.parse_args(argv)

    if args.die_at.startswith("roll-"):
        _install_rotation_crash(args.die_at, args.die_on_roll)
    elif args.die_at.startswith("topic-"):
        _install_topic_create_crash(args.die_at)

    from lkstream import Broker

    rng = random.Random(args.seed)
    broker = Broker(
        persist_dir=args.dir,
        fsync_mode=args.mode,
        partitions=args.partitions,
        segment_max_bytes=args.segment_max_bytes,
        index_interval_bytes=512,
    )
    out = sys.stdout
    out.write("READY\n")
    out.flush()
    n = args.start
    while True:
        count = rng.randint(1, args.max_batch)
        records = [make_record(args.run_seed, i) for i in range(n, n + count)]
        acks = broker.produce_many_sync(TOPIC, records)
        out.write("".join(f"A {p} {o} {i}\n" for i, (p, o) in zip(range(n, n + count), acks, strict=True)))
        out.flush()
        n += count


if __name__ == "__main__":
    sys.exit(main())
