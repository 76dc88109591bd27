"""The ``lkstream`` command group, its exit-status contract and what commands share.

Commands live in :mod:`lkstream.cli.offline` (dump, verify), :mod:`lkstream.cli.daemon`
(serve), :mod:`lkstream.cli.produce`, :mod:`lkstream.cli.consume`, :mod:`lkstream.cli.bench`
and :mod:`lkstream.cli.topics`; :mod:`lkstream.cli` imports them all so every command is
registered on :data:`cli`. Shared here: the ``--bootstrap`` / ``--data-dir`` options, the
``CODE: message`` error line, aligned tables and stderr progress bars.

Exit status is a contract scripts can rely on:

- 0: success;
- 1: the command ran and failed: an error from the broker or the daemon (printed as
  one line, no traceback; an unknown topic is ``NOT_FOUND``), an unreachable daemon,
  a data directory locked by a running daemon, a bad input line, corruption found by
  ``verify``;
- 2: usage error: unknown option, bad value, missing file, bad configuration.

There is deliberately no separate "not found" status: the ``CODE:`` prefix of the
error line (``NOT_FOUND``, ``ALREADY_EXISTS``, ``UNAVAILABLE``...) tells failures apart.

Invariant: **stdout carries only the command's result** (records, tables, a summary
line). Progress bars go to stderr, and only when stderr is a terminal, so pipes and
files never see them.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

import click

from lkstream.client.remote import RemoteBroker, connect
from lkstream.errors import CorruptRecordError, InvalidArgumentError, LkstreamError, RecordTooLargeError
from lkstream.format.batch import TIMESTAMP_TYPE_MASK, BatchHeader
from lkstream.format.codec import Compression, decode_batch
from lkstream.wire.contract import ERROR_CODES

EXIT_OK: Final = 0
EXIT_PROBLEMS: Final = 1
EXIT_USAGE: Final = 2
DEFAULT_BOOTSTRAP: Final = "127.0.0.1:9090"
#: Environment variable that replaces :data:`DEFAULT_BOOTSTRAP` (as KAFKA_BROKERS or NATS_URL do for theirs).
BOOTSTRAP_ENV: Final = "LKSTREAM_BOOTSTRAP"
_CONTEXT: Final[dict[str, Any]] = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class _Group(click.Group):
    """The command group. Maps LKSTREAM errors a command did not handle to the exit-status
    contract: ``InvalidArgumentError`` is a usage error (2), any other ``LkstreamError`` is 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            # The reader went away (`| head -1`): what it wanted was printed. Exit 0 as
            # `cat` under `head` effectively does, with no traceback and no flush error at exit.
            stop_writing_stdout()
            ctx.exit(EXIT_OK)
        except InvalidArgumentError as exc:
            raise click.UsageError(str(exc), ctx) from exc
        except LkstreamError as exc:
            raise click.ClickException(f"{error_code(exc)}: {exc}") from exc


@click.group(cls=_Group, context_settings=_CONTEXT)
@click.version_option(package_name="lkstream", prog_name="lkstream")
def cli() -> None:
    """LKSTREAM: a file-backed event log with Kafka semantics.

    Most commands talk to a daemon (--bootstrap HOST:PORT, default 127.0.0.1:9090) or
    work directly on a data directory (--data-dir DIR).

    \b
    Exit status (scripts can rely on it):
      0  success
      1  failure: an error from the broker or daemon, printed as one line
         "Error: CODE: message" (NOT_FOUND for an unknown topic), an unreachable
         daemon, a data dir locked by a running daemon, a bad input line,
         corruption found by verify
      2  usage error: unknown option, bad value, missing file, bad configuration
    """


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``lkstream`` script and of ``python -m lkstream.cli``."""
    cli.main(args=None if argv is None else list(argv), prog_name="lkstream")


def stop_writing_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush cannot fail on a closed pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real descriptor (tests' in-memory streams)
        pass
    finally:
        os.close(devnull)


# -- errors -----------------------------------------------------------------------------------------


#: Errors whose code says more than their gRPC status: the HTTP API's code, in the CLI's upper case.
SPECIFIC_CODES: Final[tuple[tuple[type[LkstreamError], str], ...]] = ((RecordTooLargeError, "RECORD_TOO_LARGE"),)


def error_code(exc: LkstreamError) -> str:
    """The code of ``exc``'s error line: the gRPC status name (``NOT_FOUND`` for an unknown topic), or
    :data:`SPECIFIC_CODES`' (``RECORD_TOO_LARGE``, as HTTP's ``record_too_large``)."""
    for specific, name in SPECIFIC_CODES:
        if isinstance(exc, specific):
            return name
    for cls, code in ERROR_CODES:
        if isinstance(exc, cls):
            return str(code.name)
    return "UNKNOWN"


@contextmanager
def broker_errors() -> Iterator[None]:
    """Turn a broker error into exit status 1 with one ``CODE: message`` line (usage errors stay 2)."""
    try:
        yield
    except InvalidArgumentError as exc:
        raise click.UsageError(str(exc)) from None
    except LkstreamError as exc:
        raise click.ClickException(f"{error_code(exc)}: {exc}") from None


# -- shared options ---------------------------------------------------------------------------------

_bootstrap_only: Final = click.option(
    "--bootstrap",
    metavar="HOST:PORT",
    default=DEFAULT_BOOTSTRAP,
    show_default=True,
    envvar=BOOTSTRAP_ENV,
    show_envvar=True,
    help="Address of the daemon's gRPC port (a host alone gets port 9090).",
)
_CREDENTIALS_KEY: Final = "lkstream.credentials"


def _remember(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    ctx.meta.setdefault(_CREDENTIALS_KEY, {})[param.name] = value
    return value


_token_option: Final = click.option(
    "--token",
    metavar="TOKEN",
    envvar="LKSTREAM_TOKEN",
    expose_value=False,
    callback=_remember,
    help="Bearer token for a daemon with authentication on (default: $LKSTREAM_TOKEN).",
)
_tls_ca_option: Final = click.option(
    "--tls-ca",
    metavar="PEM",
    envvar="LKSTREAM_TLS_CA",
    type=click.Path(exists=True, dir_okay=False),
    expose_value=False,
    callback=_remember,
    help="Connect with TLS, trusting this CA file (default: $LKSTREAM_TLS_CA).",
)


def bootstrap_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--bootstrap HOST:PORT`` plus its credentials, ``--token`` and ``--tls-ca`` (see :func:`connect_daemon`)."""
    return _bootstrap_only(_token_option(_tls_ca_option(command)))


def daemon_credentials() -> dict[str, Any]:
    """The command's ``--token`` and ``--tls-ca`` as ``lkstream.connect``'s ``token`` and ``tls``."""
    ctx = click.get_current_context(silent=True)
    credentials = ctx.meta.get(_CREDENTIALS_KEY, {}) if ctx is not None else {}
    return {"token": credentials.get("token"), "tls": credentials.get("tls_ca")}


def connect_daemon(bootstrap: str, **options: Any) -> RemoteBroker:
    """``lkstream.connect(bootstrap, **options)`` with the command's ``--token`` and ``--tls-ca``."""
    return connect(bootstrap, **daemon_credentials(), **options)


@contextmanager
def remote_daemon(bootstrap: str) -> Iterator[RemoteBroker]:
    """A connection to the daemon at ``bootstrap`` (with the command's credentials), errors as CLI errors."""
    with broker_errors():
        broker = connect_daemon(bootstrap)
        try:
            yield broker
        finally:
            broker.close()


def data_dir_option(help_text: str, *, must_exist: bool = True) -> Callable[[Any], Any]:
    """``--data-dir DIR``: work on a data directory instead of asking ``--bootstrap``."""
    return click.option(
        "--data-dir",
        type=click.Path(exists=must_exist, file_okay=False),
        help=help_text,
    )


def check_one_target(ctx: click.Context, data_dir: str | None) -> None:
    """``--bootstrap`` and ``--data-dir`` name two different places: refuse both at once."""
    # Only a --bootstrap typed on this command line conflicts; LKSTREAM_BOOTSTRAP is a default.
    if data_dir is not None and ctx.get_parameter_source("bootstrap") is click.core.ParameterSource.COMMANDLINE:
        raise click.UsageError("--bootstrap and --data-dir are mutually exclusive", ctx)


# -- tables and progress ----------------------------------------------------------------------------


def table(rows: Sequence[Sequence[object]], headers: Sequence[str]) -> list[str]:
    """Rows as right-aligned columns under ``headers``: the stable, script-friendly form."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return ["  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)) for row in cells]


def print_table(rows: Sequence[Sequence[object]], headers: Sequence[str]) -> None:
    """Print a table on stdout: a rich table on a terminal, :func:`table`'s plain columns otherwise.

    Pipes and files always get the plain form (one header line, one line per row,
    whitespace-separated), which ``awk`` and tests rely on; rich would wrap or
    truncate to a guessed width there.
    """
    if not sys.stdout.isatty():
        for line in table(rows, headers):
            click.echo(line)
        return
    from rich.console import Console  # imported late: only a terminal needs it
    from rich.table import Table

    grid = Table(box=None, header_style="bold", pad_edge=False)
    for header in headers:
        grid.add_column(header, justify="right", no_wrap=True)
    for row in rows:
        grid.add_row(*(str(cell) for cell in row))
    Console(soft_wrap=True).print(grid)


def progress_enabled() -> bool:
    """Whether progress bars are shown: only when stderr is a terminal."""
    return sys.stderr.isatty() and os.environ.get("TERM") != "dumb"


@contextmanager
def progress(description: str, total: float | None, *, unit: str = "records") -> Iterator[Callable[[float], None]]:
    """A progress bar on stderr while the block runs; yields ``advance(amount)``.

    A no-op unless stderr is a terminal, so stdout (and a redirected stderr) never
    see it. ``unit="bytes"`` shows transferred sizes, else counts. The bar is
    transient: it is erased when the block ends.
    """
    if not progress_enabled():
        yield lambda amount: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    amount_columns = (
        [DownloadColumn(), TransferSpeedColumn()] if unit == "bytes" else [MofNCompleteColumn(), TextColumn(unit)]
    )
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        *amount_columns,
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
        redirect_stdout=False,  # stdout is the command's output: never route it through the bar
        redirect_stderr=False,
    )
    with bar:
        task = bar.add_task(description, total=total)
        yield lambda amount: bar.advance(task, amount)


# -- rendering --------------------------------------------------------------------------------------


def render_bytes(data: bytes | None, binary: str = "hex") -> str:
    """``null``, a JSON string for printable UTF-8, else ``hex:...`` or ``base64:...``."""
    if data is None:
        return "null"
    try:
        text: str | None = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and text.isprintable():
        return json.dumps(text, ensure_ascii=False)
    if binary == "base64":
        return "base64:" + base64.b64encode(data).decode("ascii")
    return "hex:" + data.hex()


def _compression_name(header: BatchHeader) -> str:
    try:
        return Compression(header.compression).name.lower()
    except ValueError:
        return f"unknown({header.compression})"


def batch_line(position: int, header: BatchHeader, crc_ok: str) -> str:
    timestamp_type = "log_append" if header.attributes & TIMESTAMP_TYPE_MASK else "create"
    return (
        f"position: {position} baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
        f"count: {header.records_count} size: {header.size} crc: {header.crc:#010x} crcOk: {crc_ok} "
        f"compression: {_compression_name(header)} timestampType: {timestamp_type} "
        f"baseTimestamp: {header.base_timestamp} maxTimestamp: {header.max_timestamp}"
    )


def record_lines(batch: bytes, binary: str) -> list[str]:
    try:
        records = decode_batch(batch, "", 0)
    except CorruptRecordError as exc:
        return [f"| records not decoded: {exc.reason}"]
    lines = []
    for r in records:
        headers = ", ".join(f"{json.dumps(k, ensure_ascii=False)}={render_bytes(v, binary)}" for k, v in r.headers)
        lines.append(
            f"| offset: {r.offset} timestamp: {r.timestamp} key: {render_bytes(r.key, binary)} "
            f"value: {render_bytes(r.value, binary)} headers: [{headers}]"
        )
    return lines
