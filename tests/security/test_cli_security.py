"""``lkstream users`` and ``lkstream acls`` as an operator uses them, and ``--token``/``--tls-ca`` on a real daemon."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from lkstream.cli import cli
from lkstream.security.acl import AclDocument
from lkstream.security.credentials import UserDirectory, UsersDocument
from tests.integration.conftest import REPO
from tests.security.conftest import SecureFactory


def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), input=stdin, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_users_add_prints_the_token_alone_on_stdout_and_stores_only_its_hash(tmp_path: Path) -> None:
    code, out, err = run("users", "add", "svc", "--token", "--data-dir", str(tmp_path))
    assert code == 0, err
    token = out.strip()
    assert token.startswith("lkst_") and "\n" not in token and "not shown again" in err
    stored = (tmp_path / "security" / "users.json").read_text()
    assert token not in stored
    users = UserDirectory(UsersDocument.parse(stored.encode()))
    principal = users.verify_token(token)
    assert principal is not None and principal.name == "svc"


def test_users_add_password_from_stdin_and_replace_it(tmp_path: Path) -> None:
    path = tmp_path / "u.json"
    code, out, err = run(
        "users", "add", "alice", "--password-stdin", "--iterations", "4096", "--file", str(path), stdin="first\n"
    )
    assert (code, out) == (0, "") and "password set" in err and "4096 iterations" in err
    code, _, err = run("users", "add", "alice", "--password-stdin", "--file", str(path), stdin="second\n")
    assert code == 0 and "password replaced" in err
    users = UserDirectory(UsersDocument.parse(path.read_bytes()))
    assert users.verify_password("alice", "second") is not None
    assert users.verify_password("alice", "first") is None
    assert "second" not in path.read_text()


def test_users_list_and_remove(tmp_path: Path) -> None:
    path = str(tmp_path / "u.json")
    _, token, _ = run("users", "add", "svc", "--token", "--file", path)
    run("users", "add", "svc", "--token", "--file", path)
    run("users", "add", "bob", "--password-stdin", "--file", path, stdin="pw\n")
    code, out, _ = run("users", "list", "--file", path)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["USER", "MECHANISMS", "ITERATIONS", "TOKENS"]
    assert lines[1].split()[:3] == ["bob", "SCRAM-SHA-256,SCRAM-SHA-512", "8192"]
    token_id = token.strip().split("_")[1]
    assert token_id in lines[2]
    assert run("users", "remove", "svc", "--token", token_id, "--file", path)[0] == 0
    assert token_id not in run("users", "list", "--file", path)[1]
    assert run("users", "remove", "bob", "--file", path)[0] == 0
    code, _, err = run("users", "remove", "bob", "--file", path)
    assert code == 2 and "no user 'bob'" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["users", "add", "bad name", "--token"], "invalid user name"),
        (["users", "add", "alice"], "nothing to add"),  # no terminal, no --password-stdin, no --token
        (["users", "add", "alice", "--token", "--iterations", "10"], "10 is not in the range"),
    ],
)
def test_users_add_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    code, _, err = run(*args, "--data-dir", str(tmp_path))
    assert code == 2 and message in err


def test_acls_add_list_remove(tmp_path: Path) -> None:
    path = str(tmp_path / "a.json")
    code, _, err = run(
        "acls",
        "add",
        "--principal",
        "alice",
        "--topic",
        "orders.",
        "--prefix",
        "--operation",
        "read",
        "--operation",
        "write",
        "--file",
        path,
    )
    assert code == 0 and "2 entries added" in err
    assert run("acls", "add", "--principal", "*", "--cluster", "--operation", "describe", "--file", path)[0] == 0
    assert (
        run("acls", "add", "--principal", "bob", "--group", "g", "--operation", "read", "--deny", "--file", path)[0]
        == 0
    )
    code, out, _ = run("acls", "list", "--principal", "alice", "--file", path)
    rows = [line.split() for line in out.splitlines()[1:]]
    assert rows == [
        ["*", "allow", "describe", "cluster", "literal", "cluster"],
        ["alice", "allow", "read", "topic", "prefix", "orders."],
        ["alice", "allow", "write", "topic", "prefix", "orders."],
    ]
    assert (
        run(
            "acls",
            "remove",
            "--principal",
            "alice",
            "--topic",
            "orders.",
            "--prefix",
            "--operation",
            "read",
            "--file",
            path,
        )[0]
        == 0
    )
    assert len(AclDocument.parse(Path(path).read_bytes()).entries) == 3
    code, _, err = run(
        "acls", "remove", "--principal", "alice", "--topic", "orders.", "--operation", "read", "--file", path
    )
    assert code == 2 and "no such entry" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--principal", "a", "--topic", "t", "--group", "g", "--operation", "read"], "exactly one resource"),
        (["--principal", "a", "--operation", "read"], "exactly one resource"),
        (["--principal", "a", "--group", "g", "--operation", "write"], "does not apply to a group"),
        (["--principal", "a", "--cluster", "--prefix", "--operation", "admin"], "takes no prefix"),
        (["--principal", "a", "--topic", "t", "--operation", "fly"], "'fly' is not one of"),
    ],
)
def test_acls_add_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    code, _, err = run("acls", "add", *args, "--data-dir", str(tmp_path))
    assert code == 2 and message in err
    assert not (tmp_path / "security" / "acls.json").exists()


def test_files_come_from_the_daemon_config(tmp_path: Path) -> None:
    config = tmp_path / "lk.yml"
    config.write_text(f"persist_dir: {tmp_path / 'data'}\nserver:\n  acl_file: {tmp_path / 'custom.json'}\n")
    assert (
        run("acls", "add", "--principal", "a", "--topic", "t", "--operation", "read", "--config", str(config))[0] == 0
    )
    assert json.loads((tmp_path / "custom.json").read_text())["acls"][0]["principal"] == "a"
    assert run("users", "add", "a", "--token", "--config", str(config))[0] == 0
    assert (tmp_path / "data" / "security" / "users.json").exists()


def lkstream(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "lkstream.cli", *args], capture_output=True, text=True, timeout=60, env=full, check=False
    )


def test_cli_commands_pass_token_and_tls_ca_to_a_running_daemon(secure_daemon: SecureFactory) -> None:
    daemon = secure_daemon(tls=True)
    assert daemon.pki is not None
    data = str(daemon.process.data_dir)
    ca = str(daemon.pki.ca)
    made = lkstream("users", "add", "ops", "--token", "--data-dir", data)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    denied = lkstream("topics", "create", "audit", "--bootstrap", daemon.address, "--token", token, "--tls-ca", ca)
    assert denied.returncode == 1 and "PERMISSION_DENIED" in denied.stderr and "create topic 'audit'" in denied.stderr
    # Granted offline while the daemon runs: the next call sees it (no restart).
    granted = lkstream(
        "acls", "add", "--principal", "ops", "--topic", "audit", "--operation", "all", "--data-dir", data
    )
    assert granted.returncode == 0, granted.stderr
    env = {"LKSTREAM_TOKEN": token, "LKSTREAM_TLS_CA": ca}
    created = lkstream("topics", "create", "audit", "--bootstrap", daemon.address, env=env)
    assert created.returncode == 0, created.stderr
    listed = lkstream("topics", "list", "--bootstrap", daemon.address, env=env)
    assert listed.returncode == 0 and listed.stdout.split() == ["audit"], listed.stderr
    anonymous = lkstream("topics", "list", "--bootstrap", daemon.address, "--tls-ca", ca)
    assert anonymous.returncode == 1 and "UNAUTHENTICATED" in anonymous.stderr
