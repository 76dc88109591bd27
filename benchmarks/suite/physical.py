"""The machine's own limits, measured in the same run on the same filesystem as the systems.

``fio_seq_write_fdatasync``  fio sequential write, 1 MiB blocks, fdatasync after every write
                             (``bench_producer.fio_bandwidth``): the durable write ceiling.
``fio_seq_write_buffered``   the same with one fsync at the end (what "OS decides" can reach).
``page_cache_read``          ``readinto`` of a file already in the page cache, 1 MiB at a time:
                             the ceiling of any consume-from-start.
``python_appender``          the best plain Python appender: pre-built 1 MiB buffers, ``os.write``
                             in a loop, ``fdatasync`` every 100 ms (LKSTREAM's group interval).
``loopback_tcp``             one loopback TCP connection from another Python process sending 1 MiB
                             blocks, read with ``recv_into``: the ceiling of any client-daemon transfer.
``loopback_round_trip``      100-byte messages echoed by another Python process over loopback TCP,
                             one at a time (p50/p99 in microseconds): the floor of any request and
                             answer between two processes on this machine.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
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


# The other end of the loopback measurements, in a process of its own (a client and a daemon are two
# processes: the round trip includes waking the other one). argv: mode ("send" or "echo"), port,
# total bytes to send, message size.
_LOOPBACK_PEER = r"""
import socket, sys
mode, port, total, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
s = socket.create_connection(("127.0.0.1", port))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
if mode == "send":
    block, sent = bytes(size), 0
    while sent < total:
        s.sendall(block)
        sent += size
else:
    view = memoryview(bytearray(size))
    while True:
        got = 0
        while got < size:
            n = s.recv_into(view[got:])
            if not n:
                sys.exit(0)
            got += n
        s.sendall(view)
s.close()
"""


def _loopback_peer(mode: str, total: int, size: int) -> tuple[socket.socket, subprocess.Popen[bytes]]:
    """A connection accepted from a fresh peer process (``_LOOPBACK_PEER``) in ``mode``."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(30)
        port = listener.getsockname()[1]
        peer = subprocess.Popen([sys.executable, "-c", _LOOPBACK_PEER, mode, str(port), str(total), str(size)])
        conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn, peer


def _end_peer(conn: socket.socket, peer: subprocess.Popen[bytes]) -> None:
    conn.close()
    try:
        peer.wait(10)
    except subprocess.TimeoutExpired:
        peer.kill()  # by its own PID, never by name
        peer.wait()


def loopback_tcp(total: int, chunk: int = MiB) -> dict[str, float]:
    """Bandwidth of one loopback TCP connection: another process sends ``total`` bytes in ``chunk`` writes."""
    conn, peer = _loopback_peer("send", total, chunk)
    view = memoryview(bytearray(chunk))
    try:
        started = time.perf_counter()
        received = 0
        while got := conn.recv_into(view):
            received += got
        seconds = time.perf_counter() - started
    finally:
        _end_peer(conn, peer)
    return {"MB_per_s": received / seconds / MB, "bytes": float(received), "seconds": seconds}


def loopback_round_trip(samples: int = 20_000, size: int = 100, warmup: int = 1_000) -> dict[str, Any]:
    """Round trips of a ``size``-byte message echoed by another process, one at a time (microseconds)."""
    conn, peer = _loopback_peer("echo", 0, size)
    message, view = bytes(size), memoryview(bytearray(size))
    times: list[float] = []
    try:
        for i in range(warmup + samples):
            started = time.perf_counter()
            conn.sendall(message)
            got = 0
            while got < size:
                n = conn.recv_into(view[got:])
                if not n:
                    raise ConnectionError("the loopback echo process went away")
                got += n
            if i >= warmup:
                times.append(time.perf_counter() - started)
    finally:
        _end_peer(conn, peer)
    times.sort()
    us = [t * 1e6 for t in times]
    return {"MB_per_s": None, "p50_us": us[len(us) // 2], "p99_us": us[int(len(us) * 0.99)], "samples": float(samples)}


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
    out["loopback_tcp"] = loopback_tcp(read_bytes)
    out["loopback_round_trip"] = loopback_round_trip()
    return out
