"""TLS material from certificate and key files, for every listener and for our own clients.

Servers: :class:`ServerTls` (``server.tls_cert_file``, ``server.tls_key_file`` and, to
require and verify client certificates, ``server.tls_client_ca_file``) gives an
``ssl.SSLContext`` for asyncio/aiohttp listeners (:meth:`ServerTls.ssl_context`) and
the PEM bytes gRPC's ``ssl_server_credentials`` takes (:meth:`ServerTls.pem`), both
from the same files. :meth:`ServerTls.check` loads them once at start-up so a missing
file, a key that does not match its certificate or a bad CA file is one clear error.

Clients: :class:`ClientTls` (a CA file to trust, optionally a client certificate and
key, optionally the name to expect in the server's certificate) gives the same two
forms. ``lkstream.connect(address, tls=...)`` and the CLI's ``--tls-ca`` use it.

Nothing here opens a socket: the surfaces do (gRPC, aiohttp, the Kafka listener).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from lkstream.errors import InvalidArgumentError


def _read(path: str, setting: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise InvalidArgumentError(f"{setting}: cannot read {path}: {exc.strerror or exc}") from None


def load_chain(context: ssl.SSLContext, cert_file: str, key_file: str) -> None:
    """Load a certificate chain and its key into ``context``; one clear error naming the settings."""
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise InvalidArgumentError(
            f"server.tls_cert_file / server.tls_key_file: cannot load {cert_file} with {key_file}: "
            f"{getattr(exc, 'strerror', None) or exc}"
        ) from None


@dataclass(frozen=True)
class ServerPem:
    """A server's TLS material as PEM bytes (what ``grpc.ssl_server_credentials`` takes)."""

    certificate_chain: bytes
    private_key: bytes
    client_ca: bytes | None

    @property
    def require_client_certificate(self) -> bool:
        return self.client_ca is not None


@dataclass(frozen=True)
class ServerTls:
    """A listener's certificate chain and key, and the CA its clients' certificates must chain to."""

    cert_file: str
    key_file: str
    client_ca_file: str | None = None

    def ssl_context(self, *, client_certificate_optional: bool = False) -> ssl.SSLContext:
        """A server context: TLS 1.2 or newer; with a client CA, client certificates are verified.

        They are required, unless ``client_certificate_optional`` (the HTTP port: probes
        present none, and the JSON API refuses a request without one itself).
        """
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        load_chain(context, self.cert_file, self.key_file)
        if self.client_ca_file is not None:
            try:
                context.load_verify_locations(cafile=self.client_ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise InvalidArgumentError(
                    f"server.tls_client_ca_file: cannot load {self.client_ca_file}: "
                    f"{getattr(exc, 'strerror', None) or exc}"
                ) from None
            context.verify_mode = ssl.CERT_OPTIONAL if client_certificate_optional else ssl.CERT_REQUIRED
        return context

    def pem(self) -> ServerPem:
        """The same files as PEM bytes (for gRPC)."""
        return ServerPem(
            certificate_chain=_read(self.cert_file, "server.tls_cert_file"),
            private_key=_read(self.key_file, "server.tls_key_file"),
            client_ca=None if self.client_ca_file is None else _read(self.client_ca_file, "server.tls_client_ca_file"),
        )

    def check(self) -> None:
        """Load everything once; raise :class:`InvalidArgumentError` naming the setting that is wrong."""
        self.ssl_context()


@dataclass(frozen=True)
class ClientPem:
    """A client's TLS material as PEM bytes (what ``grpc.ssl_channel_credentials`` takes)."""

    root_certificates: bytes | None
    private_key: bytes | None
    certificate_chain: bytes | None


@dataclass(frozen=True)
class ClientTls:
    """How a client checks the server (``ca_file``; None: the system's trust store) and proves itself.

    ``cert_file``/``key_file``: a client certificate, for a server that requires one.
    ``server_name``: the name to expect in the server's certificate when it differs from
    the host in the address (e.g. connecting to an IP address).
    """

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise InvalidArgumentError("a client certificate needs both cert_file and key_file")

    def pem(self) -> ClientPem:
        return ClientPem(
            root_certificates=None if self.ca_file is None else _read(self.ca_file, "tls ca_file"),
            private_key=None if self.key_file is None else _read(self.key_file, "tls key_file"),
            certificate_chain=None if self.cert_file is None else _read(self.cert_file, "tls cert_file"),
        )

    def ssl_context(self) -> ssl.SSLContext:
        """A client context that verifies the server's certificate and host name."""
        try:
            context = ssl.create_default_context(cafile=self.ca_file)
            if self.cert_file is not None and self.key_file is not None:
                context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidArgumentError(
                f"cannot load the client TLS files: {getattr(exc, 'strerror', None) or exc}"
            ) from None
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context


def client_tls(tls: bool | str | ClientTls | None) -> ClientTls | None:
    """What ``connect(tls=...)`` accepts: None/False (plaintext), True (system CAs), a CA file path, a ClientTls."""
    if tls is None or tls is False:
        return None
    if tls is True:
        return ClientTls()
    if isinstance(tls, str):
        return ClientTls(ca_file=tls)
    if isinstance(tls, ClientTls):
        return tls
    raise InvalidArgumentError(f"tls must be True, a CA file path or a ClientTls, not {type(tls).__name__}")
