"""Topic admin: ``lkstream topics create|list|describe|alter-config|add-partitions|delete``.

::

    lkstream topics create TOPIC [--partitions N] [--config K=V ...] [--if-not-exists]
                                 [--retention-ms MS] [--retention-bytes B] [--bootstrap HOST:PORT]
    lkstream topics list     [--bootstrap HOST:PORT | --data-dir DIR]
    lkstream topics describe TOPIC [--all-configs] [--bootstrap HOST:PORT | --data-dir DIR]
    lkstream topics alter-config TOPIC [--set K=V ...] [--delete K ...] [--validate-only] [--bootstrap HOST:PORT]
    lkstream topics add-partitions TOPIC --to N [--validate-only] [--bootstrap HOST:PORT]
    lkstream topics delete TOPIC --yes [--bootstrap HOST:PORT]
    lkstream topics delete-records TOPIC --before OFFSET [--partition P ...] [--bootstrap HOST:PORT]

``--config`` and ``--set`` take Kafka's topic configs (``cleanup.policy=compact``,
``retention.ms=3600000``; docs/kafka.md lists them); ``describe`` prints, after the
partitions, every config that is not at its default with its source (``--all-configs``:
every config).

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
from lkstream.errors import TopicExistsError
from lkstream.storage.reader import DataDirReader
from lkstream.storage.topic_config import ConfigEntry
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
_CONFIG_HEADERS = ("CONFIG", "VALUE", "SOURCE")


def _dirty(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.0%}"


def _assignments(values: tuple[str, ...], option: str) -> dict[str, str]:
    """``("k=v", ...)`` as a mapping; a usage error (exit 2) for an item without ``=`` or a name given twice."""
    parsed: dict[str, str] = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise click.UsageError(f"{option} takes NAME=VALUE (a Kafka topic config), not {item!r}")
        if name.strip() in parsed:
            raise click.UsageError(f"{option} names {name.strip()!r} twice")
        parsed[name.strip()] = value
    return parsed


def _print_configs(entries: list[ConfigEntry], *, all_configs: bool) -> None:
    rows = [(e.name, e.value, e.source.name) for e in entries if all_configs or not e.is_default]
    if rows:
        click.echo("")
        print_table(rows, _CONFIG_HEADERS)


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


def _offline_overrides(meta: dict[str, object]) -> dict[str, str]:
    """The config overrides a ``topic.json`` holds (an older one: its retention, always written then)."""
    configs = meta.get("configs")
    if isinstance(configs, dict):
        return {str(k): str(v) for k, v in configs.items()}
    legacy = (("retention_ms", "retention.ms"), ("retention_bytes", "retention.bytes"))
    return {name: str(meta[field]) for field, name in legacy if isinstance(meta.get(field), int)}


def _offline_retention(overrides: dict[str, str], name: str) -> str:
    value = overrides.get(name)
    return "default" if value is None else _retention(int(value))


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
@click.option(
    "--config",
    "configs",
    multiple=True,
    metavar="K=V",
    help="A Kafka topic config (repeatable): cleanup.policy=compact.",
)
@click.option("--if-not-exists", is_flag=True, help="Exit 0 without changing anything when TOPIC exists.")
def create(
    *,
    topic: str,
    bootstrap: str,
    partitions: int | None,
    retention_ms: int | None,
    retention_bytes: int | None,
    configs: tuple[str, ...],
    if_not_exists: bool,
) -> None:
    """Create TOPIC on the daemon. Exit 1 (ALREADY_EXISTS) if it exists, unless --if-not-exists."""
    overrides = _assignments(configs, "--config")
    with _remote(bootstrap) as broker:
        try:
            broker.create_topic(
                topic, partitions, retention_ms=retention_ms, retention_bytes=retention_bytes, configs=overrides
            )
        except TopicExistsError:
            if not if_not_exists:
                raise
            click.echo(f"topic {topic} already exists; nothing changed")
            return
        count = broker.partitions_for(topic)
    click.echo(f"created topic {topic} with {count} partition{'' if count == 1 else 's'}")


@topics.command("alter-config")
@click.argument("topic")
@_bootstrap
@click.option("--set", "sets", multiple=True, metavar="K=V", help="Set a topic config (repeatable).")
@click.option("--delete", "deletes", multiple=True, metavar="K", help="Remove an override: back to the default.")
@click.option("--validate-only", is_flag=True, help="Check the change on the daemon, apply nothing.")
def alter_config(
    topic: str, bootstrap: str, sets: tuple[str, ...], deletes: tuple[str, ...], validate_only: bool
) -> None:
    """Set and delete TOPIC's config overrides (Kafka's IncrementalAlterConfigs); prints the overrides after."""
    changes = _assignments(sets, "--set")
    if not changes and not deletes:
        raise click.UsageError("nothing to change: give --set NAME=VALUE and/or --delete NAME")
    with _remote(bootstrap) as broker:
        after = broker.alter_topic_configs(topic, changes, deletes, validate_only=validate_only)
    verb = "would leave" if validate_only else "now has"
    shown = ", ".join(f"{k}={v}" for k, v in after.to_json().items()) or "no overrides"
    click.echo(f"topic {topic} {verb} {shown}")


@topics.command("add-partitions")
@click.argument("topic")
@_bootstrap
@click.option("--to", "count", type=click.IntRange(min=1), required=True, help="The new partition count.")
@click.option("--validate-only", is_flag=True, help="Check on the daemon, change nothing.")
def add_partitions(topic: str, bootstrap: str, count: int, validate_only: bool) -> None:
    """Grow TOPIC to --to partitions (never fewer). Keyed records route differently afterwards, as in Kafka."""
    with _remote(bootstrap) as broker:
        before = broker.partitions_for(topic)
        broker.create_partitions(topic, count, validate_only=validate_only)
    if validate_only:
        click.echo(f"topic {topic} can grow from {before} to {count} partitions")
    else:
        click.echo(f"topic {topic} grew from {before} to {count} partitions")


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
@click.option("--all-configs", is_flag=True, help="List every topic config, not only those off their defaults.")
def describe(topic: str, bootstrap: str, data_dir: str | None, all_configs: bool) -> None:
    """Print TOPIC's settings, a table with one row per partition, then its configs with their sources.

    Columns: log start offset, next offset, high watermark, segment count, bytes
    of segments, and for a compacted topic the dirty ratio (the share of the sealed
    bytes the cleaner has not cleaned yet; "-" otherwise). Offline (--data-dir) the
    next offset is the log end that recovery would arrive at, and the high watermark
    equals it, and the configs are the topic's overrides (the broker's defaults are
    the running daemon's).
    """
    if data_dir is not None:
        with broker_errors():
            reader = DataDirReader(data_dir)
            overrides = _offline_overrides(_offline_settings(reader, topic))
            rows = _offline_rows(reader, topic, "compact" in overrides.get("cleanup.policy", ""))
        click.echo(
            f"topic: {topic} partitions: {len(rows)} "
            f"retention.ms: {_offline_retention(overrides, 'retention.ms')} "
            f"retention.bytes: {_offline_retention(overrides, 'retention.bytes')} "
            f"(offline: {data_dir})"
        )
        print_table(rows, _HEADERS)
        if overrides:
            click.echo("")
            print_table([(k, v, "DYNAMIC_TOPIC_CONFIG") for k, v in sorted(overrides.items())], _CONFIG_HEADERS)
        return
    with _remote(bootstrap) as broker:
        description = broker.describe_topic(topic)
        entries = broker.describe_topic_configs(topic)
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
    _print_configs(entries, all_configs=all_configs)


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
