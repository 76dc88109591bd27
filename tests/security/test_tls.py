"""TLS material from files: one clear error for bad files, and contexts that really handshake."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from lkstream.errors import InvalidArgumentError
from lkstream.security.tls import ClientTls, ServerTls, client_tls
from tests.security.certs import make_pki


async def handshake(server: ServerTls, client: ClientTls, server_name: str = "localhost") -> bytes:
    """Serve one echo over TLS on a loopback port; return what the client read back."""

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.read(5))
        await writer.drain()
        writer.close()

    listener = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=server.ssl_context())
    port = listener.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=client.ssl_context(), server_hostname=server_name), 10
        )
        writer.write(b"hello")
        data = await asyncio.wait_for(reader.read(5), 10)
        writer.close()
        return data
    finally:
        listener.close()
        await listener.wait_closed()


async def test_server_and_client_contexts_handshake(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    server = ServerTls(str(pki.server_cert), str(pki.server_key))
    assert await handshake(server, ClientTls(ca_file=str(pki.ca))) == b"hello"


async def test_client_rejects_a_server_name_the_certificate_does_not_carry(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    server = ServerTls(str(pki.server_cert), str(pki.server_key))
    with pytest.raises(ssl.SSLCertVerificationError):
        await handshake(server, ClientTls(ca_file=str(pki.ca)), server_name="other.example")


async def test_client_certificate_required_when_a_client_ca_is_set(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    server = ServerTls(str(pki.server_cert), str(pki.server_key), str(pki.ca))
    try:  # TLS 1.3 may report the refused client certificate only at the first read (no data)
        data = await handshake(server, ClientTls(ca_file=str(pki.ca)))
    except (ssl.SSLError, ConnectionError):
        data = b""
    assert data == b"", "a client without a certificate was served"
    client = ClientTls(ca_file=str(pki.ca), cert_file=str(pki.client_cert), key_file=str(pki.client_key))
    assert await handshake(server, client) == b"hello"


def test_server_pem_reads_the_same_files(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    pem = ServerTls(str(pki.server_cert), str(pki.server_key), str(pki.ca)).pem()
    assert pem.certificate_chain == pki.server_cert.read_bytes() and pem.require_client_certificate
    assert ServerTls(str(pki.server_cert), str(pki.server_key)).pem().client_ca is None


@pytest.mark.parametrize(
    ("which", "setting"),
    [("cert", "tls_cert_file"), ("key", "tls_key_file"), ("mismatch", "tls_key_file"), ("ca", "tls_client_ca_file")],
)
def test_check_names_the_setting_that_is_wrong(tmp_path: Path, which: str, setting: str) -> None:
    pki = make_pki(tmp_path)
    files = {"cert": str(pki.server_cert), "key": str(pki.server_key), "ca": None}
    if which == "mismatch":
        files["key"] = str(pki.client_key)
    else:
        files[which] = str(tmp_path / "missing.pem")
    with pytest.raises(InvalidArgumentError, match=setting):
        ServerTls(files["cert"] or "", files["key"] or "", files["ca"]).check()


def test_client_tls_forms() -> None:
    assert client_tls(None) is None and client_tls(False) is None
    assert client_tls(True) == ClientTls()
    assert client_tls("/ca.pem") == ClientTls(ca_file="/ca.pem")
    with pytest.raises(InvalidArgumentError):
        client_tls(3)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="both cert_file and key_file"):
        ClientTls(cert_file="/c.pem")
