"""Produce throughput of the embedded broker (fsync_mode "group"), against the disk.

Scenarios (each on a fresh data directory, one run = one fresh broker):

``200B``            ``await broker.produce_many(topic, [(None, v)] * 1000)``, 200-byte values,
                    one partition. Target: >= 1,000,000 msg/s.
``200B_keyed``      the same with ~50 repeating ticker keys (``str`` keys, as in the seed's
                    API example), one partition.
``200B_keyed_bytes`` the same keys as ``bytes``.
``200B_keyed_p4``   keyed, topic with 4 partitions (murmur2 routing, 4 batches per call).
``200B_batch``      pre-encoded batches through ``broker.produce_batch`` (the encode is done
                    before the clock starts): the broker's append path alone, for reference.
``encode_200B``     ``encode_batch`` of 1,000 x 200 B alone (no broker): the client-side cost.
``send_200B``       ``Producer(broker).send(topic, v)`` one record at a time (the Kafka-style
                    API, default linger 5 ms), 200-byte values, one partition; the loop yields
                    to the event loop every 1,000 sends and the clock stops after ``flush()``.
                    Target (issue 14): >= 1,000,000 msg/s.
``4KiB``            4,096-byte values, batches of 1,000, one partition, timed through
                    ``broker.close()`` (final fsync). Target: >= 80 % of the disk's sequential
                    write bandwidth, measured below in the same run on the same filesystem.

Disk reference (same byte count as the ``4KiB`` log, same directory, same run):

``py_inline_1MiB``      write(1 MiB) + fdatasync whenever >= 128 KiB or 100 ms are unsynced
                        (with 1 MiB writes: after every write).
``py_threaded_1MiB``    a writer thread doing write(1 MiB) and a sync thread doing fdatasync
                        whenever >= 128 KiB or 100 ms are unsynced: the group-commit pattern,
                        i.e. the best plain Python appender with LKSTREAM's durability policy.
``py_threaded_4MiB``    the same with 4 MiB writes (the size of one 4 KiB x 1,000 batch).
``fio_*``               fio, if installed: 128k+fdatasync, 1M+fdatasync, 1M buffered+end_fsync,
                        1M O_DIRECT.

The 80 % target is judged against the best Python appender of the same run (per-run ratio,
median over runs); the ratios to fio's figures are reported too. Because this VM's disk speed
depends on what ran just before, the 4 KiB run is sandwiched between two runs of the threaded
appender and every timed disk phase starts after ``sync`` + 1 s.

    python -m benchmarks.e2e.bench_producer            # full (about 4 GiB per 4 KiB run)
    python -m benchmarks.e2e.bench_producer --quick    # smoke run
    python -m benchmarks.e2e.bench_producer --only 200B --runs 1   # one scenario
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import resource
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks._common import (
    MB,
    TICKERS,
    MiB,
    base_parser,
    bench_dir,
    check_free_space,
    dir_bytes,
    emit,
    log,
    machine_facts,
    summary,
    verdict,
)
from lkstream import Broker, Producer
from lkstream.format.codec import encode_batch

BATCH = 1000
SMALL = 200
LARGE = 4096
SYNC_BYTES = 128 * 1024
SYNC_INTERVAL_S = 0.100
SCENARIOS = (
    "encode_200B",
    "200B",
    "200B_keyed",
    "200B_keyed_bytes",
    "200B_keyed_p4",
    "200B_batch",
    "send_200B",
    "4KiB",
)


# -- payloads --------------------------------------------------------------------------------------


def make_calls(seed: int, value_size: int, templates: int, keyed: bool) -> list[list[tuple[str | None, bytes]]]:
    """``templates`` distinct produce calls of BATCH records each, from a fixed seed."""
    rng = random.Random(seed)
    calls = []
    for _ in range(templates):
        records: list[tuple[str | None, bytes]] = []
        for _ in range(BATCH):
            key = rng.choice(TICKERS) if keyed else None
            records.append((key, rng.randbytes(value_size)))
        calls.append(records)
    return calls


# -- lkstream runs ---------------------------------------------------------------------------------


async def _produce_many(broker: Broker, topic: str, calls: list[Any], n_calls: int) -> float:
    await broker.produce_many(topic, calls[0])  # creates the topic, warms the path
    started = time.perf_counter()
    for i in range(n_calls):
        await broker.produce_many(topic, calls[i % len(calls)])
    return time.perf_counter() - started


async def _produce_batches(broker: Broker, topic: str, batches: list[bytearray], n: int) -> float:
    await broker.produce_batch(topic, 0, batches[0])
    started = time.perf_counter()
    for i in range(n):
        await broker.produce_batch(topic, 0, batches[i % len(batches)])
    return time.perf_counter() - started


async def _send_each(broker: Broker, topic: str, calls: list[Any], n_calls: int) -> float:
    producer = Producer(broker)
    await producer.send(topic, calls[0][0][1])  # creates the topic, warms the path
    started = time.perf_counter()
    for i in range(n_calls):
        send = producer.send
        for key, value in calls[i % len(calls)]:
            send(topic, value, key)
        await asyncio.sleep(0)  # lets lingering or full buffers start their produce call
    await producer.flush()
    seconds = time.perf_counter() - started
    await producer.close()
    return seconds


def run_produce(
    root: Path,
    calls: list[Any],
    n_calls: int,
    *,
    partitions: int = 1,
    pre_encoded: bool = False,
    one_by_one: bool = False,
) -> dict[str, Any]:
    """One fresh broker, ``n_calls`` produce calls; msg/s acked and through close()."""
    data = root / "data"
    shutil.rmtree(data, ignore_errors=True)
    fsyncs: list[float] = []
    broker = Broker(persist_dir=str(data), fsync_mode="group", partitions=partitions)
    broker.fsync_observers.append(fsyncs.append)
    topic = "bench.produce"
    if partitions > 1:
        broker.create_topic(topic, partitions)
    try:
        cpu_started = time.thread_time()  # the event loop runs on this thread: the producer
        faults_started = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        if one_by_one:
            acked_s = asyncio.run(_send_each(broker, topic, calls, n_calls))
        elif pre_encoded:
            batches = [encode_batch(c, timestamp_ms=1_700_000_000_000) for c in calls]
            acked_s = asyncio.run(_produce_batches(broker, topic, batches, n_calls))
        else:
            acked_s = asyncio.run(_produce_many(broker, topic, calls, n_calls))
        cpu_s = time.thread_time() - cpu_started
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_started
        close_started = time.perf_counter()
    finally:
        broker.close()
    closed_s = time.perf_counter() - close_started + acked_s
    msgs = n_calls * BATCH
    value_bytes = sum(len(v) for _, v in calls[0]) * n_calls
    log_bytes = dir_bytes(data / "topics")
    return {
        "msgs": msgs,
        "seconds_acked": acked_s,
        "seconds_through_close": closed_s,
        "msg_per_s": msgs / acked_s,
        "msg_per_s_through_close": msgs / closed_s,
        "value_MB_per_s": value_bytes / acked_s / MB,
        "log_bytes": log_bytes,
        "log_MB_per_s_through_close": log_bytes / closed_s / MB,
        "fsyncs": len(fsyncs),
        "fsync_mean_ms": 1000 * sum(fsyncs) / len(fsyncs) if fsyncs else 0.0,
        "producer_thread_cpu_s_per_GiB": cpu_s / (log_bytes / 2**30),
        "minor_page_faults_per_call": faults / (n_calls + 1),
    }


def run_encode(calls: list[Any], n_calls: int) -> dict[str, Any]:
    ts = 1_700_000_000_000
    encode_batch(calls[0], timestamp_ms=ts)
    started = time.perf_counter()
    for i in range(n_calls):
        encode_batch(calls[i % len(calls)], timestamp_ms=ts)
    seconds = time.perf_counter() - started
    return {"msgs": n_calls * BATCH, "seconds": seconds, "msg_per_s": n_calls * BATCH / seconds}


def use_framer() -> None:
    """Experiment only: route large-value batches of the broker through ``frame_batch``."""
    from micro_codec import frame_batch

    import lkstream.broker.broker as broker_module

    original = broker_module.encode_batch

    def encode(records: Any, **kw: Any) -> bytearray:
        simple = kw.get("headers") is None and kw.get("timestamps") is None and not kw.get("compression")
        if simple and kw.get("timestamp_ms") is not None and len(records[0][1] or b"") >= 1024:
            return frame_batch(records, kw["timestamp_ms"])
        return original(records, **kw)

    broker_module.encode_batch = encode  # type: ignore[assignment]
    log("experiment: broker batches of >= 1 KiB values are built by micro_codec.frame_batch")


# -- disk reference --------------------------------------------------------------------------------


def py_inline(path: Path, total: int, chunk: int) -> float:
    """Serial appender: write, then fdatasync once 128 KiB or 100 ms are unsynced."""
    buf = random.Random(1).randbytes(chunk)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        started = time.perf_counter()
        written = unsynced = 0
        last_sync = started
        while written < total:
            n = os.write(fd, buf[: min(chunk, total - written)])
            written += n
            unsynced += n
            now = time.perf_counter()
            if unsynced >= SYNC_BYTES or now - last_sync >= SYNC_INTERVAL_S:
                os.fdatasync(fd)
                unsynced, last_sync = 0, time.perf_counter()
        os.fdatasync(fd)
        return time.perf_counter() - started
    finally:
        os.close(fd)
        path.unlink()


def py_threaded(path: Path, total: int, chunk: int) -> float:
    """Writer thread + sync thread (group commit): the best plain Python appender."""
    buf = random.Random(1).randbytes(chunk)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    cond = threading.Condition()
    state = {"unsynced": 0, "done": False, "first_dirty": 0.0}

    def syncer() -> None:
        while True:
            with cond:
                while not state["done"]:
                    if state["unsynced"] >= SYNC_BYTES:
                        break
                    if state["unsynced"]:
                        left = state["first_dirty"] + SYNC_INTERVAL_S - time.perf_counter()
                        if left <= 0:
                            break
                        cond.wait(left)
                    else:
                        cond.wait()
                done = state["done"]
                state["unsynced"] = 0
            os.fdatasync(fd)
            if done:
                return

    thread = threading.Thread(target=syncer)
    try:
        started = time.perf_counter()
        thread.start()
        written = 0
        while written < total:
            n = os.write(fd, buf[: min(chunk, total - written)])
            written += n
            with cond:
                if not state["unsynced"]:
                    state["first_dirty"] = time.perf_counter()
                state["unsynced"] += n
                if state["unsynced"] >= SYNC_BYTES:
                    cond.notify()
        with cond:
            state["done"] = True
            cond.notify()
        thread.join()  # includes the final fdatasync
        return time.perf_counter() - started
    finally:
        os.close(fd)
        path.unlink()


FIO_JOBS: dict[str, list[str]] = {
    "fio_128k_fdatasync": ["--bs=128k", "--fdatasync=1"],
    "fio_1M_fdatasync": ["--bs=1M", "--fdatasync=1"],
    "fio_1M_end_fsync": ["--bs=1M", "--end_fsync=1"],
    "fio_1M_direct": ["--bs=1M", "--direct=1"],
}


def fio_bandwidth(path: Path, total: int, extra: list[str]) -> float | None:
    """Sequential write bandwidth in bytes/s measured by fio, None if fio is missing."""
    fio = shutil.which("fio")
    if fio is None:
        return None
    cmd = [
        fio, "--name=seqwrite", f"--filename={path}", "--rw=write", f"--size={total}",
        "--ioengine=psync", "--output-format=json", *extra,
    ]  # fmt: skip
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=600).stdout
        return float(json.loads(out)["jobs"][0]["write"]["bw_bytes"])
    finally:
        path.unlink(missing_ok=True)


# -- main ------------------------------------------------------------------------------------------


def settle() -> None:
    """Let the previous phase's writeback and deletes finish before the next timed phase."""
    os.sync()
    time.sleep(1.0)


def disk_before(root: Path, nbytes: int) -> dict[str, Any]:
    """The best appender once *before* the LKSTREAM 4 KiB run (it runs again after it)."""
    settle()
    return {"py_threaded_1MiB_before": nbytes / py_threaded(root / "ref.dat", nbytes, MiB) / MB}


def disk_reference(root: Path, nbytes: int, lk_mb_s: float, use_fio: bool, before: dict[str, Any]) -> dict[str, Any]:
    """Write ``nbytes`` with the plain appenders (and fio) in ``root``; ratio of ``lk_mb_s``.

    The disk of a VM is noisy and its speed depends on what ran just before, so the
    LKSTREAM run is sandwiched: the threaded appender runs before it and again after it,
    every phase starts after ``settle()``, and the reference is the best appender figure.
    """
    ref: dict[str, Any] = {"bytes": nbytes, **before}
    for name, fn, chunk in (
        ("py_threaded_1MiB", py_threaded, MiB),
        ("py_threaded_4MiB", py_threaded, 4 * MiB),
        ("py_inline_1MiB", py_inline, MiB),
    ):
        settle()
        ref[name] = nbytes / fn(root / "ref.dat", nbytes, chunk) / MB
    if use_fio:
        for name, extra in FIO_JOBS.items():
            settle()
            bw = fio_bandwidth(root / "fio.dat", nbytes, extra)
            if bw is not None:
                ref[name] = bw / MB
    best_py = max(v for k, v in ref.items() if k.startswith("py_"))
    ref["best_python_MB_per_s"] = best_py
    ref["lkstream_4KiB_MB_per_s"] = lk_mb_s
    ref["ratio_4KiB_to_best_python"] = lk_mb_s / best_py
    threaded = (ref["py_threaded_1MiB_before"] + ref["py_threaded_1MiB"]) / 2
    ref["ratio_4KiB_to_threaded_1MiB_mean"] = lk_mb_s / threaded
    # like for like: the same write size as one 4 KiB x 1,000 batch, source not cache-resident
    ref["ratio_4KiB_to_threaded_4MiB"] = lk_mb_s / ref["py_threaded_4MiB"]
    fio = [v for k, v in ref.items() if k.startswith("fio_")]
    if fio:
        ref["ratio_4KiB_to_best_fio"] = lk_mb_s / max(fio)
        ref["ratio_4KiB_to_fio_1M_fdatasync"] = lk_mb_s / ref["fio_1M_fdatasync"]
    return ref


def build_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    targets = []
    if "200B" in results:
        m = results["200B"]["msg_per_s"]
        targets.append(
            {
                "target": "produce 200 B, batches of 1,000: >= 1,000,000 msg/s",
                "measured": m,
                "unit": "msg/s",
                "verdict": verdict(m["median"], 1_000_000),
            }
        )
    for name, what, target in (
        ("200B_keyed_p4", "seed pattern: str ticker keys, 4 partitions, calls of 1,000: >= 1,500,000 msg/s", 1.5e6),
        ("send_200B", "Producer.send one record at a time, 200 B: >= 1,000,000 msg/s", 1e6),
    ):
        if name in results:
            m = results[name]["msg_per_s"]
            targets.append({"target": what, "measured": m, "unit": "msg/s", "verdict": verdict(m["median"], target)})
    if "disk_reference" in results:
        ratio = results["disk_reference"]["ratio_4KiB_to_best_python"]
        targets.append(
            {
                "target": "produce 4 KiB: >= 80% of disk sequential write bandwidth",
                "measured": ratio,
                "unit": "ratio to best plain-Python appender (same bytes, same fsync policy, same run)",
                "verdict": verdict(ratio["median"], 0.80),
            }
        )
    return targets


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--msgs-200b", type=int, help="messages per 200 B run (default 5M; quick 200k)")
    parser.add_argument("--mib-4k", type=int, help="MiB of 4 KiB values per run (default 4096; quick 256)")
    parser.add_argument("--only", help="comma-separated scenarios: " + ",".join(SCENARIOS))
    parser.add_argument("--no-fio", action="store_true", help="skip fio even if installed")
    parser.add_argument("--no-reference", action="store_true", help="skip the disk reference (e.g. while profiling)")
    parser.add_argument(
        "--encoder",
        choices=("aiokafka", "framer"),
        default="aiokafka",
        help="experiment: 'framer' swaps the broker's encode_batch for micro_codec.frame_batch on "
        "batches of >= 1 KiB values (tests the CRC suggestion without editing lkstream)",
    )
    args = parser.parse_args()
    only = set(SCENARIOS if not args.only else args.only.split(","))
    if only - set(SCENARIOS):
        parser.error(f"unknown scenarios {sorted(only - set(SCENARIOS))}")
    if args.encoder == "framer":
        use_framer()
    msgs_small = args.msgs_200b or (200_000 if args.quick else 5_000_000)
    mib_large = args.mib_4k or (256 if args.quick else 4096)
    calls_small = max(1, msgs_small // BATCH)
    calls_large = max(1, mib_large * MiB // (LARGE * BATCH))
    large_bytes = calls_large * BATCH * LARGE

    with bench_dir(args.tmp_root, "producer") as root:
        # the 4 KiB log is deleted before the reference file is written
        check_free_space(root, large_bytes + msgs_small * (SMALL + 80))
        facts = machine_facts(root)
        small = make_calls(args.seed, SMALL, 16, keyed=False)
        keyed = make_calls(args.seed + 1, SMALL, 16, keyed=True)
        keyed_bytes = [[(k.encode() if k else None, v) for k, v in call] for call in keyed]
        large = make_calls(args.seed + 2, LARGE, 4, keyed=False)
        # what one 4 KiB run writes: its batches plus the warm-up batch
        large_log_bytes = len(encode_batch(large[0], timestamp_ms=1)) * (calls_large + 1)
        scenarios: dict[str, Callable[[], dict[str, Any]]] = {
            "encode_200B": lambda: run_encode(small, calls_small),
            "200B": lambda: run_produce(root, small, calls_small),
            "200B_keyed": lambda: run_produce(root, keyed, calls_small),
            "200B_keyed_bytes": lambda: run_produce(root, keyed_bytes, calls_small),
            "200B_keyed_p4": lambda: run_produce(root, keyed, calls_small, partitions=4),
            "200B_batch": lambda: run_produce(root, small, calls_small, pre_encoded=True),
            "send_200B": lambda: run_produce(root, small, calls_small, one_by_one=True),
            "4KiB": lambda: run_produce(root, large, calls_large),
        }
        raw: dict[str, list[dict[str, Any]]] = {}
        for run in range(args.runs):
            log(f"run {run + 1}/{args.runs}")
            for name, fn in scenarios.items():
                if name not in only:
                    continue
                reference = name == "4KiB" and not args.no_reference
                if reference:
                    before = disk_before(root, large_log_bytes)
                    settle()
                result = fn()
                shutil.rmtree(root / "data", ignore_errors=True)
                raw.setdefault(name, []).append(result)
                log(f"{name}: " + ", ".join(f"{k}={v:,.1f}" for k, v in result.items()))
                if reference:
                    lk_mb_s = result["log_MB_per_s_through_close"]
                    ref = disk_reference(root, result["log_bytes"], lk_mb_s, not args.no_fio, before)
                    raw.setdefault("disk_reference", []).append(ref)
                    log("disk reference: " + ", ".join(f"{k}={v:,.2f}" for k, v in ref.items()))

    results: dict[str, Any] = {}
    for name, runs in raw.items():
        keys = [k for k, v in runs[0].items() if isinstance(v, (int, float))]
        results[name] = {k: summary([r[k] for r in runs if k in r]) for k in keys}
    payload = {
        "settings": {
            "encoder": args.encoder,
            "fsync_mode": "group",
            "fsync_interval_ms": 100,
            "fsync_group_bytes": SYNC_BYTES,
            "batch_records": BATCH,
            "msgs_200B_per_run": calls_small * BATCH,
            "bytes_4KiB_values_per_run": large_bytes,
        },
        "targets": build_targets(results),
        "results": results,
    }
    emit("bench_producer", args, payload, facts)


if __name__ == "__main__":
    main()
