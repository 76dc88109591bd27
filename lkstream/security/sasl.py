"""Sans-io SASL servers: PLAIN (RFC 4616), SCRAM-SHA-256/512 (RFC 5802, RFC 7677) and
OAUTHBEARER (RFC 7628) over LKSTREAM's own bearer tokens.

No sockets here: a surface (the Kafka listener's SaslHandshake/SaslAuthenticate, or any
other) creates one server per connection with :meth:`SaslServerFactory.new` and feeds
it the client's bytes::

    server = factory.new("SCRAM-SHA-256")
    while not server.complete:
        reply = server.step(client_bytes)      # raises AuthenticationError on failure
        send(reply)
    principal = server.principal

Failures raise :class:`~lkstream.errors.AuthenticationError` with one message for a
wrong password, an unknown user and a bad proof alike. Each password exchange (PLAIN, SCRAM)
takes an attempt from the factory's :class:`~lkstream.security.failures.FailureBudget` against
the user name and the client's address as soon as the user is known, given back only if it
succeeds; an exchange whose user or address has none left is refused before any credential is
looked up (issue 28, finding 14). A refused OAUTHBEARER token counts against the address. For an unknown user SCRAM goes
through the whole exchange with a decoy salt (stable per name) and fails at the
proof, as RFC 5802 section 5.1 suggests, so the first message does not reveal which
names exist. PLAIN sends the password itself: offer it only over TLS. OAUTHBEARER sends a
token the way gRPC's ``authorization: Bearer`` metadata does, so it follows the clients'
rule for tokens: in plaintext only on loopback (the daemon decides what it offers).

The SCRAM state machine, nonce handling, username escaping and constant-time proof
check are ``scramp``'s; this module adds the credential lookup, the refusals
(channel binding, an authorization id other than the user, Kafka's ``tokenauth``
extension) and the principal.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable, Sequence
from typing import Final, Protocol

import scramp

from lkstream.errors import AuthenticationError, InvalidArgumentError
from lkstream.security.credentials import DEFAULT_ITERATIONS, SCRAM_MECHANISMS, ScramCredential, UserDirectory
from lkstream.security.failures import FailureBudget
from lkstream.security.principal import Principal

PLAIN: Final = "PLAIN"
OAUTHBEARER: Final = "OAUTHBEARER"
#: Every mechanism this module serves.
MECHANISMS: Final = (PLAIN, OAUTHBEARER, *SCRAM_MECHANISMS)
_FAILED: Final = "authentication failed: unknown user or wrong password"
_MAX_MESSAGE_BYTES: Final = 4096


class SaslServer(Protocol):
    """One SASL exchange, server side (the Kafka listener's pluggable interface)."""

    mechanism: str

    def step(self, client_bytes: bytes) -> bytes:
        """Consume the client's next message; return the server's answer. Raises AuthenticationError."""
        ...

    @property
    def complete(self) -> bool:
        """True once the client is authenticated (:attr:`principal` is set)."""
        ...

    @property
    def principal(self) -> Principal | None: ...

    def revoked(self) -> bool:
        """True once the credential this exchange authenticated may no longer be used (a token taken
        out of the users file): the connection it authenticated ends. Cheap: asked before each request."""
        ...


def _text(client_bytes: bytes) -> str:
    if len(client_bytes) > _MAX_MESSAGE_BYTES:
        raise AuthenticationError("authentication failed: SASL message too long")
    try:
        return client_bytes.decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationError("authentication failed: SASL message is not UTF-8") from None


class _Exchange:
    """What every SASL server here shares: the principal once authenticated, and the failure budget."""

    _principal: Principal | None = None
    _failures: FailureBudget | None = None
    _address: str | None = None

    _attempted = False  # an attempt was taken from the budget (for _attempt_user)
    _attempt_user: str | None = None

    def _guard(self, failures: FailureBudget | None, address: str | None) -> None:
        self._failures, self._address = failures, address or None

    def _attempt(self, user: str | None) -> None:
        """Take this exchange's attempt from the budget (given back if it succeeds); refused if spent."""
        if self._failures is not None:
            self._failures.attempt(user=user, address=self._address)
            self._attempted, self._attempt_user = True, user

    def _authenticated(self, principal: Principal) -> None:
        self._principal = principal
        if self._failures is not None and self._attempted:
            self._failures.succeeded(user=self._attempt_user, address=self._address)

    @property
    def complete(self) -> bool:
        return self._principal is not None

    @property
    def principal(self) -> Principal | None:
        return self._principal

    def revoked(self) -> bool:
        # A session authenticated by password lasts as long as its connection, as in Kafka
        # without re-authentication (KIP-368): the password itself cannot be asked again.
        return False


class PlainServer(_Exchange):
    """SASL PLAIN: one message ``authzid NUL authcid NUL password``, checked against the stored SCRAM keys."""

    mechanism = PLAIN

    def __init__(self, users: Callable[[], UserDirectory]) -> None:
        self._users = users
        self._done = False

    def step(self, client_bytes: bytes) -> bytes:
        if self._done:
            raise AuthenticationError("authentication failed: the PLAIN exchange is over")
        self._done = True
        parts = _text(client_bytes).split("\0")
        if len(parts) != 3 or not parts[1] or not parts[2]:
            raise AuthenticationError("authentication failed: malformed PLAIN message")
        authzid, user, password = parts
        if authzid and authzid != user:
            raise AuthenticationError("authentication failed: acting as another user is not supported")
        self._attempt(user)
        principal = self._users().verify_password(user, password)  # PBKDF2: callers run step() off their loop
        if principal is None:
            raise AuthenticationError(_FAILED)
        self._authenticated(principal)
        return b""


class OAuthBearerServer(_Exchange):
    """SASL OAUTHBEARER: one client message carrying ``auth=Bearer <token>``, an LKSTREAM token.

    The message is a GS2 header (``n,,`` or ``n,a=<authzid>,``) and then ``key=value``
    pairs, each ended by ``\x01``, and one more ``\x01`` (RFC 7628 section 3.1). Kafka
    clients may add their own pairs (SASL extensions); no extension changes who the client
    is, so they are ignored. A refused token ends the exchange at once with an error, not
    with RFC 7628's error challenge: Kafka's clients report a failed SaslAuthenticate either way.
    """

    mechanism = OAUTHBEARER

    def __init__(self, users: Callable[[], UserDirectory]) -> None:
        self._users = users
        self._done = False
        self._token = ""
        self._checked: UserDirectory | None = None  # the users file the token was last found in

    def revoked(self) -> bool:
        """The token was taken out of the users file (checked again only when the file changed)."""
        if self._principal is None:
            return False
        users = self._users()
        if users is not self._checked:
            if users.verify_token(self._token) != self._principal:
                return True
            self._checked = users
        return False

    def step(self, client_bytes: bytes) -> bytes:
        if self._done:
            raise AuthenticationError("authentication failed: the OAUTHBEARER exchange is over")
        self._done = True
        header, separator, pairs = _text(client_bytes).partition("\x01")
        gs2 = header.split(",")
        if not separator or len(gs2) != 3 or gs2[0] not in ("n", "y") or gs2[2]:
            raise AuthenticationError("authentication failed: malformed OAUTHBEARER message (expected n,,)")
        if not pairs.endswith("\x01\x01") and pairs != "\x01":
            raise AuthenticationError("authentication failed: malformed OAUTHBEARER message (unterminated)")
        auth = ""
        for pair in pairs[:-2].split("\x01"):
            key, _, value = pair.partition("=")
            if key == "auth":
                auth = value
        scheme, _, token = auth.partition(" ")
        token = token.lstrip(" ")
        if scheme.lower() != "bearer" or not token:
            raise AuthenticationError("authentication failed: OAUTHBEARER needs auth=Bearer <token>")
        users = self._users()
        principal = users.verify_token(token)
        if principal is None:  # counted against the address, never refused by it: tokens cannot be guessed
            if self._failures is not None:
                self._failures.failed(address=self._address)
            raise AuthenticationError("authentication failed: unknown or revoked token")
        authzid = gs2[1]
        if authzid and authzid != f"a={principal.name}":
            raise AuthenticationError("authentication failed: acting as another user is not supported")
        self._token, self._checked = token, users
        self._authenticated(principal)
        return b""


class ScramServer(_Exchange):
    """SASL SCRAM-SHA-256 or SCRAM-SHA-512: client-first -> server-first, client-final -> server-final."""

    def __init__(
        self, mechanism: str, users: Callable[[], UserDirectory], decoy_key: bytes, nonce: str | None = None
    ) -> None:
        if mechanism not in SCRAM_MECHANISMS:
            raise InvalidArgumentError(f"unknown SCRAM mechanism {mechanism!r}")
        self.mechanism = mechanism
        self._users = users
        self._decoy_key = decoy_key
        self._server = scramp.ScramMechanism(mechanism).make_server(self._lookup, s_nonce=nonce)
        self._user: str | None = None
        self._known = False
        self._stage = 0

    def _lookup(self, user: str) -> tuple[bytes, bytes, bytes, int]:
        self._user = user
        found = self._users().scram_credential(self.mechanism, user)
        self._known = found is not None
        credential = found or self._decoy(user)
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    def _decoy(self, user: str) -> ScramCredential:
        # A stable salt per unknown name (so asking twice looks like a real user) and keys nothing matches.
        salt = hmac.new(self._decoy_key, user.encode(), hashlib.sha256).digest()[:16]
        size = hashlib.new(self.mechanism.removeprefix("SCRAM-").replace("-", "").lower()).digest_size
        return ScramCredential(salt, secrets.token_bytes(size), secrets.token_bytes(size), DEFAULT_ITERATIONS)

    def step(self, client_bytes: bytes) -> bytes:
        message = _text(client_bytes)
        self._stage += 1
        try:
            if self._stage == 1:
                self._attempt(_check_client_first(message))  # before any credential is looked up
                self._server.set_client_first(message)
                return str(self._server.get_server_first()).encode()
            if self._stage == 2:
                self._server.set_client_final(message)
                if not self._known or self._user is None:
                    raise AuthenticationError(_FAILED)
                final = str(self._server.get_server_final()).encode()
                self._authenticated(Principal(self._user, self.mechanism))
                return final
        except scramp.ScramException:
            raise AuthenticationError(_FAILED) from None
        raise AuthenticationError(f"authentication failed: the {self.mechanism} exchange is over")


def _check_client_first(message: str) -> str:
    """The user name of a client-first message; refuse what this server does not offer: channel
    binding, another authzid, Kafka token auth."""
    parts = message.split(",", 3)
    if len(parts) < 4 or parts[0] not in ("n", "y"):
        raise AuthenticationError("authentication failed: channel binding is not supported (use n,,)")
    authzid, bare = parts[1], parts[2] + "," + parts[3]
    user = parts[2].removeprefix("n=")
    if authzid and authzid != f"a={user}":
        raise AuthenticationError("authentication failed: acting as another user is not supported")
    if "tokenauth=" in bare:
        raise AuthenticationError("authentication failed: delegation tokens are not supported")
    return user


class SaslServerFactory:
    """Makes one SASL server per connection for the ``mechanisms`` it offers."""

    def __init__(
        self,
        users: Callable[[], UserDirectory],
        mechanisms: Sequence[str] = MECHANISMS,
        failures: FailureBudget | None = None,
    ) -> None:
        unknown = set(mechanisms) - set(MECHANISMS)
        if unknown:
            raise InvalidArgumentError(f"unknown SASL mechanism(s) {sorted(unknown)}: use {', '.join(MECHANISMS)}")
        self.mechanisms = tuple(mechanisms)
        self._users = users
        self._decoy_key = secrets.token_bytes(32)
        #: Failed exchanges per user and per address (the daemon's one, shared with the bearer-token surfaces).
        self.failures = failures

    def new(self, mechanism: str, address: str | None = None) -> SaslServer:
        """A server for ``mechanism`` talking to a client at ``address``; :class:`AuthenticationError` if
        ``mechanism`` is not offered."""
        if mechanism not in self.mechanisms:
            raise AuthenticationError(
                f"SASL mechanism {mechanism!r} is not enabled: this server offers {', '.join(self.mechanisms)}"
            )
        server: PlainServer | OAuthBearerServer | ScramServer
        if mechanism == PLAIN:
            server = PlainServer(self._users)
        elif mechanism == OAUTHBEARER:
            server = OAuthBearerServer(self._users)
        else:
            server = ScramServer(mechanism, self._users, self._decoy_key)
        server._guard(self.failures, address)
        return server
