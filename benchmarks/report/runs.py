"""Tables from the single-system scripts' results (``benchmarks/e2e``, ``benchmarks/soak``,
``benchmarks/micro``, and the regression pass ``benchmarks/tools/quick.py``)."""

from __future__ import annotations

from typing import Any

from benchmarks.report.fmt import Result, caption, cell, num, per_run, stat, table


def quick_row(res: Result, key: str) -> dict[str, Any] | None:
    """One row of a ``quick`` result (``scenario/field``) as a summary over its passes."""
    for row in res.doc["rows"]:
        if row["row"] == key:
            return stat(row["after"]["runs"])
    return None


def _quick_table(res: Result, hdr: list[str], rows: list[tuple[str, ...]], note: str = "") -> list[str]:
    out = [[words, *(cell(quick_row(res, key)) for key in keys)] for words, *keys in rows]
    return table(hdr, out) + caption(res, note=note)


def embedded_api(res: Result) -> list[str]:
    rows = [
        ("`produce_many` of 1,000 records of 200 B, no keys, 1 partition", "200B/msg_per_s"),
        ("`produce_many` of 1,000 records, ~50 `str` ticker keys, 4 partitions", "200B_keyed_p4/msg_per_s"),
        ("`Producer.send`, one record a call", "send_200B/msg_per_s"),
        ("`Consumer.consume`, a handler that does nothing", "consumer_consume/msg_per_s"),
        ("`read_from` in a loop (records decoded, no handler)", "decoded_partition/msg_per_s"),
    ]
    return _quick_table(res, ["Embedded call (200 B values)", "msg/s"], rows, note="Medians (min-max) of the passes.")


def daemon_client(res: Result) -> list[str]:
    rows = [
        ("`produce_many_sync` of 1,000 records of 200 B", "produce_many_sync/msg_per_s"),
        ("`await produce_many` of 1,000 records", "produce_many_async/msg_per_s"),
        ("`fetch`, raw batches (no decoding)", "fetch_raw/msg_per_s"),
        ("`fetch` and decode, one fetch ahead", "fetch_pipelined/msg_per_s"),
        ("`Consumer.consume`, a handler that does nothing", "consumer/msg_per_s"),
    ]
    return _quick_table(
        res, ["`lkstream.connect(...)` call", "msg/s"], rows, note="One client process, the daemon on loopback."
    )


def latency_paths(res: Result) -> list[str]:
    rows = [
        ("embedded, `Producer(linger_ms=0).send`, 1 record per 0.1 ms", "producer_send/p50_ms", "producer_send/p99_ms"),
        ("embedded, `produce_many` of 1 record per 0.1 ms", "produce_many_1/p50_ms", "produce_many_1/p99_ms"),
        ("*embedded, the pacer alone (the harness's floor)*", "", "pacer/p99_ms"),
        ("daemon, `Producer(linger_ms=0)`, 10 records per 1 ms", "ack_10k_linger0/p50_ms", "ack_10k_linger0/p99_ms"),
        ("daemon, `Producer(linger_ms=1)`", "ack_10k_linger1/p50_ms", "ack_10k_linger1/p99_ms"),
        (
            "daemon, one awaited `produce_many` of 1 record at a time",
            "ack_10k_one_call/p50_ms",
            "ack_10k_one_call/p99_ms",
        ),
        ("*daemon, the pacer alone*", "", "ack_10k_pacer/p99_ms"),
        ("daemon, produce to `subscribe()` in another process", "e2e/p50_ms", "e2e/p99_ms"),
        ("daemon, produce to a `Consumer` in another process", "", "e2e_consumer/p99_ms"),
    ]
    return _quick_table(
        res,
        ["Path, 10,000 msg/s of 200 B", "p50 ms", "p99 ms"],
        rows,
        note="Open model: latency from each record's scheduled time; 5 s a phase.",
    )


def spark(res: Result) -> list[str]:
    rows = [
        ("source through the daemon (`bootstrap`), into `noop`", "source_bootstrap_noop/rows_per_s"),
        ("source reading the data directory in Python (`path`)", "source_path_noop/rows_per_s"),
        ("*Spark's own Parquet source, same rows (the reference)*", "parquet_noop/rows_per_s"),
        ("`lkstream.spark.jvm.read_path` / Parquet, run by run", "path_jvm_over_parquet/ratio"),
        ("`path` / Parquet, run by run", "path_over_parquet/ratio"),
        ("sink into the daemon", "sink/rows_per_s"),
        ("sink, a session's first write (Python workers start)", "sink_first/rows_per_s"),
    ]
    rows = [r for r in rows if quick_row(res, r[1]) is not None]
    return _quick_table(res, ["Spark job (`local[2]`, 200 B values, 2 partitions)", "rows/s (ratios: x)"], rows)


def spark_reader(*results: Result) -> list[str]:
    rows = []
    for res in results:
        r = res.doc["results"]
        values = "distinct JSON ticks" if res.doc.get("values") == "ticks" else "one 200 B value repeated"
        rows.append(
            [
                values,
                cell(r["source_path_jvm_noop"]["rows_per_s"]),
                cell(r["source_path_noop"]["rows_per_s"]),
                cell(r["parquet_noop"]["rows_per_s"]),
                cell(r["path_jvm_over_parquet"]["ratio"]),
            ]
        )
    hdr = ["Log", "`read_path` (JVM), rows/s", "`path` (Python), rows/s", "Parquet, rows/s", "`read_path` / Parquet"]
    return table(hdr, rows) + caption(*results, note="The ratio is taken run by run.")


def kafka_kcat(res: Result) -> list[str]:
    r = res.doc["results"]
    rows = [
        [phase, cell(r[f"{key}_msg_per_s"]), cell(r[f"{key}_broker_cpu_s_per_M"]), cell(r[f"{key}_kcat_cpu_s_per_M"])]
        for phase, key in (("produce, 200 B, 1 partition", "produce"), ("consume from the start", "consume"))
    ]
    hdr = ["kcat (librdkafka) against the Kafka listener", "msg/s", "daemon CPU s per M records", "kcat CPU s per M"]
    return table(hdr, rows) + caption(res, note="2,000,000 records, `linger.ms` 5, 1 MB batches, acks=all.")


def recovery(res: Result) -> list[str]:
    rows = []
    for i, run in enumerate(res.doc["restart"]["runs"], 1):
        reopen = run["reopen"]
        torn = sum(r.get("truncated_bytes", 0) for r in reopen.get("recovery", []))
        rows.append(
            [
                f"SIGKILL {i}" + (f" after writing {run['write']['written_bytes'] / 1e9:.1f} GB" if i == 1 else ""),
                f"{reopen['log_bytes'] / 1e9:.2f} GB",
                str(reopen["segments"]),
                f"{reopen['open_s'] * 1e3:.0f} ms",
                f"{reopen['ready_s'] * 1e3:.0f} ms",
                f"{reopen['process_wall_s']:.2f} s",
                f"{torn:,} B",
                f"{run['write']['rss_max_MB']:.0f} MB",
            ]
        )
    cold = res.doc["restart"].get("cold_reopen")
    if cold:
        rows.append(
            [
                "page cache dropped first",
                f"{cold['log_bytes'] / 1e9:.2f} GB",
                str(cold["segments"]),
                f"{cold['open_s'] * 1e3:.0f} ms",
                f"{cold['ready_s'] * 1e3:.0f} ms",
                f"{cold['process_wall_s']:.2f} s",
                "-",
                "-",
            ]
        )
    hdr = [
        "Restart",
        "log",
        "segments",
        "`Broker()`",
        "ready",
        "whole process, with imports",
        "torn tail cut",
        "writer's peak RSS",
    ]
    return table(hdr, rows) + caption(
        res, note="Ready: `Broker(persist_dir=...)` and a read of the first and the last record, in a fresh process."
    )


def crash_soak(res: Result) -> list[str]:
    rows = []
    for soak in res.doc["soak"]:
        recs = soak["recoveries"]
        rows.append(
            [
                str(soak["seed"]),
                f"{soak['messages']:,}",
                str(len(recs)),
                ", ".join(f"{r['acked']:,}" for r in recs),
                ", ".join(f"{r['truncated_bytes']:,}" for r in recs),
                ", ".join(f"{r['open_s'] * 1e3:.0f}" for r in recs),
                "every record, in order" if soak["verified"] else "**failed**",
            ]
        )
    hdr = ["Seed", "messages", "SIGKILLs", "acked at each kill", "torn bytes cut", "reopen ms", "verified"]
    return table(hdr, rows) + caption(res)


def many_partitions(*results: Result) -> list[str]:
    rows = []
    for res in results:
        r, s = res.doc["results"], res.doc["settings"]
        rows.append(
            [
                f"{s['partitions']:,} partitions, `RLIMIT_NOFILE` {s['rlimit_nofile']:,}",
                f"{r['create_s']['median']:.2f} s",
                f"{r['produce_s']['median']:.2f} s",
                f"{r['close_s']['median']:.1f} s",
                f"{r['open_s']['median']:.2f} s",
                f"{r['peak_rss_mib']['median']:.0f} MiB",
            ]
        )
    hdr = ["Data directory", "create", "1 record into each", "close", "open again", "peak RSS"]
    return table(hdr, rows) + caption(*results)


def soak_rss(res: Result) -> list[str]:
    r = res.doc["results"]
    rows = [
        [
            f"{r['seconds'] / 60:.0f} min at {num(r['achieved_msg_per_s'])} msg/s, read back through `subscribe()`",
            f"{r['rss_first_MB']:.0f} MB",
            f"{r['rss_peak_MB']:.0f} MB",
            f"{r['rss_last_MB']:.0f} MB",
            f"{r['tail_slope_MB_per_min']:+.2f} MB/min",
        ]
    ]
    return table(["Daemon run", "RSS at start", "peak", "end", "slope, last two thirds"], rows) + caption(
        res, once=True
    )


def abuse(res: Result) -> list[str]:
    f, r = res.doc["flatness"], res.doc["results"]
    c = r["completeness"]
    rows = [
        [
            f"{res.doc['settings']['minutes']:.0f} min of slow, idle, oversize and malformed clients on every listener",
            f"{num(r['warmup']['produce']['p99_ms'])} -> {num(r['under_attack']['produce']['p99_ms'])} ms",
            f"{f['rss_first_MB']:.0f} -> {f['rss_peak_MB']:.0f} -> {f['rss_last_MB']:.0f} MB",
            f"{f['tail_slope_MB_per_min']:+.2f} MB/min",
            f"{c['lost']} / {c['duplicates']} of {c['acknowledged_records']:,}",
        ]
    ]
    hdr = [
        "Daemon under attack",
        "normal produce p99, before -> during",
        "RSS start -> peak -> end",
        "slope",
        "records lost / duplicated",
    ]
    return table(hdr, rows) + caption(res, once=True)


def admin_isolation(res: Result) -> list[str]:
    r = res.doc["results"]
    rows = [
        [window, *(f"{r[key][op]['p50_ms']:.1f} / {r[key][op]['p99_ms']:.1f}" for op in ("produce", "fetch"))]
        for window, key in (("quiet", "quiet"), ("4,000-partition topics created and deleted in a loop", "churn"))
    ]
    a = r["admin"]
    note = (
        f"Creates: {a['topics_created']} in {res.doc['settings']['window_s']:.0f} s, p50"
        f" {a['create']['p50_ms']:.0f} ms; deletes p50 {a['delete']['p50_ms']:.1f} ms;"
        f" {r['completeness']['lost']} records lost."
    )
    return table(["Window (other clients)", "produce p50 / p99 ms", "fetch p50 / p99 ms"], rows) + caption(
        res, note=note
    )


def groups(res: Result) -> list[str]:
    rows = []
    for target in ("embedded", "daemon"):
        t = res.doc["results"][target]
        rows.append(
            [
                target,
                *(
                    f"{t['rebalance'][a]['join_to_all_consumed_s']['median'] * 1e3:.0f} ms"
                    for a in ("range", "roundrobin", "cooperative-sticky")
                ),
                *(num(t["throughput"][p]["records_per_s"]["median"]) for p in ("1", "8", "32")),
            ]
        )
    hdr = [
        "Group on",
        "join: `range`",
        "`roundrobin`",
        "`cooperative-sticky`",
        "consume, 1 partition, rec/s",
        "8",
        "32",
    ]
    return table(hdr, rows) + caption(
        res,
        once=True,
        note="Join: a 4th member joins a group of 3 on 32 partitions; the time until every partition was read"
        " by its new owner.",
    )


def commits(res: Result) -> list[str]:
    s = res.doc["scenarios"]
    rows = [
        ["`OffsetStore.commit` (the journal, group fsync)", cell(s["journal"]["commits_per_s"])],
        ["`OffsetStore.submit` (non-blocking, 32 in flight a thread)", cell(s["journal_submit"]["commits_per_s"])],
        ["*one file per commit: tmp, fsync, rename, directory fsync*", cell(s["atomic_write"]["commits_per_s"])],
    ]
    cfg = res.doc["config"]
    return table(["Committed offsets, durable", "commits/s"], rows) + caption(
        res, note=f"{cfg['threads']} threads, {cfg['threads'] * cfg['groups_per_thread']} groups."
    )


def access(res: Result) -> list[str]:
    u = res.doc["per_call_us"]
    rows = [
        ["Fetch naming a group: token check and 2 ACL decisions", cell(u["fetch"])],
        ["CommitOffsets over 8 topics: token check and 9 decisions", cell(u["commit_8"])],
        ["Fetch, with the security files checked for changes on every call", cell(u["reload_check"])],
    ]
    return table(["What the daemon checks before a call", "us per call"], rows) + caption(
        res, note=f"{res.doc['users']:,} users, {res.doc['acl_entries']:,} ACL entries."
    )


def random_reads(res: Result) -> list[str]:
    r, log = res.doc["results"], res.doc["logs"]["random_log"]
    rows = [
        [words, cell(r[key]["p50_ms"]), cell(r[key]["p99_ms"]), cell(r[key]["p999_ms"])]
        for words, key in (
            ("`read_from(offset, max_msgs=1)`: one record, decoded", "random_read_from_1"),
            ("`read_from(offset, max_msgs=1, max_bytes=1)`: the batch holding it", "random_read_batch"),
            ("`fetch(topic, 0, offset, max_bytes=1)`: that batch, raw bytes", "random_fetch_batch"),
        )
        if key in r
    ]
    return table(["Call at a random offset", "p50 ms", "p99 ms", "p99.9 ms"], rows) + caption(
        res,
        note=f"A {log['log_bytes'] / 1e9:.0f} GB log of {log['segments']} segments, page cache warm;"
        f" {res.doc['settings']['random_samples_per_run']:,} reads a run.",
    )


def compaction(res: Result) -> list[str]:
    """Seed 002's compaction experiment: what a clean leaves, what it costs, what others feel."""
    st, lat, cfg = res.doc["storage"], res.doc["latency"], res.doc["settings"]
    rows = [
        ["Log before the clean, MB", num(st["bytes_before"]["median"] * 1e-6)],
        ["Log after the clean, MB", cell(per_run(st["bytes_after"], 1e-6))],
        ["The final state written fresh, MB", cell(per_run(st["ideal_bytes"], 1e-6))],
        ["After / fresh", f"{st['after_over_ideal']['median']:.3f}"],
        ["Read amplification (bytes read per byte before)", cell(st["read_amplification"])],
        ["Write amplification (bytes written per byte after)", cell(st["write_amplification_of_after"])],
        ["Cleaner, MB of log per second", cell(st["clean_mb_per_s"])],
        ["Cleaner, records per second", cell(st["clean_records_per_s"])],
        ["Fetch p99 on another topic, ms: without a clean / during one", _pair(lat, "fetch")],
        ["Produce p50 on another topic, ms: without a clean / during one", _pair(lat, "produce", "p50")],
    ]
    note = (
        f"{cfg['records']:,} records of {cfg['value_bytes']} bytes, Zipfian keys (s = {cfg['zipf_s']}) over"
        f" {cfg['keys']:,} keys ({num(st['unique_keys']['median'])} distinct); the latency rows beside the clean of"
        f" a {cfg['bg_records']:,}-record topic, {cfg['rate_per_s']} calls/s each;"
        ' every phase in the notes, "Compaction".'
    )
    return table(["Compaction", "value"], rows) + caption(res, note=note)


def _pair(lat: dict[str, Any], call: str, q: str = "p99") -> str:
    return f"{cell(lat[f'{call}_without_{q}_ms'])} / {cell(lat[f'{call}_during_{q}_ms'])}"


def zero_copy(res: Result) -> list[str]:
    """Seed 002's zero-copy experiment: sendfile(2) against the copying path on identical data."""
    rows = []
    for c in res.doc["cells"]:
        r = c["results"]
        size = "4 KB" if c["value_bytes"] >= 4096 else f"{c['value_bytes']} B"
        rows.append(
            [
                f"{size} x {c['partitions']}",
                f"{num(r['zero_copy.raw_msg_per_s']['median'])} / {num(r['copy.raw_msg_per_s']['median'])}",
                _bold_if_met(r["ratio.raw_msg_per_s"]),
                f"{r['zero_copy.raw_daemon_cpu_s_per_M']['median']:.3f}"
                f" / {r['copy.raw_daemon_cpu_s_per_M']['median']:.3f}",
                _bold_if_met(r["ratio.raw_daemon_cpu_s_per_M"]),
                f"{num(r['zero_copy.kcat_msg_per_s']['median'])} / {num(r['copy.kcat_msg_per_s']['median'])}",
                _bold_if_met(r["ratio.kcat_msg_per_s"]),
            ]
        )
    hdr = [
        "Records x partitions",
        "raw client, zero-copy / copying, msg/s",
        "ratio",
        "daemon CPU s per M records, zero-copy / copying",
        "ratio",
        "kcat, zero-copy / copying, msg/s",
        "ratio",
    ]
    note = (
        f"{res.doc['cell_MB']} MB of records per cell; ratios say how many times better zero-copy is"
        " (rates: zero-copy / copying; CPU: copying / zero-copy), start by start, median (min-max);"
        " in bold where it reaches seed 002's 1.5."
    )
    return table(hdr, rows) + caption(res, note=note)


def _bold_if_met(ratio: dict[str, Any], target: float = 1.5) -> str:
    text = cell(ratio)
    return f"**{text}**" if ratio["median"] >= target else text
