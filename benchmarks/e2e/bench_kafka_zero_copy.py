"""Seed 002's zero-copy experiment on the Kafka listener: sendfile(2) against the copying path, same data.

One data directory per cell (record size x partitions) is written once; then, run after run, the
daemon is started on it with ``server.kafka_zero_copy`` true (stored batches sent with sendfile(2))
or false (read into memory, CRC-checked, written: the userspace path TLS takes), in alternating
order. Each start first reads the whole log once (page cache warm, and every batch CRC-checked in
that process, which is what lets sendfile serve it), then:

``raw``   a minimal Fetch client (one connection, Fetch v4 for every partition at its next offset,
          librdkafka's defaults: 1 MiB per partition, 50 MiB per answer; answers read with
          ``recv_into`` into one buffer, only batch headers looked at): the broker's serving rate,
          with as little client work as a client can do. Five reads per start, timed together.
``kcat``  kcat (librdkafka 2.0, C) consuming every partition from the start to /dev/null
          (``-C -e -q``): a real client, its start-up (about 0.5 s of librdkafka's own) included.

For each: records/s, MB/s, and the daemon's CPU seconds per million records (``/proc/PID/stat``).
Ratios say how many times better zero-copy is (rates: zero-copy / copying; CPU per record:
copying / zero-copy), taken start by start within a run, then summarized.

    .venv/bin/python -m benchmarks.e2e.bench_kafka_zero_copy --runs 3          # 256 MB per cell
    .venv/bin/python -m benchmarks.e2e.bench_kafka_zero_copy --quick           # 32 MB per cell, 1 run
"""

from __future__ import annotations

import shutil
import socket
import statistics
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

import lkstream
from benchmarks._common import MB, REPO, base_parser, bench_dir, check_free_space, emit, log, machine_facts, summary
from benchmarks.e2e.bench_daemon import DaemonProcess
from benchmarks.suite.core import cpu_seconds
from benchmarks.suite.lk_kafka import LkKafka
from lkstream.format.codec import encode_batch

SIZES = (200, 4096)
PARTITIONS = (1, 8, 32)
MODES = {"zero_copy": True, "copy": False}
TOPIC = "zc"
BATCH_BYTES = 1 << 20  # what librdkafka's batch.size 1 MB makes of a steady producer
PARTITION_MAX = 1 << 20  # librdkafka's max.partition.fetch.bytes default
FETCH_MAX = 50 << 20  # librdkafka's fetch.max.bytes default
READS_PER_START = 5
_PREFIX = struct.Struct(">qi")  # base offset, batch length
_LAST_DELTA = struct.Struct(">i")  # last offset delta, at byte 23 of a batch


def prepare(root: Path, value_bytes: int, partitions: int, total_bytes: int, seed: int) -> int:
    """Write the cell's log through a daemon (pre-encoded ~1 MB batches, round robin); its record count."""
    daemon = DaemonProcess(root)
    try:
        client = lkstream.connect(daemon.wait_ready())
        try:
            client.create_topic(TOPIC, partitions)
            value = bytes((seed + i) % 251 for i in range(value_bytes))
            per_batch = max(1, BATCH_BYTES // (value_bytes + 20))
            batch = encode_batch([(None, value)] * per_batch)
            batches = max(partitions, total_bytes // len(batch))
            for i in range(batches):
                client.produce_batch_sync(TOPIC, i % partitions, bytearray(batch))
            return batches * per_batch
        finally:
            client.close()
    finally:
        daemon.stop()


def _fetch_request(offsets: list[int], correlation: int) -> bytes:
    body = struct.pack(">iiiib", -1, 500, 1, FETCH_MAX, 0) + struct.pack(">i", 1)
    body += struct.pack(">h", len(TOPIC)) + TOPIC.encode() + struct.pack(">i", len(offsets))
    for pid, offset in enumerate(offsets):
        body += struct.pack(">iqi", pid, offset, PARTITION_MAX)
    header = struct.pack(">hhih", 1, 4, correlation, 5) + b"bench"
    frame = header + body
    return struct.pack(">i", len(frame)) + frame


def _recv_exactly(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if not n:
            raise ConnectionError("the daemon closed the connection")
        got += n


def _next_offsets(answer: memoryview, offsets: list[int]) -> int:
    """Move ``offsets`` past the batches of a Fetch v4 answer (its frame after the size); bytes of records."""
    pos, total = 4 + 4 + 4, 0  # correlation id, throttle time, topic count (one topic)
    (name_length,) = struct.unpack_from(">h", answer, pos)
    pos += 2 + name_length
    (count,) = struct.unpack_from(">i", answer, pos)
    pos += 4
    for _ in range(count):
        pid, code, _high, _stable, aborted = struct.unpack_from(">ihqqi", answer, pos)
        if code:
            raise RuntimeError(f"partition {pid}: error {code}")
        pos += 26 + max(aborted, 0) * 16
        (size,) = struct.unpack_from(">i", answer, pos)
        pos += 4
        end, at = pos + max(size, 0), pos
        while end - at >= 27:
            base, length = _PREFIX.unpack_from(answer, at)
            if at + 12 + length > end:
                break  # a partial batch at the end (Kafka may send one; none here)
            offsets[pid] = base + _LAST_DELTA.unpack_from(answer, at + 23)[0] + 1
            at += 12 + length
        total += size
        pos = end
    return total


def raw_read(bootstrap: str, partitions: int, records: int) -> tuple[float, int]:
    """Read every partition to its end with Fetch v4; (seconds, record bytes received)."""
    host, port = bootstrap.rsplit(":", 1)
    buffer = bytearray(FETCH_MAX + (1 << 20))
    offsets = [0] * partitions
    received = 0
    with socket.create_connection((host, int(port))) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        started = time.perf_counter()
        correlation = 0
        while sum(offsets) < records:
            correlation += 1
            sock.sendall(_fetch_request(offsets, correlation))
            size_view = memoryview(buffer)[:4]
            _recv_exactly(sock, size_view)
            (size,) = struct.unpack_from(">i", buffer)
            body = memoryview(buffer)[:size]
            _recv_exactly(sock, body)
            received += _next_offsets(body, offsets)
        return time.perf_counter() - started, received


def kcat_read(bootstrap: str, records: int) -> float:
    cmd = ["kcat", "-C", "-b", bootstrap, "-t", TOPIC, "-o", "beginning", "-e", "-q", "-c", str(records)]
    started = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=True, timeout=600)
    return time.perf_counter() - started


def measure_start(root: Path, mode: str, partitions: int, records: int, with_kcat: bool) -> dict[str, float]:
    """Start the daemon in ``mode`` on the cell's data, warm up, measure; the figures of this start."""
    daemon = DaemonProcess(root, {"kafka_zero_copy": MODES[mode]})
    try:
        daemon.wait_ready()
        bootstrap = LkKafka._kafka_address(daemon)  # type: ignore[arg-type]
        pid = int(daemon.pid)
        raw_read(bootstrap, partitions, records)  # warm-up: page cache, and CRC-checked in this process
        seconds = nbytes = 0.0
        cpu0 = cpu_seconds(pid)  # summed over the reads: /proc counts CPU in 10 ms ticks
        for _ in range(READS_PER_START):
            read_s, read_bytes = raw_read(bootstrap, partitions, records)
            seconds, nbytes = seconds + read_s, nbytes + read_bytes
        read = records * READS_PER_START
        row = {
            "raw_msg_per_s": read / seconds,
            "raw_MB_per_s": nbytes / seconds / MB,
            "raw_daemon_cpu_s_per_M": (cpu_seconds(pid) - cpu0) / (read / 1e6),
        }
        if with_kcat:
            cpu0 = cpu_seconds(pid)
            seconds = kcat_read(bootstrap, records)
            row["kcat_msg_per_s"] = records / seconds
            row["kcat_daemon_cpu_s_per_M"] = (cpu_seconds(pid) - cpu0) / (records / 1e6)
        return row
    finally:
        daemon.stop()


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--cell-mb", type=int, default=256, help="MB of records per cell")
    parser.add_argument("--no-kcat", action="store_true", help="raw client only")
    args = parser.parse_args()
    if args.quick:
        args.cell_mb, args.runs = 32, 1
    with_kcat = not args.no_kcat and shutil.which("kcat") is not None
    facts = machine_facts(REPO)
    cells: list[dict[str, Any]] = []
    with bench_dir(args.tmp_root, "kafka-zero-copy") as tmp:
        check_free_space(tmp, 2 * args.cell_mb * MB)
        for size in SIZES:
            for partitions in PARTITIONS:
                root = tmp / f"s{size}-p{partitions}"
                root.mkdir()
                records = prepare(root, size, partitions, args.cell_mb * MB, args.seed)
                log(f"cell {size} B x {partitions}: {records} records")
                raw: list[dict[str, Any]] = []
                for run in range(args.runs):
                    order = list(MODES) if run % 2 == 0 else list(reversed(MODES))
                    figures = {mode: measure_start(root, mode, partitions, records, with_kcat) for mode in order}
                    row = {"run": run, **{f"{mode}.{k}": v for mode, f in figures.items() for k, v in f.items()}}
                    for key in figures["zero_copy"]:
                        # "times better": rates zero-copy / copy, CPU per record copy / zero-copy
                        better, worse = ("copy", "zero_copy") if "cpu" in key else ("zero_copy", "copy")
                        row[f"ratio.{key}"] = figures[better][key] / max(figures[worse][key], 1e-9)
                    raw.append(row)
                    log(f"  run {run}: " + ", ".join(f"{k}={v:,.3f}" for k, v in row.items() if "ratio" in k))
                shutil.rmtree(root, ignore_errors=True)
                fields = [k for k in raw[0] if k != "run"]
                cells.append(
                    {
                        "value_bytes": size,
                        "partitions": partitions,
                        "records": records,
                        "results": {k: summary([r[k] for r in raw]) for k in fields},
                        "raw": raw,
                    }
                )
    payload = {
        "cell_MB": args.cell_mb,
        "reads_per_start": READS_PER_START,
        "fetch": {"partition_max_bytes": PARTITION_MAX, "max_bytes": FETCH_MAX},
        "cells": cells,
        "median_ratio_raw_msg_per_s": statistics.median(c["results"]["ratio.raw_msg_per_s"]["median"] for c in cells),
    }
    emit("kafka_zero_copy", args, payload, facts)


if __name__ == "__main__":
    main()
