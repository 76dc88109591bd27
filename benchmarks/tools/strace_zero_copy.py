"""strace proof that the Kafka listener serves Fetch with sendfile(2) (seed 002), and what copying does instead.

For each setting of ``server.kafka_zero_copy`` (true, then false) on the same data: a daemon is
started, kcat produces records from a file, kcat reads them back to /dev/null while
``strace -f -e trace=sendfile,pread64,sendto,write`` follows the daemon, and the trace is summed
by system call (calls, bytes). Zero-copy: the record bytes leave through ``sendfile`` (one call per
partition answered) and ``pread64`` only reads batch headers; copying: the same bytes are read with
``pread64`` and sent with ``sendto``. The first lines of each trace are kept beside the JSON result.

    .venv/bin/python -m benchmarks.tools.strace_zero_copy                  # 200,000 records of 200 B
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from benchmarks._common import REPO, RESULTS_DIR, base_parser, bench_dir, emit, log, machine_facts, utc_stamp
from benchmarks.e2e.bench_daemon import DaemonProcess
from benchmarks.e2e.bench_kafka_c_client import write_records
from benchmarks.suite.lk_kafka import LkKafka

TOPIC = "strace"
_CALL = re.compile(r"^\d+\s+(?:\d\d:\d\d:\d\d\.\d+\s+)?(\w+)\(.*\)\s+=\s+(-?\d+)")


def syscall_totals(trace: str) -> dict[str, dict[str, int]]:
    """``{syscall: {"calls": n, "bytes": sum of results}}`` of an ``strace -f`` output."""
    out: dict[str, dict[str, int]] = {}
    for line in trace.splitlines():
        match = _CALL.match(line)
        if match is None:
            continue
        name, result = match.group(1), int(match.group(2))
        entry = out.setdefault(name, {"calls": 0, "bytes": 0})
        entry["calls"] += 1
        entry["bytes"] += max(result, 0)
    return out


def traced_consume(root: Path, records: Path, count: int, zero_copy: bool, first: bool) -> dict[str, Any]:
    daemon = DaemonProcess(root, {"kafka_zero_copy": zero_copy})
    trace_path = root / f"strace-{'zero-copy' if zero_copy else 'copy'}.txt"
    try:
        daemon.wait_ready()
        bootstrap = LkKafka._kafka_address(daemon)  # type: ignore[arg-type]
        if first:
            produce = ["kcat", "-P", "-b", bootstrap, "-t", TOPIC, "-p", "0", "-l", str(records)]
            subprocess.run(produce, check=True, timeout=600, capture_output=True)
        consume = ["kcat", "-C", "-b", bootstrap, "-t", TOPIC, "-o", "beginning", "-e", "-q", "-c", str(count)]
        subprocess.run(consume, check=True, timeout=600, stdout=subprocess.DEVNULL)  # CRC-checked once, cached
        cmd = ["strace", "-f", "-tt", "-e", "trace=sendfile,pread64,sendto,write", "-o", str(trace_path)]
        strace = subprocess.Popen([*cmd, "-p", str(daemon.pid)], stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # attached to every thread
        started = time.perf_counter()
        subprocess.run(consume, check=True, timeout=600, stdout=subprocess.DEVNULL)
        seconds = time.perf_counter() - started
        strace.terminate()
        strace.wait(30)
    finally:
        daemon.stop()
    trace = trace_path.read_text()
    stamp = utc_stamp()
    kept = RESULTS_DIR / f"strace_zero_copy-{'on' if zero_copy else 'off'}-{stamp}.txt"
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    kept.write_text("\n".join(trace.splitlines()[:200]) + "\n")
    return {"kafka_zero_copy": zero_copy, "consume_s": seconds, "syscalls": syscall_totals(trace), "trace": str(kept)}


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--msgs", type=int, default=200_000)
    args = parser.parse_args()
    if args.quick:
        args.msgs = 20_000
    for tool in ("strace", "kcat"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} not found (apt-get install {tool})")
    facts = machine_facts(REPO)
    with bench_dir(args.tmp_root, "strace-zero-copy") as tmp:
        records = tmp / "records.txt"
        write_records(records, args.msgs, args.seed)
        root = tmp / "daemon"
        root.mkdir()
        traces = [
            traced_consume(root, records, args.msgs, zero_copy, i == 0) for i, zero_copy in enumerate((True, False))
        ]
    for entry in traces:
        log(f"kafka_zero_copy={entry['kafka_zero_copy']}: {entry['syscalls']}")
    emit("strace_zero_copy", args, {"msgs": args.msgs, "value_bytes": 200, "traces": traces}, facts)


if __name__ == "__main__":
    main()
