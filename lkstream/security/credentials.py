"""Users and their credentials: SCRAM stored keys and hashed bearer tokens, never a password or a token.

The users file (default ``{persist_dir}/security/users.json``, mode 0600, edited by
``lkstream users``)::

    {"version": 1,
     "users": {
       "alice": {
         "scram": {"SCRAM-SHA-256": {"salt": "<base64>", "stored_key": "<base64>",
                                     "server_key": "<base64>", "iterations": 8192},
                   "SCRAM-SHA-512": {...}},
         "tokens": [{"id": "3f9a1c2e", "sha256": "<hex>", "created": "2026-11-30T10:00:00Z"}]}}}

* **Passwords** become, per mechanism, RFC 5802 ``StoredKey = H(HMAC(SaltedPassword,
  "Client Key"))`` and ``ServerKey = HMAC(SaltedPassword, "Server Key")`` with
  ``SaltedPassword = PBKDF2-HMAC(password, salt, iterations)`` (16 random salt bytes,
  :data:`DEFAULT_ITERATIONS` unless told). Derivation is ``scramp``'s (which SASLprep-s
  the password, as RFC 5802 asks). SCRAM verifies a client proof against them; PLAIN
  re-derives the stored key from the password it receives and compares.
* **Tokens** look like ``lkst_<id>_<secret>``: 8 hex digits naming the token (to list
  and revoke it) and 256 random bits. The file keeps the SHA-256 of the whole token:
  a fast hash suffices because the secret is random, not chosen by a person. A token is
  shown once, when it is made.

Every comparison of secrets is constant-time (``hmac.compare_digest``).
"""

from __future__ import annotations

import base64
import binascii
import datetime
import hashlib
import hmac
import json
import re
import secrets
from dataclasses import dataclass, field
from typing import Any, Final

import scramp

from lkstream.errors import InvalidArgumentError
from lkstream.security.principal import Principal, validate_user_name
from lkstream.security.watched import parse_document

USERS_FILE_VERSION: Final = 1
SCRAM_MECHANISMS: Final = ("SCRAM-SHA-256", "SCRAM-SHA-512")
#: PBKDF2 iterations of new passwords (RFC 7677 asks at least 4096; Kafka allows 4096-16384).
DEFAULT_ITERATIONS: Final = 8192
MIN_ITERATIONS: Final = 4096
MAX_ITERATIONS: Final = 1_000_000
TOKEN_PREFIX: Final = "lkst_"
_TOKEN: Final = re.compile(r"lkst_([0-9a-f]{8})_[A-Za-z0-9_-]{43}")
TOKEN_MECHANISM: Final = "token"


@dataclass(frozen=True)
class ScramCredential:
    """What a server keeps of one password for one SCRAM mechanism (RFC 5802 section 3)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def derive(cls, mechanism: str, password: str, iterations: int, salt: bytes | None = None) -> ScramCredential:
        """Salt and hash ``password`` for ``mechanism`` (a fresh random salt unless given)."""
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise InvalidArgumentError(f"iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}, got {iterations}")
        try:
            salt_, stored, server, count = scramp.ScramMechanism(mechanism).make_auth_info(
                password, iteration_count=iterations, salt=salt or secrets.token_bytes(16)
            )
        except scramp.ScramException as exc:
            raise InvalidArgumentError(f"cannot use this password: {exc}") from None
        return cls(bytes(salt_), stored, server, int(count))

    def verifies(self, mechanism: str, password: str) -> bool:
        """Whether ``password`` derives this credential's stored key (PLAIN's check)."""
        try:
            again = ScramCredential.derive(mechanism, password, self.iterations, self.salt)
        except InvalidArgumentError:
            return False
        return hmac.compare_digest(again.stored_key, self.stored_key)

    def to_json(self) -> dict[str, Any]:
        return {
            "salt": base64.b64encode(self.salt).decode(),
            "stored_key": base64.b64encode(self.stored_key).decode(),
            "server_key": base64.b64encode(self.server_key).decode(),
            "iterations": self.iterations,
        }

    @classmethod
    def from_json(cls, raw: object) -> ScramCredential:
        if not isinstance(raw, dict):
            raise InvalidArgumentError("a SCRAM credential is an object with salt, stored_key, server_key, iterations")
        iterations = raw.get("iterations")
        if type(iterations) is not int or not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise InvalidArgumentError(f"a SCRAM credential's iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}")
        try:
            parts = [base64.b64decode(str(raw[key]), validate=True) for key in ("salt", "stored_key", "server_key")]
        except (KeyError, binascii.Error):
            raise InvalidArgumentError("a SCRAM credential needs base64 salt, stored_key and server_key") from None
        if not all(parts):
            raise InvalidArgumentError("a SCRAM credential's salt, stored_key and server_key may not be empty")
        return cls(parts[0], parts[1], parts[2], iterations)


@dataclass(frozen=True)
class TokenRecord:
    """A bearer token as stored: its id, the SHA-256 of the whole token, and when it was made."""

    id: str
    sha256: str
    created: str

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "sha256": self.sha256, "created": self.created}

    @classmethod
    def from_json(cls, raw: object) -> TokenRecord:
        if not isinstance(raw, dict) or not all(isinstance(raw.get(k), str) for k in ("id", "sha256", "created")):
            raise InvalidArgumentError("a token record needs id, sha256 and created")
        return cls(raw["id"], raw["sha256"], raw["created"])


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass
class User:
    """One user's credentials."""

    scram: dict[str, ScramCredential] = field(default_factory=dict)
    tokens: list[TokenRecord] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "scram": {mechanism: cred.to_json() for mechanism, cred in sorted(self.scram.items())},
            "tokens": [token.to_json() for token in self.tokens],
        }

    @classmethod
    def from_json(cls, raw: object) -> User:
        if not isinstance(raw, dict):
            raise InvalidArgumentError("a user is an object with scram and tokens")
        scram = raw.get("scram", {})
        tokens = raw.get("tokens", [])
        if not isinstance(scram, dict) or not isinstance(tokens, list):
            raise InvalidArgumentError("scram must be an object and tokens a list")
        unknown = set(scram) - set(SCRAM_MECHANISMS)
        if unknown:
            raise InvalidArgumentError(f"unknown SCRAM mechanism(s) {sorted(unknown)}")
        return cls(
            {mechanism: ScramCredential.from_json(cred) for mechanism, cred in scram.items()},
            [TokenRecord.from_json(token) for token in tokens],
        )


@dataclass
class UsersDocument:
    """The users file's content, with the edits ``lkstream users`` makes."""

    users: dict[str, User]

    @classmethod
    def empty(cls) -> UsersDocument:
        return cls({})

    @classmethod
    def parse(cls, data: bytes) -> UsersDocument:
        users = {}
        for name, record in parse_document(data, USERS_FILE_VERSION, "users", dict, "users").items():
            try:
                users[validate_user_name(name)] = User.from_json(record)
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"user {name!r}: {exc}") from None
        return cls(users)

    def serialize(self) -> bytes:
        document = {
            "version": USERS_FILE_VERSION,
            "users": {name: user.to_json() for name, user in sorted(self.users.items())},
        }
        return (json.dumps(document, indent=2) + "\n").encode()

    def set_password(self, name: str, password: str, iterations: int = DEFAULT_ITERATIONS) -> bool:
        """Store SCRAM-SHA-256 and SCRAM-SHA-512 credentials of ``password``; True if one was replaced."""
        if not password:
            raise InvalidArgumentError("the password is empty")
        user = self.users.setdefault(validate_user_name(name), User())
        replaced = bool(user.scram)
        user.scram = {m: ScramCredential.derive(m, password, iterations) for m in SCRAM_MECHANISMS}
        return replaced

    def add_token(self, name: str, now: datetime.datetime | None = None) -> str:
        """Make a new bearer token for ``name`` (creating the user); return it (the only time it is seen)."""
        user = self.users.setdefault(validate_user_name(name), User())
        taken = {token.id for u in self.users.values() for token in u.tokens}
        token_id = secrets.token_hex(4)
        while token_id in taken:
            token_id = secrets.token_hex(4)
        token = f"{TOKEN_PREFIX}{token_id}_{secrets.token_urlsafe(32)}"
        created = (now or datetime.datetime.now(datetime.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
        user.tokens.append(TokenRecord(token_id, _token_hash(token), created))
        return token

    def remove_user(self, name: str) -> None:
        if self.users.pop(name, None) is None:
            raise InvalidArgumentError(f"no user {name!r}")

    def remove_token(self, name: str, token_id: str) -> None:
        user = self.users.get(name)
        kept = [t for t in user.tokens if t.id != token_id] if user is not None else []
        if user is None or len(kept) == len(user.tokens):
            raise InvalidArgumentError(f"user {name!r} has no token {token_id!r}")
        user.tokens = kept


class UserDirectory:
    """Lookups over one version of the users file (what authentication asks)."""

    def __init__(self, document: UsersDocument) -> None:
        self.document = document
        self._tokens = {token.id: (name, token) for name, user in document.users.items() for token in user.tokens}

    @classmethod
    def parse(cls, data: bytes) -> UserDirectory:
        return cls(UsersDocument.parse(data))

    @classmethod
    def empty(cls) -> UserDirectory:
        return cls(UsersDocument.empty())

    def scram_credential(self, mechanism: str, name: str) -> ScramCredential | None:
        user = self.document.users.get(name)
        return None if user is None else user.scram.get(mechanism)

    def verify_token(self, token: str) -> Principal | None:
        """The principal ``token`` belongs to, or None when it is malformed, unknown or revoked."""
        match = _TOKEN.fullmatch(token)
        found = self._tokens.get(match.group(1)) if match else None
        if found is None:
            return None
        name, record = found
        if not hmac.compare_digest(_token_hash(token), record.sha256):
            return None
        return Principal(name, TOKEN_MECHANISM)

    def verify_password(self, name: str, password: str) -> Principal | None:
        """PLAIN: the principal when ``password`` matches ``name``'s stored SCRAM-SHA-256 key, else None.

        An unknown user costs the same key derivation as a known one, so timing does
        not tell which user names exist.
        """
        mechanism = SCRAM_MECHANISMS[0]
        stored = self.scram_credential(mechanism, name)
        if stored is None:
            _DECOY.verifies(mechanism, password)
            return None
        return Principal(name, "PLAIN") if stored.verifies(mechanism, password) else None


#: Compared against when the user is unknown, so failures cost the same time.
_DECOY: Final = ScramCredential(b"\0" * 16, b"\0" * 32, b"\0" * 32, DEFAULT_ITERATIONS)
