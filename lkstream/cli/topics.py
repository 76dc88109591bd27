"""Topic admin: ``lkstream topics create|list|describe|delete``.

::

    lkstream topics create TOPIC [--partitions N] [--retention-ms MS] [--retention-bytes B] [--bootstrap HOST:PORT]
    lkstream topics list     [--bootstrap HOST:PORT | --data-dir DIR]
    lkstream topics describe TOPIC [--bootstrap HOST:PORT | --data-dir DIR]
    lkstream topics delete TOPIC --yes [--bootstrap HOST:PORT]
    lkstream topics delete-records TOPIC --before OFFSET [--partition P ...] [--bootstrap HOST:PORT]

Against a daemon (``--bootstrap``, default 127.0.0.1:9090) every subcommand goes
through :class:`lkstream.client.remote.RemoteBroker`. With ``--data-dir``,
``list`` and ``describe`` read a data directory offline through the read-only
:class:`lkstream.storage.reader.DataDirReader` (no daemon, no lock taken; safe
beside a running broker, whose newest batch may then look torn).

Exit status: 0 success; 1 an error from the broker or the daemon, printed as one
line ``Error: CODE: message`` (``NOT_FOUND`` for an unknown topic), or no daemon
at the address; 2 usage (``delete`` without ``--yes``, a bad value, a directory
that is not a data directory).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

import click

from lkstream.cli.base import (
    bootstrap_option,
    broker_errors,
    cli,
    connect_daemon,
    data_dir_option,
    print_table,
)
from lkstream.client.remote import RemoteBroker
from lkstream.storage.reader import DataDirReader
from lkstream.storage.topics import TOPIC_META

_bootstrap = bootstrap_option
_data_dir = data_dir_option("Read this data directory offline (read-only, no daemon) instead of asking --bootstrap.")


class PartitionRow(NamedTuple):
    partition: int
    log_start_offset: int
    next_offset: int
    high_watermark: int
    segments: int
    size_bytes: int
    dirty: str = "-"  # compacted topics: the share of the sealed bytes the cleaner has not cleaned yet


_HEADERS = ("PARTITION", "LOG_START", "NEXT_OFFSET", "HIGH_WATERMARK", "SEGMENTS", "BYTES", "DIRTY")


def _dirty(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.0%}"


@contextmanager
def _remote(bootstrap: str) -> Iterator[RemoteBroker]:
    with broker_errors():
        broker = connect_daemon(bootstrap)
        try:
            yield broker
        finally:
            broker.close()


def _retention(value: int | None) -> str:
    if value is None:
        return "default"
    return "forever" if value < 0 else str(value)


def _offline_rows(reader: DataDirReader, topic: str, compacted: bool) -> list[PartitionRow]:
    rows = []
    for pid in reader.partitions(topic):
        part = reader.partition(topic, pid)
        end = part.end_offset()
        sizes = [os.stat(seg.seg_path).st_size for seg in part.segments]
        # A partition never written to has no files yet; the broker opens it with one empty segment.
        row = PartitionRow(pid, part.log_start_offset, end, end, max(1, len(part.segments)), sum(sizes))
        if compacted:  # as the broker computes it: sealed segments past the cleaner's progress are dirty
            clean_end = part.marks.clean_end if part.marks is not None else 0
            nexts = [seg.base_offset for seg in part.segments[1:]]
            dirty = sum(size for size, after in zip(sizes, nexts, strict=False) if after > clean_end)
            row = row._replace(dirty=_dirty(dirty / sum(sizes[:-1]) if len(sizes) > 1 else 0.0))
        rows.append(row)
    return rows


def _offline_settings(reader: DataDirReader, topic: str) -> dict[str, object]:
    try:
        with open(os.path.join(reader.topics_dir, topic, TOPIC_META), encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


# -- commands ---------------------------------------------------------------------------------------


@cli.group()
def topics() -> None:
    """Create, list, describe and delete topics (against a daemon, or --data-dir offline for list/describe)."""


@topics.command("create")
@click.argument("topic")
@_bootstrap
@click.option("--partitions", type=click.IntRange(min=1), help="Partition count (default: the broker's).")
@click.option("--retention-ms", type=click.IntRange(min=-1), help="Keep records this long; -1 forever.")
@click.option("--retention-bytes", type=click.IntRange(min=-1), help="Keep at most this many bytes per partition.")
def create(
    topic: str, bootstrap: str, partitions: int | None, retention_ms: int | None, retention_bytes: int | None
) -> None:
    """Create TOPIC on the daemon. Exit 1 (ALREADY_EXISTS) if it exists."""
    with _remote(bootstrap) as broker:
        broker.create_topic(topic, partitions, retention_ms=retention_ms, retention_bytes=retention_bytes)
        count = broker.partitions_for(topic)
    click.echo(f"created topic {topic} with {count} partition{'' if count == 1 else 's'}")


@topics.command("list")
@_bootstrap
@_data_dir
def list_(bootstrap: str, data_dir: str | None) -> None:
    """Print every topic name, one per line, sorted."""
    if data_dir is not None:
        with broker_errors():
            names = DataDirReader(data_dir).topics()
    else:
        with _remote(bootstrap) as broker:
            names = broker.list_topics()
    for name in sorted(names):
        click.echo(name)


@topics.command()
@click.argument("topic")
@_bootstrap
@_data_dir
def describe(topic: str, bootstrap: str, data_dir: str | None) -> None:
    """Print TOPIC's settings, then a table with one row per partition.

    Columns: log start offset, next offset, high watermark, segment count, bytes
    of segments, and for a compacted topic the dirty ratio (the share of the sealed
    bytes the cleaner has not cleaned yet; "-" otherwise). Offline (--data-dir) the
    next offset is the log end that recovery would arrive at, and the high watermark
    equals it.
    """
    if data_dir is not None:
        with broker_errors():
            reader = DataDirReader(data_dir)
            meta = _offline_settings(reader, topic)
            configs = meta.get("configs")
            policy = configs.get("cleanup.policy", "") if isinstance(configs, dict) else ""
            rows = _offline_rows(reader, topic, "compact" in str(policy))
        retention_ms = meta.get("retention_ms")
        retention_bytes = meta.get("retention_bytes")
        click.echo(
            f"topic: {topic} partitions: {len(rows)} "
            f"retention.ms: {_retention(retention_ms if isinstance(retention_ms, int) else None)} "
            f"retention.bytes: {_retention(retention_bytes if isinstance(retention_bytes, int) else None)} "
            f"(offline: {data_dir})"
        )
    else:
        with _remote(bootstrap) as broker:
            description = broker.describe_topic(topic)
        settings = description.settings
        rows = [
            PartitionRow(
                pid,
                s.log_start_offset,
                s.next_offset,
                s.high_watermark,
                s.segment_count,
                s.size_bytes,
                _dirty(s.dirty_ratio),
            )
            for pid, s in enumerate(description.partitions)
        ]
        click.echo(
            f"topic: {description.name} partitions: {settings.partitions} "
            f"retention.ms: {_retention(settings.retention_ms)} "
            f"retention.bytes: {_retention(settings.retention_bytes)}"
        )
    print_table(rows, _HEADERS)


@topics.command()
@click.argument("topic")
@_bootstrap
@click.option("--yes", is_flag=True, help="Confirm: deleting a topic removes all its records. Required.")
def delete(topic: str, bootstrap: str, yes: bool) -> None:
    """Delete TOPIC and all its records (requires --yes)."""
    if not yes:
        raise click.UsageError(f"deleting {topic!r} removes all its records; pass --yes to confirm")
    with _remote(bootstrap) as broker:
        broker.delete_topic(topic)
    click.echo(f"deleted topic {topic}")


@topics.command("delete-records")
@click.argument("topic")
@_bootstrap
@click.option(
    "--before",
    required=True,
    type=click.IntRange(min=-1),
    help="Delete the records below this offset (-1: below the high watermark, i.e. all of them).",
)
@click.option(
    "--partition", "partitions", type=click.IntRange(min=0), multiple=True, help="A partition (repeat; default: all)."
)
def delete_records(topic: str, bootstrap: str, before: int, partitions: tuple[int, ...]) -> None:
    """Delete TOPIC's records below an offset (Kafka's DeleteRecords); print each partition's new log start.

    The log start offset moves to OFFSET, durably: reads below it are out of range (consumers
    reset as their auto_offset_reset says) and whole segments below it are deleted. Exit 1
    (OUT_OF_RANGE) for an offset above a partition's high watermark.
    """
    with _remote(bootstrap) as broker:
        wanted = partitions or tuple(range(broker.partitions_for(topic)))
        lows = broker.delete_records(topic, dict.fromkeys(wanted, before))
    print_table([(pid, low) for pid, low in sorted(lows.items())], ("PARTITION", "LOG_START"))
