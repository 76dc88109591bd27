"""``lkstream produce``: lines of stdin or a file become records, through a daemon or on a data dir.

::

    lkstream produce TOPIC [--bootstrap HOST:PORT | --data-dir DIR] [-K SEP | -k KEY | --json]
                     [-H NAME=VALUE ...] [-p N] [-z gzip|snappy|lz4|zstd] [--file PATH]

The short flags are kcat's and rpk's (``-K`` key separator, ``-k`` one key for every
record, ``-H`` a header, ``-p`` partition, ``-z`` compression).

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
``{"key": K, "value": V, "headers": [{"key": "name", "value": V}], "partition": N, "timestamp": MS}``
where a key, value or header value is a string (sent as UTF-8), ``{"base64": "..."}`` for any
bytes, or ``null``; only ``value`` is required; a line's ``partition`` overrides ``--partition``
and its ``timestamp`` is kept (records without one get the time they are sent); ``topic`` and
``offset`` are accepted and ignored, so consumed lines can be produced into another topic as
they are, with their partitions and times.

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
from typing import IO, Any, Final, NamedTuple

import click

from lkstream.broker.broker import Broker
from lkstream.cli.base import (
    DEFAULT_BOOTSTRAP,
    bootstrap_option,
    broker_errors,
    check_one_target,
    cli,
    connect_daemon,
    data_dir_option,
    error_code,
    progress,
)
from lkstream.cli.sending import COMPRESSIONS, Line, Sender, Target
from lkstream.errors import DataDirLockedError, LkstreamError, count_of
from lkstream.format.codec import Compression, Headers
from lkstream.format.json_records import (
    INPUT_FIELDS,
    check_ignored_fields,
    headers_from_json,
    json_to_bytes,
    timestamp_from_json,
)
from lkstream.storage.reader import DataDirReader

#: A pipe or terminal that pauses this long gets what it wrote so far sent.
LINGER_S: Final = 0.1
_JSON_FIELDS: Final = INPUT_FIELDS | {"key_encoding", "value_encoding"}


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


def parse_json_line(line: bytes, number: int) -> Line:
    """One ``--json`` line as a :class:`Line`; :class:`BadLineError` if it is not one.

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
        timestamp = timestamp_from_json(obj)
    except ValueError as exc:
        raise BadLineError(number, str(exc)) from None
    return Line(key, value, headers, partition, timestamp)


def _field_bytes(obj: dict[str, Any], field: str) -> bytes | None:
    """``obj[field]`` as bytes; ``"value": "AAE=", "value_encoding": "base64"`` is the form of older output."""
    encoding = obj.get(f"{field}_encoding")
    if encoding is None:
        return json_to_bytes(obj.get(field), f'"{field}"')
    if encoding != "base64" or not isinstance(obj.get(field), str):
        raise ValueError(f'"{field}_encoding" must be "base64" and "{field}" a base64 string')
    return json_to_bytes({"base64": obj[field]}, f'"{field}"')


class LineShape(NamedTuple):
    """How a text line becomes a record: a key separator or one fixed key, headers, a partition."""

    separator: bytes | None = None
    key: bytes | None = None
    headers: Headers = ()
    partition: int | None = None
    as_json: bool = False


def _items(lines: Iterator[bytes | None], shape: LineShape) -> Iterator[Line | None]:
    """Records of the input lines; ``None`` passes an input pause through to the sender."""
    number = 0
    for line in lines:
        if line is None:
            yield None
            continue
        number += 1
        if shape.as_json:
            parsed = parse_json_line(line, number)
            yield parsed if parsed.partition is not None else parsed._replace(partition=shape.partition)
            continue
        key, value = shape.key, line
        if shape.separator is not None:
            head, found, tail = line.partition(shape.separator)
            if found:
                key, value = head, tail
        yield Line(key, value, list(shape.headers), shape.partition)


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


def open_target(bootstrap: str, data_dir: str | None) -> Target:
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


def _send(sender: Sender, lines: Iterator[Line | None]) -> Exception | None:
    """Send every line, a pause in the input (``None``) sending what is held; the error that stopped it.

    A bad line stops the input but the records before it are still sent, so
    ``sender.acknowledged`` is exactly what the broker holds.
    """
    stop: Exception | None = None
    try:
        for line in lines:
            if line is None:
                sender.flush()
            else:
                sender.add(line)
    except BadLineError as exc:
        stop = exc
    except LkstreamError as exc:
        return exc
    try:
        sender.flush()
    except LkstreamError as exc:
        return exc
    return stop


def _header_value(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> Headers:
    headers = []
    for item in value:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", ctx, param)
        headers.append((name, text.encode()))
    return headers


@cli.command()
@click.argument("topic")
@bootstrap_option
@data_dir_option(
    "Append to this data directory with an embedded broker instead of a daemon (takes the directory's "
    "LOCK: fails while a daemon runs on it).",
    must_exist=False,
)
@click.option(
    "-K",
    "--key-separator",
    metavar="SEP",
    help="Split each line at the first SEP into key and value (a line without SEP has no key).",
)
@click.option("-k", "--key", "fixed_key", metavar="KEY", help="Give every record this key.")
@click.option(
    "-H",
    "--header",
    "headers",
    multiple=True,
    metavar="NAME=VALUE",
    callback=_header_value,
    help="Give every record this header (repeatable).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Each line is a JSON object {"key", "value", "headers", "partition", "timestamp"} (what `consume '
    '--output json` prints); a key, value or header value is a string, {"base64": "..."} or null. A line\'s '
    "timestamp (ms) is kept. Excludes -K, -k and -H.",
)
@click.option("-p", "--partition", type=click.IntRange(min=0), help="Send every record to this partition.")
@click.option(
    "-z",
    "--compression",
    type=click.Choice(COMPRESSIONS),
    default="none",
    show_default=True,
    help="Compress each batch (Kafka's codecs; consumers decompress on their own).",
)
@click.option("--file", "path", type=click.Path(exists=True, dir_okay=False), help="Read lines from this file.")
@click.pass_context
def produce(
    ctx: click.Context,
    *,
    topic: str,
    bootstrap: str,
    data_dir: str | None,
    key_separator: str | None,
    fixed_key: str | None,
    headers: Headers,
    as_json: bool,
    partition: int | None,
    compression: str,
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
    if as_json and (key_separator is not None or fixed_key is not None or headers):
        raise click.UsageError("--json lines carry their own key and headers: -K, -k and -H do not apply", ctx)
    if key_separator is not None and fixed_key is not None:
        raise click.UsageError("-K/--key-separator and -k/--key are mutually exclusive", ctx)
    shape = LineShape(
        separator=None if key_separator is None else key_separator.encode(),
        key=None if fixed_key is None else fixed_key.encode(),
        headers=headers,
        partition=partition,
        as_json=as_json,
    )
    where = data_dir if data_dir is not None else bootstrap
    with broker_errors():
        target = open_target(bootstrap or DEFAULT_BOOTSTRAP, data_dir)
    sender = Sender(target, topic, Compression.parse(compression))
    try:
        with open(path, "rb") if path is not None else nullcontext(sys.stdin.buffer) as stream:
            size = _regular_file_size(stream)
            bar = progress(f"produce {topic}", size, unit="bytes") if size is not None else nullcontext(_ignore)
            with bar as step:
                error = _send(sender, _items(_lines(stream, step), shape))
    finally:
        with broker_errors():
            target.close()
    acknowledged = sender.acknowledged
    if error is not None:
        click.echo(f"{count_of(acknowledged, 'record')} acknowledged before the error", err=True)
        message = f"{error_code(error)}: {error}" if isinstance(error, LkstreamError) else str(error)
        raise click.ClickException(message)
    click.echo(f"{count_of(acknowledged, 'record')} acknowledged by {where} (topic {topic})")
