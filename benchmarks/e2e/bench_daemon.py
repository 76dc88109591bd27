"""The daemon (issues 3 and 14): one client process against ``python -m lkstream.grpc_server`` on loopback.

Each run starts a fresh daemon as a subprocess (fsync_mode "group", data directory under
``<repo>/.bench-tmp/``, free ports), measures with 200-byte values, and stops it by PID
(SIGTERM, SIGKILL after a deadline):

``produce_many_sync``  ``rb.produce_many_sync(topic, [(None, v)] * 1000)`` in a loop, one
                       partition: the client encodes, the daemon appends. msg/s acked.
``produce_many_async`` the same with ``await rb.produce_many(...)``, one call after the other.
``produce_batch``      pre-encoded 1,000-record batches through ``await rb.produce_batch`` (the
                       encode is done before the clock starts): the RPC + append path alone.
``fetch_decode``       ``rb.fetch(topic, 0, offset)`` (raw batches, 1 MiB) + ``decode_batches``
                       from offset 0 to the end of the produce_many_sync log. msg/s.
``fetch_raw``          the same without the decode (reference).
``fetch_pipelined``    ``fetch_async`` + decode with one read ahead (the next fetch in flight).
``consumer``           the public ``Consumer.consume()`` with a handler that only counts.
``ack_latency``        open model: 1,000-record ``produce_many`` calls scheduled at fixed intervals
                       so the offered rate is 80% of this run's ``produce_many_sync`` ceiling (issue 3).
``ack_10k_*``          ack latency at 10,000 msg/s in 1 ms ticks, the peer suite's schedule, with a
                       precise pacer (``daemon_latency.py``): ``pacer`` (the harness alone),
                       ``linger0`` (``Producer(linger_ms=0)``), ``one_call`` (``await produce_many``
                       of one record) and ``linger1`` (``Producer(linger_ms=1)``, the suite's row).
``e2e``                produce-to-Subscribe: one ``produce_many`` per 1 ms tick (10 records), read
                       back by ``subscribe()`` in another process (``e2e_reader.py``).
``e2e_consumer``       the same read by the public ``Consumer`` in another process.
``rss``                daemon VmRSS after start, after the produce phases, at the end, and its peak
                       (sampled every 50 ms through the whole run).

    python -m benchmarks.e2e.bench_daemon --runs 3
    python -m benchmarks.e2e.bench_daemon --quick --runs 1
    python -m benchmarks.e2e.bench_daemon --runs 1 --py-spy produce_many_sync   # profile both processes
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import lkstream
from benchmarks._common import (
    MB,
    REPO,
    RESULTS_DIR,
    add_pacer_argument,
    base_parser,
    bench_dir,
    check_free_space,
    emit,
    log,
    machine_facts,
    percentile,
    rss_bytes,
    set_pacer,
    summary,
    utc_stamp,
    verdict,
)
from benchmarks.e2e import daemon_latency
from benchmarks.e2e.daemon_latency import ACK_VARIANTS
from lkstream.format.batch import span_of_whole_batches
from lkstream.format.codec import decode_batches, encode_batch

BATCH = 1000
SMALL = 200
E2E_RATE = 10_000
E2E_BATCH = 100
LOAD_FRACTION = 0.80
PHASES = (
    "produce_many_sync",
    "produce_many_async",
    "produce_batch",
    "fetch_decode",
    "fetch_raw",
    "fetch_pipelined",
    "consumer",
    "ack_latency",
    *(f"ack_10k_{variant}" for variant in ACK_VARIANTS),
    "e2e",
    "e2e_consumer",
)
PY_SPY = REPO / ".venv" / "bin" / "py-spy"


# -- daemon process --------------------------------------------------------------------------------


class DaemonProcess:
    """``python -m lkstream.grpc_server`` on loopback with free ports; stopped by PID."""

    def __init__(self, root: Path, extra_config: str = "") -> None:
        self.root = root
        data = root / "data"
        config = root / "daemon.yml"
        config.write_text(
            extra_config + f"persist_dir: {data}\n"
            "fsync_mode: group\n"
            "fsync_interval_ms: 100\n"
            "fsync_group_bytes: 131072\n"
            "partitions: 1\n"
            "server:\n"
            "  grpc_host: 127.0.0.1\n"
            "  grpc_port: 0\n"
            "  http_host: 127.0.0.1\n"
            "  http_port: 0\n"
            "  kafka_port: 0\n"
        )
        self.stdout_path = root / "daemon.out"
        self.stderr_path = root / "daemon.err"
        self._out = open(self.stdout_path, "wb")  # noqa: SIM115 (closed in stop)
        self._err = open(self.stderr_path, "wb")  # noqa: SIM115
        cmd = [sys.executable, "-m", "lkstream.grpc_server", "--config", str(config), "--log-level", "WARNING"]
        # From the tree this process imported lkstream from (``python -m`` puts the working directory
        # first on sys.path): with quick.py --against, the daemon is the revision's too.
        tree = Path(lkstream.__file__).resolve().parent.parent
        self.proc = subprocess.Popen(cmd, cwd=tree, stdout=self._out, stderr=self._err)
        self.pid = self.proc.pid
        self.address = ""

    def wait_ready(self, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"daemon exited with {self.proc.returncode}: {self.stderr_path.read_text()[-2000:]}")
            for line in self.stdout_path.read_text().splitlines():
                if line.startswith("lkstream daemon ready:"):
                    self.address = line.split("grpc=", 1)[1].split()[0]
                    return self.address
            time.sleep(0.02)
        raise SystemExit(f"daemon not ready within {timeout} s")

    def stop(self, deadline_s: float = 15.0) -> int | None:
        try:
            if self.proc.poll() is None:
                os.kill(self.pid, signal.SIGTERM)
                try:
                    self.proc.wait(deadline_s)
                except subprocess.TimeoutExpired:
                    log(f"daemon {self.pid} ignored SIGTERM for {deadline_s} s: SIGKILL")
                    os.kill(self.pid, signal.SIGKILL)
                    self.proc.wait(5)
            return self.proc.returncode
        finally:
            self._out.close()
            self._err.close()


def add_py_spy_arguments(parser: argparse.ArgumentParser, phases: Sequence[str]) -> None:
    """``--py-spy PHASE`` and its options, as :func:`py_spy` reads them."""
    parser.add_argument("--py-spy", choices=phases, help="record the daemon and the client with py-spy in this phase")
    parser.add_argument("--py-spy-native", action="store_true", help="with --py-spy: native frames, every thread")
    parser.add_argument("--py-spy-binary", type=Path, default=PY_SPY, help=f"py-spy to use (default {PY_SPY})")


@contextlib.contextmanager
def py_spy(pid: int, phase: str, args: Any) -> Any:
    """Record the daemon and this client with py-spy (raw collapsed stacks) while ``phase`` runs, if asked.

    ``--py-spy-native`` adds native frames and every thread (grpcio's C core shows up by name);
    it slows both processes several times, so read its proportions, not the phase's figure.
    """
    if args.py_spy != phase:
        yield None
        return
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = utc_stamp()
    options = ["--native", "--threads"] if args.py_spy_native else ["--nonblocking"]
    spies = []
    for side, target in (("", pid), ("client-", os.getpid())):
        out = RESULTS_DIR / f"bench_daemon-pyspy-{side}{phase}-{stamp}.txt"
        cmd = [str(args.py_spy_binary), "record", "-o", str(out), "--format", "raw", "--pid", str(target), "-r", "200"]
        spies.append((out, subprocess.Popen([*cmd, *options], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
    time.sleep(1.0)  # let py-spy attach
    try:
        yield [out for out, _ in spies]
    finally:
        for out, spy in spies:
            spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            try:
                spy.wait(30)
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.wait()
            log(f"py-spy profile of {phase}: {out.relative_to(REPO)}")


# -- phases ----------------------------------------------------------------------------------------


def make_calls(seed: int, templates: int) -> list[list[tuple[None, bytes]]]:
    rng = random.Random(seed)
    return [[(None, rng.randbytes(SMALL)) for _ in range(BATCH)] for _ in range(templates)]


def phase_produce_sync(rb: Any, topic: str, calls: list[Any], n_calls: int) -> dict[str, Any]:
    rb.produce_many_sync(topic, calls[0])  # creates the topic, warms the channel
    started = time.perf_counter()
    for i in range(n_calls):
        rb.produce_many_sync(topic, calls[i % len(calls)])
    seconds = time.perf_counter() - started
    return {"msgs": n_calls * BATCH, "seconds": seconds, "msg_per_s": n_calls * BATCH / seconds}


def phase_produce_async(rb: Any, topic: str, calls: list[Any], n_calls: int) -> dict[str, Any]:
    async def go() -> float:
        await rb.produce_many(topic, calls[0])  # creates the topic, warms the path
        started = time.perf_counter()
        for i in range(n_calls):
            await rb.produce_many(topic, calls[i % len(calls)])
        return time.perf_counter() - started

    seconds = asyncio.run(go())
    return {"msgs": n_calls * BATCH, "seconds": seconds, "msg_per_s": n_calls * BATCH / seconds}


def phase_produce_batch(rb: Any, topic: str, calls: list[Any], n_calls: int) -> dict[str, Any]:
    batches = [encode_batch(c, timestamp_ms=1_700_000_000_000) for c in calls]

    async def go() -> float:
        await rb.produce_many(topic, calls[0])  # creates the topic, opens the aio channel
        started = time.perf_counter()
        for i in range(n_calls):
            await rb.produce_batch(topic, 0, batches[i % len(batches)])
        return time.perf_counter() - started

    seconds = asyncio.run(go())
    return {"msgs": n_calls * BATCH, "seconds": seconds, "msg_per_s": n_calls * BATCH / seconds}


def phase_fetch(rb: Any, topic: str, decode: bool) -> dict[str, Any]:
    rb.fetch(topic, 0, 0)  # warm
    offset = msgs = nbytes = 0
    started = time.perf_counter()
    while True:
        res = rb.fetch(topic, 0, offset)
        if not res.data:
            break
        nbytes += len(res.data)
        if decode:
            records = decode_batches(res.data, topic, 0, offset)
            msgs += len(records)
            offset = records[-1].offset + 1
        else:
            # last batch's base offset + last offset delta: header fields at 0 and 23
            view = memoryview(res.data)
            pos = last = 0
            while pos + 61 <= len(view):
                base, length = struct.unpack_from(">qi", view, pos)
                if pos + 12 + length > len(view):
                    break
                (delta,) = struct.unpack_from(">i", view, pos + 23)
                last = base + delta
                pos += 12 + length
            msgs += last + 1 - offset
            offset = last + 1
        if offset >= res.high_watermark:
            break
    seconds = time.perf_counter() - started
    return {"msgs": msgs, "seconds": seconds, "msg_per_s": msgs / seconds, "MB_per_s": nbytes / seconds / MB}


def phase_fetch_pipelined(rb: Any, topic: str) -> dict[str, Any]:
    """Fetch + decode with one read ahead: the next Fetch is in flight while this one decodes."""

    async def go() -> tuple[int, int, float]:
        await rb.fetch_async(topic, 0, 0)  # warm
        offset = msgs = nbytes = 0
        started = time.perf_counter()
        pending = asyncio.ensure_future(rb.fetch_async(topic, 0, 0))
        while pending is not None:
            res = await pending
            pending = None
            _, next_offset = span_of_whole_batches(res.data, offset)
            if offset < next_offset < res.high_watermark:
                pending = asyncio.ensure_future(rb.fetch_async(topic, 0, next_offset))
            nbytes += len(res.data)
            msgs += len(decode_batches(res.data, topic, 0, offset))
            offset = next_offset
        return msgs, nbytes, time.perf_counter() - started

    msgs, nbytes, seconds = asyncio.run(go())
    return {"msgs": msgs, "seconds": seconds, "msg_per_s": msgs / seconds, "MB_per_s": nbytes / seconds / MB}


def phase_consumer(rb: Any, topic: str, total: int) -> dict[str, Any]:
    """The public Consumer over the daemon (read-ahead on), a handler that only counts."""
    consumer = lkstream.Consumer(rb, auto_commit=False)
    consumer.assign([(topic, 0)])
    handled = 0

    def handler(_pid: int, _offset: int, _record: Any) -> None:
        nonlocal handled
        handled += 1

    started = time.perf_counter()
    asyncio.run(consumer.consume(topic, handler, max_records=total, idle_timeout=1.0))
    seconds = time.perf_counter() - started
    return {"msgs": handled, "seconds": seconds, "msg_per_s": handled / seconds}


def lat_stats(lat_s: list[float], prefix: str = "") -> dict[str, float]:
    lat = sorted(lat_s)
    return {
        f"{prefix}p50_ms": 1000 * percentile(lat, 50),
        f"{prefix}p99_ms": 1000 * percentile(lat, 99),
        f"{prefix}p999_ms": 1000 * percentile(lat, 99.9),
        f"{prefix}max_ms": 1000 * lat[-1],
        f"{prefix}samples": float(len(lat)),
    }


def phase_ack_latency(rb: Any, topic: str, calls: list[Any], ceiling: float, seconds: float) -> dict[str, Any]:
    rate = LOAD_FRACTION * ceiling
    interval = BATCH / rate
    n = max(10, int(seconds / interval))
    warm = n // 10

    async def go() -> tuple[list[float], float, int]:
        await rb.produce_many(topic, calls[0])
        lat: list[float] = []
        max_in_flight = 0
        in_flight = 0

        async def one(i: int, scheduled: float) -> None:
            nonlocal in_flight, max_in_flight
            in_flight += 1
            max_in_flight = max(max_in_flight, in_flight)
            await rb.produce_many(topic, calls[i % len(calls)])
            in_flight -= 1
            if i >= warm:
                lat.append(time.perf_counter() - scheduled)

        tasks = []
        start = time.perf_counter() + 0.05
        for i in range(n):
            scheduled = start + i * interval
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i, scheduled)))
        await asyncio.gather(*tasks)
        achieved = (n * BATCH) / (time.perf_counter() - start)
        return lat, achieved, max_in_flight

    lat, achieved, max_in_flight = asyncio.run(go())
    return {
        "offered_msg_per_s": rate,
        "achieved_msg_per_s": achieved,
        "calls": float(n),
        "max_in_flight": float(max_in_flight),
        **lat_stats(lat),
    }


# -- one run ---------------------------------------------------------------------------------------


class PeakRss:
    """Samples a process's VmRSS every 50 ms in a thread; ``peak`` is the largest seen."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss_bytes(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, rss_bytes(self.pid))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(5)
        return self.peak


def one_run(root: Path, args: Any, calls: list[Any], n_calls: int, phase_s: float) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    daemon = DaemonProcess(root)
    rb = None
    peak: PeakRss | None = None
    try:
        address = daemon.wait_ready()
        rss0 = rss_bytes(daemon.pid)
        peak = PeakRss(daemon.pid)
        log(f"daemon pid {daemon.pid} at {address}, RSS {rss0 / MB:.1f} MB")
        rb = lkstream.connect(address)

        def run(name: str, fn: Callable[[], dict[str, Any]]) -> None:
            if name not in args.only:
                return
            with py_spy(daemon.pid, name, args):
                out[name] = fn()
            log(f"{name}: " + ", ".join(f"{k}={v:,.3f}" for k, v in out[name].items()))

        run("produce_many_sync", lambda: phase_produce_sync(rb, "bench.produce", calls, n_calls))
        run("produce_many_async", lambda: phase_produce_async(rb, "bench.async", calls, n_calls))
        run("produce_batch", lambda: phase_produce_batch(rb, "bench.batch", calls, n_calls))
        rss1 = rss_bytes(daemon.pid)
        run("fetch_decode", lambda: phase_fetch(rb, "bench.produce", decode=True))
        run("fetch_raw", lambda: phase_fetch(rb, "bench.produce", decode=False))
        run("fetch_pipelined", lambda: phase_fetch_pipelined(rb, "bench.produce"))
        run("consumer", lambda: phase_consumer(rb, "bench.produce", n_calls * BATCH))
        ceiling = out.get("produce_many_sync", {}).get("msg_per_s", args.ceiling)
        run("ack_latency", lambda: phase_ack_latency(rb, "bench.ack", calls, ceiling, phase_s))
        for variant in ACK_VARIANTS:
            run(
                f"ack_10k_{variant}",
                lambda v=variant: daemon_latency.ack_10k(rb, f"bench.ack10k.{v}", v, phase_s, SMALL),
            )
        run("e2e", lambda: daemon_latency.e2e(rb, "bench.e2e", phase_s, SMALL, reader="subscribe", seed=args.seed))
        run(
            "e2e_consumer",
            lambda: daemon_latency.e2e(rb, "bench.e2e.c", phase_s, SMALL, reader="consumer", seed=args.seed),
        )
        rss2 = rss_bytes(daemon.pid)
        out["rss"] = {
            "after_start_MB": rss0 / MB,
            "after_produce_MB": rss1 / MB,
            "at_end_MB": rss2 / MB,
            "peak_MB": peak.stop() / MB,
            "growth_MB": (rss2 - rss0) / MB,
        }
        log("rss: " + ", ".join(f"{k}={v:,.1f}" for k, v in out["rss"].items()))
    finally:
        if peak is not None:
            peak.stop()
        if rb is not None:
            rb.close()
        code = daemon.stop()
        log(f"daemon {daemon.pid} stopped, exit code {code}")
    return out


TARGETS = (
    # (target, result section, key, limit, higher is better, unit)
    (
        "issue 3: produce >= 500,000 msg/s (1,000 x 200 B per call)",
        "produce_many_sync",
        "msg_per_s",
        5e5,
        True,
        "msg/s",
    ),
    ("issue 14: produce_many >= 1,100,000 msg/s (sync)", "produce_many_sync", "msg_per_s", 1.1e6, True, "msg/s"),
    ("issue 14: produce_many >= 1,100,000 msg/s (async)", "produce_many_async", "msg_per_s", 1.1e6, True, "msg/s"),
    (
        "issue 3: consume via Fetch >= 1,000,000 msg/s (one read ahead)",
        "fetch_pipelined",
        "msg_per_s",
        1e6,
        True,
        "msg/s",
    ),
    (
        "issue 14: consume >= 1,300,000 msg/s (fetch + decode, one read ahead)",
        "fetch_pipelined",
        "msg_per_s",
        1.3e6,
        True,
        "msg/s",
    ),
    ("issue 14: consume >= 1,300,000 msg/s (Consumer.consume)", "consumer", "msg_per_s", 1.3e6, True, "msg/s"),
    ("issue 3: ack latency p50 < 1 ms at 80% of ceiling", "ack_latency", "p50_ms", 1.0, False, "ms"),
    ("issue 3: ack latency p99 < 10 ms at 80% of ceiling", "ack_latency", "p99_ms", 10.0, False, "ms"),
    ("issue 14: ack p50 <= 0.5 ms at 10k msg/s, Producer(linger_ms=0)", "ack_10k_linger0", "p50_ms", 0.5, False, "ms"),
    ("issue 14: ack p99 <= 2 ms at 10k msg/s, Producer(linger_ms=0)", "ack_10k_linger0", "p99_ms", 2.0, False, "ms"),
    ("issue 14: ack p50 <= 0.5 ms at 10k msg/s, produce_many of one", "ack_10k_one_call", "p50_ms", 0.5, False, "ms"),
    ("issue 14: ack p99 <= 2 ms at 10k msg/s, produce_many of one", "ack_10k_one_call", "p99_ms", 2.0, False, "ms"),
    ("issue 14: produce-to-Subscribe p99 <= 3 ms at 10k msg/s", "e2e", "p99_ms", 3.0, False, "ms"),
    ("issue 14: produce-to-Consumer p99 <= 3 ms at 10k msg/s", "e2e_consumer", "p99_ms", 3.0, False, "ms"),
    ("issue 14: daemon peak RSS <= 150 MB", "rss", "peak_MB", 150.0, False, "MB"),
)


def build_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    targets = []
    for target, section, key, limit, higher, unit in TARGETS:
        if section in results and key in results[section]:
            m = results[section][key]
            targets.append(
                {"target": target, "measured": m, "unit": unit, "verdict": verdict(m["median"], limit, higher)}
            )
    return targets


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--msgs", type=int, help="messages per produce phase (default 1M; quick 100k)")
    parser.add_argument("--phase-seconds", type=float, help="length of the latency phases (default 10; quick 3)")
    parser.add_argument("--only", help="comma-separated phases: " + ",".join(PHASES))
    parser.add_argument("--ceiling", type=float, default=100_000, help="msg/s for ack_latency if produce is skipped")
    add_py_spy_arguments(parser, PHASES)
    add_pacer_argument(parser)
    args = parser.parse_args()
    set_pacer(args.pacer)
    args.only = set(PHASES if not args.only else args.only.split(","))
    if args.only - set(PHASES):
        parser.error(f"unknown phases {sorted(args.only - set(PHASES))}")
    msgs = args.msgs or (100_000 if args.quick else 1_000_000)
    n_calls = max(1, msgs // BATCH)
    phase_s = args.phase_seconds or (3.0 if args.quick else 10.0)
    calls = make_calls(args.seed, 16)

    raw: dict[str, list[dict[str, Any]]] = {}
    with bench_dir(args.tmp_root, "daemon") as root:
        check_free_space(root, 3 * msgs * (SMALL + 80))
        facts = machine_facts(root)
        for run in range(args.runs):
            log(f"run {run + 1}/{args.runs}")
            run_root = root / f"run{run}"
            run_root.mkdir()
            for name, result in one_run(run_root, args, calls, n_calls, phase_s).items():
                raw.setdefault(name, []).append(result)

    results: dict[str, Any] = {}
    for name, runs in raw.items():
        keys = [k for k, v in runs[0].items() if isinstance(v, (int, float))]
        results[name] = {k: summary([r[k] for r in runs if k in r]) for k in keys}
    payload = {
        "settings": {
            "transport": "gRPC on loopback, daemon subprocess, one client process",
            "fsync_mode": "group",
            "fsync_interval_ms": 100,
            "fsync_group_bytes": 131072,
            "value_bytes": SMALL,
            "batch_records": BATCH,
            "msgs_per_produce_phase": n_calls * BATCH,
            "latency_phase_seconds": phase_s,
            "ack_load_fraction": LOAD_FRACTION,
            "e2e": f"{E2E_BATCH} records every {1000 * E2E_BATCH / E2E_RATE:.0f} ms",
            "py_spy_phase": args.py_spy,
            "pacer": args.pacer,
        },
        "targets": build_targets(results),
        "results": results,
    }
    emit("bench_daemon", args, payload, facts)


if __name__ == "__main__":
    main()
