"""``lkstream topics copy SOURCE TARGET``: a topic into another, record by record, as they are.

::

    lkstream topics copy SOURCE TARGET [--repartition] [-z CODEC] [--bootstrap HOST:PORT]

Invariants:

* **Records are copied as they are**: key, value, headers and timestamp, each into the
  same partition number of TARGET, in offset order (so what one key wrote stays in one
  partition, in order). With ``--repartition`` each record goes where a producer would
  send it in TARGET instead (murmur2 of its key; keyless records spread).
* **TARGET is made like SOURCE**: created with SOURCE's partition count and retention
  when it does not exist. An existing TARGET must have at least SOURCE's partition count,
  unless ``--repartition``; that is checked before anything is copied.
* **What is copied** is SOURCE as it is when the copy starts: each partition from its log
  start up to its high watermark then. Records produced to SOURCE meanwhile are not.
* **It says what it did**: one line with the count, the partitions and whether TARGET was
  created. A copy that fails part-way says on stderr how many records it had copied; the
  records it copied stay in TARGET (a second run appends them again).
"""

from __future__ import annotations

from collections.abc import Iterator

import click

from lkstream.cli.base import bootstrap_option, remote_daemon
from lkstream.cli.sending import COMPRESSIONS, Line, Sender
from lkstream.cli.topics import topics
from lkstream.client.remote import RemoteBroker
from lkstream.errors import LkstreamError, UnknownTopicError, count_of
from lkstream.format.codec import Compression, Record


def records_between(broker: RemoteBroker, topic: str, pid: int, start: int, end: int) -> Iterator[Record]:
    """The records of ``topic[pid]`` at offsets ``[start, end)``, in order."""
    offset = start
    while offset < end:
        records = broker.read_from(topic, pid, offset)
        if not records:
            return  # retention took the rest meanwhile
        for record in records:
            if record.offset >= end:
                return
            yield record
        offset = records[-1].offset + 1


def _prepare_target(broker: RemoteBroker, source: str, target: str, *, repartition: bool) -> tuple[int, bool]:
    """TARGET's partition count, creating it like SOURCE if missing; ``(count, created)``."""
    settings = broker.describe_topic(source).settings
    try:
        count = len(broker.describe_topic(target).partitions)
    except UnknownTopicError:
        broker.create_topic(
            target, settings.partitions, retention_ms=settings.retention_ms, retention_bytes=settings.retention_bytes
        )
        return settings.partitions, True
    if count < settings.partitions and not repartition:
        raise click.ClickException(
            f"INVALID_ARGUMENT: {target!r} has {count_of(count, 'partition')} and {source!r} has "
            f"{settings.partitions}: copy partition for partition into a topic with at least as many "
            "(or a new one), or give --repartition to route records by key"
        )
    return count, False


@topics.command("copy")
@click.argument("source")
@click.argument("target")
@bootstrap_option
@click.option(
    "--repartition",
    is_flag=True,
    help="Route each record by its key in TARGET (as a producer would) instead of partition for partition.",
)
@click.option(
    "-z",
    "--compression",
    type=click.Choice(COMPRESSIONS),
    default="none",
    show_default=True,
    help="Compress the copied batches.",
)
def copy(source: str, target: str, bootstrap: str, repartition: bool, compression: str) -> None:
    """Copy every record of SOURCE into TARGET with its key, value, headers, timestamp and partition.

    TARGET is created like SOURCE (partitions, retention) when it does not exist.
    SOURCE is copied as it is when the copy starts.
    """
    if source == target:
        raise click.UsageError("SOURCE and TARGET are the same topic")
    with remote_daemon(bootstrap) as broker:
        partitions = broker.describe_topic(source).partitions
        count, created = _prepare_target(broker, source, target, repartition=repartition)
        sender = Sender(broker, target, Compression.parse(compression))
        try:
            for pid, stats in enumerate(partitions):
                for record in records_between(broker, source, pid, stats.log_start_offset, stats.high_watermark):
                    line = Line(record.key, record.value, list(record.headers), None, record.timestamp)
                    sender.add(line if repartition else line._replace(partition=pid))
            sender.flush()
        except LkstreamError:
            click.echo(f"{count_of(sender.acknowledged, 'record')} copied before the error", err=True)
            raise
    made = f"created with {count_of(count, 'partition')}" if created else f"existing, {count_of(count, 'partition')}"
    how = "re-partitioned by key" if repartition else "partition for partition"
    click.echo(
        f"copied {count_of(sender.acknowledged, 'record')} from {source} ({count_of(len(partitions), 'partition')}) "
        f"to {target} ({made}; {how}, keys, values, headers and timestamps kept)"
    )
