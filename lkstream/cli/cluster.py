"""``lkstream cluster info``: the daemon at ``--bootstrap``, described (as ``rpk cluster info`` and ``kcat -L``).

::

    lkstream cluster info [--json] [--bootstrap HOST:PORT]

One ``name: value`` line per fact (``--json``: one object): the version and protocol,
how long it has run, where it listens (gRPC, HTTP, Kafka; ``off`` for a listener that
is off), TLS and authentication, the data directory and the bytes of its segments, how
many topics, partitions and consumer groups it holds, and whether it creates topics on
first produce. With access control it needs ``describe`` on the cluster.
"""

from __future__ import annotations

import dataclasses
import json

import click

from lkstream.cli.base import bootstrap_option, cli, remote_daemon
from lkstream.client.remote.cluster import ClusterDescription
from lkstream.errors import count_of

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def human_bytes(size: int) -> str:
    """``12345`` as ``12.1 KiB``."""
    value = float(size)
    for unit in _UNITS:
        if value < 1024 or unit == _UNITS[-1]:
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def human_duration(seconds: float) -> str:
    """``3725.4`` as ``1h2m5s``."""
    left = int(seconds)
    days, left = divmod(left, 86_400)
    hours, left = divmod(left, 3600)
    minutes, secs = divmod(left, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    shown = "".join(f"{n}{unit}" for n, unit in parts if n)
    return shown or "0s"


def info_lines(d: ClusterDescription) -> list[str]:
    on_off = {True: "on", False: "off"}
    created = f"yes ({count_of(d.default_partitions, 'partition')} each)" if d.auto_create_topics else "no"
    return [
        f"version: {d.server_version}",
        f"protocol: {d.protocol_version}",
        f"uptime: {human_duration(d.uptime_s)}",
        f"grpc: {d.grpc_address or 'off'}",
        f"http: {d.http_address or 'off'}",
        f"kafka: {d.kafka_address or 'off'}",
        f"tls: {on_off[d.tls]}",
        f"auth: {on_off[d.auth]}",
        f"data_dir: {d.data_dir}",
        f"data_bytes: {d.data_bytes} ({human_bytes(d.data_bytes)})",
        f"topics: {d.topics}",
        f"partitions: {d.partitions}",
        f"groups: {d.groups}",
        f"auto_create_topics: {created}",
    ]


@cli.group()
def cluster() -> None:
    """Describe the daemon (listeners, version, data)."""


@cluster.command()
@bootstrap_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of name: value lines.")
def info(bootstrap: str, as_json: bool) -> None:
    """Print the daemon's version, listeners, data directory and usage, and topic, partition and group counts."""
    with remote_daemon(bootstrap) as broker:
        description = broker.describe_cluster()
    if as_json:
        click.echo(json.dumps(dataclasses.asdict(description)))
        return
    for line in info_lines(description):
        click.echo(line)
