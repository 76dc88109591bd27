"""``lkstream bridge`` between two places with access control, run as a user runs it.

The source is a daemon with TLS and tokens; the target is another daemon's Kafka
listener with SASL_SSL (SCRAM-SHA-512): the bridge's aiokafka producer and admin client
authenticate there. Each side grants the bridge's user only what it needs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

import lkstream
from lkstream.bridge import KafkaSecurity
from lkstream.errors import InvalidArgumentError
from lkstream.security.acl import AclEntry
from lkstream.security.tls import ClientTls
from tests.integration.conftest import REPO
from tests.security.conftest import SecureFactory

DEADLINE_S = 60.0


def test_the_bridge_copies_from_a_token_daemon_into_a_sasl_ssl_kafka_listener(secure_daemon: SecureFactory) -> None:
    source, target = secure_daemon(tls=True), secure_daemon(tls=True)
    assert source.pki is not None and target.pki is not None
    source_tls, target_tls = ClientTls(str(source.pki.ca)), ClientTls(str(target.pki.ca))
    with lkstream.connect(source.address, token=source.admin_token, tls=source_tls) as admin:
        admin.create_topic("ticks", 2)
        admin.produce_many_sync("ticks", [(f"k{i}".encode(), f"v{i}".encode()) for i in range(100)])
    source.set_acls(
        AclEntry.build("bridge", "read", "topic", "ticks"), AclEntry.build("bridge", "read", "group", "lkstream-bridge")
    )
    target.set_password("bridge", "bridge-password")
    target.set_acls(
        AclEntry.build("bridge", "write", "topic", "ticks"), AclEntry.build("bridge", "create", "topic", "ticks")
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "LKSTREAM_TOKEN": source.token("bridge"),
        "LKSTREAM_BRIDGE_KAFKA_PASSWORD": "bridge-password",
    }
    bridge = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lkstream.cli",
            "bridge",
            "--topics",
            "ticks",
            "--bootstrap",
            source.address,
            "--tls-ca",
            str(source.pki.ca),
            "--kafka-bootstrap",
            target.kafka_address,
            "--kafka-security-protocol",
            "SASL_SSL",
            "--kafka-sasl-mechanism",
            "SCRAM-SHA-512",
            "--kafka-username",
            "bridge",
            "--kafka-tls-ca",
            str(target.pki.ca),
            "--commit-every",
            "10",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        with lkstream.connect(target.address, token=target.admin_token, tls=target_tls) as reader:
            deadline = time.monotonic() + DEADLINE_S
            copied: list[bytes] = []
            while len(copied) < 100 and time.monotonic() < deadline and bridge.poll() is None:
                time.sleep(0.3)
                if "ticks" in reader.list_topics():
                    copied = [r.value for pid in range(2) for r in reader.read_from("ticks", pid, 0)]
        assert sorted(copied) == sorted(f"v{i}".encode() for i in range(100)), bridge.poll()
    finally:
        bridge.send_signal(signal.SIGTERM)
        output, _ = bridge.communicate(timeout=DEADLINE_S)
    assert bridge.returncode == 0, output
    assert "bridge stopped cleanly" in output


def test_kafka_security_settings_refuse_what_cannot_work() -> None:
    with pytest.raises(InvalidArgumentError, match="needs a SASL mechanism"):
        KafkaSecurity(protocol="SASL_SSL", username="u")
    with pytest.raises(InvalidArgumentError, match="needs SASL_SSL or SASL_PLAINTEXT"):
        KafkaSecurity(protocol="SSL", sasl_mechanism="PLAIN", username="u", password="p")
    with pytest.raises(InvalidArgumentError, match="TLS files need SSL"):
        KafkaSecurity(protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", username="u", password="p", ca_file="/ca")
    secure = KafkaSecurity(protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256", username="u", password="secret")
    assert "secret" not in repr(secure)
    assert secure.client_options() == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "u",
        "sasl_plain_password": "secret",
    }
