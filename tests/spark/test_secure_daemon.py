"""The Spark source and sink against a daemon with TLS and authentication on (options token and tlsCa)."""

from __future__ import annotations

from typing import Any

import pytest

import lkstream
from lkstream.security.acl import AclEntry
from lkstream.security.tls import ClientTls
from tests.security.conftest import SecureDaemon, SecureFactory, secure_daemon

__all__ = ["secure_daemon"]  # the fixture, for pytest


@pytest.fixture
def daemon(secure_daemon: SecureFactory) -> SecureDaemon:
    started = secure_daemon(tls=True)
    assert started.pki is not None
    with lkstream.connect(started.address, token=started.admin_token, tls=ClientTls(str(started.pki.ca))) as admin:
        admin.create_topic("spark.in", 2)
        admin.create_topic("spark.out", 2)
        admin.produce_many_sync("spark.in", [(f"k{i}".encode(), f"v{i}".encode()) for i in range(40)])
    started.set_acls(
        AclEntry.build("etl", "read", "topic", "spark.in"),
        AclEntry.build("etl", "write", "topic", "spark.out"),
    )
    return started


def test_spark_reads_and_writes_through_a_daemon_with_tls_and_a_token(spark: Any, daemon: SecureDaemon) -> None:
    assert daemon.pki is not None
    credentials = {"bootstrap": daemon.address, "token": daemon.token("etl"), "tlsCa": str(daemon.pki.ca)}
    rows = spark.read.format("lkstream").options(**credentials, subscribe="spark.in").load()
    values = sorted(r["value"] for r in rows.collect())
    assert values == sorted(f"v{i}".encode() for i in range(40))
    rows.selectExpr("key", "value").write.mode("append").format("lkstream").options(
        **credentials, topic="spark.out"
    ).save()
    with lkstream.connect(daemon.address, token=daemon.admin_token, tls=ClientTls(str(daemon.pki.ca))) as admin:
        written = [r.value for pid in range(2) for r in admin.read_from("spark.out", pid, 0)]
    assert sorted(written) == values


def test_spark_without_a_token_fails_with_one_clear_error(spark: Any, daemon: SecureDaemon) -> None:
    assert daemon.pki is not None
    reader = spark.read.format("lkstream").options(bootstrap=daemon.address, tlsCa=str(daemon.pki.ca))
    with pytest.raises(Exception, match="authentication required"):
        reader.option("subscribe", "spark.in").load().collect()
