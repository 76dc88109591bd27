"""Password and token guessing is held to a budget per user and per address (issue 28, finding 14).

Before: Kafka's SASL refusals were paced per connection only (100 ms, one attempt per connection),
so 32 parallel connections made about 300 guesses a second, and PLAIN's PBKDF2 ran on the event loop.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
import scramp

from lkstream.errors import AuthenticationError
from lkstream.security.credentials import UserDirectory, UsersDocument
from lkstream.security.failures import MAX_KEYS, FailureBudget, Rate, TooManyFailures
from lkstream.security.sasl import SaslServerFactory
from tests.integration.raw_sockets import kafka_api_versions, read_kafka_response
from tests.security.conftest import SecureFactory
from tests.security.kafka_raw import RawKafka

PASSWORD = "correct horse battery staple"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_key_may_fail_its_burst_then_one_more_per_interval() -> None:
    clock = Clock()
    budget = FailureBudget(Rate(burst=3, per_second=0.5), Rate(burst=100, per_second=1), clock=clock)
    for _ in range(3):
        budget.check(user="alice")
        budget.failed(user="alice")
    with pytest.raises(TooManyFailures, match=r"too many failed attempts for this user; retry in 2 s"):
        budget.check(user="alice")
    budget.check(user="bob")  # another user is not affected
    clock.now += 2.0  # one failure's worth came back
    budget.check(user="alice")
    budget.failed(user="alice")
    with pytest.raises(TooManyFailures):
        budget.check(user="alice")
    clock.now += 10.0
    budget.check(user="alice")
    assert budget.refused == 2


def test_a_success_costs_nothing_and_refilled_keys_are_forgotten() -> None:
    clock = Clock()
    budget = FailureBudget(Rate(burst=2, per_second=1), Rate(burst=2, per_second=1), clock=clock)
    budget.failed(user="alice", address="10.0.0.1")
    assert budget.tracked() == 2
    clock.now += 5
    budget.check(user="alice", address="10.0.0.1")
    assert budget.tracked() == 0


def test_the_table_of_keys_is_bounded() -> None:
    budget = FailureBudget()
    for n in range(MAX_KEYS + 500):
        budget.failed(user=f"user-{n}")
    assert budget.tracked() == MAX_KEYS


def _directory() -> UserDirectory:
    doc = UsersDocument.empty()
    doc.set_password("alice", PASSWORD, iterations=4096)
    doc.set_password("bob", PASSWORD, iterations=4096)
    return UserDirectory(UsersDocument.parse(doc.serialize()))


def _plain(factory: SaslServerFactory, user: str, password: str, address: str) -> None:
    factory.new("PLAIN", address).step(f"\0{user}\0{password}".encode())


def test_sasl_failures_count_per_user_and_per_address_across_exchanges() -> None:
    users = _directory()
    factory = SaslServerFactory(lambda: users, failures=FailureBudget(Rate(3, 0.01), Rate(5, 0.01)))
    for _ in range(3):
        with pytest.raises(AuthenticationError, match="unknown user or wrong password"):
            _plain(factory, "alice", "guess", "10.0.0.1")
    # alice's budget is spent: even her password is refused unchecked (the documented trade-off)
    with pytest.raises(TooManyFailures, match="user"):
        _plain(factory, "alice", PASSWORD, "10.0.0.2")
    _plain(factory, "bob", PASSWORD, "10.0.0.1")  # the address has failures left
    with pytest.raises(AuthenticationError):
        _plain(factory, "bob", "guess", "10.0.0.1")
    with pytest.raises(AuthenticationError):
        _plain(factory, "carol", "guess", "10.0.0.1")
    with pytest.raises(TooManyFailures, match="address"):  # 5 failures from 10.0.0.1
        _plain(factory, "bob", PASSWORD, "10.0.0.1")


def test_scram_and_oauthbearer_failures_count_too() -> None:
    users = _directory()
    factory = SaslServerFactory(lambda: users, failures=FailureBudget(Rate(1, 0.01), Rate(100, 1)))
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "guess")
    server = factory.new("SCRAM-SHA-256", "10.0.0.1")
    client.set_server_first(server.step(client.get_client_first().encode()).decode())
    with pytest.raises(AuthenticationError):
        server.step(client.get_client_final().encode())
    with pytest.raises(TooManyFailures):  # refused at the first message, before any proof is checked
        factory.new("SCRAM-SHA-256", "10.0.0.9").step(b"n,,n=alice,r=abcdefgh")
    budget = FailureBudget(Rate(100, 1), Rate(1, 0.01))
    oauth = SaslServerFactory(lambda: users, failures=budget)
    with pytest.raises(AuthenticationError, match="unknown or revoked token"):
        oauth.new("OAUTHBEARER", "10.0.0.7").step(b"n,,\x01auth=Bearer lkst_00000000_nope\x01\x01")
    with pytest.raises(TooManyFailures, match="address"):  # the bad token cost the address its password logins
        _plain(oauth, "bob", PASSWORD, "10.0.0.7")


def _guess(address: str, source: str, user: str, password: str) -> str:
    """One SCRAM login from ``source``; its error message ("" on success)."""
    sock = socket.create_connection(tuple(address.rsplit(":", 1)), source_address=(source, 0))  # type: ignore[arg-type]
    kafka = RawKafka.__new__(RawKafka)
    kafka.sock, kafka.client_id, kafka.correlation = sock, b"guesser", 0
    with kafka:
        answer = kafka.login_scram("SCRAM-SHA-256", user, password)
    return "" if answer.error_code == 0 else str(answer.error_message)


def test_parallel_kafka_guesses_are_refused_once_the_user_or_the_address_spent_its_budget(
    secure_daemon: SecureFactory,
) -> None:
    daemon = secure_daemon()
    daemon.set_password("alice", PASSWORD)
    daemon.set_password("bob", PASSWORD)
    answers: list[str] = []
    threads = [
        threading.Thread(target=lambda: answers.append(_guess(daemon.kafka_address, "127.0.0.2", "alice", "guess")))
        for _ in range(24)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    refused = [a for a in answers if "too many failed attempts for this user" in a]
    checked = [a for a in answers if "unknown user or wrong password" in a]
    assert len(answers) == 24 and len(checked) <= 11 and len(refused) >= 13, answers  # a user's burst is 10
    assert _guess(daemon.kafka_address, "127.0.0.2", "bob", PASSWORD) == ""  # another user from that address
    spread: list[str] = []  # one guess per user name: only the address's budget (20, then 1 a second) applies
    threads = [
        threading.Thread(target=lambda n=n: spread.append(_guess(daemon.kafka_address, "127.0.0.3", f"x{n}", "g")))
        for n in range(40)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    by_address = [a for a in spread if "too many failed attempts for this address" in a]
    assert len(spread) == 40 and len(by_address) >= 10, spread


def test_a_slow_plain_key_derivation_does_not_stall_other_connections(secure_daemon: SecureFactory) -> None:
    """PLAIN derives the password's key (PBKDF2) at login; on the event loop every connection waited for it."""
    from lkstream.security.credentials import UsersDocument as Doc
    from lkstream.security.watched import edit_file

    daemon = secure_daemon(tls=True)
    assert daemon.pki is not None
    edit_file(
        str(daemon.users_file), Doc.parse, Doc.empty, Doc.serialize,
        lambda doc: doc.set_password("slow", PASSWORD, iterations=1_000_000),
    )  # fmt: skip
    login_took: list[float] = []

    def login() -> None:
        with RawKafka(daemon.kafka_address, tls_ca=str(daemon.pki.ca)) as kafka:  # type: ignore[union-attr]
            started = time.monotonic()
            assert kafka.login_plain("slow", PASSWORD).error_code == 0
            login_took.append(time.monotonic() - started)

    with RawKafka(daemon.kafka_address, tls_ca=str(daemon.pki.ca)) as other:
        thread = threading.Thread(target=login)
        thread.start()
        time.sleep(0.1)
        worst = 0.0
        while thread.is_alive():
            started = time.monotonic()
            other.sock.sendall(kafka_api_versions())
            assert read_kafka_response(other.sock, 30) == 7
            worst = max(worst, time.monotonic() - started)
            time.sleep(0.02)
        thread.join()
    assert login_took and login_took[0] > 0.15, "the key derivation was expected to take a while"
    assert worst < login_took[0] / 2, f"ApiVersions waited {worst:.2f} s for a {login_took[0]:.2f} s login"


def test_bad_tokens_on_any_surface_spend_the_addresss_password_attempts_but_never_block_a_token(
    secure_daemon: SecureFactory,
) -> None:
    import http.client

    import grpc

    from lkstream.wire._proto import messaging_pb2 as pb
    from lkstream.wire._proto import messaging_pb2_grpc as pb_grpc

    daemon = secure_daemon()
    daemon.set_password("bob", PASSWORD)
    host, port = daemon.process.http_address.rsplit(":", 1)

    def get_topics(token: str) -> int:
        connection = http.client.HTTPConnection(host, int(port), timeout=10, source_address=("127.0.0.4", 0))
        connection.request("GET", "/topics", headers={"Authorization": f"Bearer {token}", "Host": "localhost"})
        status = connection.getresponse().status
        connection.close()
        return status

    assert [get_topics("lkst_00000000_" + "x" * 43) for _ in range(21)] == [401] * 21
    assert get_topics(daemon.admin_token) == 200  # a real token is never refused by the budget
    refused = _guess(daemon.kafka_address, "127.0.0.4", "bob", PASSWORD)
    assert "too many failed attempts for this address" in refused  # the right password, unchecked
    assert _guess(daemon.kafka_address, "127.0.0.5", "bob", PASSWORD) == ""  # another address logs in
    with grpc.insecure_channel(daemon.address) as channel:  # gRPC's refusals count too (from 127.0.0.1)
        stub = pb_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]
        for _ in range(21):
            with pytest.raises(grpc.RpcError):
                stub.Admin(pb.AdminRequest(list_topics=pb.ListTopics()), metadata=(("authorization", "Bearer no"),))
    assert "too many failed attempts for this address" in _guess(daemon.kafka_address, "127.0.0.1", "bob", PASSWORD)
