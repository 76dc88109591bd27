"""A new certificate is served without a restart: every listener, on file change or SIGHUP.

The rotation writes the certificate first and the key afterwards (a window where the
pair does not match): the old pair stays in force until the new one loads together.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import ssl
import time
import urllib.request
from pathlib import Path

import pytest

import lkstream
from lkstream.errors import LkstreamError
from lkstream.security.certificates import ServerCertificates
from lkstream.security.tls import ClientTls, ServerTls
from tests.security.certs import Pki, make_pki
from tests.security.conftest import SecureDaemon, SecureFactory
from tests.security.kafka_raw import RawKafka

DEADLINE_S = 20.0


async def served_by(context: ssl.SSLContext, ca: Path) -> bool:
    """Whether a client trusting only ``ca`` completes a handshake with a server using ``context``."""

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.read(2))
        await writer.drain()
        writer.close()

    listener = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=context)
    port = listener.sockets[0].getsockname()[1]
    try:
        client = ssl.create_default_context(cafile=str(ca))
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="localhost"), 10
        )
        writer.write(b"hi")
        ok = await asyncio.wait_for(reader.read(2), 10) == b"hi"
        writer.close()
        return ok
    except ssl.SSLCertVerificationError:
        return False
    finally:
        listener.close()
        await listener.wait_closed()


def rotate(live: Pki, new: Pki, *, key_too: bool = True) -> None:
    """Put ``new``'s certificate (and key) where ``live``'s files are: certificate first, as a careless copy does."""
    shutil.copyfile(new.server_cert, live.server_cert)
    if key_too:
        shutil.copyfile(new.server_key, live.server_key)


async def test_a_changed_certificate_is_loaded_into_live_contexts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    live, new = make_pki(tmp_path / "live", "old"), make_pki(tmp_path / "new", "new")
    certificates = ServerCertificates(ServerTls(str(live.server_cert), str(live.server_key)))
    context = certificates.ssl_context()
    assert await served_by(context, live.ca) and not await served_by(context, new.ca)
    assert not certificates.check(), "nothing changed"
    rotate(live, new, key_too=False)  # the certificate without its key: does not load, the old pair stays
    assert not certificates.check()
    assert await served_by(context, live.ca)
    [refusal] = [r.getMessage() for r in caplog.records if "do not load" in r.getMessage()]
    assert str(live.server_cert) in refusal and "key values mismatch" in refusal.lower(), refusal
    assert not certificates.check(), "the same half-done rotation is reported once"
    assert len([r for r in caplog.records if "do not load" in r.getMessage()]) == 1
    assert certificates.version == 0
    rotate(live, new)
    assert certificates.check()
    assert certificates.version == 1
    assert await served_by(context, new.ca) and not await served_by(context, live.ca)
    assert certificates.pem().certificate_chain == new.server_cert.read_bytes()


def test_a_broken_certificate_at_start_is_still_an_error(tmp_path: Path) -> None:
    live = make_pki(tmp_path, "x")
    live.server_key.write_text("not a key")
    with pytest.raises(LkstreamError, match="tls_cert_file"):
        ServerCertificates(ServerTls(str(live.server_cert), str(live.server_key)))


def grpc_served(daemon: SecureDaemon, ca: Path) -> bool:
    try:
        with lkstream.connect(
            daemon.address, token=daemon.admin_token, tls=ClientTls(str(ca)), connect_timeout=2, retry_timeout_s=0
        ) as client:
            client.list_topics()
        return True
    except LkstreamError:
        return False


def http_served(daemon: SecureDaemon, ca: Path) -> bool:
    context = ssl.create_default_context(cafile=str(ca))
    try:
        with urllib.request.urlopen(f"{daemon.http_url}/healthz", timeout=5, context=context) as response:
            return bool(response.status == 200)
    except OSError:  # URLError (a refused certificate) is an OSError
        return False


def kafka_served(daemon: SecureDaemon, ca: Path) -> bool:
    try:
        with RawKafka(daemon.kafka_address, tls_ca=str(ca)) as kafka:
            return bool(kafka.call(18, 0).error_code == 0)
    except (OSError, ssl.SSLError):
        return False


def every_listener(daemon: SecureDaemon, ca: Path) -> dict[str, bool]:
    return {
        "grpc": grpc_served(daemon, ca),
        "http": http_served(daemon, ca),
        "kafka": kafka_served(daemon, ca),
    }


def wait_for(check: object, deadline_s: float = DEADLINE_S) -> dict[str, bool]:
    end = time.monotonic() + deadline_s
    while True:
        state = check()  # type: ignore[operator]
        if all(state.values()) or time.monotonic() > end:
            return state  # type: ignore[no-any-return]
        time.sleep(0.2)


def test_every_listener_serves_a_rotated_certificate_without_a_restart(
    secure_daemon: SecureFactory, tmp_path: Path
) -> None:
    daemon = secure_daemon(tls=True, security_reload_interval_ms=200)
    assert daemon.pki is not None
    old_ca = daemon.pki.ca
    assert every_listener(daemon, old_ca) == {"grpc": True, "http": True, "kafka": True}
    new = make_pki(tmp_path / "rotated", "rotated")
    rotate(daemon.pki, new)
    assert wait_for(lambda: every_listener(daemon, new.ca)) == {"grpc": True, "http": True, "kafka": True}
    assert every_listener(daemon, old_ca) == {"grpc": False, "http": False, "kafka": False}
    assert daemon.process.process is not None and daemon.process.process.poll() is None
    assert "TLS certificate reloaded" in "".join(daemon.process.output)


def test_sighup_loads_a_new_certificate_at_once(secure_daemon: SecureFactory, tmp_path: Path) -> None:
    # An interval far longer than the test: only SIGHUP can make the daemon look.
    daemon = secure_daemon(tls=True, security_reload_interval_ms=600_000)
    assert daemon.pki is not None and daemon.process.process is not None
    new = make_pki(tmp_path / "rotated", "rotated")
    rotate(daemon.pki, new)
    time.sleep(0.5)
    assert every_listener(daemon, new.ca) == {"grpc": False, "http": False, "kafka": False}
    os.kill(daemon.process.process.pid, signal.SIGHUP)
    assert wait_for(lambda: every_listener(daemon, new.ca)) == {"grpc": True, "http": True, "kafka": True}
    assert daemon.process.process.poll() is None, "SIGHUP must not stop the daemon"


def test_sighup_without_tls_re_reads_the_security_files_and_keeps_serving(secure_daemon: SecureFactory) -> None:
    daemon = secure_daemon(security_reload_interval_ms=600_000)
    assert daemon.process.process is not None
    token = daemon.token("late")  # written after start: the daemon has not looked at the file since
    os.kill(daemon.process.process.pid, signal.SIGHUP)
    end = time.monotonic() + DEADLINE_S
    while True:
        try:
            with lkstream.connect(daemon.address, token=token, retry_timeout_s=0) as client:
                client.list_topics()
            break
        except LkstreamError:
            assert time.monotonic() < end, "the new token was not accepted after SIGHUP"
            time.sleep(0.2)
    assert daemon.process.process.poll() is None
