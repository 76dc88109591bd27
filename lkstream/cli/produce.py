"""``lkstream produce``: lines of stdin or a file become records, through a daemon or on a data dir.

::

    lkstream produce TOPIC [--bootstrap HOST:PORT | --data-dir DIR] [--key-separator SEP | --json]
                     [--partition N] [--file PATH]

Invariants:

* **Nothing is lost silently.** Records go in requests of up to 1,000 lines; the
  summary line counts only acknowledged records. On an error (from the broker, or
  a bad ``--json`` line) every record read before it is still sent, the count
  acknowledged is printed on stderr, and the exit status is 1. A bad line names
  its line number (1-based).
* **One target.** ``--bootstrap`` talks to a daemon through :func:`lkstream.connect`;
  ``--data-dir`` opens the embedded :class:`lkstream.Broker`, which takes the data
  directory's ``LOCK``: while a daemon owns the directory that is an error naming
  the daemon's pid, never a second writer.

``--json`` lines are record objects, the shape ``consume --output json`` prints
(:mod:`lkstream.format.json_records`, docs/http.md "The record object"):
``{"key": K, "value": V, "headers": [{"key": "name", "value": V}], "partition": N}`` where a
key, value or header value is a string (sent as UTF-8), ``{"base64": "..."}`` for any bytes,
or ``null``; only ``value`` is required; a line's ``partition`` overrides ``--partition``;
``topic``, ``offset`` and ``timestamp`` are accepted and ignored, so consumed lines can be
produced into another topic as they are.

Delivery: a daemon restart is waited out (the remote client reconnects with backoff
for up to 30 s). A request resent after the connection dropped may have been
appended already, so produce is **at-least-once**: a restart can duplicate, never
lose, an acknowledged line.
"""

from __future__ import annotations

import io
import json
import os
import select
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from typing import IO, Any, Final, Protocol

import click

from lkstream.broker.broker import Broker
from lkstream.cli.base import (
    DEFAULT_BOOTSTRAP,
    bootstrap_option,
    broker_errors,
    check_one_target,
    cli,
    connect_daemon,
    count_of,
    data_dir_option,
    error_code,
    progress,
)
from lkstream.errors import DataDirLockedError, LkstreamError
from lkstream.format.codec import Headers
from lkstream.format.json_records import INPUT_FIELDS, check_ignored_fields, headers_from_json, json_to_bytes
from lkstream.storage.reader import DataDirReader

#: Lines sent per Produce request.
PRODUCE_BATCH_LINES: Final = 1000
#: A pipe or terminal that pauses this long gets what it wrote so far sent.
LINGER_S: Final = 0.1
_JSON_FIELDS: Final = INPUT_FIELDS | {"key_encoding", "value_encoding"}

Item = tuple[bytes | None, bytes | None, Headers]


class _Target(Protocol):
    def produce_many_sync(self, topic: str, records: Any, *, partition: int | None = None) -> list[tuple[int, int]]: ...

    def close(self) -> None: ...


class BadLineError(Exception):
    """A ``--json`` input line that is not a valid record object."""

    def __init__(self, number: int, reason: str) -> None:
        super().__init__(f"line {number}: {reason}")
        self.number = number


# -- input ------------------------------------------------------------------------------------------


def _lines(stream: IO[bytes], advance: Callable[[float], None]) -> Iterator[bytes | None]:
    """The lines of ``stream`` without their line ends; a pipe or terminal is read live (:func:`_live_lines`)."""
    fd = _live_fd(stream)
    if fd is not None:
        yield from _live_lines(fd, advance)
        return
    for line in stream:
        advance(len(line))
        yield line[:-1].removesuffix(b"\r") if line.endswith(b"\n") else line


def _live_fd(stream: IO[bytes]) -> int | None:
    """The descriptor of a pipe or terminal (read live), None for a regular file or an in-memory stream."""
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        return None
    return None if stat.S_ISREG(st.st_mode) else stream.fileno()


def _live_lines(fd: int, advance: Callable[[float], None]) -> Iterator[bytes | None]:
    """Lines of a pipe or terminal as they arrive, and ``None`` once input pauses for :data:`LINGER_S`.

    The ``None`` tells the sender to send what it holds, so a line typed (or
    written by a slow process) is acknowledged within the linger, as
    kafka-console-producer and kcat do, instead of waiting for 1,000 lines or EOF.
    A fast pipe never pauses, so its requests still carry 1,000 lines each.
    """
    pending = b""
    idle_reported = False
    while True:
        end = pending.find(b"\n")
        if end >= 0:
            line, pending = pending[:end], pending[end + 1 :]
            idle_reported = False
            yield line.removesuffix(b"\r")
            continue
        if not idle_reported and not select.select([fd], [], [], LINGER_S)[0]:
            idle_reported = True
            yield None
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            if pending:
                yield pending.removesuffix(b"\r")
            return
        advance(len(chunk))
        pending += chunk


def parse_json_line(line: bytes, number: int) -> tuple[Item, int | None]:
    """One ``--json`` line as ``((key, value, headers), partition)``; :class:`BadLineError` if it is not one.

    The shape is :mod:`lkstream.format.json_records`' (what ``consume --output json``
    prints). The ``key_encoding``/``value_encoding`` markers of older ``consume``
    output are still understood.
    """
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadLineError(number, f"not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise BadLineError(number, "not a JSON object")
    unknown = sorted(set(obj) - _JSON_FIELDS)
    if unknown:
        allowed = ", ".join(sorted(INPUT_FIELDS))
        raise BadLineError(number, f"unknown field(s) {', '.join(unknown)} (allowed: {allowed})")
    if "value" not in obj:
        raise BadLineError(number, 'no "value" field')
    partition = obj.get("partition")
    if partition is not None and (not isinstance(partition, int) or isinstance(partition, bool) or partition < 0):
        raise BadLineError(number, f'"partition" must be a non-negative integer, not {json.dumps(partition)}')
    try:
        check_ignored_fields(obj)
        key = _field_bytes(obj, "key")
        value = _field_bytes(obj, "value")
        headers = headers_from_json(obj.get("headers"))
    except ValueError as exc:
        raise BadLineError(number, str(exc)) from None
    return (key, value, headers), partition


def _field_bytes(obj: dict[str, Any], field: str) -> bytes | None:
    """``obj[field]`` as bytes; ``"value": "AAE=", "value_encoding": "base64"`` is the form of older output."""
    encoding = obj.get(f"{field}_encoding")
    if encoding is None:
        return json_to_bytes(obj.get(field), f'"{field}"')
    if encoding != "base64" or not isinstance(obj.get(field), str):
        raise ValueError(f'"{field}_encoding" must be "base64" and "{field}" a base64 string')
    return json_to_bytes({"base64": obj[field]}, f'"{field}"')


def _items(
    lines: Iterator[bytes | None], separator: bytes | None, as_json: bool, default_partition: int | None
) -> Iterator[tuple[Item, int | None] | None]:
    """Records with their partition; ``None`` passes an input pause through to the sender."""
    number = 0
    for line in lines:
        if line is None:
            yield None
            continue
        number += 1
        if as_json:
            item, partition = parse_json_line(line, number)
            yield item, default_partition if partition is None else partition
            continue
        key: bytes | None = None
        value = line
        if separator is not None:
            head, found, tail = line.partition(separator)
            if found:
                key, value = head, tail
        yield (key, value, []), default_partition


def _regular_file_size(stream: IO[bytes]) -> int | None:
    """The size of a regular file (``--file``, or stdin redirected from one); None for a pipe or terminal."""
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):  # no descriptor (an in-memory stream)
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def _ignore(amount: float) -> None:
    """No progress bar: nothing to advance."""


# -- sending ----------------------------------------------------------------------------------------


def open_target(bootstrap: str, data_dir: str | None) -> _Target:
    """A daemon client for ``bootstrap``, or an embedded broker on ``data_dir`` (which takes its LOCK)."""
    if data_dir is None:
        return connect_daemon(bootstrap)
    try:
        return Broker(persist_dir=data_dir)
    except DataDirLockedError:
        holder = DataDirReader(data_dir).lock_holder() if os.path.isdir(os.path.join(data_dir, "topics")) else None
        by = f"a running daemon (pid {holder})" if holder is not None else "another process (a running daemon?)"
        raise click.ClickException(
            f"data directory {data_dir} is locked by {by}; produce through it with --bootstrap HOST:PORT instead"
        ) from None


def _send(target: _Target, topic: str, items: Iterator[tuple[Item, int | None] | None]) -> tuple[int, Exception | None]:
    """Send ``items`` in requests of up to 1,000 (one partition each); ``(acknowledged, error)``.

    A pause in the input (``None``) sends what is held. A bad line stops the
    input but the records before it are still sent, so the count is exactly
    what the broker holds.
    """
    acknowledged = 0
    batch: list[Item] = []
    batch_partition: int | None = None
    stop: Exception | None = None
    try:
        for entry in items:
            if entry is None:
                if batch:
                    acknowledged += len(target.produce_many_sync(topic, batch, partition=batch_partition))
                    batch = []
                continue
            item, partition = entry
            if batch and (partition != batch_partition or len(batch) == PRODUCE_BATCH_LINES):
                acknowledged += len(target.produce_many_sync(topic, batch, partition=batch_partition))
                batch = []
            batch_partition = partition
            batch.append(item)
    except BadLineError as exc:
        stop = exc
    except LkstreamError as exc:
        return acknowledged, exc
    if batch:
        try:
            acknowledged += len(target.produce_many_sync(topic, batch, partition=batch_partition))
        except LkstreamError as exc:
            return acknowledged, exc
    return acknowledged, stop


@cli.command()
@click.argument("topic")
@bootstrap_option
@data_dir_option(
    "Append to this data directory with an embedded broker instead of a daemon (takes the directory's "
    "LOCK: fails while a daemon runs on it).",
    must_exist=False,
)
@click.option(
    "--key-separator",
    metavar="SEP",
    help="Split each line at the first SEP into key and value (a line without SEP has no key).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Each line is a JSON object {"key", "value", "headers", "partition"}; a key, value or header value '
    'is a string, {"base64": "..."} or null. Excludes --key-separator.',
)
@click.option("--partition", type=click.IntRange(min=0), help="Send every record to this partition.")
@click.option("--file", "path", type=click.Path(exists=True, dir_okay=False), help="Read lines from this file.")
@click.pass_context
def produce(
    ctx: click.Context,
    *,
    topic: str,
    bootstrap: str,
    data_dir: str | None,
    key_separator: str | None,
    as_json: bool,
    partition: int | None,
    path: str | None,
) -> None:
    """Send each line of stdin (or --file) as one record of TOPIC; print how many were acknowledged.

    Lines go in requests of 1,000. On an error, or a --json line that is not a valid
    record (named by its line number), the records before it are still sent, the
    count acknowledged is reported and the exit status is 1. Reading a file (--file,
    or stdin redirected from one) with stderr on a terminal, a progress bar on stderr
    shows the bytes read.
    """
    check_one_target(ctx, data_dir)
    if key_separator == "":
        raise click.BadParameter("must not be empty", param_hint="--key-separator")
    if as_json and key_separator is not None:
        raise click.UsageError("--json and --key-separator are mutually exclusive", ctx)
    separator = None if key_separator is None else key_separator.encode()
    where = data_dir if data_dir is not None else bootstrap
    with broker_errors():
        target = open_target(bootstrap or DEFAULT_BOOTSTRAP, data_dir)
    try:
        with open(path, "rb") if path is not None else nullcontext(sys.stdin.buffer) as stream:
            size = _regular_file_size(stream)
            bar = progress(f"produce {topic}", size, unit="bytes") if size is not None else nullcontext(_ignore)
            with bar as step:
                acknowledged, error = _send(target, topic, _items(_lines(stream, step), separator, as_json, partition))
    finally:
        with broker_errors():
            target.close()
    if error is not None:
        click.echo(f"{count_of(acknowledged, 'record')} acknowledged before the error", err=True)
        message = f"{error_code(error)}: {error}" if isinstance(error, LkstreamError) else str(error)
        raise click.ClickException(message)
    click.echo(f"{count_of(acknowledged, 'record')} acknowledged by {where} (topic {topic})")
