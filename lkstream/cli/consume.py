"""``lkstream consume``: print a topic's records, from a daemon or read offline from a data dir.

::

    lkstream consume TOPIC [--bootstrap HOST:PORT | --data-dir DIR]
                     [--from earliest|latest|committed|OFFSET | --from-timestamp MS] [--partition N]
                     [--follow] [--max-messages N] [--output raw|json] [--group GROUP]

Invariants:

* **A group commits only what was printed, and only forward.** With ``--group``
  the next offset is committed (CommitOffset) after each printed batch, i.e. for
  records already written to stdout; with ``--follow``, after each record. A
  commit never moves the group back: re-reading from an earlier ``--from``
  commits nothing until it passes the committed offset (``lkstream groups reset``
  rewinds a group). Commits are refused while the group has live members.
* **A group resumes where it committed.** With ``--group`` and no ``--from`` (or
  ``--from committed``), each partition starts at the group's committed offset
  (FetchCommittedOffsets), clamped into the partition's current bounds, or at its
  log start when the group never committed there.
* **Offline is read-only.** ``--data-dir`` reads through
  :class:`lkstream.storage.reader.DataDirReader`: no daemon, no ``LOCK`` taken, safe
  beside a running daemon (whose newest batch may then be missing). It sees what
  recovery would keep. Commits need a broker, so ``--group`` and ``--follow`` need
  ``--bootstrap``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import nullcontext, suppress
from typing import Protocol

import click

from lkstream.cli.base import (
    bootstrap_option,
    broker_errors,
    check_one_target,
    cli,
    connect_daemon,
    count_of,
    data_dir_option,
    progress,
)
from lkstream.client.remote import RemoteBroker
from lkstream.client.retry import DEFAULT_RETRY_TIMEOUT_S
from lkstream.format.codec import Record, decode_batch
from lkstream.format.json_records import record_to_json
from lkstream.storage.reader import DataDirReader

# -- where records come from ------------------------------------------------------------------------


class _Source(Protocol):
    def partition_count(self, topic: str) -> int: ...

    def bounds(self, topic: str) -> list[tuple[int, int]]: ...

    def chunks(self, topic: str, pid: int, offset: int) -> Iterator[list[Record]]: ...

    def offsets_for_timestamp(self, topic: str, timestamp_ms: int, pids: list[int]) -> dict[int, int]: ...


class _Remote:
    """Records from a daemon, one Fetch per chunk."""

    def __init__(self, broker: RemoteBroker) -> None:
        self.broker = broker

    def partition_count(self, topic: str) -> int:
        return self.broker.partitions_for(topic)

    def bounds(self, topic: str) -> list[tuple[int, int]]:
        return [(p.log_start_offset, p.high_watermark) for p in self.broker.describe_topic(topic).partitions]

    def chunks(self, topic: str, pid: int, offset: int) -> Iterator[list[Record]]:
        while records := self.broker.read_from(topic, pid, offset):
            yield records
            offset = records[-1].offset + 1

    def offsets_for_timestamp(self, topic: str, timestamp_ms: int, pids: list[int]) -> dict[int, int]:
        return self.broker.offsets_for_timestamp(topic, timestamp_ms, pids)


class _Offline:
    """Records read from a data directory's segments, one batch per chunk, without the lock."""

    def __init__(self, reader: DataDirReader) -> None:
        self.reader = reader

    def partition_count(self, topic: str) -> int:
        return len(self.reader.partitions(topic))

    def bounds(self, topic: str) -> list[tuple[int, int]]:
        parts = [self.reader.partition(topic, pid) for pid in self.reader.partitions(topic)]
        return [(part.log_start_offset, part.end_offset()) for part in parts]

    def chunks(self, topic: str, pid: int, offset: int) -> Iterator[list[Record]]:
        for batch in self.reader.partition(topic, pid).batches(offset):
            yield decode_batch(batch.data, topic, pid, offset)

    def offsets_for_timestamp(self, topic: str, timestamp_ms: int, pids: list[int]) -> dict[int, int]:
        found = {}
        for pid in pids:
            part = self.reader.partition(topic, pid)
            found[pid] = part.end_offset()  # every record older: the end, as the daemon answers
            for batch in part.batches(part.log_start_offset):
                if batch.header.max_timestamp >= timestamp_ms:
                    hits = [r.offset for r in decode_batch(batch.data, topic, pid) if r.timestamp >= timestamp_ms]
                    if hits:
                        found[pid] = hits[0]
                        break
        return found


# -- output -----------------------------------------------------------------------------------------


def json_line(record: Record) -> str:
    """One record as a JSON object of :mod:`lkstream.format.json_records` (what ``produce --json`` reads)."""
    return json.dumps(record_to_json(record), ensure_ascii=False)


class _Printer:
    def __init__(self, output: str, max_messages: int | None, advance: Callable[[float], None]) -> None:
        self.output = output
        self.remaining = max_messages
        self.advance = advance
        self.out = sys.stdout.buffer

    @property
    def done(self) -> bool:
        return self.remaining is not None and self.remaining <= 0

    def emit(self, record: Record) -> None:
        if self.output == "json":
            self.out.write(json_line(record).encode("utf-8") + b"\n")
        else:
            self.out.write((record.value or b"") + b"\n")
        self.out.flush()
        self.advance(1)
        if self.remaining is not None:
            self.remaining -= 1


def _ignore(amount: float) -> None:
    """No progress bar: nothing to advance."""


# -- where to start ---------------------------------------------------------------------------------


def _starts(
    source: _Source,
    broker: RemoteBroker | None,
    topic: str,
    *,
    pids: list[int],
    start: str,
    from_timestamp: int | None,
    group: str | None,
) -> dict[int, int]:
    if from_timestamp is not None:
        found = source.offsets_for_timestamp(topic, from_timestamp, pids)
        return {pid: found[pid] for pid in pids}
    bounds = source.bounds(topic)
    if start == "earliest":
        return {pid: bounds[pid][0] for pid in pids}
    if start == "latest":
        return {pid: bounds[pid][1] for pid in pids}
    if start == "committed":
        assert broker is not None and group is not None  # checked with the options
        committed = broker.committed_offsets(group, topic, pids)
        # Retention may have deleted past a commit: resume at the oldest record still there.
        return {pid: min(max(committed.get(pid, 0), bounds[pid][0]), bounds[pid][1]) for pid in pids}
    return dict.fromkeys(pids, int(start))


class _GroupProgress:
    """A group's position per partition, committed forward only.

    The coordinator refuses to move a committed offset backward (only an operator
    reset may), so re-reading from an earlier ``--from`` leaves the commit where it
    is until the reader passes it.
    """

    def __init__(self, broker: RemoteBroker, group: str, topic: str, pids: list[int]) -> None:
        self._broker, self._group, self._topic = broker, group, topic
        self._committed = broker.committed_offsets(group, topic, pids)

    def advance(self, pid: int, offset: int) -> None:
        if offset > self._committed.get(pid, -1):
            self._broker.commit_offset(self._group, self._topic, pid, offset)
            self._committed[pid] = offset


def _drain(
    source: _Source,
    topic: str,
    *,
    pid: int,
    offset: int,
    printer: _Printer,
    group: _GroupProgress | None,
) -> None:
    """Print ``topic[pid]`` from ``offset`` up to its current end (or until enough were printed).

    With a ``group``, the position after each printed chunk is committed for it.
    """
    for records in source.chunks(topic, pid, offset):
        start = offset
        for record in records:
            if printer.done:
                break
            printer.emit(record)
            offset = record.offset + 1
        if group is not None and offset > start:
            group.advance(pid, offset)
        if printer.done:
            return


async def _follow(
    broker: RemoteBroker, topic: str, starts: dict[int, int], printer: _Printer, group: _GroupProgress | None
) -> None:
    async def one(pid: int, offset: int) -> None:
        async for record in broker.subscribe(topic, pid, offset):
            printer.emit(record)
            if group is not None:  # a streamed record is its own batch
                await asyncio.to_thread(group.advance, pid, record.offset + 1)
            if printer.done:
                return

    tasks = [asyncio.create_task(one(pid, offset)) for pid, offset in starts.items()]
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


def _from_value(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None or value in ("earliest", "latest", "committed") or value.isdigit():
        return value
    raise click.BadParameter(f"{value!r} is not earliest, latest, committed or a non-negative offset", ctx, param)


@cli.command()
@click.argument("topic")
@bootstrap_option
@data_dir_option("Read this data directory offline (read-only, no daemon, no lock) instead of asking --bootstrap.")
@click.option(
    "--from",
    "start",
    metavar="earliest|latest|committed|OFFSET",
    callback=_from_value,
    help="Where to start in each partition. committed: the --group's committed offsets (the log start where it "
    "never committed). Default: committed with --group, else earliest.",
)
@click.option(
    "--from-timestamp",
    "from_timestamp",
    type=int,
    metavar="MS",
    help="Start in each partition at the first record whose timestamp (milliseconds since the epoch) is >= MS "
    "(the end of the partition when every record is older). Excludes --from.",
)
@click.option("--partition", type=click.IntRange(min=0), help="Read only this partition (default: all).")
@click.option("--follow", "-f", is_flag=True, help="Keep waiting for new records (until Ctrl-C or --max-messages).")
@click.option("--max-messages", type=click.IntRange(min=1), help="Stop after this many records.")
@click.option(
    "--output",
    type=click.Choice(["raw", "json"]),
    default="raw",
    show_default=True,
    help="raw: each value on a line; json: one record object per line (topic, partition, offset, timestamp, key, "
    'value, headers; bytes that are not UTF-8 as {"base64": ...}), the shape `produce --json` reads.',
)
@click.option(
    "--group",
    metavar="GROUP",
    help="Consume as consumer group GROUP: start at its committed offsets (unless --from or --from-timestamp "
    "says otherwise) and commit the position after each printed batch. Needs --bootstrap.",
)
@click.pass_context
def consume(
    ctx: click.Context,
    *,
    topic: str,
    bootstrap: str,
    data_dir: str | None,
    start: str | None,
    from_timestamp: int | None,
    partition: int | None,
    follow: bool,
    max_messages: int | None,
    output: str,
    group: str | None,
) -> None:
    """Print the records of TOPIC, partition by partition, then stop (or, with --follow, wait for more).

    JSON output is one record object per line: topic, partition, offset,
    timestamp, key, value, headers, where a key, value or header value is a
    string when it is UTF-8 and {"base64": "..."} otherwise (docs/http.md, "The
    record object"); `lkstream produce T2 --json` reads it back, so
    `consume T --output json | produce T2 --json` copies a topic.

    With --group, each partition starts at the group's committed offset (read
    back from the daemon with FetchCommittedOffsets; the log start where the
    group never committed) unless --from or --from-timestamp is given, and the
    next offset to read is committed after each printed batch, i.e. only for
    records already written to stdout; with --follow, after each record.

    With --max-messages, stdout redirected and stderr on a terminal, a progress
    bar counts the records printed.
    """
    check_one_target(ctx, data_dir)
    if from_timestamp is not None and start is not None:
        raise click.UsageError("--from and --from-timestamp are mutually exclusive", ctx)
    if start == "committed" and group is None:
        raise click.UsageError("--from committed needs --group GROUP", ctx)
    if data_dir is not None and (group is not None or follow):
        raise click.UsageError("--data-dir reads offline: --group and --follow need a daemon (--bootstrap)", ctx)
    if start is None and from_timestamp is None:
        start = "committed" if group is not None else "earliest"
    # A bar only when it cannot mix with the records: stdout goes elsewhere than the terminal.
    bar_total = max_messages if not sys.stdout.isatty() else None
    with broker_errors():
        # A follower waits out daemon restarts as long as it takes, as Kafka consumers do.
        broker = (
            connect_daemon(bootstrap, retry_timeout_s=None if follow else DEFAULT_RETRY_TIMEOUT_S)
            if data_dir is None
            else None
        )
        source: _Source = _Remote(broker) if broker is not None else _Offline(DataDirReader(data_dir or ""))
        try:
            bar = progress(f"consume {topic}", bar_total) if bar_total else nullcontext(_ignore)
            with bar as advance:
                printer = _Printer(output, max_messages, advance)
                _print_records(
                    source, broker, topic, printer,
                    partition=partition, start=start or "", from_timestamp=from_timestamp, follow=follow, group=group,
                )  # fmt: skip
        finally:
            if broker is not None:
                broker.close()


def _print_records(
    source: _Source,
    broker: RemoteBroker | None,
    topic: str,
    printer: _Printer,
    *,
    partition: int | None,
    start: str,
    from_timestamp: int | None,
    follow: bool,
    group: str | None,
) -> None:
    count = source.partition_count(topic)
    if partition is not None and partition >= count:
        # The broker's own words and code, as `produce --partition` prints them.
        raise click.ClickException(
            f"INVALID_ARGUMENT: partition {partition} does not exist in {topic!r} "
            f"(it has {count_of(count, 'partition')})"
        )
    pids = [partition] if partition is not None else list(range(count))
    starts = _starts(source, broker, topic, pids=pids, start=start, from_timestamp=from_timestamp, group=group)
    progress = _GroupProgress(broker, group, topic, pids) if broker is not None and group is not None else None
    if not follow:
        for pid, offset in starts.items():
            _drain(source, topic, pid=pid, offset=offset, printer=printer, group=progress)
            if printer.done:
                return
        return
    assert broker is not None  # --follow needs a daemon: checked with the options
    with suppress(KeyboardInterrupt):
        asyncio.run(_follow(broker, topic, starts, printer, progress))
