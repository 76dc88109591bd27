"""Backup and restore of a daemon with authentication: users and ACLs kept, and a backup trusted for nothing.

Issue 28, finding 10: ``security/`` was neither backed up nor restored, so after a restore no
token worked. Finding 9: ``lkstream restore`` followed symbolic links (a root-only file outside
the backup ended up in the data directory), installed whatever security files the backup held
(a forged admin token then worked as super user on the restored daemon) and printed manifest
names raw (terminal escape sequences). The commands run as an operator runs them, against a
real daemon with ``auth: true``.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import crc32c
import pytest
import yaml

import lkstream
from lkstream import AuthenticationError, AuthorizationError
from lkstream.security.acl import AclEntry
from lkstream.security.credentials import UsersDocument
from lkstream.storage.backup import MANIFEST
from tests.integration.conftest import REPO, DaemonProcess
from tests.integration.test_backup import lkstream_cli
from tests.security.conftest import SecureDaemon, SecureFactory

pytestmark = pytest.mark.timeout(240)

SEGMENT = "topics/orders/part0/00000000000000000000.seg"


def _backed_up(daemon: SecureDaemon, tmp_path: Path) -> tuple[Path, str]:
    """A backup of ``daemon`` holding topic ``orders`` and user ``reader`` (read on it); the reader's token."""
    token = daemon.token("reader")
    daemon.grant(AclEntry.build("reader", "read", "topic", "orders"))
    with lkstream.connect(daemon.address, token=daemon.admin_token) as admin:
        admin.create_topic("orders", 1)
        admin.produce_many_sync("orders", [(None, f"v{i}".encode()) for i in range(5)])
    backup = tmp_path / "backup"
    done = lkstream_cli("backup", str(daemon.process.data_dir), str(backup))
    assert done.returncode == 0, done.stderr
    return backup, token


def _daemon_on(data_dir: Path, tmp_path: Path, name: str) -> DaemonProcess:
    """A daemon with ``auth: true`` and ``admin`` as super user on ``data_dir`` (its security files as found)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    config = tmp_path / f"{name}.yml"
    server = {"grpc_port": 0, "http_port": 0, "kafka_port": 0, "auth": True, "super_users": ["admin"]}
    config.write_text(yaml.safe_dump({"persist_dir": str(data_dir), "server": server}))
    return DaemonProcess(config, data_dir, env).start()


def test_users_and_acls_are_backed_up_and_restored_on_request(secure_daemon: SecureFactory, tmp_path: Path) -> None:
    daemon = secure_daemon()
    backup, token = _backed_up(daemon, tmp_path)
    for name in ("users.json", "acls.json"):
        assert stat.S_IMODE((backup / "security" / name).stat().st_mode) == 0o600
    daemon.process.terminate()

    plain = lkstream_cli("restore", str(backup), str(tmp_path / "plain"))
    assert plain.returncode == 0, plain.stderr
    token_id = token.split("_")[1]
    assert f"user reader: passwords none; tokens {token_id}" in plain.stderr  # shown before anything is copied
    assert "allow 'reader' to read topic 'orders'" in plain.stderr
    assert "not restored" in plain.stderr and "--with-security" in plain.stderr
    assert not (tmp_path / "plain" / "security").exists()

    full = lkstream_cli("restore", str(backup), str(tmp_path / "full"), "--with-security")
    assert full.returncode == 0, full.stderr
    restored = _daemon_on(tmp_path / "full", tmp_path, "full")
    try:
        with lkstream.connect(restored.address, token=token) as reader:
            assert reader.fetch("orders", 0, 0).high_watermark == 5
            with pytest.raises(AuthorizationError):
                reader.produce_many_sync("orders", [(None, b"x")])
    finally:
        restored.terminate()


def test_a_forged_admin_token_in_a_backup_does_not_work_after_a_restore(
    secure_daemon: SecureFactory, tmp_path: Path
) -> None:
    daemon = secure_daemon()
    backup, _ = _backed_up(daemon, tmp_path)
    daemon.process.terminate()
    forged = UsersDocument.empty()
    forged_token = forged.add_token("admin")
    data = forged.serialize()
    (backup / "security" / "users.json").write_bytes(data)
    manifest = json.loads((backup / MANIFEST).read_bytes())
    for entry in manifest.get("files", []):  # a careful forger updates the checksum too
        if entry["path"] == "security/users.json":
            entry["size"], entry["crc32c"] = len(data), crc32c.crc32c(data)
    (backup / MANIFEST).write_text(json.dumps(manifest))
    done = lkstream_cli("restore", str(backup), str(tmp_path / "restored"))
    assert done.returncode == 0, done.stderr
    assert "user admin: passwords none; tokens" in done.stderr  # the operator sees what it would grant
    restored = _daemon_on(tmp_path / "restored", tmp_path, "restored")
    try:
        with pytest.raises(AuthenticationError):
            lkstream.connect(restored.address, token=forged_token, retries=0)
    finally:
        restored.terminate()


def test_restore_never_copies_a_root_only_file_through_a_link(secure_daemon: SecureFactory, tmp_path: Path) -> None:
    daemon = secure_daemon()
    backup, _ = _backed_up(daemon, tmp_path)
    secret = tmp_path / "shadow"
    secret.write_bytes(b"root-only secret")
    secret.chmod(0o600)
    (backup / SEGMENT).unlink()
    (backup / SEGMENT).symlink_to(secret)
    done = lkstream_cli("restore", str(backup), str(tmp_path / "restored"))
    assert done.returncode == 1 and "symbolic link" in done.stderr, done.stderr
    restored = tmp_path / "restored"
    assert not restored.exists() or all(b"root-only" not in p.read_bytes() for p in restored.rglob("*") if p.is_file())


def test_restore_prints_the_backups_names_escaped(secure_daemon: SecureFactory, tmp_path: Path) -> None:
    daemon = secure_daemon()
    backup, _ = _backed_up(daemon, tmp_path)
    manifest = json.loads((backup / MANIFEST).read_bytes())
    manifest["notes"].append("topic \x1b]0;pwned\x07\x1b[2J was deleted")
    manifest["partitions"][0]["topic"] = "orders\x1b[31m"
    (backup / MANIFEST).write_text(json.dumps(manifest))
    done = lkstream_cli("restore", str(backup), str(tmp_path / "restored"))
    output = done.stdout + done.stderr
    assert "\x1b" not in output and "\x07" not in output, output
    assert "\\x1b" in output
