"""SASL servers: RFC 7677's SCRAM-SHA-256 exchange byte for byte, and real Kafka clients' SASL code.

aiokafka's own authenticators (``SaslPlainAuthenticator``, ``ScramAuthenticator``,
``OAuthAuthenticator``; the
code aiokafka runs against a Kafka broker) drive our sans-io servers message by
message, and scramp's client checks the server's final signature for SHA-512.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
import scramp
from aiokafka.conn import OAuthAuthenticator, SaslPlainAuthenticator, ScramAuthenticator

from lkstream.errors import AuthenticationError, InvalidArgumentError
from lkstream.security.credentials import DEFAULT_ITERATIONS, ScramCredential, UserDirectory, UsersDocument
from lkstream.security.sasl import MECHANISMS, SaslServer, SaslServerFactory, ScramServer

FAST = 4096

# RFC 7677 section 3: SCRAM-SHA-256, user "user", password "pencil".
RFC7677 = {
    "client_first": b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
    "server_nonce": "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    "server_first": b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
    "client_final": b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    "server_final": b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
}


def directory(iterations: int = FAST, **passwords: str) -> UserDirectory:
    doc = UsersDocument.empty()
    for name, password in passwords.items():
        doc.set_password(name, password, iterations=iterations)
    return UserDirectory(UsersDocument.parse(doc.serialize()))


def rfc_directory() -> UserDirectory:
    doc = UsersDocument.empty()
    doc.set_password("user", "pencil", iterations=4096)
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    doc.users["user"].scram["SCRAM-SHA-256"] = ScramCredential.derive("SCRAM-SHA-256", "pencil", 4096, salt)
    return UserDirectory(doc)


def test_scram_sha256_server_reproduces_rfc7677_exchange() -> None:
    users = rfc_directory()
    server = ScramServer("SCRAM-SHA-256", lambda: users, b"k" * 32, nonce=RFC7677["server_nonce"])
    assert server.step(RFC7677["client_first"]) == RFC7677["server_first"]
    assert not server.complete
    assert server.step(RFC7677["client_final"]) == RFC7677["server_final"]
    assert server.complete
    assert server.principal is not None and (server.principal.name, server.principal.mechanism) == (
        "user",
        "SCRAM-SHA-256",
    )


def test_rfc7677_exchange_with_a_wrong_proof_fails() -> None:
    users = rfc_directory()
    server = ScramServer("SCRAM-SHA-256", lambda: users, b"k" * 32, nonce=RFC7677["server_nonce"])
    server.step(RFC7677["client_first"])
    bad = RFC7677["client_final"].replace(b"p=dHzb", b"p=dHzc")
    with pytest.raises(AuthenticationError, match="unknown user or wrong password"):
        server.step(bad)
    assert not server.complete and server.principal is None


def test_a_final_message_that_does_not_echo_the_servers_nonce_exactly_fails() -> None:
    # RFC 5802 5.1: the nonce must be the one the server sent. librdkafka before 2.6.1 repeats the
    # client's part (confluentinc/librdkafka#4895); Kafka 4 refuses that, and so does this server.
    users = rfc_directory()
    server = ScramServer("SCRAM-SHA-256", lambda: users, b"k" * 32, nonce=RFC7677["server_nonce"])
    server.step(RFC7677["client_first"])
    client_nonce = b"rOprNGfwEbeRWgbNEkqO"
    repeated = RFC7677["client_final"].replace(b"r=" + client_nonce, b"r=" + client_nonce + client_nonce)
    with pytest.raises(AuthenticationError):
        server.step(repeated)
    assert not server.complete


def drive(client: Any, server: SaslServer) -> None:
    """Run an aiokafka authenticator against ``server`` exactly as aiokafka's connection does."""
    reply: bytes | None = None
    while True:
        step = client._step(reply)
        if step is None:
            return
        message, _expects_answer = step
        reply = server.step(message)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_aiokafka_scram_client_authenticates(mechanism: str) -> None:
    users = directory(alice="s3cret")
    server = SaslServerFactory(lambda: users).new(mechanism)
    client = ScramAuthenticator(
        loop=None, sasl_plain_username="alice", sasl_plain_password="s3cret", sasl_mechanism=mechanism
    )
    drive(client, server)  # aiokafka checks our server signature in its last step
    assert server.complete and server.principal is not None and server.principal.name == "alice"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_aiokafka_scram_client_with_wrong_password_is_refused(mechanism: str) -> None:
    users = directory(alice="s3cret")
    server = SaslServerFactory(lambda: users).new(mechanism)
    client = ScramAuthenticator(
        loop=None, sasl_plain_username="alice", sasl_plain_password="guess", sasl_mechanism=mechanism
    )
    with pytest.raises(AuthenticationError):
        drive(client, server)
    assert not server.complete


def test_aiokafka_scram_client_with_a_comma_in_the_user_name() -> None:
    doc = UsersDocument.empty()
    doc.set_password("a.b@c", "pw", iterations=FAST)
    users = UserDirectory(doc)
    server = SaslServerFactory(lambda: users).new("SCRAM-SHA-256")
    drive(
        ScramAuthenticator(
            loop=None, sasl_plain_username="a.b@c", sasl_plain_password="pw", sasl_mechanism="SCRAM-SHA-256"
        ),
        server,
    )
    assert server.principal is not None and server.principal.name == "a.b@c"


def test_unknown_user_gets_a_stable_decoy_salt_and_the_same_failure() -> None:
    users = directory(DEFAULT_ITERATIONS, alice="s3cret")
    factory = SaslServerFactory(lambda: users)

    def first(user: str) -> bytes:
        return factory.new("SCRAM-SHA-256").step(f"n,,n={user},r=abcdefgh".encode())

    salt_of = lambda reply: dict(part.split("=", 1) for part in reply.decode().split(","))  # noqa: E731
    ghost, again, real = salt_of(first("ghost")), salt_of(first("ghost")), salt_of(first("alice"))
    assert ghost["s"] == again["s"] and ghost["i"] == real["i"]
    client = ScramAuthenticator(
        loop=None, sasl_plain_username="ghost", sasl_plain_password="s3cret", sasl_mechanism="SCRAM-SHA-256"
    )
    with pytest.raises(AuthenticationError, match="unknown user or wrong password"):
        drive(client, factory.new("SCRAM-SHA-256"))


def test_scramp_client_checks_sha512_server_signature() -> None:
    users = directory(bob="pw512")
    server = SaslServerFactory(lambda: users).new("SCRAM-SHA-512")
    client = scramp.ScramClient(["SCRAM-SHA-512"], "bob", "pw512")
    server_first = server.step(client.get_client_first().encode())
    client.set_server_first(server_first.decode())
    server_final = server.step(client.get_client_final().encode())
    client.set_server_final(server_final.decode())  # raises if the signature is wrong
    assert server.complete


def test_aiokafka_plain_client_authenticates() -> None:
    users = directory(alice="s3cret")
    server = SaslServerFactory(lambda: users).new("PLAIN")
    drive(SaslPlainAuthenticator(loop=None, sasl_plain_username="alice", sasl_plain_password="s3cret"), server)
    assert server.principal is not None and (server.principal.name, server.principal.mechanism) == ("alice", "PLAIN")


@pytest.mark.parametrize(
    "message",
    [b"\0alice\0wrong", b"\0ghost\0s3cret", b"bob\0alice\0s3cret", b"alice\0s3cret", b"\0\0", b"\xff\0a\0b"],
)
def test_plain_refuses_bad_credentials_and_impersonation(message: bytes) -> None:
    users = directory(alice="s3cret")
    server = SaslServerFactory(lambda: users).new("PLAIN")
    with pytest.raises(AuthenticationError):
        server.step(message)
    assert not server.complete


def test_plain_exchange_cannot_be_replayed_on_the_same_server() -> None:
    users = directory(alice="s3cret")
    server = SaslServerFactory(lambda: users).new("PLAIN")
    server.step(b"\0alice\0s3cret")
    with pytest.raises(AuthenticationError, match="over"):
        server.step(b"\0alice\0s3cret")


@pytest.mark.parametrize(
    "client_first",
    [
        b"p=tls-unique,,n=alice,r=abc",  # channel binding
        b"n,a=bob,n=alice,r=abc",  # act as another user
        b"n,,n=alice,r=abc,tokenauth=true",  # Kafka delegation token
        b"garbage",
        b"x" * 5000,
    ],
)
def test_scram_refuses_what_it_does_not_offer(client_first: bytes) -> None:
    users = directory(alice="s3cret")
    with pytest.raises(AuthenticationError):
        SaslServerFactory(lambda: users).new("SCRAM-SHA-256").step(client_first)


def test_factory_offers_only_its_mechanisms() -> None:
    users = directory()
    factory = SaslServerFactory(lambda: users, ["SCRAM-SHA-512"])
    assert factory.mechanisms == ("SCRAM-SHA-512",)
    with pytest.raises(AuthenticationError, match="not enabled"):
        factory.new("PLAIN")
    with pytest.raises(InvalidArgumentError, match="unknown SASL"):
        SaslServerFactory(lambda: users, ["GSSAPI"])
    assert set(MECHANISMS) == {"PLAIN", "OAUTHBEARER", "SCRAM-SHA-256", "SCRAM-SHA-512"}


def test_a_new_password_takes_effect_for_the_next_exchange() -> None:
    current = {"users": directory(alice="old")}
    factory = SaslServerFactory(lambda: current["users"])
    current["users"] = directory(alice="new")
    with pytest.raises(AuthenticationError):
        factory.new("PLAIN").step(b"\0alice\0old")
    factory.new("PLAIN").step(b"\0alice\0new")


# -- OAUTHBEARER ------------------------------------------------------------------------------------


class _TokenProvider:
    def __init__(self, token: str, extensions: dict[str, str] | None = None) -> None:
        self._token = token
        self._extensions = extensions or {}

    async def token(self) -> str:
        return self._token

    def extensions(self) -> dict[str, str]:
        return self._extensions


def token_directory() -> tuple[UserDirectory, str]:
    doc = UsersDocument.empty()
    token = doc.add_token("alice")
    return UserDirectory(UsersDocument.parse(doc.serialize())), token


@pytest.mark.parametrize("extensions", [{}, {"traceId": "abc", "logicalCluster": "lkc-1"}])
async def test_oauthbearer_accepts_aiokafkas_message_with_a_token(extensions: dict[str, str]) -> None:
    users, token = token_directory()
    client = OAuthAuthenticator(sasl_oauth_token_provider=_TokenProvider(token, extensions))
    message, _ = await client.step(None)
    server = SaslServerFactory(lambda: users).new("OAUTHBEARER")
    assert server.step(message) == b""
    assert server.complete and server.principal is not None
    assert (server.principal.name, server.principal.mechanism) == ("alice", "token")
    with pytest.raises(AuthenticationError, match="exchange is over"):
        server.step(message)


def test_oauthbearer_takes_an_authorization_id_only_of_the_tokens_owner() -> None:
    users, token = token_directory()
    own = SaslServerFactory(lambda: users).new("OAUTHBEARER")
    own.step(f"n,a=alice,\x01auth=Bearer {token}\x01\x01".encode())
    assert own.principal is not None and own.principal.name == "alice"
    with pytest.raises(AuthenticationError, match="another user"):
        SaslServerFactory(lambda: users).new("OAUTHBEARER").step(f"n,a=bob,\x01auth=Bearer {token}\x01\x01".encode())


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ("n,,\x01auth=Bearer {token}x\x01\x01", "unknown or revoked"),  # a token that is not stored
        ("n,,\x01auth=Bearer lk_abc\x01\x01", "unknown or revoked"),  # malformed token
        ("n,,\x01auth=Basic {token}\x01\x01", "auth=Bearer"),
        ("n,,\x01auth=Bearer \x01\x01", "auth=Bearer"),
        ("n,,\x01\x01", "auth=Bearer"),  # no pairs at all
        ("n,,\x01traceId=1\x01\x01", "auth=Bearer"),
        ("n,,\x01auth=Bearer {token}\x01", "unterminated"),
        ("n,,auth=Bearer {token}\x01\x01", "malformed"),  # no separator after the GS2 header
        ("p=tls-unique,,\x01auth=Bearer {token}\x01\x01", "malformed"),  # channel binding
        ("\x01", "malformed"),  # RFC 7628's answer to an error challenge, sent first
        ("n,,\x01auth=Bearer " + "x" * 5000 + "\x01\x01", "too long"),
    ],
)
def test_oauthbearer_refuses_malformed_or_unknown_tokens(message: str, reason: str) -> None:
    users, token = token_directory()
    server = SaslServerFactory(lambda: users).new("OAUTHBEARER")
    with pytest.raises(AuthenticationError, match=reason):
        server.step(message.format(token=token).encode())
    assert not server.complete and server.principal is None


def test_a_revoked_token_is_refused_at_the_next_exchange() -> None:
    doc = UsersDocument.empty()
    token = doc.add_token("alice")
    current = {"users": UserDirectory(UsersDocument.parse(doc.serialize()))}
    factory = SaslServerFactory(lambda: current["users"])
    message = f"n,,\x01auth=Bearer {token}\x01\x01".encode()
    factory.new("OAUTHBEARER").step(message)
    current["users"] = directory()  # the token is gone from the users file
    with pytest.raises(AuthenticationError, match="unknown or revoked"):
        factory.new("OAUTHBEARER").step(message)


def test_an_oauthbearer_session_is_revoked_with_its_token_and_only_then() -> None:
    doc = UsersDocument.empty()
    token = doc.add_token("alice")
    other = doc.add_token("alice")
    current = {"users": UserDirectory(UsersDocument.parse(doc.serialize()))}
    server = SaslServerFactory(lambda: current["users"]).new("OAUTHBEARER")
    assert not server.revoked()  # nothing authenticated yet
    server.step(f"n,,\x01auth=Bearer {token}\x01\x01".encode())
    assert not server.revoked()
    doc.remove_token("alice", other.split("_")[1])  # another token of the same user goes
    current["users"] = UserDirectory(UsersDocument.parse(doc.serialize()))
    assert not server.revoked()
    doc.remove_token("alice", token.split("_")[1])
    current["users"] = UserDirectory(UsersDocument.parse(doc.serialize()))
    assert server.revoked()


def test_password_sessions_are_never_revoked_by_the_server() -> None:
    users = directory(alice="s3cret")
    server = SaslServerFactory(lambda: users).new("PLAIN")
    server.step(b"\0alice\0s3cret")
    assert not server.revoked()
