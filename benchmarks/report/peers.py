"""Tables from one peer suite result (``python -m benchmarks.suite.run``): LKSTREAM beside Tansu, NATS
JetStream and Redis Streams, and the machine's limits measured in the same run."""

from __future__ import annotations

from benchmarks.report.fmt import Result, caption, cell, mb, num, per_run, stat, table
from benchmarks.suite.core import MiB
from benchmarks.suite.report import Result as Suite

EMBEDDED = ("lkstream-embedded", "lkstream-embedded-none")
DAEMON = ("lkstream-daemon", "lkstream-http", "lkstream-kafka")
PEERS = ("tansu", "nats-jetstream", "redis-streams")
# Throughput columns of the embedded and daemon tables: (metric, value bytes, field, header).
THROUGHPUT = (
    ("produce", 200, "msg_per_s", "produce 200 B, msg/s"),
    ("produce", 4096, "MB_per_s", "produce 4 KiB, MB/s"),
    ("consume", 200, "msg_per_s", "consume 200 B, msg/s"),
    ("consume", 4096, "MB_per_s", "consume 4 KiB, MB/s"),
)
LIMITS = {
    "fio_seq_write_buffered": ("disk: fio sequential 1 MiB writes, one fsync at the end", "produce", 4096),
    "python_appender": ("disk: plain Python appender, 1 MiB writes, fdatasync every 100 ms", "produce", 4096),
    "fio_seq_write_fdatasync": ("disk: fio sequential 1 MiB writes, fdatasync after each", "produce", 4096),
    "page_cache_read": ("memory: page-cache read, 1 MiB `readinto`", "consume", 4096),
    "loopback_tcp": ("loopback TCP from another process, 1 MiB sends", "consume", 4096),
}
SUITE_NOTE = "Cells: median (min-max) over the runs; every system starts fresh in each run."


def _suite(res: Result) -> Suite:
    return Suite(res.doc)


def _label(s: Suite, system: str, how: str = "") -> str:
    return s.label(system) + (f", {how}" if how else "")


def _limit_rows(s: Suite, res: Result, keys: tuple[str, ...]) -> list[list[str]]:
    phys = (res.doc.get("extras") or {}).get("physical", {})
    rows = []
    for key in keys:
        if key not in phys:
            continue
        words, metric, size = LIMITS[key]
        rows.append(
            [f"*limit: {words}*"] + [mb(phys[key]) if (m, b) == (metric, size) else "" for m, b, _, _ in THROUGHPUT]
        )
    return rows


def _throughput_rows(s: Suite, systems: list[tuple[str, str, str]]) -> list[list[str]]:
    rows = []
    for system, how, produce_metric in systems:
        if system not in s.systems:
            continue
        row = [_label(s, system, how)]
        for metric, size, fld, _ in THROUGHPUT:
            show = mb if fld == "MB_per_s" else cell
            if metric == "produce":
                row.append(show(s.field(system, produce_metric, fld, size, 1)))
            else:
                row.append("" if produce_metric == "produce_many" else show(s.field(system, metric, fld, size, 1)))
        rows.append(row)
    return rows


def embedded_throughput(res: Result) -> list[str]:
    s = _suite(res)
    systems = [
        ("lkstream-embedded", "`Producer.send` / `Consumer`", "produce"),
        ("lkstream-embedded", "`produce_many` of 1,000", "produce_many"),
        ("lkstream-embedded-none", "`Producer.send` / `Consumer`", "produce"),
        *[(p, "", "produce") for p in PEERS],
    ]
    rows = _throughput_rows(s, systems)
    rows += _limit_rows(s, res, ("fio_seq_write_buffered", "python_appender", "page_cache_read"))
    return table(["System", *[h for *_, h in THROUGHPUT]], rows) + caption(res, note=SUITE_NOTE)


def daemon_throughput(res: Result) -> list[str]:
    s = _suite(res)
    systems = [
        ("lkstream-daemon", "`Producer.send` / `Consumer`", "produce"),
        ("lkstream-daemon", "`produce_many` of 1,000", "produce_many"),
        ("lkstream-http", "", "produce"),
        ("lkstream-kafka", "confluent-kafka", "produce"),
        *[(p, "", "produce") for p in PEERS],
    ]
    rows = _throughput_rows(s, systems)
    rows += _limit_rows(s, res, ("loopback_tcp", "page_cache_read"))
    return table(["System", *[h for *_, h in THROUGHPUT]], rows) + caption(res, note=SUITE_NOTE)


def cores(res: Result) -> list[str]:
    """CPU cores each process used per second of the 1 KiB produce and consume phases."""
    s = _suite(res)
    rows = []
    for system in s.systems:
        row = [s.label(system)]
        for metric in ("produce", "consume"):
            a = s.get(system, metric, 1024, 1)
            wall = (a or {}).get("seconds", {}).get("median")
            if not a or not wall:
                row += ["", ""]
                continue
            embedded = s.systems[system]["kind"] == "embedded"
            client = a["client_cpu_s"]["median"] / wall
            row += ["(one process)" if embedded else f"{client:.2f}", f"{a['server_cpu_s']['median'] / wall:.2f}"]
        rows.append(row)
    hdr = ["System", "produce: client", "produce: server", "consume: client", "consume: server"]
    return table(hdr, rows) + caption(res, note="Cores used per second of the 1 KiB, 1-partition phase.")


def kafka_clients(res: Result) -> list[str]:
    """The Kafka client workloads beyond plain produce and consume, LKSTREAM's listener against Tansu."""
    s = _suite(res)
    ours, theirs = "lkstream-kafka", "tansu"
    rows = []
    for metric, size, fld, words, unit in (
        ("produce", 200, "msg_per_s", "produce, 200 B, `linger.ms` 5, 1 MB batches", "msg/s"),
        ("consume", 200, "msg_per_s", "consume from the start, 200 B", "msg/s"),
        ("produce_idempotent", 200, "msg_per_s", "idempotent producer, 20 KB batches", "msg/s"),
        ("group_join", 200, "seconds", "new group: `subscribe()` to the first record", "s"),
        ("ack_10k_unbatched", 1024, "p99_ms", "ack p99 at 10,000 msg/s, `linger.ms` 0", "ms"),
    ):
        a, b = s.field(ours, metric, fld, size, 1), s.field(theirs, metric, fld, size, 1)
        rows.append(
            [words, f"{cell(a)} {unit}", f"{cell(b)} {unit}", _run_ratio(res, ours, theirs, metric, fld, size=size)]
        )
    hdr = ["confluent-kafka workload", s.label(ours) if ours in s.systems else ours, "Tansu (memory)", "ratio"]
    return table(hdr, rows) + caption(res, note="Ratios are taken run by run, then the median (min-max).")


def _by_run(res: Result, system: str, metric: str, fld: str, size: int) -> dict[int, float]:
    """``{run: value}`` of one figure at one value size (a phase runs at several sizes)."""
    return {
        int(r["run"]): float(r[fld])
        for r in res.doc["raw"]
        if r["system"] == system
        and r["metric"] == metric
        and isinstance(r.get(fld), (int, float))
        and r.get("value_bytes") == size
        and r.get("partitions", 1) == 1
    }


def _run_ratio(res: Result, a: str, b: str, metric: str, fld: str, *, size: int) -> str:
    x, y = _by_run(res, a, metric, fld, size), _by_run(res, b, metric, fld, size)
    ratios = [x[run] / y[run] for run in sorted(x) if y.get(run)]
    return f"x{cell(stat(ratios))}" if ratios else "n/a"


LATENCY_SYSTEMS = (*EMBEDDED, *DAEMON, *PEERS)


def latency(res: Result) -> list[str]:
    """Ack and produce-to-consume latency at 10,000 msg/s of 1 KiB values, every system."""
    s = _suite(res)
    rows = []
    for system in LATENCY_SYSTEMS:
        if system not in s.systems:
            continue
        ack, bare, e2e = (s.get(system, m, 1024, 1) or {} for m in ("ack_10k", "ack_10k_unbatched", "e2e_10k"))
        rows.append(
            [
                s.label(system),
                cell(ack.get("p50_ms")),
                cell(ack.get("p99_ms")),
                cell(bare.get("p99_ms")),
                cell(e2e.get("p50_ms")),
                cell(e2e.get("p99_ms")),
            ]
        )
    trip = (res.doc.get("extras") or {}).get("loopback_round_trip_us")
    if trip:
        ms = [cell(per_run(trip[q], 1e-3)) for q in ("p50_us", "p99_us")]
        rows.append(["*limit: a 100 B round trip between two Python processes over loopback TCP*", *ms, "", "", ""])
    hdr = ["System", "ack p50 ms", "ack p99 ms", "ack p99 ms, no linger", "produce-to-consume p50 ms", "p99 ms"]
    return table(hdr, rows) + caption(
        res,
        note="Open model: 10 records every 1 ms tick, latency from each record's scheduled time; producers"
        " linger up to 1 ms (`linger_ms=1`, `linger.ms=1`), or not at all in *no linger*.",
    )


def ack_at_ceiling(res: Result) -> list[str]:
    """Ack latency at 80 % of each system's own 1 KiB produce ceiling in the same run."""
    s = _suite(res)
    rows = []
    for system in LATENCY_SYSTEMS:
        a = s.get(system, "ack_80pct", 1024, 1)
        if a is None:
            continue
        off, ach = a["offered_msg_per_s"]["median"], a["achieved_msg_per_s"]["median"]
        behind = " (fell behind)" if ach < 0.95 * off else ""
        rows.append([s.label(system), num(off), num(ach) + behind, cell(a.get("p50_ms")), cell(a.get("p99_ms"))])
    hdr = ["System", "offered msg/s", "achieved msg/s", "ack p50 ms", "ack p99 ms"]
    return table(hdr, rows) + caption(res)


def memory(res: Result) -> list[str]:
    """Peak RSS of each server (the embedded broker's whole process) over its block of phases."""
    s = _suite(res)
    rows = []
    for system in s.systems:
        a = s.get(system, "resources")
        if a is None:
            continue
        share = a["server_cpu_s"]["median"] / a["wall_s"]["median"] if a["wall_s"]["median"] else 0.0
        rows.append([s.label(system), cell(a["peak_rss_MB"]), cell(a["server_cpu_s"]), f"{share:.2f}"])
    hdr = ["System", "peak RSS, MB", "server CPU, s", "server cores, average"]
    return table(hdr, rows) + caption(
        res,
        note="RSS sampled every 50 ms over every phase of the system, about 25 s; the embedded broker's"
        " figure is its whole benchmark process.",
    )


def partitions(res: Result) -> list[str]:
    """Consume from the start with 1 and 8 partitions (one consumer reading them all)."""
    s = _suite(res)
    rows = []
    for system in LATENCY_SYSTEMS:
        if system not in s.systems:
            continue
        cells = [mb(s.field(system, "consume", "MB_per_s", size, p)) for size in (200, 4096) for p in (1, 8)]
        rows.append([s.label(system), *cells])
    hdr = ["System", "200 B x1, MB/s", "200 B x8, MB/s", "4 KiB x1, MB/s", "4 KiB x8, MB/s"]
    return table(hdr, rows) + caption(res)


def sweep(res: Result) -> list[str]:
    """Seed 002's batch size x fsync policy on LKSTREAM's storage, with the knee."""
    sw = (res.doc.get("extras") or {}).get("sweep")
    if not sw:
        return ["*Not in this result (run the suite without `--no-extras`).*"]
    rows = []
    for size in sorted(sw["MB_per_s"], key=int):
        modes = sw["MB_per_s"][size]
        label = _size(int(size))
        fsyncs = per_run(modes.get("sync"), 1e6 / int(size))
        rows.append([label, *(mb(modes.get(m)) for m in ("none", "interval", "sync")), cell(fsyncs)])
    k = sw["knee_of_medians"]
    knee, model = k["knee_batch_bytes"], k.get("knee_model_bytes")
    loss = ", ".join(f"{_size(int(b))}: {v:.0f} MB" for b, v in k["interval_loss_window_MB"].items())
    words = (
        f"The knee, the smallest batch whose fsync on each batch keeps at least {k['threshold']:.0%} of the"
        f" no-fsync rate: **{_size(knee) if knee else 'not reached within these sizes'}**"
        + (f" (the model *bandwidth x fsync cost* puts it at {model / MiB:.2f} MiB)" if model else "")
        + f". What a 100 ms fsync interval can lose at these rates: {loss}."
    )
    hdr = ["Batch", "no fsync, MB/s", "fsync every 100 ms, MB/s", "fsync each batch, MB/s", "fsyncs/s (each batch)"]
    note = "`Broker.produce_batch_sync` of pre-encoded batches, one partition."
    return [*table(hdr, rows), "", words, *caption(res, note=note)]


def _size(nbytes: int) -> str:
    return f"{nbytes // MiB} MiB" if nbytes >= MiB else f"{nbytes // 1024} KiB"


def seq_vs_random(res: Result) -> list[str]:
    rw = (res.doc.get("extras") or {}).get("seq_vs_random")
    if not rw:
        return ["*Not in this result (run the suite without `--no-extras`).*"]
    words = {
        "sequential": "sequential 4 KiB `pwrite`s, fdatasync every 100 ms",
        "random": "random 4 KiB `pwrite`s into the same pre-written file",
        "ratio": "sequential / random",
        "fio_direct_sequential": "fio, O_DIRECT sequential 4 KiB (the device)",
        "fio_direct_random": "fio, O_DIRECT random 4 KiB (the device)",
        "fio_direct_ratio": "fio sequential / random",
    }
    rows = [[words.get(k, k.replace("_", " ")), cell(v) if "ratio" in k else mb(v)] for k, v in rw.items()]
    return table(["Pattern", "MB/s (ratios: x)"], rows) + caption(res)


def seek(res: Result) -> list[str]:
    points = (res.doc.get("extras") or {}).get("seek")
    if not points:
        return ["*Not in this result (run the suite without `--no-extras`).*"]
    rows = [
        [
            f"{p['log_bytes'] / MiB:,.0f} MiB",
            f"{p['segments']:.0f}",
            cell(p["p50_ms"]),
            cell(p["p99_ms"]),
            cell(p["p999_ms"]),
        ]
        for p in points
    ]
    return table(["Log", "segments", "p50 ms", "p99 ms", "p99.9 ms"], rows) + caption(
        res, note="`read_from(offset, max_msgs=1)` at uniformly random offsets, page cache warm."
    )


def durability(res: Result) -> list[str]:
    s = _suite(res)
    rows = [[s.label(n), info["durability"], info["client"]] for n, info in s.systems.items()]
    return table(["System", "What is on disk when the ack comes", "Client and settings"], rows) + caption(res)
