"""Daemon commands: ``serve`` runs the daemon, ``produce`` and ``consume`` talk to one.

::

    lkstream serve [--config PATH] [--persist-dir DIR] [--grpc-port N] [--http-port N] [--fsync-mode MODE]
    lkstream produce TOPIC --bootstrap HOST:PORT [--key-separator SEP] [--partition N] [--file PATH]
    lkstream consume TOPIC --bootstrap HOST:PORT [--from earliest|latest|OFFSET | --from-timestamp MS] [--partition N]
                     [--follow] [--max-messages N] [--output raw|json] [--group GROUP]

``serve`` is ``python -m lkstream.grpc_server``: both call
:func:`lkstream.server.daemon.run_daemon`, and its flags are
:func:`lkstream.config.load_config` overrides (above the file and ``LKSTREAM_*``).

``produce`` and ``consume`` go through :func:`lkstream.connect`. Exit status:
0 success; 1 an error from the daemon, or no daemon at the address (one line
naming it, no traceback); 2 usage.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from collections.abc import Iterable, Iterator
from typing import IO, Any, Final

import click

from lkstream.cli.base import cli, count_of
from lkstream.client.remote import RemoteBroker, connect
from lkstream.errors import LkstreamError
from lkstream.format.codec import Record
from lkstream.server.daemon import run_daemon

DEFAULT_BOOTSTRAP: Final = "127.0.0.1:9090"
#: Lines sent per Produce request.
PRODUCE_BATCH_LINES: Final = 1000

_bootstrap = click.option(
    "--bootstrap",
    metavar="HOST:PORT",
    default=DEFAULT_BOOTSTRAP,
    show_default=True,
    help="Address of the daemon's gRPC port.",
)


# -- serve -----------------------------------------------------------------------------------------


@cli.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="YAML config file.")
@click.option("--persist-dir", help="Data directory (overrides the config).")
@click.option("--fsync-mode", type=click.Choice(["sync", "group", "none"]), help="fsync mode (overrides the config).")
@click.option("--grpc-host", help="gRPC listen address (overrides the config).")
@click.option("--grpc-port", type=click.IntRange(0, 65535), help="gRPC port, 0 for any free port.")
@click.option("--http-host", help="HTTP (/metrics, /healthz, /ready) listen address.")
@click.option("--http-port", type=click.IntRange(0, 65535), help="HTTP port, 0 for any free port.")
@click.option("--log-level", default="INFO", show_default=True, help="Logging level.")
@click.pass_context
def serve(
    ctx: click.Context,
    *,
    config_path: str | None,
    persist_dir: str | None,
    fsync_mode: str | None,
    grpc_host: str | None,
    grpc_port: int | None,
    http_host: str | None,
    http_port: int | None,
    log_level: str,
) -> None:
    """Run the daemon (gRPC on 9090, HTTP on 8080, loopback) until SIGTERM or Ctrl-C.

    Configuration: built-in defaults < --config file < LKSTREAM_* environment <
    these flags. Prints one `lkstream daemon ready: grpc=... http=...` line once
    it serves; exits 0 after a graceful shutdown, 1 if it cannot start, 2 for a
    bad configuration.
    """
    overrides = {
        "persist_dir": persist_dir,
        "fsync_mode": fsync_mode,
        "server.grpc_host": grpc_host,
        "server.grpc_port": grpc_port,
        "server.http_host": http_host,
        "server.http_port": http_port,
    }
    ctx.exit(run_daemon(config_path, overrides, log_level=log_level))


# -- produce ---------------------------------------------------------------------------------------


def _lines(stream: IO[bytes]) -> Iterator[bytes]:
    for line in stream:
        yield line[:-1].removesuffix(b"\r") if line.endswith(b"\n") else line


def _records(lines: Iterable[bytes], separator: bytes | None) -> Iterator[tuple[bytes | None, bytes]]:
    for line in lines:
        if separator is not None:
            key, found, value = line.partition(separator)
            if found:
                yield key, value
                continue
        yield None, line


def _batches(records: Iterator[tuple[bytes | None, bytes]], size: int) -> Iterator[list[tuple[bytes | None, bytes]]]:
    batch: list[tuple[bytes | None, bytes]] = []
    for record in records:
        batch.append(record)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _connect(bootstrap: str) -> RemoteBroker:
    try:
        return connect(bootstrap)
    except LkstreamError as exc:
        raise click.ClickException(str(exc)) from None


@cli.command()
@click.argument("topic")
@_bootstrap
@click.option(
    "--key-separator",
    metavar="SEP",
    help="Split each line at the first SEP into key and value (a line without SEP has no key).",
)
@click.option("--partition", type=click.IntRange(min=0), help="Send every record to this partition.")
@click.option("--file", "path", type=click.File("rb"), help="Read lines from this file instead of stdin.")
def produce(
    topic: str, bootstrap: str, key_separator: str | None, partition: int | None, path: IO[bytes] | None
) -> None:
    """Send each line of stdin (or --file) as one record of TOPIC; print how many were acknowledged.

    Lines go in requests of 1,000. On an error, the records acknowledged before it
    are reported and the exit status is 1.
    """
    if key_separator == "":
        raise click.BadParameter("must not be empty", param_hint="--key-separator")
    separator = None if key_separator is None else key_separator.encode()
    stream = path if path is not None else sys.stdin.buffer
    acknowledged = 0
    with _connect(bootstrap) as broker:
        try:
            for batch in _batches(_records(_lines(stream), separator), PRODUCE_BATCH_LINES):
                acknowledged += len(broker.produce_many_sync(topic, batch, partition=partition))
        except LkstreamError as exc:
            click.echo(f"{count_of(acknowledged, 'record')} acknowledged before the error", err=True)
            raise click.ClickException(str(exc)) from None
    click.echo(f"{count_of(acknowledged, 'record')} acknowledged by {bootstrap} (topic {topic})")


# -- consume ---------------------------------------------------------------------------------------


def _text_or_base64(data: bytes | None) -> tuple[str | None, bool]:
    if data is None:
        return None, False
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), True


def json_line(record: Record) -> str:
    """One record as a JSON object; ``key_encoding``/``value_encoding`` say "base64" when not UTF-8."""
    key, key_b64 = _text_or_base64(record.key)
    value, value_b64 = _text_or_base64(record.value)
    obj: dict[str, Any] = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": key,
        "value": value,
    }
    if key_b64:
        obj["key_encoding"] = "base64"
    if value_b64:
        obj["value_encoding"] = "base64"
    return json.dumps(obj, ensure_ascii=False)


class _Printer:
    def __init__(self, output: str, max_messages: int | None) -> None:
        self.output = output
        self.remaining = max_messages
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
        if self.remaining is not None:
            self.remaining -= 1


def _start_offset(broker: RemoteBroker, topic: str, pid: int, start: str) -> int:
    stats = broker.describe_topic(topic).partitions[pid]
    if start == "earliest":
        return stats.log_start_offset
    if start == "latest":
        return stats.high_watermark
    return int(start)


def _drain(broker: RemoteBroker, topic: str, pid: int, offset: int, printer: _Printer, *, group: str | None) -> None:
    """Print ``topic[pid]`` from ``offset`` up to its current end (or until enough were printed).

    With a ``group``, the position after each printed batch is committed for it.
    """
    while not printer.done:
        records = broker.read_from(topic, pid, offset)
        if not records:
            return
        start = offset
        for record in records:
            if printer.done:
                break
            printer.emit(record)
            offset = record.offset + 1
        if group is not None and offset > start:
            broker.commit_offset(group, topic, pid, offset)


async def _follow(
    broker: RemoteBroker, topic: str, starts: dict[int, int], printer: _Printer, group: str | None
) -> None:
    async def one(pid: int, offset: int) -> None:
        async for record in broker.subscribe(topic, pid, offset):
            printer.emit(record)
            if group is not None:  # a streamed record is its own batch
                await asyncio.to_thread(broker.commit_offset, group, topic, pid, record.offset + 1)
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


def _from_value(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if value in ("earliest", "latest") or (value.isdigit()):
        return value
    raise click.BadParameter(f"{value!r} is not earliest, latest or a non-negative offset", ctx, param)


@cli.command()
@click.argument("topic")
@_bootstrap
@click.option(
    "--from",
    "start",
    default="earliest",
    show_default=True,
    metavar="earliest|latest|OFFSET",
    callback=_from_value,
    help="Where to start in each partition.",
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
    help="raw: each value on a line; json: one object per line (topic, partition, offset, timestamp, key, value).",
)
@click.option(
    "--group",
    metavar="GROUP",
    help="Commit the position after each printed batch for consumer group GROUP. The protocol cannot read "
    "committed offsets back, so consuming still starts at --from (pass the last position with --from OFFSET).",
)
@click.pass_context
def consume(
    ctx: click.Context,
    *,
    topic: str,
    bootstrap: str,
    start: str,
    from_timestamp: int | None,
    partition: int | None,
    follow: bool,
    max_messages: int | None,
    output: str,
    group: str | None,
) -> None:
    """Print the records of TOPIC, partition by partition, then stop (or, with --follow, wait for more).

    In JSON output a key or value that is not UTF-8 is base64, marked by
    "key_encoding" / "value_encoding": "base64".

    With --group, the next offset to read is committed (CommitOffset) after each
    printed batch, i.e. only for records already written to stdout; with
    --follow, after each record. The daemon offers no call that reads a
    group's committed offsets, so --group does not choose the start: --from
    (or --from-timestamp) does.
    """
    if from_timestamp is not None and ctx.get_parameter_source("start") is not click.core.ParameterSource.DEFAULT:
        raise click.UsageError("--from and --from-timestamp are mutually exclusive", ctx)
    printer = _Printer(output, max_messages)
    with _connect(bootstrap) as broker:
        try:
            count = broker.partitions_for(topic)
            pids = [partition] if partition is not None else list(range(count))
            if partition is not None and partition >= count:
                raise click.ClickException(f"topic {topic!r} has {count_of(count, 'partition')}, no {partition}")
            if from_timestamp is not None:
                found = broker.offsets_for_timestamp(topic, from_timestamp, pids)
                starts = {pid: found[pid] for pid in pids}
            else:
                starts = {pid: _start_offset(broker, topic, pid, start) for pid in pids}
            if not follow:
                for pid, offset in starts.items():
                    _drain(broker, topic, pid, offset, printer, group=group)
                return
            try:
                asyncio.run(_follow(broker, topic, starts, printer, group))
            except KeyboardInterrupt:
                return
        except LkstreamError as exc:
            raise click.ClickException(str(exc)) from None
        except BrokenPipeError:
            sys.stderr.close()  # the reader went away (`| head`): stop quietly
