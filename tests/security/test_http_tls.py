"""The HTTP port with TLS: probes stay open over HTTPS, plaintext gets nothing, client certificates for the API."""

from __future__ import annotations

import http.client
import json
import ssl
from typing import Any

import pytest

from tests.security.conftest import SecureDaemon, SecureFactory
from tests.security.kafka_raw import RawKafka


def https(daemon: SecureDaemon, path: str, *, token: str | None = None, client_cert: bool = False) -> tuple[int, Any]:
    assert daemon.pki is not None
    context = ssl.create_default_context(cafile=str(daemon.pki.ca))
    if client_cert:
        context.load_cert_chain(str(daemon.pki.client_cert), str(daemon.pki.client_key))
    host, port = daemon.process.http_address.rsplit(":", 1)
    connection = http.client.HTTPSConnection(host, int(port), context=context, timeout=10)
    try:
        connection.request("GET", path, headers={} if token is None else {"Authorization": f"Bearer {token}"})
        response = connection.getresponse()
        body = response.read()
        is_json = response.getheader("Content-Type", "").startswith("application/json")
        return response.status, json.loads(body) if is_json else body.decode()
    finally:
        connection.close()


def test_probes_answer_over_https_and_plaintext_http_gets_nothing(secure_daemon: SecureFactory) -> None:
    daemon = secure_daemon(tls=True)
    assert daemon.http_url.startswith("https://")
    for path in ("/healthz", "/ready", "/metrics"):
        assert https(daemon, path)[0] == 200, path
    assert https(daemon, "/topics")[0] == 401
    assert https(daemon, "/topics", token=daemon.admin_token) == (200, {"topics": []})
    host, port = daemon.process.http_address.rsplit(":", 1)
    plain = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            plain.request("GET", "/healthz")
            plain.getresponse()
    finally:
        plain.close()


def test_with_a_client_ca_the_api_needs_a_client_certificate_and_probes_do_not(
    secure_daemon: SecureFactory,
) -> None:
    daemon = secure_daemon(tls=True, client_ca=True)
    assert https(daemon, "/healthz") == (200, "ok\n")  # a kubelet probe has no client certificate
    status, body = https(daemon, "/topics", token=daemon.admin_token)
    assert status == 403 and body["error"]["code"] == "client_certificate_required"
    assert https(daemon, "/topics", token=daemon.admin_token, client_cert=True) == (200, {"topics": []})
    assert https(daemon, "/topics", client_cert=True)[0] == 401, "a certificate does not replace the token"


def test_with_a_client_ca_the_kafka_port_requires_a_client_certificate(secure_daemon: SecureFactory) -> None:
    daemon = secure_daemon(tls=True, client_ca=True)
    assert daemon.pki is not None
    # TLS 1.3 may say so only at the first read.
    with (
        pytest.raises((ssl.SSLError, ConnectionError, OSError)),
        RawKafka(daemon.kafka_address, tls_ca=str(daemon.pki.ca)) as kafka,
    ):
        kafka.call(18, 0)
    certificate = (str(daemon.pki.client_cert), str(daemon.pki.client_key))
    with RawKafka(daemon.kafka_address, tls_ca=str(daemon.pki.ca), client_cert=certificate) as kafka:
        assert kafka.call(18, 0).error_code == 0
