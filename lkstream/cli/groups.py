"""Consumer group admin: ``lkstream groups list|describe|reset`` against a daemon.

::

    lkstream groups list [--bootstrap HOST:PORT | --data-dir DIR]
    lkstream groups describe GROUP [--bootstrap HOST:PORT]
    lkstream groups reset GROUP --topic T [--partition N ...]
        (--to-earliest | --to-latest | --to-offset N | --to-timestamp MS) [--bootstrap HOST:PORT]

``describe`` prints the group's state, generation and assignor, a table of
members (member id, static instance id, client, host, owned partitions) and a
table per partition: committed offset, high watermark, lag in messages, lag in
seconds (age of the oldest record not consumed; 0 when caught up) and owner.

``reset`` is the operator's way to rewind or skip a group (a committed offset
otherwise never moves backward). The coordinator refuses it while the group has
live members: stop the group's consumers first.

Exit status: 0 success; 1 an error from the daemon, printed as one line
``Error: CODE: message`` (``FAILED_PRECONDITION`` for a reset of a group with
live members, ``NOT_FOUND`` for a group or topic that does not exist), or no
daemon at the address; 2 usage (no reset target or two of them, a bad value).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import click

from lkstream.broker.groups.types import GroupDescription, GroupState, PartitionLag, TopicPartition
from lkstream.cli.base import (
    bootstrap_option,
    broker_errors,
    check_one_target,
    cli,
    connect_daemon,
    count_of,
    data_dir_option,
    print_table,
)
from lkstream.client.remote import RemoteBroker
from lkstream.storage.names import escaped
from lkstream.storage.offsets import OffsetStore
from lkstream.storage.reader import DataDirReader

_MEMBER_HEADERS = ("MEMBER", "INSTANCE", "CLIENT", "HOST", "PARTITIONS")
_LAG_HEADERS = ("TOPIC", "PARTITION", "COMMITTED", "HIGH_WATERMARK", "LAG", "LAG_SECONDS", "OWNER")


@contextmanager
def _remote(bootstrap: str) -> Iterator[RemoteBroker]:
    with broker_errors():
        broker = connect_daemon(bootstrap)
        try:
            yield broker
        finally:
            broker.close()


def format_partitions(partitions: frozenset[TopicPartition] | set[TopicPartition]) -> str:
    """``{("a", 0), ("a", 1), ("b", 3)}`` as ``a[0,1] b[3]``; ``-`` for none."""
    if not partitions:
        return "-"
    by_topic: dict[str, list[int]] = {}
    for topic, pid in sorted(partitions):
        by_topic.setdefault(topic, []).append(pid)
    return " ".join(f"{topic}[{','.join(map(str, pids))}]" for topic, pids in by_topic.items())


def member_rows(description: GroupDescription) -> list[tuple[str, str, str, str, str]]:
    return [
        (m.member_id, m.instance_id or "-", m.client_id or "-", m.client_host or "-", format_partitions(m.owned))
        for m in sorted(description.members, key=lambda m: m.member_id)
    ]


def lag_rows(lags: Sequence[PartitionLag]) -> list[tuple[str, int, str, int, int, str, str]]:
    return [
        (
            lag.topic,
            lag.partition,
            "-" if lag.committed is None else str(lag.committed),
            lag.high_watermark,
            lag.lag_messages,
            f"{lag.lag_seconds:.3f}",
            lag.owner or "-",
        )
        for lag in sorted(lags, key=lambda lag: (lag.topic, lag.partition))
    ]


# -- commands ---------------------------------------------------------------------------------------


@cli.group()
def groups() -> None:
    """List, describe and reset consumer groups (against a daemon)."""


@groups.command("list")
@bootstrap_option
@data_dir_option("Read the groups' committed offsets from this data directory offline (read-only, no lock).")
@click.pass_context
def list_(ctx: click.Context, bootstrap: str, data_dir: str | None) -> None:
    """Print every group with its state and live member count (groups with only committed offsets: Empty).

    With --data-dir, the groups that committed offsets in that data directory,
    read offline (live members are known only to a daemon, so STATE is
    "offline"), with how many topics and partitions each committed.
    """
    check_one_target(ctx, data_dir)
    if data_dir is not None:
        print_table(offline_group_rows(data_dir), ("GROUP", "STATE", "TOPICS", "PARTITIONS"))
        return
    with _remote(bootstrap) as broker:
        listings = broker.list_groups()
    print_table(
        [(escaped(g.group), g.state.value, g.members) for g in sorted(listings, key=lambda g: g.group)],
        ("GROUP", "STATE", "MEMBERS"),
    )


def offline_group_rows(data_dir: str) -> list[tuple[str, str, int, int]]:
    """``(group, "offline", topics, partitions)`` per group with committed offsets in ``data_dir``."""
    with broker_errors():
        DataDirReader(data_dir)  # refuses a directory that is not a data directory
        store = OffsetStore(data_dir, read_only=True)
        try:
            committed = store.list_committed()
        finally:
            store.close()
    by_group: dict[str, set[tuple[str, int]]] = {}
    for group, topic, pid in committed:
        by_group.setdefault(group, set()).add((topic, pid))
    return [
        (escaped(group), "offline", len({topic for topic, _ in parts}), len(parts))
        for group, parts in sorted(by_group.items())
    ]


@groups.command()
@click.argument("group")
@bootstrap_option
def describe(group: str, bootstrap: str) -> None:
    """Print GROUP's state, generation, assignor, members, and per partition committed offset and lag."""
    with _remote(bootstrap) as broker:
        description = broker.describe_group(group)
        if description.state is GroupState.DEAD:
            raise click.ClickException(f"NOT_FOUND: group {group!r} does not exist (no members, no committed offsets)")
        lags = broker.group_lag(group)
    click.echo(
        f"group: {escaped(description.group)} state: {description.state.value} generation: {description.generation} "
        f"assignor: {description.assignor or '-'} members: {len(description.members)}"
    )
    if description.members:
        click.echo("")
        print_table(member_rows(description), _MEMBER_HEADERS)
    click.echo("")
    print_table(lag_rows(lags), _LAG_HEADERS)


@groups.command()
@click.argument("group")
@bootstrap_option
@click.option("--topic", required=True, help="Topic whose committed offsets to reset.")
@click.option(
    "--partition",
    "partitions",
    type=click.IntRange(min=0),
    multiple=True,
    help="Partition to reset (repeatable; default: every partition of the topic).",
)
@click.option("--to-earliest", is_flag=True, help="The log start of each partition (re-read everything kept).")
@click.option("--to-latest", is_flag=True, help="The high watermark of each partition (skip everything).")
@click.option("--to-offset", type=click.IntRange(min=0), help="This offset in each partition.")
@click.option(
    "--to-timestamp",
    type=click.IntRange(min=0),
    metavar="MS",
    help="The first record at or after this time (ms since the epoch) in each partition.",
)
def reset(
    *,
    group: str,
    bootstrap: str,
    topic: str,
    partitions: tuple[int, ...],
    to_earliest: bool,
    to_latest: bool,
    to_offset: int | None,
    to_timestamp: int | None,
) -> None:
    """Set GROUP's committed offsets on --topic; refused (exit 1) while the group has live members."""
    chosen = [to_earliest, to_latest, to_offset is not None, to_timestamp is not None]
    if sum(chosen) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-offset N, --to-timestamp MS")
    target: str | int | None = "earliest" if to_earliest else "latest" if to_latest else to_offset
    with _remote(bootstrap) as broker:
        done = broker.reset_offsets(
            group,
            topic,
            list(partitions) or None,
            to=target,  # type: ignore[arg-type]
            timestamp_ms=to_timestamp,
        )
    print_table([(topic, pid, offset) for pid, offset in sorted(done.items())], ("TOPIC", "PARTITION", "NEW_OFFSET"))
    click.echo(f"reset group {escaped(group)} on {topic}: {count_of(len(done), 'partition')}", err=True)
