"""Consumer group admin: ``lkstream groups list|describe|reset|delete`` against a daemon.

::

    lkstream groups list [--bootstrap HOST:PORT | --data-dir DIR]
    lkstream groups describe GROUP [--bootstrap HOST:PORT]
    lkstream groups reset GROUP --topic T [--partition N ...]
        (--to-earliest | --to-latest | --to-offset N | --to-timestamp TIME) [--dry-run] [--bootstrap HOST:PORT]
    lkstream groups delete GROUP [--bootstrap HOST:PORT]

``describe`` prints the group's state, generation and assignor, a table of
members (member id, static instance id, client, host, owned partitions) and a
table per partition: committed offset, high watermark, lag in messages, lag in
seconds (age of the oldest record not consumed; 0 when caught up) and owner.

``reset`` is the operator's way to rewind or skip a group (a committed offset
otherwise never moves backward). The coordinator refuses it while the group has
live members: stop the group's consumers first. It prints each partition's old and
new committed offset; ``--dry-run`` prints the same table and commits nothing.

``delete`` drops a group's committed offsets (and what the Kafka listener knows of
it), as Kafka's ``kafka-consumer-groups --delete``; refused while it has live members.

Exit status: 0 success; 1 an error from the daemon, printed as one line
``Error: CODE: message`` (``FAILED_PRECONDITION`` for a reset of a group with
live members, ``NOT_FOUND`` for a group or topic that does not exist), or no
daemon at the address; 2 usage (no reset target or two of them, a bad value).
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from lkstream.broker.groups.facade import ResetTarget
from lkstream.broker.groups.types import GroupDescription, GroupState, PartitionLag, TopicPartition
from lkstream.cli.base import (
    bootstrap_option,
    broker_errors,
    check_one_target,
    cli,
    data_dir_option,
    print_table,
    remote_daemon,
)
from lkstream.cli.positions import TIME_HELP, time_value
from lkstream.client.remote import RemoteBroker
from lkstream.errors import GroupNotEmptyError, OffsetOutOfRangeError, count_of, no_such_partition
from lkstream.storage.names import escaped
from lkstream.storage.offsets import OffsetStore
from lkstream.storage.reader import DataDirReader

_MEMBER_HEADERS = ("MEMBER", "INSTANCE", "CLIENT", "HOST", "PARTITIONS")
_LAG_HEADERS = ("TOPIC", "PARTITION", "COMMITTED", "HIGH_WATERMARK", "LAG", "LAG_SECONDS", "OWNER")


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
    with remote_daemon(bootstrap) as broker:
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
    with remote_daemon(bootstrap) as broker:
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
    metavar="TIME",
    callback=time_value,
    help=f"The first record at or after TIME in each partition: {TIME_HELP}.",
)
@click.option("--dry-run", is_flag=True, help="Print the old and new offsets and commit nothing.")
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
    dry_run: bool,
) -> None:
    """Set GROUP's committed offsets on --topic; refused (exit 1) while the group has live members.

    Prints, per partition, the offset committed before (- for none) and after; with
    --dry-run, the offsets a reset would commit now, committing nothing.
    """
    chosen = [to_earliest, to_latest, to_offset is not None, to_timestamp is not None]
    if sum(chosen) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-offset N, --to-timestamp TIME")
    target: ResetTarget | None = "earliest" if to_earliest else "latest" if to_latest else to_offset
    with remote_daemon(bootstrap) as broker:
        pids = list(partitions) or list(range(broker.partitions_for(topic)))
        before = broker.committed_offsets(group, topic, pids)
        if dry_run:
            after = planned_reset(broker, group, topic, pids, target=target, timestamp_ms=to_timestamp)
        else:
            after = broker.reset_offsets(group, topic, pids, to=target, timestamp_ms=to_timestamp)
    rows = [(topic, pid, before.get(pid, "-"), offset) for pid, offset in sorted(after.items())]
    print_table(rows, ("TOPIC", "PARTITION", "OLD_OFFSET", "NEW_OFFSET"))
    done = "would reset (dry run, nothing committed)" if dry_run else "reset"
    click.echo(f"{done} group {escaped(group)} on {topic}: {count_of(len(after), 'partition')}", err=True)


def planned_reset(
    broker: RemoteBroker,
    group: str,
    topic: str,
    pids: list[int],
    *,
    target: ResetTarget | None,
    timestamp_ms: int | None,
) -> dict[int, int]:
    """The offsets a reset would commit now, found as the daemon finds them (and checked as it checks them)."""
    if broker.describe_group(group).members:
        live = len(broker.describe_group(group).members)
        raise GroupNotEmptyError(group, live, "reset offsets")
    if timestamp_ms is not None:
        return broker.offsets_for_timestamp(topic, timestamp_ms, pids)
    bounds = broker.describe_topic(topic).partitions
    planned = {}
    for pid in pids:
        if pid >= len(bounds):
            raise no_such_partition(topic, pid, len(bounds))
        low, high = bounds[pid].log_start_offset, bounds[pid].high_watermark
        if target == "earliest":
            planned[pid] = low
        elif target == "latest":
            planned[pid] = high
        else:
            assert isinstance(target, int)
            if not low <= target <= high:
                raise OffsetOutOfRangeError(topic, pid, target, low, high)
            planned[pid] = target
    return planned


@groups.command()
@click.argument("group")
@bootstrap_option
def delete(group: str, bootstrap: str) -> None:
    """Delete GROUP: forget its committed offsets. Refused (exit 1) while the group has live members."""
    with remote_daemon(bootstrap) as broker:
        removed = broker.delete_group(group)
    click.echo(f"deleted group {escaped(group)} ({count_of(removed or 0, 'committed offset')} removed)")
