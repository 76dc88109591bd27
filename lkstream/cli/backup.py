"""``lkstream backup`` and ``lkstream restore``: an online snapshot of a data directory, and putting it back.

::

    lkstream backup DATA_DIR DEST [--config PATH]      # beside a running daemon: no LOCK, no daemon call
    lkstream restore BACKUP DATA_DIR [--with-security] # into an empty or new directory; then `lkstream verify`

The work is :mod:`lkstream.storage.backup` (what is copied and why it is consistent) and
:mod:`lkstream.storage.restore` (what a restore trusts: nothing); this module prints what the
snapshot holds: per partition the offsets ``[START, END)`` it has, so an operator knows where a
restored log ends. A backup carries the daemon's users and ACL files (``--config`` finds them
where the daemon's configuration puts them); a restore shows what they grant and installs them
only with ``--with-security``. Everything printed from a backup is escaped: its text could hold
terminal control sequences. Exit status: 0 done; 1 the source is corrupt, a file could not be
read or written, or a backup file was refused (a link, a checksum); 2 usage (a source that is
not a data directory, a target that is not empty, a backup naming a file outside the layout).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import click

from lkstream.cli.base import broker_errors, cli, count_of, print_table
from lkstream.cli.security_files import resolve
from lkstream.errors import InvalidArgumentError, LkstreamError
from lkstream.security.acl import AclDocument
from lkstream.security.credentials import UsersDocument
from lkstream.storage.backup import BackupReport, backup_data_dir, default_security_files, summary
from lkstream.storage.restore import SECURITY_FILES, escaped, read_backup_file, read_manifest, restore_backup

_HEADERS = ("TOPIC", "PARTITION", "START", "END", "SEGMENTS", "BYTES")


@contextmanager
def _os_errors() -> Iterator[None]:
    """A target that cannot be written (permissions, a full disk) is one error line, exit 1."""
    try:
        yield
    except OSError as exc:
        raise click.ClickException(f"STORAGE: {exc.filename or ''}: {exc.strerror or exc}") from None


def _print_report(report: BackupReport, notes: list[str]) -> None:
    rows = [
        (escaped(str(p.topic)), p.partition, p.log_start_offset, p.end_offset, p.segments, p.bytes)
        for p in sorted(report.partitions, key=lambda p: (str(p.topic), str(p.partition)))
    ]
    print_table(rows, _HEADERS)
    for note in [*report.notes, *notes]:
        click.echo(f"note: {escaped(note)}", err=True)


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
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help="The daemon's config file, to find its users and ACL files (default: DATA_DIR/security/).",
)
def backup(data_dir: str, dest: str, config_path: str | None) -> None:
    """Snapshot DATA_DIR into the new directory DEST, safely beside a running daemon.

    Takes no lock and asks no daemon. Committed offsets are taken first, then
    every segment: sealed ones whole, the active one up to its last whole,
    CRC-valid batch; then the producer ids and the users and ACL files (mode
    0600). The table says, per partition, the offsets the snapshot holds (START
    to END, END excluded). DEST is itself a data directory (plus backup.json,
    which lists every file with its CRC-32C): `lkstream verify DEST` and
    `lkstream consume --data-dir DEST` work on it as it is. docs/operations.md
    has the runbook.
    """
    with broker_errors(), _os_errors():
        security = default_security_files(data_dir)
        if config_path is not None:
            security = [
                resolve(which, file_path=None, data_dir=None, config_path=config_path) for which in ("users", "acl")
            ]
        report = backup_data_dir(data_dir, dest, security_files=security)
    kept = [f.path for f in report.files or () if f.path in SECURITY_FILES]
    _print_report(
        report, [f"{', '.join(kept)} backed up (mode 0600): restore them with --with-security"] if kept else []
    )
    click.echo(f"backup of {data_dir} in {dest}: {_totals(report)}", err=True)


@cli.command()
@click.argument("backup_dir", metavar="BACKUP", type=click.Path(exists=True, file_okay=False))
@click.argument("data_dir", type=click.Path())
@click.option(
    "--with-security",
    is_flag=True,
    help="Also restore the backup's users and ACL files (shown first): they decide who may do what.",
)
def restore(backup_dir: str, data_dir: str, with_security: bool) -> None:
    """Copy BACKUP (made by `lkstream backup`) into DATA_DIR, which must be empty or absent.

    Only the files the backup's manifest names are copied, each checked against
    its size and CRC-32C, never through a symbolic link. The users and ACL files
    are shown, and restored only with --with-security (into DATA_DIR/security/).
    Start a daemon on DATA_DIR afterwards; `lkstream verify DATA_DIR` exits 0 on
    a restored directory. Each partition ends where the backup's table said.
    """
    with broker_errors(), _os_errors():
        manifest = read_manifest(backup_dir)
        carried = [f for f in SECURITY_FILES if manifest.files is None or f in {e.path for e in manifest.files}]
        grants = _grants(backup_dir, carried, strict=with_security)
        if grants:
            click.echo("the backup's security files grant:", err=True)
            for line in grants:
                click.echo(f"  {escaped(line)}", err=True)
        report = restore_backup(backup_dir, data_dir, with_security=with_security)
    notes = list(report.notes)
    if report.security_files and not report.security_restored:
        notes.append(f"{', '.join(report.security_files)} not restored: review them above, then add --with-security")
    elif report.security_restored:
        notes.append(f"{', '.join(report.security_files)} restored into {data_dir}/security (mode 0600)")
    _print_report(report.manifest, notes)
    click.echo(f"restored {backup_dir} into {data_dir}: {_totals(report.manifest)}", err=True)


def _grants(backup_dir: str, paths: list[str], *, strict: bool) -> list[str]:
    """What the backup's users and ACL files grant, one line each (``strict``: one that does not parse fails)."""
    lines: list[str] = []
    for path in paths:
        try:
            raw = read_backup_file(backup_dir, path)
        except LkstreamError:
            continue  # not in the backup (format 1): the restore says what it finds
        try:
            lines += _users(raw) if path.endswith("users.json") else _acls(raw)
        except InvalidArgumentError as exc:
            if strict:
                raise InvalidArgumentError(f"{path} in the backup does not parse ({exc}): not restoring it") from None
            lines.append(f"{path}: does not parse ({exc})")
    return lines


def _users(raw: bytes) -> list[str]:
    lines = []
    for name, user in sorted(UsersDocument.parse(raw).users.items()):
        passwords = ", ".join(sorted(user.scram)) or "none"
        tokens = ", ".join(f"{t.id} (made {t.created})" for t in user.tokens) or "none"
        lines.append(f"user {name}: passwords {passwords}; tokens {tokens}")
    return lines or ["no users"]


def _acls(raw: bytes) -> list[str]:
    entries = sorted(AclDocument.parse(raw).entries, key=lambda e: e.describe())
    return [f"acl: {entry.describe()}" for entry in entries] or ["no ACL entries"]
