"""``lkstream consume``: print topics' records, from a daemon or read offline from a data dir.

::

    lkstream consume TOPIC... [-r] [--bootstrap HOST:PORT | --data-dir DIR]
                     [-o POSITION | --from-timestamp TIME] [-p N[,N...]] [--follow] [-n N]
                     [-f FORMAT [-Z] | --output raw|json] [-g GROUP]

The flags are kcat's and rpk's where they have one (``-o``, ``-p``, ``-n``, ``-f``,
``-Z``, ``-g``; a TOPIC starting with ``^`` is a regular expression, as in kcat).
Positions and times: :mod:`lkstream.cli.positions`; format strings:
:mod:`lkstream.cli.record_format`; the group member: :mod:`lkstream.cli.consume_group`.

Invariants:

* **A group is a group.** With ``--group`` the command is a member of the group: members
  split the partitions and commit only what they printed (:mod:`lkstream.cli.consume_group`).
  Without it nothing is committed.
* **A follower waits for a topic that will come.** ``--follow`` on a topic that does not
  exist yet waits for it (saying so on stderr) when the daemon creates topics on first
  produce, as a Kafka consumer subscribed by name does; otherwise it is ``NOT_FOUND``.
* **Offline is read-only.** ``--data-dir`` reads through
  :class:`lkstream.storage.reader.DataDirReader`: no daemon, no ``LOCK`` taken, safe
  beside a running daemon (whose newest batch may then be missing). Commits and waits
  need a broker, so ``--group`` and ``--follow`` need ``--bootstrap``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext, suppress
from typing import Final, Literal

import click

from lkstream.cli.base import (
    bootstrap_option,
    broker_errors,
    check_one_target,
    cli,
    connect_daemon,
    data_dir_option,
    progress,
)
from lkstream.cli.consume_group import consume_as_member
from lkstream.cli.consume_sources import OfflineSource, RemoteSource, Source, is_pattern, matching_topics
from lkstream.cli.positions import (
    POSITION_HELP,
    TIME_HELP,
    OffsetSpec,
    Position,
    offset_spec_value,
    time_value,
)
from lkstream.cli.record_format import FORMAT_HELP, RecordFormat
from lkstream.client.remote import RemoteBroker
from lkstream.client.retry import DEFAULT_RETRY_TIMEOUT_S
from lkstream.errors import LkstreamError, UnknownTopicError, no_such_partition
from lkstream.format.codec import Record
from lkstream.format.json_records import record_to_json
from lkstream.storage.reader import DataDirReader

#: How often a follower asks whether the topic it waits for exists yet.
TOPIC_WAIT_INTERVAL_S: Final = 0.5

TopicPartition = tuple[str, int]

# -- output -----------------------------------------------------------------------------------------


def json_line(record: Record) -> str:
    """One record as a JSON object of :mod:`lkstream.format.json_records` (what ``produce --json`` reads)."""
    return json.dumps(record_to_json(record), ensure_ascii=False)


def _raw(record: Record) -> bytes:
    return (record.value or b"") + b"\n"


def _json(record: Record) -> bytes:
    return json_line(record).encode("utf-8") + b"\n"


class Printer:
    """Writes each record to stdout as rendered, counting down ``--num``."""

    def __init__(self, render: Callable[[Record], bytes], max_messages: int | None, advance: Callable[[float], None]):
        self.render = render
        self.remaining = max_messages
        self.advance = advance
        self.out = sys.stdout.buffer

    @property
    def done(self) -> bool:
        return self.remaining is not None and self.remaining <= 0

    def emit(self, record: Record) -> None:
        self.out.write(self.render(record))
        self.out.flush()
        self.advance(1)
        if self.remaining is not None:
            self.remaining -= 1


def _ignore(amount: float) -> None:
    """No progress bar: nothing to advance."""


# -- where to start ---------------------------------------------------------------------------------


def _chosen_partitions(topic: str, count: int, partitions: tuple[int, ...], spec: OffsetSpec) -> list[int]:
    """The partitions of ``topic`` to read: ``-p``'s and the spec's chosen ones, or all."""
    chosen = sorted(set(partitions) | set(spec.per_partition)) or list(range(count))
    for pid in chosen:
        if pid >= count:
            # The broker's own words and code, as `produce -p` prints them (a failure, not a usage error).
            raise click.ClickException(f"INVALID_ARGUMENT: {no_such_partition(topic, pid, count)}")
    return chosen


def _starts(source: Source, topic: str, pids: list[int], spec: OffsetSpec) -> dict[int, int]:
    bounds = source.bounds(topic)

    def at_time(pid: int) -> Callable[[int], int]:
        return lambda ms: source.offsets_for_timestamp(topic, ms, [pid])[pid]

    def never_committed() -> int | None:  # "committed" needs --group, which reads as a member
        return None

    starts = {}
    for pid in pids:
        position = spec.position(pid) or Position("earliest")
        low, high = bounds[pid]
        starts[pid] = position.resolve(low, high, never_committed, at_time(pid))
    return starts


# -- reading ----------------------------------------------------------------------------------------


def _drain(source: Source, topic: str, pid: int, offset: int, printer: Printer) -> None:
    """Print ``topic[pid]`` from ``offset`` up to its current end (or until enough were printed)."""
    for records in source.chunks(topic, pid, offset):
        for record in records:
            if printer.done:
                return
            printer.emit(record)


async def _follow(broker: RemoteBroker, starts: dict[TopicPartition, int], printer: Printer) -> None:
    async def one(topic: str, pid: int, offset: int) -> None:
        async for record in broker.subscribe(topic, pid, offset):
            printer.emit(record)
            if printer.done:
                return

    tasks = [asyncio.create_task(one(topic, pid, offset)) for (topic, pid), offset in starts.items()]
    try:
        while tasks and not printer.done:
            finished, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in finished:
                task.result()  # raise the stream's error, if any
                tasks.remove(task)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def wait_for_topics(broker: RemoteBroker, topics: list[str]) -> None:
    """Return once every topic exists; while one does not, say so on stderr and wait.

    Only when the daemon creates topics on first produce (``auto_create_topics``): a topic
    that nothing may create is ``NOT_FOUND`` at once (a typo should not wait for ever).
    """
    for topic in topics:
        try:
            broker.describe_topic(topic)
            continue
        except UnknownTopicError as missing:
            try:
                creates = broker.describe_cluster().auto_create_topics
            except LkstreamError:  # a daemon older than DescribeCluster cannot say: do not wait
                raise missing from None
            if not creates:
                raise
        click.echo(
            f"waiting for topic {topic!r} to be created (the daemon creates it on its first produce); Ctrl-C to stop",
            err=True,
        )
        while True:
            time.sleep(TOPIC_WAIT_INTERVAL_S)
            try:
                broker.describe_topic(topic)
                break
            except UnknownTopicError:
                continue


def _read_standalone(
    source: Source,
    broker: RemoteBroker | None,
    topics: list[str],
    printer: Printer,
    *,
    partitions: tuple[int, ...],
    spec: OffsetSpec,
    follow: bool,
) -> None:
    starts: dict[TopicPartition, int] = {}
    for topic in topics:
        pids = _chosen_partitions(topic, source.partition_count(topic), partitions, spec)
        starts.update({(topic, pid): offset for pid, offset in _starts(source, topic, pids, spec).items()})
    if not follow:
        for (topic, pid), offset in starts.items():
            _drain(source, topic, pid, offset, printer)
            if printer.done:
                return
        return
    assert broker is not None  # --follow needs a daemon: checked with the options
    asyncio.run(_follow(broker, starts, printer))


# -- the command ------------------------------------------------------------------------------------


def _partitions_value(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[int, ...]:
    chosen: list[int] = []
    for item in ",".join(value).split(","):
        if item.strip():
            if not item.strip().isdigit():
                raise click.BadParameter(f"{item.strip()!r} is not a partition number", ctx, param)
            chosen.append(int(item))
    return tuple(sorted(set(chosen)))


def _member_reset(
    ctx: click.Context, spec: OffsetSpec | None, from_timestamp: int | None, partitions: tuple[int, ...]
) -> Literal["earliest", "latest"]:
    """A group member's start for partitions the group never committed: earliest or latest."""
    if from_timestamp is not None or partitions or (spec is not None and spec.per_partition):
        raise click.UsageError(
            "with --group the group's coordinator assigns the partitions and they start at the group's committed "
            "offsets: -p, --from-timestamp and per-partition offsets do not apply (move the group with "
            "`lkstream groups reset`, or read without --group)",
            ctx,
        )
    kinds = spec.kinds if spec is not None else set()
    if kinds - {"earliest", "latest", "committed"}:
        raise click.UsageError(
            "with --group, --offset may only be earliest or latest (where partitions the group never committed "
            "start); use `lkstream groups reset` to move a group",
            ctx,
        )
    return "latest" if kinds == {"latest"} else "earliest"


@cli.command()
@click.argument("topics", nargs=-1, required=True, metavar="TOPIC...")
@bootstrap_option
@data_dir_option("Read this data directory offline (read-only, no daemon, no lock) instead of asking --bootstrap.")
@click.option(
    "-r",
    "--regex",
    is_flag=True,
    help="Each TOPIC is a regular expression (full match; a TOPIC starting with ^ is one anyway, as in kcat).",
)
@click.option(
    "-o",
    "--offset",
    "--from",
    "spec",
    metavar="POSITION",
    callback=offset_spec_value,
    help=f"Where to start: {POSITION_HELP}. Default: earliest (a --group: its committed offsets).",
)
@click.option(
    "--from-timestamp",
    "from_timestamp",
    metavar="TIME",
    callback=time_value,
    help=f"Start at the first record at or after TIME in each partition (the end when all are older): {TIME_HELP}.",
)
@click.option(
    "-p",
    "--partition",
    "partitions",
    multiple=True,
    metavar="N[,N...]",
    callback=_partitions_value,
    help="Read only these partitions (repeatable; default: all).",
)
@click.option("--follow", is_flag=True, help="Keep waiting for new records (until Ctrl-C or --num).")
@click.option(
    "-n",
    "--num",
    "--max-messages",
    "max_messages",
    type=click.IntRange(min=1),
    metavar="N",
    help="Stop after this many records.",
)
@click.option("-f", "--format", "fmt", metavar="FORMAT", help=f"Print each record through {FORMAT_HELP}.")
@click.option(
    "-Z",
    "--null-literal",
    is_flag=True,
    help="With -f: print a null key or value as NULL instead of nothing (kcat's -Z).",
)
@click.option(
    "--output",
    type=click.Choice(["raw", "json"]),
    default="raw",
    show_default=True,
    help="raw: each value on a line; json: one record object per line (topic, partition, offset, timestamp, key, "
    'value, headers; bytes that are not UTF-8 as {"base64": ...}), the shape `produce --json` reads.',
)
@click.option(
    "-g",
    "--group",
    metavar="GROUP",
    help="Consume as a member of consumer group GROUP: members split the partitions, each starts at the group's "
    "committed offsets and commits what it printed. Needs --bootstrap.",
)
@click.pass_context
def consume(
    ctx: click.Context,
    *,
    topics: tuple[str, ...],
    bootstrap: str,
    data_dir: str | None,
    regex: bool,
    spec: OffsetSpec | None,
    from_timestamp: int | None,
    partitions: tuple[int, ...],
    follow: bool,
    max_messages: int | None,
    fmt: str | None,
    null_literal: bool,
    output: str,
    group: str | None,
) -> None:
    """Print the records of each TOPIC, partition by partition, then stop (or, with --follow, wait for more).

    JSON output is one record object per line: topic, partition, offset,
    timestamp, key, value, headers, where a key, value or header value is a
    string when it is UTF-8 and {"base64": "..."} otherwise (docs/http.md, "The
    record object"); `lkstream produce T2 --json` reads it back.

    With -f, each record is printed through kcat's format string, e.g.
    -f '%t[%p]@%o %k=%s headers: %h\\n'.

    With --group GROUP the command is a member of the group, as `kcat -G` and
    `rpk topic consume -g` are: members split the partitions; each partition
    starts at the group's committed offset (one never committed at --offset
    earliest or latest) and the positions of printed records are committed
    every second, at a rebalance and at the end.

    --follow on a topic that does not exist yet waits for it when the daemon
    creates topics on first produce.

    With --num, stdout redirected and stderr on a terminal, a progress bar
    counts the records printed.
    """
    check_one_target(ctx, data_dir)
    if from_timestamp is not None and spec is not None:
        raise click.UsageError("--offset/--from and --from-timestamp are mutually exclusive", ctx)
    if data_dir is not None and (group is not None or follow):
        raise click.UsageError("--data-dir reads offline: --group and --follow need a daemon (--bootstrap)", ctx)
    if fmt is not None and ctx.get_parameter_source("output") is click.core.ParameterSource.COMMANDLINE:
        raise click.UsageError("-f/--format and --output are mutually exclusive", ctx)
    if null_literal and fmt is None:
        raise click.UsageError("-Z applies to -f/--format output", ctx)
    reset = _member_reset(ctx, spec, from_timestamp, partitions) if group is not None else "earliest"
    if group is None and spec is not None and "committed" in spec.kinds:
        raise click.UsageError("--offset committed needs --group GROUP", ctx)
    if from_timestamp is not None:
        spec = OffsetSpec(default=Position("timestamp", from_timestamp))
    with broker_errors():
        render = _renderer(fmt, null_literal, output)
    # A bar only when it cannot mix with the records: stdout goes elsewhere than the terminal.
    bar_total = max_messages if not sys.stdout.isatty() else None
    with broker_errors():
        # A follower waits out daemon restarts as long as it takes, as Kafka consumers do.
        broker = (
            connect_daemon(bootstrap, retry_timeout_s=None if follow else DEFAULT_RETRY_TIMEOUT_S)
            if data_dir is None
            else None
        )
        try:
            source: Source = (
                RemoteSource(broker) if broker is not None else OfflineSource(DataDirReader(data_dir or ""))
            )
            bar = progress(f"consume {' '.join(topics)}", bar_total) if bar_total else nullcontext(_ignore)
            with bar as advance, suppress(KeyboardInterrupt):
                printer = Printer(render, max_messages, advance)
                names = matching_topics(source, topics, regex=regex)
                if follow and broker is not None:
                    wait_for_topics(broker, [name for name in names if not (regex or is_pattern(name))])
                if broker is not None and group is not None:
                    consume_as_member(broker, names, group, printer, follow=follow, reset=reset)
                else:
                    _read_standalone(
                        source, broker, names, printer, partitions=partitions, spec=spec or OffsetSpec(), follow=follow
                    )
        finally:
            if broker is not None:
                broker.close()


def _renderer(fmt: str | None, null_literal: bool, output: str) -> Callable[[Record], bytes]:
    if fmt is not None:
        return RecordFormat(fmt, null=b"NULL" if null_literal else b"").render
    return _json if output == "json" else _raw
