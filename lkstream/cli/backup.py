"""``lkstream backup`` and ``lkstream restore``: an online snapshot of a data directory, and putting it back.

::

    lkstream backup DATA_DIR DEST      # beside a running daemon: no LOCK, no daemon call
    lkstream restore BACKUP DATA_DIR   # into an empty or new directory; then `lkstream verify DATA_DIR`

The work is :mod:`lkstream.storage.backup` (what is copied and why it is
consistent); this module prints what the snapshot holds: per partition the
offsets ``[START, END)`` it has, so an operator knows where a restored log ends.
Exit status: 0 done; 1 the source is corrupt or a file could not be read or
written; 2 usage (a source that is not a data directory, a target that is not
empty).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import click

from lkstream.cli.base import broker_errors, cli, print_table
from lkstream.errors import count_of
from lkstream.storage.backup import BackupReport, backup_data_dir, restore_backup, summary

_HEADERS = ("TOPIC", "PARTITION", "START", "END", "SEGMENTS", "BYTES")


@contextmanager
def _os_errors() -> Iterator[None]:
    """A target that cannot be written (permissions, a full disk) is one error line, exit 1."""
    try:
        yield
    except OSError as exc:
        raise click.ClickException(f"STORAGE: {exc.filename or ''}: {exc.strerror or exc}") from None


def _print_report(report: BackupReport) -> None:
    rows = [
        (p.topic, p.partition, p.log_start_offset, p.end_offset, p.segments, p.bytes)
        for p in sorted(report.partitions, key=lambda p: (p.topic, p.partition))
    ]
    print_table(rows, _HEADERS)
    for note in report.notes:
        click.echo(f"note: {note}", err=True)


def _totals(report: BackupReport) -> str:
    t = summary(report)
    return (
        f"{count_of(t['topics'], 'topic')}, {count_of(t['partitions'], 'partition')}, "
        f"{count_of(t['records'], 'offset')} ({t['bytes']} bytes), "
        f"{count_of(t['committed_offsets'], 'committed offset')}"
    )


@cli.command()
@click.argument("data_dir", type=click.Path(exists=True, file_okay=False))
@click.argument("dest", type=click.Path())
def backup(data_dir: str, dest: str) -> None:
    """Snapshot DATA_DIR into the new directory DEST, safely beside a running daemon.

    Takes no lock and asks no daemon. Committed offsets are taken first, then
    every segment: sealed ones whole, the active one up to its last whole,
    CRC-valid batch. The table says, per partition, the offsets the snapshot
    holds (START to END, END excluded). DEST is itself a data directory (plus
    backup.json): `lkstream verify DEST` and `lkstream consume --data-dir DEST`
    work on it as it is. docs/operations.md has the runbook.
    """
    with broker_errors(), _os_errors():
        report = backup_data_dir(data_dir, dest)
    _print_report(report)
    click.echo(f"backup of {data_dir} in {dest}: {_totals(report)}", err=True)


@cli.command()
@click.argument("backup_dir", metavar="BACKUP", type=click.Path(exists=True, file_okay=False))
@click.argument("data_dir", type=click.Path())
def restore(backup_dir: str, data_dir: str) -> None:
    """Copy BACKUP (made by `lkstream backup`) into DATA_DIR, which must be empty or absent.

    Start a daemon on DATA_DIR afterwards; `lkstream verify DATA_DIR` exits 0 on
    a restored directory. Each partition ends where the backup's table said.
    """
    with broker_errors(), _os_errors():
        report = restore_backup(backup_dir, data_dir)
    _print_report(report)
    click.echo(f"restored {backup_dir} into {data_dir}: {_totals(report)}", err=True)
