"""A real daemon with access control on: users and ACL files in tmp_path, optional TLS, a super user.

``secure_daemon(tls=..., client_ca=..., broker={...}, **server)`` starts ``python -m lkstream.grpc_server``
on free loopback ports (the integration suite's :class:`DaemonProcess`) with
``auth: true``, the files re-read on every call (``security_reload_interval_ms: 0``) and
``admin`` as super user; ``SecureDaemon.token(user)`` and ``set_password(user, pw)`` make
users, tokens and passwords the way ``lkstream users add`` does, ``grant``/``set_acls``
edit the ACL file. Every listener binds a free port (the Kafka one too).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from lkstream.security.acl import AclDocument, AclEntry
from lkstream.security.credentials import UsersDocument
from lkstream.security.watched import edit_file
from tests.integration.conftest import REPO, DaemonProcess
from tests.security.certs import Pki, make_pki

KAFKA_READY = re.compile(r"lkstream daemon ready: .* kafka=(\S+)")


@dataclass
class SecureDaemon:
    process: DaemonProcess
    users_file: Path
    acl_file: Path
    pki: Pki | None
    admin_token: str

    @property
    def address(self) -> str:
        return self.process.address

    @property
    def kafka_address(self) -> str:
        """``host:port`` of the Kafka listener, from the ready line."""
        for line in self.process.output:
            match = KAFKA_READY.search(line)
            if match:
                return match.group(1)
        raise AssertionError("no Kafka listener in the ready line")

    @property
    def http_url(self) -> str:
        scheme = "https" if self.pki is not None else "http"
        return f"{scheme}://{self.process.http_address}"

    def set_password(self, user: str, password: str) -> None:
        edit_file(
            str(self.users_file),
            UsersDocument.parse,
            UsersDocument.empty,
            UsersDocument.serialize,
            lambda doc: doc.set_password(user, password, iterations=4096),
        )

    def token(self, user: str) -> str:
        return edit_file(
            str(self.users_file),
            UsersDocument.parse,
            UsersDocument.empty,
            UsersDocument.serialize,
            lambda doc: doc.add_token(user),
        )

    def remove_token(self, user: str, token: str) -> None:
        """Revoke ``token`` (as ``lkstream users remove USER --token ID`` does)."""
        token_id = token.split("_")[1]
        edit_file(
            str(self.users_file),
            UsersDocument.parse,
            UsersDocument.empty,
            UsersDocument.serialize,
            lambda doc: doc.remove_token(user, token_id),
        )

    def set_acls(self, *entries: AclEntry) -> None:
        """Replace every ACL entry with ``entries``."""

        def replace(doc: AclDocument) -> None:
            doc.entries = set(entries)

        edit_file(str(self.acl_file), AclDocument.parse, AclDocument.empty, AclDocument.serialize, replace)

    def grant(self, *entries: AclEntry) -> None:
        edit_file(
            str(self.acl_file), AclDocument.parse, AclDocument.empty, AclDocument.serialize, lambda d: d.add(entries)
        )


SecureFactory = Callable[..., SecureDaemon]


@pytest.fixture
def secure_daemon(tmp_path: Path) -> Iterator[SecureFactory]:
    started: list[DaemonProcess] = []
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")

    def start(
        *,
        tls: bool = False,
        client_ca: bool = False,
        auth: bool = True,
        broker: dict[str, Any] | None = None,
        **server: Any,
    ) -> SecureDaemon:
        # The first daemon's data is tmp_path/data; later ones (a second daemon in one test) get their own.
        data = tmp_path / ("data" if not started else f"data-{len(started)}")
        users_file, acl_file = data / "security" / "users.json", data / "security" / "acls.json"
        pki = make_pki(tmp_path / f"pki-{len(started)}") if tls else None
        settings: dict[str, Any] = {
            "grpc_port": 0,
            "http_port": 0,
            "kafka_port": 0,  # never the default 9092: another run on this machine may hold it
            "auth": auth,
            "super_users": ["admin"],
            "security_reload_interval_ms": 0,
            **server,
        }
        if pki is not None:
            settings.update(tls_cert_file=str(pki.server_cert), tls_key_file=str(pki.server_key))
            if client_ca:
                settings["tls_client_ca_file"] = str(pki.ca)
        path = tmp_path / f"secure-{len(started)}.yml"
        path.write_text(yaml.safe_dump({"persist_dir": str(data), **(broker or {}), "server": settings}))
        daemon = SecureDaemon(DaemonProcess(path, data, env), users_file, acl_file, pki, "")
        daemon.admin_token = daemon.token("admin")
        started.append(daemon.process)
        daemon.process.start()
        return daemon

    yield start
    for process in started:
        if process.process is not None and process.process.poll() is None:
            process.terminate()
