"""Seed 002's single-node experiments, on LKSTREAM's own storage (the embedded ``Broker``).

``sweep``         batch size (4 KiB, 64 KiB, 1 MiB pre-encoded batches) x fsync policy (``none``:
                  the OS decides; ``interval``: fdatasync every 100 ms, no byte trigger;
                  ``sync``: fdatasync before every ack), acked MB/s through
                  ``Broker.produce_batch_sync``; the knee is located by
                  :func:`benchmarks.suite.core.locate_knee`.
``seq_vs_random`` the same bytes written as 4 KiB ``pwrite``s at sequential vs random offsets of a
                  pre-written file, fdatasync every 100 ms (what the page cache makes of it), and
                  the same pattern with fio ``--direct=1`` (the device itself): why a log appends.
``seek``          random-offset single-record reads (``Partition.read_from(off, max_msgs=1)``) on a
                  log grown to each of several sizes; page cache warm (the log was just written).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from benchmarks.e2e.bench_consumer import latencies
from benchmarks.suite.core import MB, MiB, locate_knee
from lkstream import Broker
from lkstream.format.codec import encode_batch

SWEEP_BATCHES = (4 * 1024, 64 * 1024, MiB)
MODES = {"none": "none", "interval": "group", "sync": "sync"}  # sweep name -> fsync_mode
RECORD_VALUE = 1000  # ~1 KiB per record with its framing
TS = 1_700_000_000_000


def sweep_batch(batch_bytes: int, seed: int) -> bytearray:
    n = max(1, batch_bytes // 1024)
    rng = random.Random(seed + batch_bytes)
    return encode_batch([(None, rng.randbytes(RECORD_VALUE)) for _ in range(n)], timestamp_ms=TS)


def sweep_cell(root: Path, mode: str, batch: bytearray, max_bytes: int, max_seconds: float) -> dict[str, float]:
    data = root / f"sweep-{mode}-{len(batch)}"
    # interval: no byte trigger (fsync_group_bytes beyond any run), so the 100 ms clock alone decides
    broker = Broker(persist_dir=str(data), fsync_mode=MODES[mode], fsync_interval_ms=100, fsync_group_bytes=2**40)
    try:
        broker.produce_batch_sync("sweep", 0, batch)  # creates the topic
        started = time.perf_counter()
        deadline = started + max_seconds
        written = 0
        while written < max_bytes and time.perf_counter() < deadline:
            broker.produce_batch_sync("sweep", 0, batch)
            written += len(batch)
        seconds = time.perf_counter() - started
    finally:
        t0 = time.perf_counter()
        broker.close()
        close_s = time.perf_counter() - t0
        shutil.rmtree(data, ignore_errors=True)
    return {
        "MB_per_s": written / seconds / MB,
        "batches_per_s": written / len(batch) / seconds,
        "bytes": float(written),
        "seconds": seconds,
        "close_seconds": close_s,
    }


def sweep(root: Path, seed: int, max_bytes: int, max_seconds: float) -> dict[str, Any]:
    cells: dict[int, dict[str, dict[str, float]]] = {}
    for size in SWEEP_BATCHES:
        batch = sweep_batch(size, seed)
        for mode in MODES:
            os.sync()
            cells.setdefault(size, {})[mode] = sweep_cell(root, mode, batch, max_bytes, max_seconds)
    return {
        "cells": {str(size): {mode: c for mode, c in modes.items()} for size, modes in cells.items()},
        "knee": locate_knee({size: {m: c["MB_per_s"] for m, c in modes.items()} for size, modes in cells.items()}),
    }


def seq_vs_random(root: Path, size: int, block: int, max_seconds: float, seed: int) -> dict[str, dict[str, float]]:
    path = root / "rw.dat"
    buf = random.Random(seed).randbytes(block)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    out: dict[str, dict[str, float]] = {}
    try:
        chunk = random.Random(seed + 1).randbytes(MiB)
        for off in range(0, size, MiB):
            os.pwrite(fd, chunk, off)
        os.fdatasync(fd)
        blocks = size // block
        order = list(range(blocks))
        for pattern in ("sequential", "random"):
            if pattern == "random":
                random.Random(seed + 2).shuffle(order)
            os.sync()
            started = time.perf_counter()
            last_sync = started
            deadline = started + max_seconds
            n = 0
            for i in order:
                os.pwrite(fd, buf, i * block)
                n += 1
                now = time.perf_counter()
                if now - last_sync >= 0.100:
                    os.fdatasync(fd)
                    last_sync = time.perf_counter()
                    if last_sync > deadline:
                        break
            os.fdatasync(fd)
            seconds = time.perf_counter() - started
            out[pattern] = {"MB_per_s": n * block / seconds / MB, "iops": n / seconds, "bytes": float(n * block)}
    finally:
        os.close(fd)
    try:
        for pattern, rw in (("fio_direct_sequential", "write"), ("fio_direct_random", "randwrite")):
            res = fio_direct(path, rw, block, size, max_seconds)
            if res is not None:
                out[pattern] = res
    finally:
        path.unlink(missing_ok=True)
    return out


def fio_direct(path: Path, rw: str, block: int, size: int, seconds: float) -> dict[str, float] | None:
    """fio O_DIRECT ``rw`` of ``block``-byte writes over ``size`` bytes, at most ``seconds``; None without fio."""
    fio = shutil.which("fio")
    if fio is None:
        return None
    cmd = [
        fio, "--name=rw", f"--filename={path}", f"--rw={rw}", f"--bs={block}", f"--size={size}",
        "--direct=1", "--ioengine=psync", f"--runtime={max(1, round(seconds))}", "--output-format=json",
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=120).stdout
    job = json.loads(out)["jobs"][0]["write"]
    return {"MB_per_s": float(job["bw_bytes"]) / MB, "iops": float(job["iops"]), "bytes": float(job["io_bytes"])}


def seek_vs_size(root: Path, sizes: list[int], samples: int, seed: int) -> list[dict[str, Any]]:
    data = root / "seek"
    rng = random.Random(seed)
    batches = [encode_batch([(None, rng.randbytes(200)) for _ in range(1000)], timestamp_ms=TS) for _ in range(8)]
    out = []
    broker = Broker(persist_dir=str(data), fsync_mode="group")
    try:
        written = i = 0
        for target in sorted(sizes):
            while written < target:
                broker.produce_batch_sync("seek", 0, batches[i % len(batches)])
                written += len(batches[i % len(batches)])
                i += 1
            partition = broker.partition("seek", 0)
            end = partition.high_watermark
            pick = random.Random(seed + target)
            offsets = [pick.randrange(end) for _ in range(samples)]
            res = latencies(lambda off, part=partition: part.read_from(off, max_msgs=1), offsets)
            stats = partition.stats()
            out.append(
                {
                    "log_bytes": float(stats.size_bytes),
                    "records": float(end),
                    "segments": float(stats.segment_count),
                    **{k: float(v) for k, v in res.items()},
                }
            )
    finally:
        broker.close()
        shutil.rmtree(data, ignore_errors=True)
    return out
