"""Issue 28, finding 5: a JoinGroup flood on the Kafka listener, and another group's heartbeat beside it.

Per daemon tree (this one; with ``--compare DIR`` also ``DIR/lkstream``, e.g. a checkout of the
commit before the fix, run one after the other in the same invocation):

1. a *steady* classic member (raw JoinGroup v5 + SyncGroup v3, as a Kafka consumer does) sends
   Heartbeat v3 every ``--heartbeat-interval-ms`` for the whole run; each round trip is timed;
2. ``--baseline-s`` seconds without a flood;
3. the *flood*: a child process (its own GIL) sends ``--joins`` JoinGroup v5 requests one after
   another, each under a new group name with no member id and Kafka's longest session
   (30 min): each gets MEMBER_ID_REQUIRED and never joins again, so every one leaves a
   pending member id and a group behind. Each join is timed;
4. ``--idle-s`` seconds after the flood: the daemon's CPU time over that window (what its group
   ticker spends on the flood's leftovers) and its RSS.

Reported: per-join latency (median of the first and of the last 1000 joins), the steady member's
heartbeat p50/p99 before and during the flood, the idle CPU and RSS, and the ratios between
the trees. The machine may be shared: medians, and both trees measured in one run.

    .venv/bin/python benchmarks/bench_join_flood.py --quick
    .venv/bin/python benchmarks/bench_join_flood.py --compare /tmp/before-fix
"""

from __future__ import annotations

import asyncio
import datetime
import os
import statistics
import struct
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from _common import REPO, base_parser, bench_dir, emit, log, machine_facts
from _hostile import Daemon, latency_summary, process_sample, run_in_process

sys.path.insert(0, str(REPO))

from kio.serial import entity_reader

from lkstream.kafka import kio_codec
from lkstream.kafka.protocol import ApiKey

SESSION_MS = 1_800_000  # Kafka's group.max.session.timeout.ms: the longest a fixed broker accepts
WINDOW = 1000


class KafkaConnection:
    """One connection speaking non-flexible request versions (header v1), one request at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.correlation = 0

    @classmethod
    async def open(cls, address: str) -> KafkaConnection:
        host, port = address.rsplit(":", 1)
        return cls(*await asyncio.open_connection(host, int(port)))

    async def call(self, api_key: int, version: int, **values: Any) -> Any:
        self.correlation += 1
        body = kio_codec.encode(kio_codec.make(kio_codec.request_type(api_key, version), **values))
        header = struct.pack(">hhih", api_key, version, self.correlation, 5) + b"flood"
        self.writer.write(struct.pack(">i", len(header) + len(body)) + header + body)
        (size,) = struct.unpack(">i", await self.reader.readexactly(4))
        answer = await self.reader.readexactly(size)
        decoded, _ = entity_reader(kio_codec.response_type(api_key, version))(answer, 4)
        return decoded

    async def join(self, group: str, member_id: str = "") -> Any:
        return await self.call(
            ApiKey.JOIN_GROUP,
            5,
            group_id=group,
            session_timeout=datetime.timedelta(milliseconds=SESSION_MS),
            rebalance_timeout=datetime.timedelta(milliseconds=SESSION_MS),
            member_id=member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocols=(kio_codec.make(_protocol_type(), name="range", metadata=b""),),
        )

    def close(self) -> None:
        self.writer.close()


def _protocol_type() -> Any:
    return kio_codec.item_type(kio_codec.request_type(ApiKey.JOIN_GROUP, 5), "protocols")


async def flood(address: str, joins: int, prefix: str) -> list[float]:
    """The flood (run in a child process): ``joins`` first joins under new group names; their latencies."""
    connection = await KafkaConnection.open(address)
    latencies = []
    try:
        for i in range(joins):
            started = time.perf_counter()
            answer = await connection.join(f"{prefix}-{i}")
            latencies.append(time.perf_counter() - started)
            if answer.error_code not in (0, 79):  # 79: MEMBER_ID_REQUIRED, the expected answer
                raise SystemExit(f"join {i}: error {answer.error_code}")
    finally:
        connection.close()
    return latencies


async def steady_member(
    address: str, interval_s: float, stop: asyncio.Event, samples: list[tuple[float, float]]
) -> None:
    """A member of group "steady": joins, syncs, then heartbeats until ``stop``; (when, latency) samples."""
    connection = await KafkaConnection.open(address)
    try:
        required = await connection.join("steady")
        joined = await connection.join("steady", required.member_id)
        member_id, generation = joined.member_id, joined.generation_id
        await connection.call(
            ApiKey.SYNC_GROUP,
            3,
            group_id="steady",
            generation_id=generation,
            member_id=member_id,
            group_instance_id=None,
            assignments=(),
        )
        while not stop.is_set():
            started = time.perf_counter()
            answer = await connection.call(
                ApiKey.HEARTBEAT,
                3,
                group_id="steady",
                generation_id=generation,
                member_id=member_id,
                group_instance_id=None,
            )
            samples.append((time.monotonic(), time.perf_counter() - started))
            if answer.error_code:
                raise SystemExit(f"the steady member's heartbeat failed: error {answer.error_code}")
            await asyncio.sleep(interval_s)
    finally:
        connection.close()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure_tree(tree: Path, root: Path, args: Any) -> dict[str, Any]:
    daemon = Daemon(root, {"fsync_mode": "group"}, tree=tree)
    try:
        daemon.wait_ready()
        stop = asyncio.Event()
        samples: list[tuple[float, float]] = []
        steady = asyncio.create_task(steady_member(daemon.kafka, args.heartbeat_interval_ms / 1000, stop, samples))
        await asyncio.sleep(args.baseline_s)
        flood_started = time.monotonic()
        join_flood = run_in_process(flood, daemon.kafka, args.joins, f"flood-{uuid.uuid4().hex[:8]}")
        latencies: list[float] = await asyncio.to_thread(join_flood, 3600.0)
        flood_ended = time.monotonic()
        cpu_before = _cpu_seconds(daemon.pid)
        await asyncio.sleep(args.idle_s)
        idle_cpu = (_cpu_seconds(daemon.pid) - cpu_before) / args.idle_s
        stop.set()
        await steady
        before = [lat for when, lat in samples if when < flood_started]
        during = [lat for when, lat in samples if flood_started <= when <= flood_ended]
        return {
            "tree": str(tree),
            "joins": len(latencies),
            "flood_s": round(flood_ended - flood_started, 2),
            "join_ms_first_1000_median": round(1e3 * statistics.median(latencies[:WINDOW]), 3),
            "join_ms_last_1000_median": round(1e3 * statistics.median(latencies[-WINDOW:]), 3),
            "steady_heartbeat_before": latency_summary(before),
            "steady_heartbeat_during": latency_summary(during),
            "daemon_idle_cpu_after_flood": round(idle_cpu, 3),
            "daemon": process_sample(daemon.pid),
        }
    finally:
        daemon.stop()


def main() -> None:
    parser = base_parser(__doc__ or "")
    parser.add_argument("--joins", type=int, default=20_000, help="flood joins (default 20000; --quick 3000)")
    parser.add_argument("--baseline-s", type=float, default=3.0)
    parser.add_argument("--idle-s", type=float, default=5.0)
    parser.add_argument("--heartbeat-interval-ms", type=float, default=50.0)
    parser.add_argument("--compare", type=Path, help="also run the daemon of DIR/lkstream (A/B)")
    args = parser.parse_args()
    if args.quick:
        args.joins, args.baseline_s, args.idle_s = min(args.joins, 3_000), 2.0, 3.0
    trees = [REPO, *([args.compare] if args.compare else [])]
    results = {}
    with bench_dir(args.tmp_root, "join_flood") as root:
        facts = machine_facts(root)
        for i, tree in enumerate(trees):
            label = "this_tree" if i == 0 else "compare_tree"
            log(f"{label}: {tree}")
            path = root / label
            path.mkdir()
            results[label] = asyncio.run(measure_tree(tree, path, args))
            log(f"{label}: {results[label]}")
    payload: dict[str, Any] = {"results": results}
    if args.compare:
        new, old = results["this_tree"], results["compare_tree"]
        payload["ratios_compare_over_this"] = {
            "join_ms_last_1000_median": round(old["join_ms_last_1000_median"] / new["join_ms_last_1000_median"], 2),
            "steady_heartbeat_during_p99": round(
                old["steady_heartbeat_during"]["p99_ms"] / new["steady_heartbeat_during"]["p99_ms"], 2
            ),
        }
    emit("bench_join_flood", args, payload, facts)


if __name__ == "__main__":
    main()
