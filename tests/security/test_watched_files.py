"""Security files: atomic private edits under a lock, reloads on change, the last good version kept."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from lkstream.errors import AuthenticationError, AuthorizationError, InvalidArgumentError
from lkstream.security.access import Access, bearer_token
from lkstream.security.acl import AclDocument, AclEntry, Operation, ResourceType
from lkstream.security.credentials import UsersDocument
from lkstream.security.principal import ANONYMOUS
from lkstream.security.watched import WatchedFile, edit_file


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def edit_acls(path: Path, *entries: AclEntry) -> None:
    edit_file(str(path), AclDocument.parse, AclDocument.empty, AclDocument.serialize, lambda d: d.add(entries))


def test_edit_creates_a_private_file_in_a_private_directory(tmp_path: Path) -> None:
    path = tmp_path / "security" / "users.json"
    edit_file(str(path), UsersDocument.parse, UsersDocument.empty, UsersDocument.serialize, lambda d: d.add_token("a"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_failed_change_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "acls.json"
    edit_acls(path, AclEntry.build("alice", "read", "topic", "t"))
    before = path.read_bytes()

    def fail(doc: AclDocument) -> None:
        doc.add([AclEntry.build("bob", "read", "topic", "t")])
        raise InvalidArgumentError("no")

    with pytest.raises(InvalidArgumentError):
        edit_file(str(path), AclDocument.parse, AclDocument.empty, AclDocument.serialize, fail)
    assert path.read_bytes() == before


def test_concurrent_edits_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "acls.json"
    threads = [
        threading.Thread(target=edit_acls, args=(path, AclEntry.build(f"user{i}", "read", "topic", "t")))
        for i in range(16)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(AclDocument.parse(path.read_bytes()).entries) == 16


def test_watched_file_reloads_after_the_interval(tmp_path: Path) -> None:
    path = tmp_path / "acls.json"
    clock = Clock()
    watched = WatchedFile(str(path), AclDocument.parse, AclDocument.empty, check_interval_s=1.0, clock=clock)
    assert watched.current().entries == set()
    edit_acls(path, AclEntry.build("alice", "read", "topic", "t"))
    assert watched.current().entries == set()  # not looked at again before the interval
    clock.now = 1.0
    assert len(watched.current().entries) == 1


def test_broken_file_keeps_the_last_good_version_and_a_fix_is_picked_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "acls.json"
    edit_acls(path, AclEntry.build("alice", "read", "topic", "t"))
    clock = Clock()
    watched = WatchedFile(str(path), AclDocument.parse, AclDocument.empty, check_interval_s=0.5, clock=clock)
    path.write_text("{ broken")
    clock.now = 1.0
    assert len(watched.current().entries) == 1
    assert "previous version stays in force" in caplog.text
    with pytest.raises(InvalidArgumentError, match="not a JSON ACL file"):  # editing refuses a broken file
        edit_acls(path, AclEntry.build("bob", "read", "topic", "t"))
    fixed = AclDocument({AclEntry.build("bob", "read", "topic", "t"), AclEntry.build("carol", "read", "topic", "t")})
    path.write_bytes(fixed.serialize())
    clock.now = 2.0
    assert watched.current().entries == fixed.entries


def test_broken_file_at_start_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "users.json"
    path.write_text("[]")
    with pytest.raises(InvalidArgumentError, match=str(path)):
        WatchedFile(str(path), UsersDocument.parse, UsersDocument.empty)


def test_deleted_file_means_nobody_is_allowed(tmp_path: Path) -> None:
    path = tmp_path / "acls.json"
    edit_acls(path, AclEntry.build("alice", "read", "topic", "t"))
    clock = Clock()
    watched = WatchedFile(str(path), AclDocument.parse, AclDocument.empty, check_interval_s=0.1, clock=clock)
    os.remove(path)
    clock.now = 1.0
    assert watched.current().entries == set()


def test_access_reads_grants_and_revocations_without_restart(tmp_path: Path) -> None:
    users_file, acl_file = tmp_path / "users.json", tmp_path / "acls.json"
    token = edit_file(
        str(users_file), UsersDocument.parse, UsersDocument.empty, UsersDocument.serialize, lambda d: d.add_token("svc")
    )
    access = Access.from_files(str(users_file), str(acl_file), check_interval_s=0.0)
    principal = access.authenticate_bearer(f"Bearer {token}")
    assert principal.name == "svc"
    with pytest.raises(AuthorizationError, match="'svc' is not allowed to write topic 'orders'"):
        access.require(principal, Operation.WRITE, ResourceType.TOPIC, "orders")
    edit_acls(acl_file, AclEntry.build("svc", "write", "topic", "orders"))
    access.require(principal, Operation.WRITE, ResourceType.TOPIC, "orders")
    token_id = token.split("_")[1]
    edit_file(
        str(users_file),
        UsersDocument.parse,
        UsersDocument.empty,
        UsersDocument.serialize,
        lambda d: d.remove_token("svc", token_id),
    )
    with pytest.raises(AuthenticationError, match="unknown or revoked"):
        access.authenticate_bearer(f"Bearer {token}")


@pytest.mark.parametrize("header", [None, "", "Basic dXNlcjpwdw==", "Bearer", "Bearer    "])
def test_access_requires_a_bearer_token(tmp_path: Path, header: str | None) -> None:
    access = Access.from_files(str(tmp_path / "u.json"), str(tmp_path / "a.json"))
    assert bearer_token(header) is None
    with pytest.raises(AuthenticationError, match="authentication required"):
        access.authenticate_bearer(header)


def test_disabled_access_lets_anyone_do_anything() -> None:
    access = Access.disabled()
    assert access.authenticate_bearer(None) is ANONYMOUS
    access.require(ANONYMOUS, Operation.DELETE, ResourceType.TOPIC, "x")
    assert access.is_super_user(ANONYMOUS)


def test_bearer_scheme_is_case_insensitive() -> None:
    assert bearer_token("bearer abc") == "abc"
    assert bearer_token("BEARER  abc ") == "abc"
