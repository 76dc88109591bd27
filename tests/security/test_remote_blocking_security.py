"""Blocking produce and fetch on the synchronous channel through TLS and a bearer token (a real daemon)."""

from __future__ import annotations

import threading

import pytest

import lkstream
from lkstream import AuthorizationError
from lkstream.format.codec import encode_batch
from lkstream.security.acl import AclEntry
from tests.security.conftest import SecureFactory

pytestmark = pytest.mark.timeout(120)


def test_blocking_produce_and_fetch_go_through_tls_with_a_token_and_its_permissions(
    secure_daemon: SecureFactory,
) -> None:
    daemon = secure_daemon(tls=True)
    assert daemon.pki is not None
    ca = str(daemon.pki.ca)
    with lkstream.connect(daemon.address, token=daemon.admin_token, tls=ca) as admin:
        admin.create_topic("secure.sync", 2)
    daemon.grant(AclEntry.build("writer", "write", "topic", "secure.sync"))
    with lkstream.connect(daemon.address, token=daemon.token("writer"), tls=ca) as writer:
        placed = writer.produce_many_sync("secure.sync", [(f"k{i}", f"v{i}".encode()) for i in range(50)])
        assert len(placed) == 50
        first, last = writer.produce_batch_sync("secure.sync", 1, bytes(encode_batch([(None, b"one")])))
        assert first == last == sum(1 for p, _ in placed if p == 1)
        with pytest.raises(AuthorizationError, match=r"not allowed to read topic 'secure\.sync'"):
            writer.fetch("secure.sync", 0, 0)
    with lkstream.connect(daemon.address, token=daemon.admin_token, tls=ca) as admin:
        values = [r.value for p in (0, 1) for r in admin.read_from("secure.sync", p, 0)]
        assert sorted(values) == sorted([f"v{i}".encode() for i in range(50)] + [b"one"])


def test_a_token_without_write_permission_fails_blocking_produce_from_every_thread(
    secure_daemon: SecureFactory,
) -> None:
    daemon = secure_daemon()
    with lkstream.connect(daemon.address, token=daemon.admin_token) as admin:
        admin.create_topic("secure.ro", 1)
    daemon.grant(AclEntry.build("reader", "read", "topic", "secure.ro"))
    errors: list[BaseException] = []
    with lkstream.connect(daemon.address, token=daemon.token("reader")) as reader:

        def produce() -> None:
            try:
                reader.produce_many_sync("secure.ro", [(None, b"x")])
            except AuthorizationError as exc:
                errors.append(exc)

        workers = [threading.Thread(target=produce) for _ in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
        assert reader.fetch("secure.ro", 0, 0).high_watermark == 0
    assert len(errors) == 4 and all("not allowed to write" in str(e) for e in errors), errors
