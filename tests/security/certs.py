"""Certificates made at test time with ``cryptography``: a CA, a server certificate and a client one.

Nothing secret is committed: every test run makes fresh keys in its tmp_path.
The server certificate names ``localhost`` and ``127.0.0.1`` (what the tests connect to).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    """Paths of PEM files: a CA, a server cert/key it signed, a client cert/key it signed."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)


def _sign(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: str,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool,
    usage: x509.ObjectIdentifier | None = None,
    names: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def make_pki(directory: Path, name: str = "test") -> Pki:
    """A fresh CA with a server certificate (localhost, 127.0.0.1) and a client certificate (CN client)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _sign(f"{name} CA", ca_key, f"{name} CA", ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_names: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    server_cert = _sign(
        "localhost",
        server_key,
        f"{name} CA",
        ca_key,
        ca=False,
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        names=server_names,
    )
    client_key = ec.generate_private_key(ec.SECP256R1())
    client_cert = _sign("client", client_key, f"{name} CA", ca_key, ca=False, usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    pki = Pki(
        ca=directory / f"{name}-ca.pem",
        server_cert=directory / f"{name}-server.pem",
        server_key=directory / f"{name}-server.key",
        client_cert=directory / f"{name}-client.pem",
        client_key=directory / f"{name}-client.key",
    )
    pki.ca.write_bytes(_pem(ca_cert))
    pki.server_cert.write_bytes(_pem(server_cert))
    _write_key(server_key, pki.server_key)
    pki.client_cert.write_bytes(_pem(client_cert))
    _write_key(client_key, pki.client_key)
    return pki
