"""``lkstream users add|remove|list``: the users file of a daemon with authentication on.

::

    lkstream users add NAME [--password-stdin] [--token] [--iterations N]
    lkstream users remove NAME [--token ID]
    lkstream users list

``add`` sets a password (stored as SCRAM-SHA-256 and SCRAM-SHA-512 keys, never the
password: read from stdin with ``--password-stdin``, otherwise asked for twice on a
terminal) and/or makes a bearer token (``--token``): the token is printed once, alone on
stdout, and never again. Setting a password again replaces it; tokens accumulate
(rotation: add a new one, move clients, remove the old one by its id). Messages go to
stderr. Which file: :mod:`lkstream.cli.security_files`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

import click

from lkstream.cli.base import broker_errors, cli, print_table
from lkstream.cli.security_files import resolve, security_file_options
from lkstream.security.credentials import DEFAULT_ITERATIONS, MAX_ITERATIONS, MIN_ITERATIONS, UsersDocument
from lkstream.security.principal import validate_user_name
from lkstream.security.watched import edit_file, read_file

R = TypeVar("R")


@cli.group()
def users() -> None:
    """Users of a daemon with authentication on (server.auth: true).

    Edits the users file; a running daemon picks the change up by itself.
    """


def _edit_users(path: str, change: Callable[[UsersDocument], R]) -> R:
    return edit_file(path, UsersDocument.parse, UsersDocument.empty, UsersDocument.serialize, change)


def _password(from_stdin: bool, token: bool) -> str | None:
    if from_stdin:
        line = sys.stdin.readline()
        return line.removesuffix("\n").removesuffix("\r")
    if token or not sys.stdin.isatty():
        return None
    return str(click.prompt("Password", hide_input=True, confirmation_prompt=True, err=True))


@users.command("add")
@click.argument("name")
@click.option("--password-stdin", is_flag=True, help="Read the password from the first line of stdin.")
@click.option("--token", "make_token", is_flag=True, help="Make a bearer token and print it (shown only once).")
@click.option(
    "--iterations",
    type=click.IntRange(MIN_ITERATIONS, MAX_ITERATIONS),
    default=DEFAULT_ITERATIONS,
    show_default=True,
    help="PBKDF2 iterations of the stored SCRAM keys.",
)
@security_file_options("users")
def add(
    name: str,
    *,
    password_stdin: bool,
    make_token: bool,
    iterations: int,
    file_path: str | None,
    data_dir: str | None,
    config_path: str | None,
) -> None:
    """Add user NAME, or set its password, or give it another token."""
    with broker_errors():
        validate_user_name(name)
        path = resolve("users", file_path=file_path, data_dir=data_dir, config_path=config_path)
        password = _password(password_stdin, make_token)
        if password is None and not make_token:
            raise click.UsageError("nothing to add: give --password-stdin, --token, or run it on a terminal")

        def change(doc: UsersDocument) -> tuple[bool, str | None]:
            replaced = doc.set_password(name, password, iterations) if password is not None else False
            return replaced, doc.add_token(name) if make_token else None

        replaced, token = _edit_users(path, change)
    if password is not None:
        verb = "replaced" if replaced else "set"
        click.echo(
            f"{name}: password {verb} (SCRAM-SHA-256, SCRAM-SHA-512, {iterations} iterations) in {path}", err=True
        )
    if token is not None:
        click.echo(f"{name}: new token {token.split('_')[1]}; store it now, it is not shown again:", err=True)
        click.echo(token)


@users.command("remove")
@click.argument("name")
@click.option("--token", "token_id", metavar="ID", help="Remove only this token (the id `users list` shows).")
@security_file_options("users")
def remove(
    name: str, *, token_id: str | None, file_path: str | None, data_dir: str | None, config_path: str | None
) -> None:
    """Remove user NAME (all its credentials), or only one of its tokens."""
    with broker_errors():
        path = resolve("users", file_path=file_path, data_dir=data_dir, config_path=config_path)
        if token_id is None:
            _edit_users(path, lambda doc: doc.remove_user(name))
        else:
            _edit_users(path, lambda doc: doc.remove_token(name, token_id))
    click.echo(f"{name}: {'token ' + token_id if token_id else 'user'} removed from {path}", err=True)


@users.command("list")
@security_file_options("users")
def list_users(file_path: str | None, data_dir: str | None, config_path: str | None) -> None:
    """List users, their SCRAM mechanisms and iteration counts, and their token ids."""
    with broker_errors():
        path = resolve("users", file_path=file_path, data_dir=data_dir, config_path=config_path)
        doc = read_file(path, UsersDocument.parse, UsersDocument.empty)
    rows = [
        (
            name,
            ",".join(sorted(user.scram)) or "-",
            ",".join(sorted({str(c.iterations) for c in user.scram.values()})) or "-",
            ",".join(f"{t.id}({t.created})" for t in user.tokens) or "-",
        )
        for name, user in sorted(doc.users.items())
    ]
    print_table(rows, ("USER", "MECHANISMS", "ITERATIONS", "TOKENS"))
