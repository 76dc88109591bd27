"""What one megabyte costs the sender on loopback TCP: sendfile(2) against pread + send (no Python in between).

Why the Kafka listener's zero-copy Fetch is at parity with its copying path when an answer is one
1 MiB range (docs/benchmarks-notes.md, "The read path"): a file of 256 MiB in the page cache is sent 1 MiB at a
time to a reader process on a loopback TCP connection, by ``os.sendfile`` and by ``os.pread`` +
``socket.sendall``, the two alternating for ``--runs`` rounds. On loopback the sender's system call
also runs the receiver's TCP input, so its CPU per megabyte (``time.process_time``) is the whole
kernel cost of the path.

    .venv/bin/python -m benchmarks.micro.micro_sendfile --runs 5
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from typing import Any

from benchmarks._common import REPO, base_parser, bench_dir, emit, machine_facts, summary

MiB = 1 << 20
FILE_MIB = 256
PASSES = 4  # over the file per measurement


def _reader(port: int) -> None:
    """Drain the connection into one buffer until it closes (the child process)."""
    with socket.create_connection(("127.0.0.1", port)) as conn:
        view = memoryview(bytearray(4 * MiB))
        while conn.recv_into(view):
            pass


def measure(send: Callable[[int], None]) -> dict[str, float]:
    started, cpu0 = time.perf_counter(), time.process_time()
    for _ in range(PASSES):
        for offset in range(0, FILE_MIB * MiB, MiB):
            send(offset)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu0
    return {
        "MB_per_s": PASSES * FILE_MIB * MiB / 1e6 / seconds,
        "sender_cpu_us_per_MiB": 1e6 * cpu / (PASSES * FILE_MIB),
    }


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    args = parser.parse_args()
    if args.quick:
        args.runs = 1
    facts = machine_facts(REPO)
    rows: list[dict[str, Any]] = []
    with bench_dir(args.tmp_root, "micro-sendfile") as tmp:
        path = tmp / "file.dat"
        with path.open("wb") as out:
            for _ in range(FILE_MIB):
                out.write(os.urandom(MiB))
        fd = os.open(path, os.O_RDONLY)
        listener = socket.create_server(("127.0.0.1", 0))
        child = os.fork()
        if child == 0:
            _reader(listener.getsockname()[1])
            os._exit(0)
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def by_sendfile(offset: int) -> None:
            sent = 0
            while sent < MiB:
                sent += os.sendfile(conn.fileno(), fd, offset + sent, MiB - sent)

        def by_copy(offset: int) -> None:
            conn.sendall(os.pread(fd, MiB, offset))

        try:
            measure(by_copy)  # page cache and connection warm
            for run in range(args.runs):
                order = [("sendfile", by_sendfile), ("pread_send", by_copy)]
                for name, send in order if run % 2 == 0 else reversed(order):
                    rows.append({"run": run, "path": name, **measure(send)})
        finally:
            conn.close()
            listener.close()
            os.waitpid(child, 0)
            os.close(fd)
    results = {
        path: {k: summary([r[k] for r in rows if r["path"] == path]) for k in ("MB_per_s", "sender_cpu_us_per_MiB")}
        for path in ("sendfile", "pread_send")
    }
    emit("micro_sendfile", args, {"file_MiB": FILE_MIB, "passes": PASSES, "results": results, "raw": rows}, facts)


if __name__ == "__main__":
    main()
