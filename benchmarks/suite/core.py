"""Shared machinery of the peer suite: statistics, processes, pacing, result schema.

Everything here is either pure (statistics, knee, ratios, schema validation: unit-tested in
tests/unit/test_bench_suite.py) or a thin wrapper over /proc and subprocess.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._common import TICKERS, log, percentile

SCHEMA_VERSION = 1
MB = 1000**2
MiB = 1024**2
# e2e / latency payloads start with the scheduled send time (perf_counter, a system-wide
# monotonic clock on Linux, so it compares across threads and processes) and a sequence number.
STAMP = struct.Struct(">dq")
LK_SYSTEMS = ("lkstream-embedded", "lkstream-embedded-none", "lkstream-daemon", "lkstream-http", "lkstream-kafka")
# per-run raw rows: which field each metric is compared on, and whether higher is better
KEY_FIELD: dict[str, tuple[str, bool]] = {
    "produce": ("msg_per_s", True),
    "produce_many": ("msg_per_s", True),
    "consume": ("msg_per_s", True),
    "produce_keyed": ("msg_per_s", True),
    "ack_10k": ("p99_ms", False),
    "ack_10k_unbatched": ("p99_ms", False),
    "ack_10k_one_call": ("p99_ms", False),
    "ack_80pct": ("p99_ms", False),
    "e2e_10k": ("p99_ms", False),
    # Kafka-protocol systems only (benchmarks.suite.kafka_phases)
    "produce_idempotent": ("msg_per_s", True),
    "consume_idempotent": ("msg_per_s", True),
    "group_join": ("seconds", False),
    "resources": ("peak_rss_MB", False),
}


class BenchError(RuntimeError):
    """A system under test misbehaved (did not start, lost messages, ...)."""


# -- statistics ------------------------------------------------------------------------------------


def lat_summary(lat_s: Sequence[float], cdf_points: int = 100) -> dict[str, Any]:
    """p50/p99/p999/max/mean in ms of latencies given in seconds, plus a compact CDF.

    The CDF is ``cdf_points`` (latency_ms, quantile) pairs at evenly spaced quantiles plus the
    tail (0.99, 0.999, max), enough to draw the curve without storing every sample.
    """
    if not lat_s:
        raise BenchError("no latency samples")
    lat = sorted(1000.0 * x for x in lat_s)
    n = len(lat)
    qs = sorted({i / cdf_points for i in range(1, cdf_points)} | {0.99, 0.999, 1.0})
    cdf = [[round(percentile(lat, 100 * q), 4), q] for q in qs]
    return {
        "p50_ms": percentile(lat, 50),
        "p99_ms": percentile(lat, 99),
        "p999_ms": percentile(lat, 99.9),
        "max_ms": lat[-1],
        "mean_ms": sum(lat) / n,
        "samples": n,
        "cdf": cdf,
    }


def summary(values: Sequence[float], digits: int = 4) -> dict[str, Any]:
    """Median and min-max of per-run values (and the values)."""
    vals = [float(v) for v in values]
    if not vals:
        raise BenchError("summary of no values")
    return {
        "median": round(statistics.median(vals), digits),
        "min": round(min(vals), digits),
        "max": round(max(vals), digits),
        "runs": [round(v, digits) for v in vals],
    }


def row_key(row: dict[str, Any]) -> tuple[str, str, int, int]:
    return (row["system"], row["metric"], int(row.get("value_bytes", 0)), int(row.get("partitions", 0)))


def aggregate(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Group raw per-run rows by (system, metric, value size, partitions); summarize each number."""
    groups: dict[tuple[str, str, int, int], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row_key(row), []).append(row)
    out = []
    for (system, metric, size, parts), runs in sorted(groups.items()):
        numeric = sorted(
            {k for r in runs for k, v in r.items() if isinstance(v, (int, float)) and k not in ("run",)}
            - {"value_bytes", "partitions"}
        )
        entry: dict[str, Any] = {"system": system, "metric": metric, "value_bytes": size, "partitions": parts}
        entry["n_runs"] = len(runs)
        for k in numeric:
            vals = [r[k] for r in runs if isinstance(r.get(k), (int, float))]
            entry[k] = summary(vals)
        out.append(entry)
    return out


def pair_ratios(rows: Iterable[dict[str, Any]], lk_systems: Sequence[str] = LK_SYSTEMS) -> list[dict[str, Any]]:
    """LKSTREAM/peer ratios of each metric's key field, computed run by run, then summarized.

    A ratio > 1 means LKSTREAM's figure is larger (better for throughput, worse for latency and
    RSS; ``better`` says which). Only runs where both systems have the row count.
    """
    by_run: dict[tuple[str, int, int], dict[str, dict[int, float]]] = {}
    for row in rows:
        metric = row["metric"]
        if metric not in KEY_FIELD:
            continue
        fld, _ = KEY_FIELD[metric]
        value = row.get(fld)
        if not isinstance(value, (int, float)):
            continue
        key = (metric, int(row.get("value_bytes", 0)), int(row.get("partitions", 0)))
        by_run.setdefault(key, {}).setdefault(row["system"], {})[int(row["run"])] = float(value)
    out = []
    for (metric, size, parts), systems in sorted(by_run.items()):
        fld, higher = KEY_FIELD[metric]
        for lk in lk_systems:
            if lk not in systems:
                continue
            for peer, peer_runs in sorted(systems.items()):
                if peer in lk_systems:
                    continue
                ratios = [
                    systems[lk][run] / peer_runs[run]
                    for run in sorted(systems[lk])
                    if run in peer_runs and peer_runs[run] > 0
                ]
                if not ratios:
                    continue
                s = summary(ratios, 3)
                out.append(
                    {
                        "metric": metric,
                        "field": fld,
                        "value_bytes": size,
                        "partitions": parts,
                        "lkstream": lk,
                        "peer": peer,
                        "ratio": s,
                        "lkstream_better": (s["median"] > 1) == higher,
                    }
                )
    return out


def locate_knee(sweep: dict[int, dict[str, float]], threshold: float = 0.5) -> dict[str, Any]:
    """The durability knee of a batch-size x fsync-policy sweep (seed 002, experiment 1).

    ``sweep[batch_bytes][mode]`` is a throughput in MB/s for modes ``none`` (no fsync),
    ``interval`` and ``sync`` (fsync before every ack). With an fsync costing ``L`` seconds and the
    unsynced path moving ``BW`` bytes/s, per-batch fsync gives ``B / (B / BW + L)``: it keeps half
    of ``BW`` at ``B = BW * L`` and collapses below. Reported:

    * ``knee_batch_bytes``: the smallest swept batch whose ``sync/none`` ratio is >= ``threshold``
      (``None`` if none is);
    * ``fsync_cost_ms``: ``L`` per batch size, from ``B/sync - B/none``;
    * ``knee_model_bytes``: ``BW * median(L)`` with ``BW`` the no-fsync throughput of the largest
      batch: where the curve bends, even when it lies outside the swept sizes.
    """
    ratios: dict[int, float] = {}
    costs: dict[int, float] = {}
    for size in sorted(sweep):
        cell = sweep[size]
        none, sync = cell.get("none", 0.0), cell.get("sync", 0.0)
        if none > 0 and sync > 0:
            ratios[size] = sync / none
            costs[size] = max(0.0, size / (sync * MB) - size / (none * MB))
    knee = next((size for size, r in ratios.items() if r >= threshold), None)
    model = None
    if costs:
        top = max(costs)
        model = sweep[top]["none"] * MB * statistics.median(costs.values())
    interval = {str(k): v["interval"] * 0.1 for k, v in sorted(sweep.items()) if "interval" in v}
    return {
        "threshold": threshold,
        "knee_batch_bytes": knee,
        "sync_over_none": {str(k): round(v, 4) for k, v in ratios.items()},
        "fsync_cost_ms": {str(k): round(1000 * v, 3) for k, v in costs.items()},
        "knee_model_bytes": None if model is None else round(model),
        # interval fsync (100 ms): what an OS crash can lose at the measured rate, in MB
        "interval_loss_window_MB": {k: round(v, 2) for k, v in interval.items()},
    }


def validate_result(doc: dict[str, Any]) -> list[str]:
    """Problems with a suite result document (empty list: valid)."""
    problems = []
    for key, kind in (
        ("suite", str),
        ("schema_version", int),
        ("utc", str),
        ("command", str),
        ("runs", int),
        ("machine", dict),
        ("systems", dict),
        ("raw", list),
        ("aggregate", list),
        ("ratios", list),
    ):
        if not isinstance(doc.get(key), kind):
            problems.append(f"{key}: missing or not {kind.__name__}")
    if problems:
        return problems
    if doc["schema_version"] != SCHEMA_VERSION:
        problems.append(f"schema_version {doc['schema_version']} != {SCHEMA_VERSION}")
    for name, info in doc["systems"].items():
        problems += [f"systems.{name}.{k}: missing" for k in ("label", "durability", "version") if not info.get(k)]
    for i, row in enumerate(doc["raw"]):
        problems += _row_problems(i, row, doc["systems"])
    problems += [f"machine.{k}: missing" for k in ("cores", "kernel") if k not in doc["machine"]]
    return problems


def _row_problems(i: int, row: dict[str, Any], systems: dict[str, Any]) -> list[str]:
    problems = [f"raw[{i}].{k}: missing" for k in ("run", "system", "metric") if k not in row]
    if row.get("system") not in systems:
        problems.append(f"raw[{i}].system {row.get('system')!r} not in systems")
    fld = KEY_FIELD.get(row.get("metric", ""), (None, True))[0]
    if fld is not None and not isinstance(row.get(fld), (int, float)):
        problems.append(f"raw[{i}] ({row.get('metric')}): no numeric {fld}")
    return problems


def top_frames(collapsed: str, n: int = 8) -> list[tuple[str, float]]:
    """Self-time shares of the ``n`` hottest frames of py-spy's collapsed ("raw") output.

    Each line is ``frame;frame;...;leaf COUNT``; the leaf frame's line number is dropped so one
    function's samples add up.
    """
    counts: dict[str, int] = {}
    total = 0
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        leaf = stack.rsplit(";", 1)[-1]
        name, _, where = leaf.partition(" (")
        path = where.rstrip(")").rsplit(":", 1)[0]
        key = f"{name} ({path})" if path else name
        counts[key] = counts.get(key, 0) + int(count)
        total += int(count)
    if not total:
        return []
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:n]
    return [(k, round(v / total, 4)) for k, v in top]


# -- payloads --------------------------------------------------------------------------------------


def payloads(seed: int, size: int, count: int = 64) -> list[bytes]:
    """``count`` distinct random values of ``size`` bytes (fixed seed: identical across systems)."""
    rng = random.Random(seed * 1_000_003 + size)
    return [rng.randbytes(size) for _ in range(count)]


def keyed_records(seed: int, size: int, count: int = 1000) -> list[tuple[str, bytes]]:
    """``count`` fixed ``(ticker, value)`` records of ``size``-byte values, from ``seed``."""
    rng = random.Random(seed)
    return [(rng.choice(TICKERS), rng.randbytes(size)) for _ in range(count)]


def stamped(scheduled: float, seq: int, pad: bytes) -> bytes:
    """A latency-probe value: scheduled time and sequence number, padded to the value size."""
    return STAMP.pack(scheduled, seq) + pad


def unstamp(value: bytes | bytearray | memoryview) -> tuple[float, int]:
    scheduled, seq = STAMP.unpack_from(value)
    return float(scheduled), int(seq)


# -- pacing (open model) ---------------------------------------------------------------------------


@dataclass
class Schedule:
    """Open-model send schedule: ``rate`` msg/s for ``seconds``, in ticks of ``tick_s``.

    Every tick's messages share one scheduled time; latencies run from that time (not from when
    the sender got round to it), so a stalled sender shows up as latency, not as a lower rate.
    """

    rate: float
    seconds: float
    tick_s: float = 0.001

    def ticks(self) -> list[tuple[float, int, int]]:
        """(offset from start in s, first sequence number, count) per tick."""
        out = []
        sent = 0
        n_ticks = max(1, int(self.seconds / self.tick_s))
        for i in range(n_ticks):
            due = round(self.rate * (i + 1) * self.tick_s)
            if due > sent:
                out.append((i * self.tick_s, sent, due - sent))
                sent = due
        return out

    @property
    def total(self) -> int:
        return sum(c for _, _, c in self.ticks())


async def run_open_async(
    schedule: Schedule, send: Callable[[float, int, int], Awaitable[None] | None]
) -> tuple[float, int]:
    """Call ``send(scheduled, first_seq, count)`` at each tick on the running loop.

    ``send`` may return an awaitable: it is scheduled as a task (the loop never waits for acks),
    and all of them are awaited at the end. A sender that falls so far behind that the phase runs
    past :func:`overrun_deadline` stops early (the phase length stays bounded). Returns the start
    time and the number of messages sent.
    """
    start = time.perf_counter() + 0.02
    stop_at = start + overrun_deadline(schedule.seconds)
    pending: list[asyncio.Future[Any]] = []
    sent = 0
    for offset, first, count in schedule.ticks():
        scheduled = start + offset
        now = time.perf_counter()
        if now > stop_at:
            break
        while scheduled > now:  # never send early: a latency must not start before its send
            await asyncio.sleep(scheduled - now)
            now = time.perf_counter()
        result = send(scheduled, first, count)
        sent += count
        if result is not None:
            pending.append(asyncio.ensure_future(result))
    if pending:
        await asyncio.gather(*pending)
    return start, sent


async def run_open_sequential(
    schedule: Schedule, send: Callable[[float, int, int], Awaitable[None]]
) -> tuple[float, int]:
    """Like :func:`run_open_async`, but each tick's ``send`` is awaited before the next tick starts.

    For one call in flight at a time (``ack_10k_one_call``): a sender that falls behind sends the
    next tick at once, and its lateness still counts from the scheduled time (no coordinated
    omission), but it never piles up concurrent calls the way one task per tick would.
    """
    start = time.perf_counter() + 0.02
    stop_at = start + overrun_deadline(schedule.seconds)
    sent = 0
    for offset, first, count in schedule.ticks():
        scheduled = start + offset
        now = time.perf_counter()
        if now > stop_at:
            break
        if scheduled > now:
            await asyncio.sleep(scheduled - now)
        await send(scheduled, first, count)
        sent += count
    return start, sent


def overrun_deadline(seconds: float) -> float:
    """How long an open-model phase of ``seconds`` may take before its sender gives up."""
    return 2 * seconds + 1.0


def run_open_sync(
    schedule: Schedule, send: Callable[[float, int, int], None], idle: Callable[[float], None] | None = None
) -> tuple[float, int]:
    """Blocking twin of :func:`run_open_async`; ``idle(seconds)`` is called instead of sleeping."""
    start = time.perf_counter() + 0.02
    stop_at = start + overrun_deadline(schedule.seconds)
    sent = 0
    for offset, first, count in schedule.ticks():
        scheduled = start + offset
        now = time.perf_counter()
        if now > stop_at:
            break
        while scheduled > now:  # idle() may return early (a poll that served a callback)
            if idle is not None:
                idle(scheduled - now)
            else:
                time.sleep(scheduled - now)
            now = time.perf_counter()
        send(scheduled, first, count)
        sent += count
    return start, sent


# -- processes -------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes] | None, timeout: float = 20.0, what: str = "server") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise BenchError(f"{what} exited with code {proc.returncode} before listening on {port}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise BenchError(f"{what} not listening on 127.0.0.1:{port} within {timeout} s")


_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (all threads) in seconds; 0 if the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()  # the command name may contain spaces
    return (int(fields[11]) + int(fields[12])) / _TICKS  # fields 14 and 15 of proc(5)


def peak_rss_bytes(pid: int) -> int:
    """VmHWM (peak resident set) of ``pid``; 0 if the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


@dataclass
class ServerProcess:
    """A peer server started on loopback, output in files under ``root``, stopped by PID."""

    name: str
    cmd: list[str]
    root: Path
    cwd: Path | None = None
    env: dict[str, str] | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)

    def start(self) -> int:
        out = open(self.root / f"{self.name}.out", "wb")  # noqa: SIM115 (the child owns it)
        try:
            self.proc = subprocess.Popen(
                self.cmd,
                cwd=self.cwd or self.root,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(self.env or {})},
                start_new_session=True,  # a Ctrl-C of the runner does not hit the server first
            )
        finally:
            out.close()
        return self.proc.pid

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise BenchError(f"{self.name} not started")
        return self.proc.pid

    def output_tail(self, chars: int = 2000) -> str:
        with contextlib.suppress(OSError):
            return (self.root / f"{self.name}.out").read_text(errors="replace")[-chars:]
        return ""

    def stop(self, deadline_s: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after ``deadline_s``; the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(deadline_s)
            except subprocess.TimeoutExpired:
                log(f"{self.name} (pid {self.proc.pid}) ignored SIGTERM for {deadline_s} s: SIGKILL")
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        return self.proc.returncode


def command_version(cmd: list[str]) -> str:
    """First line of ``cmd``'s output (e.g. ``nats-server --version``), or ``missing``."""
    if shutil.which(cmd[0]) is None and not Path(cmd[0]).exists():
        return "missing"
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return "missing"
    text = (res.stdout or res.stderr).strip().splitlines()
    return text[0] if text else "unknown"


def lsblk_facts() -> Any:
    """Block devices (name, model, rotational, size) from lsblk, or the error."""
    try:
        out = subprocess.run(
            ["lsblk", "-J", "-d", "-o", "NAME,MODEL,ROTA,SIZE,TYPE"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout
        return json.loads(out).get("blockdevices", [])
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError) as exc:
        return f"lsblk failed: {exc}"


def df_facts(path: Path) -> str:
    try:
        return subprocess.run(
            ["df", "-T", str(path)], capture_output=True, text=True, timeout=10, check=False
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"df failed: {exc}"
