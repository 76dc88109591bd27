"""Consumer groups: the rebalance pause when a member joins, and consume throughput vs partitions.

Every consumer is a thread of this process (a ``Consumer.poll`` loop) with its real
heartbeat thread; ``--target`` picks where the group lives: ``embedded`` (one
``lkstream.Broker`` in this process), ``daemon`` (a daemon subprocess on a free loopback
port, one gRPC connection per consumer; the daemon rebalance producer ticks every
``--daemon-produce-interval-ms``, default 20, since a tick is 32 produce RPCs) or
``both`` (default). Nothing is mocked.

``rebalance``   A group of ``--members`` (default 3) consumers reads a 32-partition topic
                while a producer thread appends one record to every partition every
                ``--produce-interval-ms`` (default 5). Then one more member joins.
                Per partition, the *pause* is the longest gap between two consumptions
                after the join; the baseline is the longest gap in the same span before
                it. ``join_to_all_consumed_s``: from the join until every partition was
                read by its final owner after that owner was (re)assigned it; it
                cannot be below the producer tick (the next record must arrive), so
                ``join_to_all_assigned_s`` also reports when the last partition that had
                to change hands (eager: all 32; cooperative: only the moved ones) was
                handed to its final owner (its ``on_assigned`` ran), to the millisecond.
                Measured with the eager ``range`` and ``roundrobin`` assignors (every
                partition pauses: target < 1 s) and with
                ``cooperative-sticky`` (only moved partitions pause; the unmoved ones
                should show no more than the baseline gap). Heartbeat interval 3 s
                (the default): a pause far below it shows the long-poll heartbeat and
                the consumer's wake-up, not the interval, drive the rebalance.
``throughput``  1, 8 and 32 partitions, one consumer per partition in one group (so
                1, 8, 32 threads), ``--records`` records of ``--value-bytes`` bytes spread
                evenly. Timed from the moment every member holds exactly one partition
                (after the rebalances) until every record was consumed; auto-commit on.
                Threads share one interpreter (the GIL): decoding records is CPU work in
                Python, so total throughput is expected to stay roughly flat or fall as
                consumers are added: partitions give *parallelism across processes*
                (or machines), not within one. Against the daemon the broker's side runs
                in another process, but the consumers' decoding still shares this one.
                Consumer processes (not measured here) could at best reach ~2x on 2
                cores, with the daemon then the shared bottleneck.

    python -m benchmarks.e2e.bench_groups           # full
    python -m benchmarks.e2e.bench_groups --quick   # smoke run
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import lkstream
from benchmarks._common import base_parser, bench_dir, emit, log, machine_facts, summary, verdict
from lkstream import Broker, Consumer

REPO = Path(__file__).resolve().parent.parent
READY = re.compile(r"lkstream daemon ready: grpc=(\S+)")

TARGET_EAGER_PAUSE_S = 1.0
REBALANCE_PARTITIONS = 32
DEADLINE_S = 60.0


class PollingMember:
    """A consumer thread recording, per partition, the monotonic times it consumed records."""

    def __init__(self, broker: Any, topic: str, assignor: str, name: str, record_times: bool = True) -> None:
        self.consumer = Consumer(
            broker,
            group="bench",
            assignor=assignor,
            heartbeat_interval_ms=3000,
            session_timeout_ms=30_000,
            auto_commit_interval_ms=200,
            client_id=name,
            on_assigned=self._assigned,
        )
        self.topic = topic
        self.assigned_at: dict[int, float] = {}  # partition -> when it was last assigned to this member
        self.record_times = record_times
        self.times: dict[int, list[float]] = defaultdict(list)
        self.count = 0
        self.stop = threading.Event()
        self.go = threading.Event()
        self.go.set()
        self.error: BaseException | None = None
        self.consumer.subscribe(topic)
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _assigned(self, partitions: list[tuple[str, int]]) -> None:
        now = time.monotonic()
        for _, pid in partitions:
            self.assigned_at[pid] = now

    def start(self) -> PollingMember:
        self.thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                if not self.go.is_set():
                    self.consumer.poll(0.0, max_records=0)  # apply rebalances, read nothing
                    time.sleep(0.005)
                    continue
                records = self.consumer.poll(0.05)
                if self.record_times and records:
                    now = time.monotonic()
                    for pid in {r.partition for r in records}:
                        self.times[pid].append(now)
                self.count += len(records)
        except BaseException as exc:
            self.error = exc

    def close(self) -> None:
        self.stop.set()
        self.thread.join(DEADLINE_S)
        self.consumer.close()
        if self.error is not None:
            raise self.error


class Target:
    """Where the group lives: an embedded Broker, or a daemon subprocess with one connection per client."""

    def __init__(self, kind: str, root: Path) -> None:
        self.kind = kind
        self.root = root
        self.daemon: subprocess.Popen[str] | None = None
        self.address = ""
        self.clients: list[Any] = []
        if kind == "embedded":
            self.admin: Any = Broker(persist_dir=str(root), fsync_mode="none")
            return
        config = root / "daemon.yml"
        root.mkdir(parents=True, exist_ok=True)
        config.write_text(
            f"persist_dir: {root / 'data'}\nfsync_mode: none\n"
            "server:\n  grpc_port: 0\n  http_port: 0\n  kafka_port: 0\n"
        )
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.daemon = subprocess.Popen(
            [sys.executable, "-m", "lkstream.grpc_server", "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=REPO,
        )
        assert self.daemon.stdout is not None
        for line in self.daemon.stdout:
            match = READY.search(line)
            if match:
                self.address = match.group(1)
                break
        else:
            raise RuntimeError("the daemon did not start")
        # Keep draining its output so it never blocks on a full pipe.
        threading.Thread(target=lambda: [None for _ in self.daemon.stdout or []], daemon=True).start()  # type: ignore[union-attr]
        self.admin = lkstream.connect(self.address)

    def client(self) -> Any:
        """The source a consumer uses: the broker itself, or its own daemon connection."""
        if self.kind == "embedded":
            return self.admin
        conn = lkstream.connect(self.address)
        self.clients.append(conn)
        return conn

    def close(self) -> None:
        for conn in self.clients:
            conn.close()
        self.admin.close()
        if self.daemon is not None:
            self.daemon.send_signal(signal.SIGTERM)
            try:
                self.daemon.wait(30)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait()


def _max_gap(times: list[float], start: float, end: float) -> tuple[float, float]:
    """(longest gap between consecutive times within [start, end], the time that gap ended)."""
    inside = [t for t in times if start <= t <= end]
    gap, ended = 0.0, start
    for before, after in zip([start, *inside], inside, strict=False):
        if after - before > gap:
            gap, ended = after - before, after
    if inside and end - inside[-1] > gap:
        gap, ended = end - inside[-1], end
    return gap, ended


def rebalance_run(
    root: Path, kind: str, assignor: str, *, members: int, produce_interval_s: float, window_s: float
) -> dict[str, Any]:
    topic = "rebalance"
    target = Target(kind, root)
    try:
        broker = target.admin
        broker.create_topic(topic, REBALANCE_PARTITIONS)
        stop_producing = threading.Event()

        def produce() -> None:
            while not stop_producing.is_set():
                for pid in range(REBALANCE_PARTITIONS):
                    broker.produce_many_sync(topic, [(None, b"x" * 64)], partition=pid)
                time.sleep(produce_interval_s)

        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        group = [PollingMember(target.client(), topic, assignor, f"m{i}").start() for i in range(members)]
        _wait_stable(broker, members, REBALANCE_PARTITIONS)
        time.sleep(window_s)  # the baseline window
        before = {pid: owner for owner, m in enumerate(group) for _, pid in m.consumer.assignment()}
        joined_at = time.monotonic()
        newcomer = PollingMember(target.client(), topic, assignor, "joiner").start()
        group.append(newcomer)
        _wait_stable(broker, members + 1, REBALANCE_PARTITIONS)
        settled_at = time.monotonic()
        time.sleep(window_s)
        end = time.monotonic()
        stop_producing.set()
        producer.join(DEADLINE_S)
        after = {pid: owner for owner, m in enumerate(group) for _, pid in m.consumer.assignment()}
        # Snapshot before closing: each leave rebalances the members still open.
        assigned_at = [dict(m.assigned_at) for m in group]
        for m in group:
            m.close()
    finally:
        target.close()
    times: dict[int, list[float]] = defaultdict(list)
    for m in group:
        for pid, ts in m.times.items():
            times[pid].extend(ts)
    pauses, baseline, resumed = {}, {}, {}
    for pid in range(REBALANCE_PARTITIONS):
        ts = sorted(times[pid])
        pauses[pid], _ = _max_gap(ts, joined_at, end)
        baseline[pid], _ = _max_gap(ts, joined_at - window_s, joined_at)
        # Consumed again: the first read by its final owner after the join, and after that owner
        # was (re)assigned the partition if the rebalance revoked it (eager) or moved it.
        owner = group[after[pid]]
        since = max(joined_at, assigned_at[after[pid]].get(pid, joined_at))
        resumed[pid] = next((t for t in owner.times[pid] if t >= since), end)
    moved = sorted(pid for pid in range(REBALANCE_PARTITIONS) if before.get(pid) != after.get(pid))
    unmoved = sorted(set(range(REBALANCE_PARTITIONS)) - set(moved))
    # Independent of the producer tick: when the final owner's on_assigned ran for each partition it
    # had to (re)take after the join (eager: all of them; cooperative: the moved ones only).
    reassigned = [
        assigned_at[after[pid]][pid] - joined_at
        for pid in range(REBALANCE_PARTITIONS)
        if assigned_at[after[pid]].get(pid, 0.0) >= joined_at
    ]
    out: dict[str, Any] = {
        "reassigned_partitions": len(reassigned),
        "join_to_all_assigned_s": round(max(reassigned, default=0.0), 4),
        "assignor": assignor,
        "members_before": members,
        "moved_partitions": len(moved),
        "join_to_stable_s": round(settled_at - joined_at, 4),
        "join_to_all_consumed_s": round(max(resumed.values()) - joined_at, 4),
        "max_pause_s": round(max(pauses.values()), 4),
        "baseline_max_gap_s": round(max(baseline.values()), 4),
        "moved_max_pause_s": round(max((pauses[p] for p in moved), default=0.0), 4),
        "unmoved_max_pause_s": round(max((pauses[p] for p in unmoved), default=0.0), 4),
    }
    return out


def _wait_stable(broker: Any, members: int, partitions: int) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        d = broker.describe_group("bench")
        owned = sum(len(m.owned) for m in d.members)
        if len(d.members) == members and d.state.value == "Stable" and owned == partitions:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"group did not settle: {d}")
        time.sleep(0.002)


def throughput_run(root: Path, kind: str, partitions: int, records: int, value_bytes: int) -> dict[str, Any]:
    topic = f"tp{partitions}"
    per_partition = records // partitions
    target = Target(kind, root)
    try:
        broker = target.admin
        broker.create_topic(topic, partitions)
        value = b"v" * value_bytes
        chunk = 1000
        for pid in range(partitions):
            for start in range(0, per_partition, chunk):
                broker.produce_many_sync(topic, [(None, value)] * min(chunk, per_partition - start), partition=pid)
        group: list[PollingMember] = []
        for i in range(partitions):
            member = PollingMember(target.client(), topic, "range", f"c{i}", record_times=False)
            member.go.clear()  # hold reading until every member has its one partition
            group.append(member.start())
        _wait_stable(broker, partitions, partitions)
        while any(len(m.consumer.assignment()) != 1 for m in group):
            time.sleep(0.002)  # the members apply the last grants on their own threads
        started = time.monotonic()
        for m in group:
            m.go.set()
        total = per_partition * partitions
        deadline = started + DEADLINE_S * 5
        while sum(m.count for m in group) < total:
            if time.monotonic() > deadline:
                raise RuntimeError("throughput run did not finish")
            time.sleep(0.001)
        elapsed = time.monotonic() - started
        for m in group:
            m.close()
    finally:
        target.close()
    return {"records": total, "seconds": round(elapsed, 4), "records_per_s": round(total / elapsed, 1)}


def measure(root: Path, kind: str, args: Any, *, runs: int, window_s: float, records: int) -> dict[str, Any]:
    """Every scenario against one target kind (embedded or daemon)."""
    interval_s = (args.produce_interval_ms if kind == "embedded" else args.daemon_produce_interval_ms) / 1000.0
    results: dict[str, Any] = {"produce_interval_ms": interval_s * 1000.0, "rebalance": {}, "throughput": {}}
    for assignor in ("range", "roundrobin", "cooperative-sticky"):
        detail = []
        for run in range(runs):
            run_dir = root / f"{kind}-rebalance-{assignor}-{run}"
            out = rebalance_run(
                run_dir, kind, assignor, members=args.members, produce_interval_s=interval_s, window_s=window_s
            )
            log(f"{kind} rebalance {assignor} run {run + 1}: {out}")
            detail.append(out)
        results["rebalance"][assignor] = {
            "join_to_all_consumed_s": summary([d["join_to_all_consumed_s"] for d in detail], 4),
            "join_to_all_assigned_s": summary([d["join_to_all_assigned_s"] for d in detail], 4),
            "reassigned_partitions": summary([d["reassigned_partitions"] for d in detail], 1),
            "max_pause_s": summary([d["max_pause_s"] for d in detail], 4),
            "unmoved_max_pause_s": summary([d["unmoved_max_pause_s"] for d in detail], 4),
            "baseline_max_gap_s": summary([d["baseline_max_gap_s"] for d in detail], 4),
            "detail": detail,
        }
    for partitions in (1, 8, 32):
        rates = []
        detail = []
        for run in range(runs):
            run_dir = root / f"{kind}-throughput-{partitions}-{run}"
            out = throughput_run(run_dir, kind, partitions, records, args.value_bytes)
            log(f"{kind} throughput {partitions} partitions run {run + 1}: {out}")
            rates.append(out["records_per_s"])
            detail.append(out)
        results["throughput"][str(partitions)] = {"records_per_s": summary(rates, 1), "detail": detail}
    eager = max(results["rebalance"][a]["join_to_all_consumed_s"]["median"] for a in ("range", "roundrobin"))
    coop = results["rebalance"]["cooperative-sticky"]
    results["verdict"] = {
        "eager_pause": verdict(eager, TARGET_EAGER_PAUSE_S, higher_is_better=False),
        "cooperative_unmoved_pause": verdict(
            coop["unmoved_max_pause_s"]["median"],
            # "no pause": within the baseline gap, plus one produce interval of scheduling noise
            coop["baseline_max_gap_s"]["median"] + interval_s + 0.05,
            higher_is_better=False,
        ),
    }
    return results


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=("embedded", "daemon", "both"), default="both")
    parser.add_argument("--members", type=int, default=3, help="members before the join (rebalance)")
    parser.add_argument("--produce-interval-ms", type=float, default=5.0, help="embedded rebalance producer tick")
    parser.add_argument(
        "--daemon-produce-interval-ms",
        type=float,
        default=20.0,
        help="daemon rebalance producer tick (32 produce RPCs per tick)",
    )
    parser.add_argument("--records", type=int, help="records per throughput run (default 2M; quick 400k)")
    parser.add_argument("--value-bytes", type=int, default=100)
    args = parser.parse_args()
    runs = 1 if args.quick else args.runs
    window_s = 0.5 if args.quick else 1.0
    records = args.records or (400_000 if args.quick else 2_000_000)
    kinds = ("embedded", "daemon") if args.target == "both" else (args.target,)
    with bench_dir(args.tmp_root, "groups") as root:
        facts = machine_facts(root)
        results = {kind: measure(root, kind, args, runs=runs, window_s=window_s, records=records) for kind in kinds}
    payload = {
        "config": {
            "consumers": "threads of this process, one Consumer.poll loop each (not processes)",
            "targets": {
                "embedded": "one lkstream.Broker in this process, shared by every consumer",
                "daemon": "a daemon subprocess; every consumer has its own gRPC connection",
            },
            "rebalance_partitions": REBALANCE_PARTITIONS,
            "members_before_join": args.members,
            "heartbeat_interval_ms": 3000,
            "window_s": window_s,
            "throughput_records": records,
            "value_bytes": args.value_bytes,
        },
        "targets": {
            "eager_join_to_all_consumed_s": f"< {TARGET_EAGER_PAUSE_S}",
            "cooperative_unmoved_pause": "no pause beyond the baseline gap",
        },
        "results": results,
        "note": (
            "2-core shared machine, other jobs running: gaps include scheduler noise; pauses are only resolved to "
            "about one producer tick. Throughput with threads is GIL-bound: more partitions do not add CPU; "
            "see the module docstring."
        ),
    }
    emit("bench_groups", args, payload, facts)


if __name__ == "__main__":
    main()
