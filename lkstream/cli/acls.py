"""``lkstream acls add|remove|list``: the ACL file of a daemon with authentication on.

::

    lkstream acls add    --principal NAME|'*' (--topic NAME | --group NAME | --cluster) [--prefix]
                         --operation OP [--operation OP ...] [--deny]
    lkstream acls remove (the same options: removes exactly those entries)
    lkstream acls list   [--principal NAME]

Operations: topic ``read write create delete describe all``; group ``read delete
describe all``; cluster ``admin create describe all``. With authentication on, what no
entry allows is denied; a ``--deny`` entry wins over any allow. The daemon re-reads the
file within ``server.security_reload_interval_ms``: no restart. Model and rules:
docs/security.md. Which file: :mod:`lkstream.cli.security_files`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from lkstream.cli.base import broker_errors, cli, print_table
from lkstream.cli.security_files import resolve, security_file_options
from lkstream.errors import InvalidArgumentError, count_of
from lkstream.security.acl import CLUSTER_NAME, AclDocument, AclEntry, Operation, PatternType, Permission
from lkstream.security.watched import edit_file, read_file

_OPERATIONS = [op.value for op in Operation]


@cli.group()
def acls() -> None:
    """Access control lists of a daemon with authentication on (server.auth: true).

    Edits the ACL file; a running daemon picks the change up by itself.
    """


def _entry_options(command: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--principal", required=True, help="User name, or '*' for every authenticated user."),
        click.option("--topic", help="A topic name (or prefix with --prefix; '*' for every topic)."),
        click.option("--group", help="A consumer group name (or prefix with --prefix; '*' for every group)."),
        click.option("--cluster", is_flag=True, help="The cluster (admin: offset resets; create: any topic)."),
        click.option("--prefix", is_flag=True, help="The name is a prefix: every name starting with it."),
        click.option(
            "--operation",
            "operations",
            multiple=True,
            required=True,
            type=click.Choice(_OPERATIONS, case_sensitive=False),
            help="Operation to allow (or deny); repeat for several.",
        ),
        click.option("--deny", is_flag=True, help="A deny entry: wins over any allow."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _entries(
    *,
    principal: str,
    topic: str | None,
    group: str | None,
    cluster: bool,
    prefix: bool,
    operations: tuple[str, ...],
    deny: bool,
) -> list[AclEntry]:
    chosen = [(kind, name) for kind, name in (("topic", topic), ("group", group)) if name is not None]
    if cluster:
        chosen.append(("cluster", CLUSTER_NAME))
    if len(chosen) != 1:
        raise InvalidArgumentError("name exactly one resource: --topic NAME, --group NAME or --cluster")
    kind, name = chosen[0]
    return [
        AclEntry.build(
            principal,
            operation,
            kind,
            name,
            pattern=PatternType.PREFIX if prefix else PatternType.LITERAL,
            permission=Permission.DENY if deny else Permission.ALLOW,
        )
        for operation in operations
    ]


def _edit(path: str, change: Callable[[AclDocument], list[AclEntry]]) -> list[AclEntry]:
    return edit_file(path, AclDocument.parse, AclDocument.empty, AclDocument.serialize, change)


@acls.command("add")
@_entry_options
@security_file_options("acl")
def add(*, file_path: str | None, data_dir: str | None, config_path: str | None, **entry: Any) -> None:
    """Add ACL entries (one per --operation)."""
    with broker_errors():
        wanted = _entries(**entry)
        path = resolve("acl", file_path=file_path, data_dir=data_dir, config_path=config_path)
        added = _edit(path, lambda doc: doc.add(wanted))
    for item in added:
        click.echo(f"added: {item.describe()}", err=True)
    click.echo(f"{count_of(len(added), 'entry', 'entries')} added to {path}", err=True)


@acls.command("remove")
@_entry_options
@security_file_options("acl")
def remove(*, file_path: str | None, data_dir: str | None, config_path: str | None, **entry: Any) -> None:
    """Remove exactly the ACL entries these options describe."""
    with broker_errors():
        wanted = _entries(**entry)
        path = resolve("acl", file_path=file_path, data_dir=data_dir, config_path=config_path)

        def drop(doc: AclDocument) -> list[AclEntry]:
            removed = doc.remove(wanted)
            if not removed:
                raise InvalidArgumentError("no such entry: `lkstream acls list` shows the entries")
            return removed

        removed = _edit(path, drop)
    click.echo(f"{count_of(len(removed), 'entry', 'entries')} removed from {path}", err=True)


@acls.command("list")
@click.option("--principal", help="Only the entries of this principal (and of '*').")
@security_file_options("acl")
def list_acls(*, principal: str | None, file_path: str | None, data_dir: str | None, config_path: str | None) -> None:
    """List ACL entries."""
    with broker_errors():
        path = resolve("acl", file_path=file_path, data_dir=data_dir, config_path=config_path)
        doc = read_file(path, AclDocument.parse, AclDocument.empty)
    entries = sorted(e for e in doc.entries if principal is None or e.principal in (principal, "*"))
    rows = [(e.principal, e.permission, e.operation, e.resource_type, e.pattern, e.name) for e in entries]
    print_table(rows, ("PRINCIPAL", "PERMISSION", "OPERATION", "RESOURCE", "PATTERN", "NAME"))
