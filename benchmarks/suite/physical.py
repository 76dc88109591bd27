"""The machine's own limits, measured in the same run on the same filesystem as the systems.

``fio_seq_write_fdatasync``  fio sequential write, 1 MiB blocks, fdatasync after every write
                             (``bench_producer.fio_bandwidth``): the durable write ceiling.
``fio_seq_write_buffered``   the same with one fsync at the end (what "OS decides" can reach).
``page_cache_read``          ``readinto`` of a file already in the page cache, 1 MiB at a time:
                             the ceiling of any consume-from-start.
``python_appender``          the best plain Python appender: pre-built 1 MiB buffers, ``os.write``
                             in a loop, ``fdatasync`` every 100 ms (LKSTREAM's group interval).
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

from benchmarks.e2e.bench_producer import fio_bandwidth
from benchmarks.suite.core import MB, MiB


def python_appender(path: Path, total: int, chunk: int = MiB, interval_s: float = 0.100) -> dict[str, float]:
    """Write ``total`` bytes of pre-built buffers, fdatasync every ``interval_s`` and at the end."""
    rng = random.Random(7)
    buffers = [rng.randbytes(chunk) for _ in range(4)]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    syncs = 0
    try:
        started = time.perf_counter()
        last_sync = started
        written = i = 0
        while written < total:
            written += os.write(fd, buffers[i % 4])
            i += 1
            now = time.perf_counter()
            if now - last_sync >= interval_s:
                os.fdatasync(fd)
                syncs += 1
                last_sync = time.perf_counter()
        os.fdatasync(fd)
        seconds = time.perf_counter() - started
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return {"MB_per_s": written / seconds / MB, "bytes": float(written), "seconds": seconds, "fsyncs": float(syncs + 1)}


def page_cache_read(path: Path, size: int, passes: int = 3) -> dict[str, float]:
    """Bandwidth of reading a page-cache-resident file with 1 MiB ``readinto`` (best of ``passes``)."""
    block = random.Random(3).randbytes(MiB)
    with open(path, "wb") as f:
        for _ in range(size // MiB):
            f.write(block)
    buf = bytearray(MiB)
    best = 0.0
    try:
        for _ in range(passes + 1):  # the first pass only makes sure every page is cached
            with open(path, "rb", buffering=0) as f:
                started = time.perf_counter()
                n = 0
                while got := f.readinto(buf):
                    n += got
                best = max(best, n / (time.perf_counter() - started))
    finally:
        path.unlink(missing_ok=True)
    return {"MB_per_s": best / MB, "bytes": float(size)}


def measure(root: Path, write_bytes: int, read_bytes: int) -> dict[str, dict[str, Any]]:
    """All physical limits once; MB/s each (fio entries are None when fio is missing)."""
    out: dict[str, dict[str, Any]] = {}
    os.sync()
    bw = fio_bandwidth(root / "fio.dat", write_bytes, ["--bs=1M", "--fdatasync=1"])
    out["fio_seq_write_fdatasync"] = {"MB_per_s": None if bw is None else bw / MB, "bytes": float(write_bytes)}
    bw = fio_bandwidth(root / "fio.dat", write_bytes, ["--bs=1M", "--end_fsync=1"])
    out["fio_seq_write_buffered"] = {"MB_per_s": None if bw is None else bw / MB, "bytes": float(write_bytes)}
    os.sync()
    out["python_appender"] = python_appender(root / "append.dat", write_bytes)
    out["page_cache_read"] = page_cache_read(root / "read.dat", read_bytes)
    return out
