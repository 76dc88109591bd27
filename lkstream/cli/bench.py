"""``lkstream bench produce|consume``: a quick self-benchmark through the public API.

::

    lkstream bench produce|consume [--bootstrap HOST:PORT | --data-dir DIR] [--messages N] [--size BYTES]
                                   [--batch N] [--partitions N] [--json]

A smoke-sized measurement an operator runs on the machine at hand ("is this box
and this daemon healthy?"), not the benchmark suite: the targets and their
methodology live in ``benchmarks/`` and ``docs/benchmarks.md``.

Invariants:

* **Public API only**: :func:`lkstream.connect` for a daemon, :class:`lkstream.Broker`
  for a data directory (which takes its ``LOCK``), so it measures what applications get.
* **A throwaway topic**: ``bench.<random hex>`` is created with ``--partitions`` and
  deleted afterwards, also when the run fails or is interrupted.
* ``produce`` times each ``produce_many_sync`` call of ``--batch`` records (round
  robin over the partitions); ``consume`` first fills the topic (untimed), then times
  each ``read_from`` call of up to ``--batch`` records until every record was read.
  Rates cover the whole timed phase; latencies are per call (nearest-rank p50/p99).
"""

from __future__ import annotations

import json
import math
import os
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final

import click

from lkstream.broker.broker import Broker
from lkstream.cli.base import (
    bootstrap_option,
    broker_errors,
    check_one_target,
    cli,
    data_dir_option,
    print_table,
    progress,
)
from lkstream.cli.produce import open_target
from lkstream.client.remote import RemoteBroker

_FILL_BATCH: Final = 1000


@dataclass(frozen=True)
class BenchResult:
    """One run's numbers (the ``--json`` object)."""

    mode: str
    target: str
    messages: int
    size: int
    batch: int
    partitions: int
    seconds: float
    msg_per_s: float
    mb_per_s: float
    calls: int
    latency_p50_ms: float
    latency_p99_ms: float


def percentile(samples: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of ``samples`` (0 for none)."""
    if not samples:
        return 0.0
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def _produce(
    broker: Broker | RemoteBroker,
    topic: str,
    *,
    messages: int,
    value: bytes,
    batch: int,
    partitions: int,
    advance: Callable[[float], None],
) -> list[float]:
    latencies = []
    sent = 0
    call = 0
    while sent < messages:
        n = min(batch, messages - sent)
        began = time.perf_counter()
        broker.produce_many_sync(topic, [(None, value)] * n, partition=call % partitions)
        latencies.append(time.perf_counter() - began)
        sent += n
        call += 1
        advance(n)
    return latencies


def _consume(
    broker: Broker | RemoteBroker,
    topic: str,
    *,
    messages: int,
    batch: int,
    partitions: int,
    advance: Callable[[float], None],
) -> list[float]:
    latencies = []
    read = 0
    for pid in range(partitions):
        offset = 0
        while True:
            began = time.perf_counter()
            records = broker.read_from(topic, pid, offset, max_msgs=batch)
            latencies.append(time.perf_counter() - began)
            if not records:
                break
            read += len(records)
            advance(len(records))
            offset = records[-1].offset + 1
    if read != messages:
        raise click.ClickException(f"read back {read} records, {messages} were produced")
    return latencies


def run_bench(
    broker: Broker | RemoteBroker,
    mode: str,
    target: str,
    *,
    messages: int,
    size: int,
    batch: int,
    partitions: int,
) -> BenchResult:
    """Create a ``bench.<random>`` topic, measure ``mode``, delete the topic; return the numbers."""
    topic = f"bench.{secrets.token_hex(4)}"
    value = os.urandom(size)
    broker.create_topic(topic, partitions)
    try:
        if mode == "consume":
            with progress("bench: fill", messages) as advance:
                _produce(
                    broker,
                    topic,
                    messages=messages,
                    value=value,
                    batch=max(batch, _FILL_BATCH),
                    partitions=partitions,
                    advance=advance,
                )
        with progress(f"bench: {mode}", messages) as advance:
            began = time.perf_counter()
            if mode == "produce":
                latencies = _produce(
                    broker, topic, messages=messages, value=value, batch=batch, partitions=partitions, advance=advance
                )
            else:
                latencies = _consume(
                    broker, topic, messages=messages, batch=batch, partitions=partitions, advance=advance
                )
            seconds = time.perf_counter() - began
    finally:
        broker.delete_topic(topic)
    return BenchResult(
        mode=mode,
        target=target,
        messages=messages,
        size=size,
        batch=batch,
        partitions=partitions,
        seconds=round(seconds, 6),
        msg_per_s=round(messages / seconds, 1),
        mb_per_s=round(messages * size / seconds / 1e6, 3),
        calls=len(latencies),
        latency_p50_ms=round(percentile(latencies, 0.50) * 1000, 4),
        latency_p99_ms=round(percentile(latencies, 0.99) * 1000, 4),
    )


@cli.command()
@click.argument("mode", type=click.Choice(["produce", "consume"]))
@bootstrap_option
@data_dir_option(
    "Benchmark an embedded broker on this data directory instead of a daemon (takes its LOCK).", must_exist=False
)
@click.option("--messages", type=click.IntRange(min=1), default=100_000, show_default=True, help="Records to send.")
@click.option("--size", type=click.IntRange(min=0), default=200, show_default=True, help="Value size in bytes.")
@click.option(
    "--batch", type=click.IntRange(min=1), default=1000, show_default=True, help="Records per produce / read call."
)
@click.option(
    "--partitions", type=click.IntRange(min=1), default=1, show_default=True, help="Partitions of the bench topic."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
@click.pass_context
def bench(
    ctx: click.Context,
    *,
    mode: str,
    bootstrap: str,
    data_dir: str | None,
    messages: int,
    size: int,
    batch: int,
    partitions: int,
    as_json: bool,
) -> None:
    """Measure produce or consume (MODE) on a throwaway topic: msg/s, MB/s, per-call latency p50/p99.

    The topic, bench.<random>, is created with --partitions and deleted afterwards.
    A quick health check on this machine, not the benchmark suite (benchmarks/).
    """
    check_one_target(ctx, data_dir)
    target = data_dir if data_dir is not None else bootstrap
    with broker_errors():
        broker: Any = open_target(bootstrap, data_dir)
        try:
            result = run_bench(broker, mode, target, messages=messages, size=size, batch=batch, partitions=partitions)
        finally:
            broker.close()
    if as_json:
        click.echo(json.dumps(asdict(result)))
        return
    print_table(
        [[result.mode, result.messages, result.size, result.batch, result.partitions, f"{result.seconds:.3f}",
          f"{result.msg_per_s:,.0f}", f"{result.mb_per_s:.2f}", f"{result.latency_p50_ms:.3f}",
          f"{result.latency_p99_ms:.3f}"]],
        ("MODE", "MESSAGES", "SIZE", "BATCH", "PARTITIONS", "SECONDS", "MSG/S", "MB/S", "P50_MS", "P99_MS"),
    )  # fmt: skip
