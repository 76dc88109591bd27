"""lkstream.storage.restore trusts nothing in a backup (issue 28, findings 9 and 10).

``lkstream restore`` copied the backup directory as it found it: it followed symbolic links
(a root-only 0600 file outside the backup was copied into the data directory), copied any
file there, printed the manifest's names raw and installed whatever ``security/`` files the
backup held. Each test here tampers with a real backup the way its writer could, and checks
that the restore refuses it (or leaves the file out) and writes nothing it should not.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import crc32c
import pytest

from lkstream import Broker
from lkstream.errors import CorruptRecordError, InvalidArgumentError
from lkstream.security.acl import AclDocument, AclEntry
from lkstream.security.credentials import UsersDocument
from lkstream.storage.backup import MANIFEST, backup_data_dir
from lkstream.storage.restore import SECURITY_FILES, escaped, layout_path, restore_backup
from lkstream.storage.verify import verify_data_dir

SEGMENT = "topics/orders/part0/00000000000000000000.seg"
SECRET = b"root-only secret\n"


@pytest.fixture
def backup(tmp_path: Path) -> Path:
    """A real backup of a data directory with one topic, committed offsets and security files."""
    data = tmp_path / "data"
    with Broker(persist_dir=str(data)) as broker:
        broker.create_topic("orders", 1)
        broker.produce_many_sync("orders", [(b"k", f"v{i}".encode()) for i in range(10)], partition=0)
        broker.init_producer_id()
    (data / "security").mkdir(mode=0o700)
    users = UsersDocument.empty()
    users.add_token("alice")
    (data / "security" / "users.json").write_bytes(users.serialize())
    acls = AclDocument.empty()
    acls.add([AclEntry.build("alice", "read", "topic", "orders")])
    (data / "security" / "acls.json").write_bytes(acls.serialize())
    out = tmp_path / "backup"
    backup_data_dir(str(data), str(out))
    return out


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "outside" / "shadow"
    path.parent.mkdir()
    path.write_bytes(SECRET)
    path.chmod(0o600)
    return path


def _manifest(backup: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((backup / MANIFEST).read_bytes())


def _rewrite_manifest(backup: Path, change) -> None:  # type: ignore[no-untyped-def]
    doc = _manifest(backup)
    change(doc)
    (backup / MANIFEST).write_text(json.dumps(doc))


def _reseal(backup: Path, relative: str) -> None:
    """Update the manifest's size and CRC of ``relative`` (a careful forger does)."""
    data = (backup / relative).read_bytes()

    def change(doc: dict) -> None:  # type: ignore[type-arg]
        for entry in doc["files"]:
            if entry["path"] == relative:
                entry["size"], entry["crc32c"] = len(data), crc32c.crc32c(data)

    _rewrite_manifest(backup, change)


def _holds_nothing_of(root: Path, secret: bytes) -> bool:
    return not root.exists() or all(secret not in p.read_bytes() for p in root.rglob("*") if p.is_file())


def test_a_backup_restores_every_named_file_and_verifies(backup: Path, tmp_path: Path) -> None:
    names = {entry["path"] for entry in _manifest(backup)["files"]}
    assert {SEGMENT, "producer_ids", *SECURITY_FILES} <= names
    for name in SECURITY_FILES:
        assert stat.S_IMODE((backup / name).stat().st_mode) == 0o600  # backed up with its permissions
    report = restore_backup(str(backup), str(tmp_path / "restored"))
    assert sorted(report.security_files) == sorted(SECURITY_FILES) and not report.security_restored
    assert verify_data_dir(str(tmp_path / "restored")).problems == []
    assert (tmp_path / "restored" / "producer_ids").read_bytes() == (backup / "producer_ids").read_bytes()
    with Broker(persist_dir=str(tmp_path / "restored")) as broker:
        assert broker.describe_topic("orders").partitions[0].next_offset == 10
        assert broker.init_producer_id()[0] >= 1  # never an id the restored log's producers had


def test_security_files_are_restored_only_when_asked_with_their_mode(backup: Path, tmp_path: Path) -> None:
    restore_backup(str(backup), str(tmp_path / "plain"))
    assert not (tmp_path / "plain" / "security").exists()
    report = restore_backup(str(backup), str(tmp_path / "full"), with_security=True)
    assert report.security_restored
    for name in SECURITY_FILES:
        restored = tmp_path / "full" / name
        assert restored.read_bytes() == (backup / name).read_bytes()
        assert stat.S_IMODE(restored.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "full" / "security").stat().st_mode) == 0o700


def test_a_segment_replaced_by_a_link_to_a_root_only_file_is_refused(
    backup: Path, secret: Path, tmp_path: Path
) -> None:
    (backup / SEGMENT).unlink()
    (backup / SEGMENT).symlink_to(secret)
    with pytest.raises(CorruptRecordError, match="symbolic link"):
        restore_backup(str(backup), str(tmp_path / "restored"))
    assert not (tmp_path / "restored").exists()
    assert _holds_nothing_of(tmp_path / "restored", SECRET)


def test_a_directory_replaced_by_a_link_is_refused(backup: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    (backup / "topics" / "orders").rename(elsewhere)
    (backup / "topics" / "orders").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(CorruptRecordError, match="link"):
        restore_backup(str(backup), str(tmp_path / "restored"))
    assert not (tmp_path / "restored").exists()


def test_a_fifo_in_place_of_a_segment_is_refused_without_blocking(backup: Path, tmp_path: Path) -> None:
    (backup / SEGMENT).unlink()
    os.mkfifo(backup / SEGMENT)
    with pytest.raises(CorruptRecordError, match="not a regular file"):
        restore_backup(str(backup), str(tmp_path / "restored"))


@pytest.mark.parametrize(
    "name",
    [
        "/etc/passwd",
        "../../outside/shadow",
        "topics/orders/part0/../../../outside/shadow",
        "topics/orders/part0/notes.txt",
        "topics/../security/users.json",
        "topics/or\x1b]0;x\x07ders/topic.json",
        "security/users.json/..",
        "",
    ],
)
def test_a_manifest_naming_a_file_outside_the_layout_is_refused_whole(backup: Path, tmp_path: Path, name: str) -> None:
    _rewrite_manifest(backup, lambda doc: doc["files"].append({"path": name, "size": 1, "crc32c": 0}))
    with pytest.raises(InvalidArgumentError, match="not a file of an lkstream data directory") as refused:
        restore_backup(str(backup), str(tmp_path / "restored"))
    assert "\x1b" not in str(refused.value)
    assert not (tmp_path / "restored").exists()


def test_a_changed_byte_fails_its_checksum_and_nothing_is_left(backup: Path, tmp_path: Path) -> None:
    data = bytearray((backup / SEGMENT).read_bytes())
    data[-1] ^= 1
    (backup / SEGMENT).write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError, match="CRC-32C"):
        restore_backup(str(backup), str(tmp_path / "restored"))
    assert not (tmp_path / "restored").exists()


def test_files_the_manifest_does_not_name_are_not_copied(backup: Path, tmp_path: Path) -> None:
    (backup / "topics" / "orders" / "part0" / "00000000000000000099.seg").write_bytes(b"planted")
    (backup / "LOCK").write_text("planted")
    restore_backup(str(backup), str(tmp_path / "restored"))
    assert not (tmp_path / "restored" / "topics" / "orders" / "part0" / "00000000000000000099.seg").exists()
    assert not (tmp_path / "restored" / "LOCK").exists()


def test_a_format_1_backup_is_restored_by_a_walk_under_the_same_rules(
    backup: Path, secret: Path, tmp_path: Path
) -> None:
    def downgrade(doc: dict) -> None:  # type: ignore[type-arg]
        doc["format"] = 1
        del doc["files"]

    _rewrite_manifest(backup, downgrade)
    report = restore_backup(str(backup), str(tmp_path / "restored"))
    assert any("format-1" in note for note in report.notes)
    assert verify_data_dir(str(tmp_path / "restored")).problems == []
    (backup / SEGMENT).unlink()
    (backup / SEGMENT).symlink_to(secret)
    with pytest.raises(CorruptRecordError, match="symbolic link"):
        restore_backup(str(backup), str(tmp_path / "again"))
    (backup / SEGMENT).unlink()
    (backup / "extra.txt").write_text("planted")
    with pytest.raises(InvalidArgumentError, match=r"extra\.txt"):
        restore_backup(str(backup), str(tmp_path / "third"))


def test_a_forged_users_file_needs_with_security_to_be_installed(backup: Path, tmp_path: Path) -> None:
    forged = UsersDocument.empty()
    forged.add_token("admin")
    (backup / "security" / "users.json").write_bytes(forged.serialize())
    _reseal(backup, "security/users.json")
    restore_backup(str(backup), str(tmp_path / "restored"))
    assert not (tmp_path / "restored" / "security" / "users.json").exists()


def test_escaped_writes_control_characters_as_escapes() -> None:
    assert escaped("plain name-1.x") == "plain name-1.x"
    assert escaped("a\x1b]0;pwned\x07b\nc") == "a\\x1b]0;pwned\\x07b\\nc"
    assert layout_path("topics/orders/part12/00000000000000000042.idx") == (
        "topics",
        "orders",
        "part12",
        "00000000000000000042.idx",
    )


def test_a_link_planted_at_the_staging_name_receives_nothing(backup: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / f"restored.restoring-{os.getpid()}").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(FileExistsError):
        restore_backup(str(backup), str(tmp_path / "restored"))
    assert list(elsewhere.iterdir()) == []
