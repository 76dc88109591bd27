"""The ``lkstream`` command group, its exit-status contract and shared rendering helpers.

Commands live in :mod:`lkstream.cli.offline` (dump, verify: read a data directory)
and :mod:`lkstream.cli.daemon` (serve, produce, consume: run or talk to a daemon);
:mod:`lkstream.cli` imports both so every command is registered on :data:`cli`.

Exit status is a contract scripts can rely on:

- 0: success;
- 1: the command ran and failed: an error from the broker or the daemon (printed as
  one line, no traceback), an unreachable daemon, corruption found by ``verify``;
- 2: usage error: unknown option, bad value, missing file, bad configuration.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any, Final

import click

from lkstream.errors import CorruptRecordError, InvalidArgumentError, LkstreamError
from lkstream.format.batch import TIMESTAMP_TYPE_MASK, BatchHeader
from lkstream.format.codec import Compression, decode_batch

EXIT_PROBLEMS: Final = 1
_CONTEXT: Final[dict[str, Any]] = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class _Group(click.Group):
    """The command group. Maps LKSTREAM errors a command did not handle to the exit-status
    contract: ``InvalidArgumentError`` is a usage error (2), any other ``LkstreamError`` is 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except InvalidArgumentError as exc:
            raise click.UsageError(str(exc), ctx) from exc
        except LkstreamError as exc:
            raise click.ClickException(str(exc)) from exc


@click.group(cls=_Group, context_settings=_CONTEXT)
@click.version_option(package_name="lkstream", prog_name="lkstream")
def cli() -> None:
    """LKSTREAM: a file-backed event log with Kafka semantics.

    Exit status: 0 success, 1 failure (an error from the daemon, problems found, an I/O error), 2 usage error.
    """


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``lkstream`` script and of ``python -m lkstream.cli``."""
    cli.main(args=None if argv is None else list(argv), prog_name="lkstream")


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


def count_of(count: int, noun: str, plural: str = "") -> str:
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


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
