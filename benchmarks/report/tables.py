"""Every generated table of the docs, by the name its marker gives: the kinds of result it reads, in
order (a result's kind is its file name before the UTC stamp), and the function that renders it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from benchmarks.report import glance, peers, runs
from benchmarks.report.fmt import Result


@dataclass(frozen=True)
class Table:
    kinds: tuple[str, ...]
    render: Callable[..., list[str]]


TABLES: dict[str, Table] = {
    "glance": Table(("peers", "quick", "bench_recovery"), glance.glance),
    "durability": Table(("peers",), peers.durability),
    "embedded-throughput": Table(("peers",), peers.embedded_throughput),
    "embedded-api": Table(("quick",), runs.embedded_api),
    "daemon-throughput": Table(("peers",), peers.daemon_throughput),
    "daemon-client": Table(("quick",), runs.daemon_client),
    "cores": Table(("peers",), peers.cores),
    "kafka-clients": Table(("peers",), peers.kafka_clients),
    "kafka-kcat": Table(("kafka_c_client",), runs.kafka_kcat),
    "zero-copy": Table(("kafka_zero_copy",), runs.zero_copy),
    "access": Table(("micro_access",), runs.access),
    "spark": Table(("quick",), runs.spark),
    "spark-reader": Table(("bench_spark", "bench_spark"), runs.spark_reader),
    "latency": Table(("peers",), peers.latency),
    "latency-paths": Table(("quick",), runs.latency_paths),
    "ack-at-ceiling": Table(("peers",), peers.ack_at_ceiling),
    "memory": Table(("peers",), peers.memory),
    "soak-rss": Table(("soak_daemon",), runs.soak_rss),
    "abuse": Table(("soak_abuse",), runs.abuse),
    "recovery": Table(("bench_recovery",), runs.recovery),
    "crash-soak": Table(("bench_recovery",), runs.crash_soak),
    "many-partitions": Table(("bench_partitions", "bench_partitions"), runs.many_partitions),
    "sweep": Table(("peers",), peers.sweep),
    "seq-vs-random": Table(("peers",), peers.seq_vs_random),
    "seek": Table(("peers",), peers.seek),
    "random-reads": Table(("bench_consumer",), runs.random_reads),
    "partitions": Table(("peers",), peers.partitions),
    "groups": Table(("bench_groups-quick",), runs.groups),
    "commits": Table(("bench_commits",), runs.commits),
    "admin-isolation": Table(("bench_admin_isolation",), runs.admin_isolation),
    "compaction": Table(("bench_compaction",), runs.compaction),
}

__all__ = ["TABLES", "Result", "Table"]
