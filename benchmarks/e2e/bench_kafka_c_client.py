"""The Kafka listener's capacity with a client that is not Python: kcat (librdkafka, C) against
LKSTREAM's Kafka listener (issue 11: "name the bound of each miss").

The peer suite drives both brokers from one Python process (confluent-kafka), whose per-record loop
is the bound of its produce and consume phases (docs/benchmarks-notes.md, "The Kafka listener"). Here kcat
reads the records from a file (``-P -l``: one message per line, no Python per record) and consumes
them to ``/dev/null`` (``-C -e -q``), with the suite's producer settings (``linger.ms`` 5,
``batch.size`` 1 MB, acks=all). Besides the rate, each phase reports the CPU seconds per million
records of the broker (``/proc/PID/stat``) and of kcat (``getrusage``): on 2 shared cores their sum
bounds the rate, and the broker's share says what it could take with a faster client.
Tansu is not measured here: Debian's kcat links librdkafka 2.0.2, whose ApiVersions exchange with
Tansu fails ("Read underflow"); the peer suite compares the two with confluent-kafka 2.16.

    python -m benchmarks.e2e.bench_kafka_c_client              # 2,000,000 records of 200 B, 3 runs
    python -m benchmarks.e2e.bench_kafka_c_client --quick      # 100,000 records, 1 run
"""

from __future__ import annotations

import random
import resource
import shutil
import subprocess
import time
from pathlib import Path

from benchmarks._common import REPO, base_parser, bench_dir, emit, log, machine_facts, summary
from benchmarks.suite.base import System
from benchmarks.suite.core import cpu_seconds
from benchmarks.suite.lk_kafka import LkKafka
from benchmarks.suite.peer_tansu import THROUGHPUT_CONFIG

VALUE_BYTES = 200
TIMEOUT_S = 600.0


def write_records(path: Path, count: int, seed: int) -> None:
    """``count`` lines of ``VALUE_BYTES - 1`` printable bytes (kcat adds no newline to the value)."""
    rng = random.Random(seed)
    alphabet = b"abcdefghijklmnopqrstuvwxyz0123456789"
    lines = [bytes(rng.choice(alphabet) for _ in range(VALUE_BYTES - 1)) for _ in range(1000)]
    with path.open("wb") as out:
        for i in range(count):
            out.write(lines[i % len(lines)] + b"\n")


def kcat_config() -> list[str]:
    """The suite's producer settings as kcat ``-X`` options."""
    out: list[str] = []
    for key, value in THROUGHPUT_CONFIG.items():
        if key in ("enable.idempotence",):
            continue
        out += ["-X", f"{key}={str(value).lower() if isinstance(value, bool) else value}"]
    return out


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(cmd: list[str], pid: int) -> tuple[float, float, float]:
    """Run ``cmd`` to completion; return (wall seconds, broker CPU seconds, kcat's CPU seconds)."""
    cpu0, client0, t0 = cpu_seconds(pid), _children_cpu_s(), time.perf_counter()
    # The records go to /dev/null: piping 400 MB of kcat's output into this process cost the
    # consume phase about a third of its rate (1.6 against 2.4 M msg/s, side by side).
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=TIMEOUT_S, check=False)
    seconds, cpu, client = time.perf_counter() - t0, cpu_seconds(pid) - cpu0, _children_cpu_s() - client0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    return seconds, cpu, client


def measure(system: System, root: Path, records: Path, count: int) -> dict[str, float]:
    root.mkdir(parents=True)
    system.start(root)
    try:
        bootstrap = str(system.bootstrap)  # type: ignore[attr-defined]
        pid = system.server_pid()
        topic = "c-client"
        system._create(topic, 1)  # type: ignore[attr-defined]
        produce_s, produce_cpu, produce_client = timed(
            ["kcat", "-P", "-b", bootstrap, "-t", topic, "-p", "0", "-l", *kcat_config(), str(records)], pid
        )
        consume = ["kcat", "-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q"]
        fetch = [
            "-X",
            "fetch.message.max.bytes=8388608",
        ]  # Debian's kcat links librdkafka 2.0: no fetch.queue.backoff.ms
        consume_s, consume_cpu, consume_client = timed([*consume, "-c", str(count), *fetch], pid)
    finally:
        system.stop()
    millions = count / 1e6
    return {
        "produce_msg_per_s": count / produce_s,
        "produce_broker_cpu_s_per_M": produce_cpu / millions,
        "produce_kcat_cpu_s_per_M": produce_client / millions,
        "consume_msg_per_s": count / consume_s,
        "consume_broker_cpu_s_per_M": consume_cpu / millions,
        "consume_kcat_cpu_s_per_M": consume_client / millions,
    }


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--msgs", type=int, default=2_000_000, help="records per phase")
    args = parser.parse_args()
    if args.quick:
        args.msgs, args.runs = 100_000, 1
    if shutil.which("kcat") is None:
        raise SystemExit("kcat not found: bash scripts/install-system-deps.sh")
    facts = machine_facts(REPO)
    raw: list[dict[str, float]] = []
    with bench_dir(args.tmp_root, "kafka-c-client") as tmp:
        records = tmp / "records.txt"
        write_records(records, args.msgs, args.seed)
        for run in range(args.runs):
            log(f"run {run + 1}/{args.runs}")
            row = measure(LkKafka(), tmp / f"r{run}", records, args.msgs)
            raw.append({"run": run, **row})
            log(f"  {row}")
    results = {field: summary([r[field] for r in raw]) for field in raw[0] if field != "run"}
    emit("kafka_c_client", args, {"msgs": args.msgs, "value_bytes": VALUE_BYTES, "results": results, "raw": raw}, facts)


if __name__ == "__main__":
    main()
