"""The users file: SCRAM stored keys (never the password), hashed tokens shown once, PLAIN checks."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import pytest

from lkstream.errors import InvalidArgumentError
from lkstream.security.credentials import (
    DEFAULT_ITERATIONS,
    ScramCredential,
    UserDirectory,
    UsersDocument,
)

FAST = 4096  # the smallest count allowed: keeps the tests quick


def rfc_stored_key(hash_name: str, password: bytes, salt: bytes, iterations: int) -> tuple[bytes, bytes]:
    """RFC 5802 section 3, computed independently of scramp."""
    salted = hashlib.pbkdf2_hmac(hash_name, password, salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hash_name).digest()
    server_key = hmac.new(salted, b"Server Key", hash_name).digest()
    return hashlib.new(hash_name, client_key).digest(), server_key


@pytest.mark.parametrize(("mechanism", "hash_name"), [("SCRAM-SHA-256", "sha256"), ("SCRAM-SHA-512", "sha512")])
def test_derived_credential_matches_rfc5802_formulas(mechanism: str, hash_name: str) -> None:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")  # RFC 7677's example salt
    credential = ScramCredential.derive(mechanism, "pencil", 4096, salt)
    stored, server = rfc_stored_key(hash_name, b"pencil", salt, 4096)
    assert (credential.stored_key, credential.server_key, credential.salt) == (stored, server, salt)


def test_users_file_holds_no_password_and_states_iterations() -> None:
    doc = UsersDocument.empty()
    doc.set_password("alice", "correct horse battery", iterations=FAST)
    text = doc.serialize().decode()
    assert "correct horse" not in text
    raw = json.loads(text)["users"]["alice"]["scram"]
    assert set(raw) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert {cred["iterations"] for cred in raw.values()} == {FAST}
    assert raw["SCRAM-SHA-256"]["salt"] != raw["SCRAM-SHA-512"]["salt"]  # a fresh salt each


def test_same_password_gets_different_salts_for_different_users() -> None:
    doc = UsersDocument.empty()
    doc.set_password("alice", "same", iterations=FAST)
    doc.set_password("bob", "same", iterations=FAST)
    a = doc.users["alice"].scram["SCRAM-SHA-256"]
    b = doc.users["bob"].scram["SCRAM-SHA-256"]
    assert a.salt != b.salt and a.stored_key != b.stored_key


def test_default_iterations_are_above_the_rfc_minimum() -> None:
    assert DEFAULT_ITERATIONS >= 4096


@pytest.mark.parametrize("iterations", [1, 4095, 10**7])
def test_iteration_count_outside_bounds_is_rejected(iterations: int) -> None:
    with pytest.raises(InvalidArgumentError, match="iterations"):
        UsersDocument.empty().set_password("alice", "pw", iterations=iterations)


def test_empty_password_is_rejected() -> None:
    with pytest.raises(InvalidArgumentError, match="empty"):
        UsersDocument.empty().set_password("alice", "")


def test_plain_verification_against_stored_keys() -> None:
    doc = UsersDocument.empty()
    doc.set_password("alice", "s3cret", iterations=FAST)
    users = UserDirectory(UsersDocument.parse(doc.serialize()))
    principal = users.verify_password("alice", "s3cret")
    assert principal is not None and principal.name == "alice" and principal.mechanism == "PLAIN"
    assert users.verify_password("alice", "wrong") is None
    assert users.verify_password("mallory", "s3cret") is None


def test_token_is_shown_once_and_stored_hashed() -> None:
    doc = UsersDocument.empty()
    token = doc.add_token("svc")
    assert token.startswith("lkst_")
    assert token not in doc.serialize().decode()
    users = UserDirectory(UsersDocument.parse(doc.serialize()))
    principal = users.verify_token(token)
    assert principal is not None and (principal.name, principal.mechanism) == ("svc", "token")


@pytest.mark.parametrize(
    "mangle", [lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"), lambda t: t + "x", lambda t: "", lambda t: "lkst_"]
)
def test_altered_or_malformed_token_is_refused(mangle: object) -> None:
    doc = UsersDocument.empty()
    token = doc.add_token("svc")
    users = UserDirectory(doc)
    assert users.verify_token(mangle(token)) is None  # type: ignore[operator]


def test_revoked_token_stops_working_and_others_stay() -> None:
    doc = UsersDocument.empty()
    old = doc.add_token("svc")
    new = doc.add_token("svc")
    doc.remove_token("svc", old.split("_")[1])
    users = UserDirectory(doc)
    assert users.verify_token(old) is None
    assert users.verify_token(new) is not None


def test_removing_unknown_user_or_token_is_an_error() -> None:
    doc = UsersDocument.empty()
    with pytest.raises(InvalidArgumentError, match="no user"):
        doc.remove_user("ghost")
    doc.add_token("svc")
    with pytest.raises(InvalidArgumentError, match="no token"):
        doc.remove_token("svc", "00000000")


@pytest.mark.parametrize(
    "data",
    [
        b"{}",
        b'{"version": 1, "users": {"bad name": {}}}',
        b'{"version": 1, "users": {"a": {"scram": {"SCRAM-MD5": {}}}}}',
        b'{"version": 1, "users": {"a": {"scram": {"SCRAM-SHA-256": {"salt": "!!", "stored_key": "", '
        b'"server_key": "", "iterations": 4096}}}}}',
        b'{"version": 1, "users": {"a": {"tokens": [{"id": 1}]}}}',
        b'{"version": 1, "users": {"a": {"scram": {"SCRAM-SHA-256": {"salt": "AA==", "stored_key": "AA==", '
        b'"server_key": "AA==", "iterations": true}}}}}',
        b'{"version": 1, "users": {"a": {"scram": {"SCRAM-SHA-256": {"salt": "", "stored_key": "AA==", '
        b'"server_key": "AA==", "iterations": 4096}}}}}',
    ],
)
def test_bad_users_file_is_rejected(data: bytes) -> None:
    with pytest.raises(InvalidArgumentError):
        UsersDocument.parse(data)
