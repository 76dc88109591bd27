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

``--json`` lines are objects ``{"key": K, "value": V, "headers": {"name": V}, "partition": N}``
where a key or value is a string (sent as UTF-8), ``{"base64": "..."}`` for binary data, or
``null``; only ``value`` is required, and a line's ``partition`` overrides ``--partition``.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import os
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
from lkstream.storage.reader import DataDirReader

#: Lines sent per Produce request.
PRODUCE_BATCH_LINES: Final = 1000
_JSON_FIELDS: Final = frozenset({"key", "value", "headers", "partition"})

Item = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]


class _Target(Protocol):
    def produce_many_sync(self, topic: str, records: Any, *, partition: int | None = None) -> list[tuple[int, int]]: ...

    def close(self) -> None: ...


class BadLineError(Exception):
    """A ``--json`` input line that is not a valid record object."""

    def __init__(self, number: int, reason: str) -> None:
        super().__init__(f"line {number}: {reason}")
        self.number = number


# -- input ------------------------------------------------------------------------------------------


def _lines(stream: IO[bytes], advance: Callable[[float], None]) -> Iterator[bytes]:
    for line in stream:
        advance(len(line))
        yield line[:-1].removesuffix(b"\r") if line.endswith(b"\n") else line


def _blob(value: object, what: str) -> bytes | None:
    """A JSON key, value or header value: a string (UTF-8), ``{"base64": "..."}`` or null."""
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, dict) and set(value) == {"base64"} and isinstance(value["base64"], str):
        try:
            return base64.b64decode(value["base64"], validate=True)
        except binascii.Error as exc:
            raise ValueError(f"{what} is not valid base64 ({exc})") from None
    raise ValueError(f'{what} must be a string, {{"base64": "..."}} or null, not {json.dumps(value)[:60]}')


def parse_json_line(line: bytes, number: int) -> tuple[Item, int | None]:
    """One ``--json`` line as ``((key, value, headers), partition)``; :class:`BadLineError` if it is not one."""
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadLineError(number, f"not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise BadLineError(number, "not a JSON object")
    unknown = sorted(set(obj) - _JSON_FIELDS)
    if unknown:
        raise BadLineError(number, f"unknown field(s) {', '.join(unknown)} (allowed: headers, key, partition, value)")
    if "value" not in obj:
        raise BadLineError(number, 'no "value" field')
    partition = obj.get("partition")
    if partition is not None and (not isinstance(partition, int) or isinstance(partition, bool) or partition < 0):
        raise BadLineError(number, f'"partition" must be a non-negative integer, not {json.dumps(partition)}')
    headers_obj = obj.get("headers") or {}
    if not isinstance(headers_obj, dict):
        raise BadLineError(number, '"headers" must be an object of name: value')
    try:
        key = _blob(obj.get("key"), '"key"')
        value = _blob(obj["value"], '"value"')
        headers = [(name, _blob(v, f"header {name!r}")) for name, v in headers_obj.items()]
    except ValueError as exc:
        raise BadLineError(number, str(exc)) from None
    return (key, value, headers), partition


def _items(
    lines: Iterator[bytes], separator: bytes | None, as_json: bool, default_partition: int | None
) -> Iterator[tuple[Item, int | None]]:
    for number, line in enumerate(lines, start=1):
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


def _send(target: _Target, topic: str, items: Iterator[tuple[Item, int | None]]) -> tuple[int, Exception | None]:
    """Send ``items`` in requests of up to 1,000 (one partition each); ``(acknowledged, error)``.

    A bad line stops the input but the records before it are still sent, so the
    count is exactly what the broker holds.
    """
    acknowledged = 0
    batch: list[Item] = []
    batch_partition: int | None = None
    stop: Exception | None = None
    try:
        for item, partition in items:
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
