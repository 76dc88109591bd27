"""Where ``lkstream users`` and ``lkstream acls`` find the daemon's security files.

They edit the files offline, while the daemon runs: every edit is atomic and locked
(:mod:`lkstream.security.watched`) and the daemon re-reads a changed file within
``server.security_reload_interval_ms``. The file is, first match wins:

1. ``--file PATH``;
2. the default under ``--data-dir DIR`` (``DIR/security/users.json`` or ``acls.json``);
3. what the daemon's configuration says (``--config PATH``, then ``LKSTREAM_*``):
   ``server.users_file`` / ``server.acl_file``, else the default under ``persist_dir``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Literal

import click

from lkstream.config import load_config
from lkstream.server.settings import server_settings

Which = Literal["users", "acl"]


def security_file_options(which: Which) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--config``, ``--data-dir`` and ``--file``: the three ways to name the file to edit."""
    name = "users.json" if which == "users" else "acls.json"

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        command = click.option(
            "--file", "file_path", type=click.Path(dir_okay=False), help="The file itself (overrides the others)."
        )(command)
        command = click.option(
            "--data-dir", type=click.Path(file_okay=False), help=f"Use DIR/security/{name} (the daemon's default)."
        )(command)
        return click.option(
            "--config",
            "config_path",
            type=click.Path(dir_okay=False),
            help="The daemon's config file: its server.users_file / server.acl_file or persist_dir.",
        )(command)

    return decorate


def resolve(which: Which, *, file_path: str | None, data_dir: str | None, config_path: str | None) -> str:
    """The path of the users (``which="users"``) or ACL file to edit."""
    if file_path is not None:
        return file_path
    if data_dir is not None:
        return os.path.join(data_dir, "security", "users.json" if which == "users" else "acls.json")
    loaded = load_config(config_path)
    users_file, acl_file = server_settings(loaded, check_exposure=False).security_files(loaded.broker)
    return users_file if which == "users" else acl_file
