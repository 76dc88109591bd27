"""A minimal Kafka protocol client for tests: any API at any version, over TLS, with SASL PLAIN or SCRAM.

Requests are built from plain values with ``kio``'s schema classes (nested lists of
dicts become the nested entities); responses come back as ``kio`` entities. Real
Kafka clients (librdkafka, aiokafka, kafka-python, kcat) are tested elsewhere; this
one exists so that a table can send each API with exactly the fields it needs.
"""

from __future__ import annotations

import dataclasses
import datetime
import socket
import ssl
import struct
import typing
from typing import Any

import scramp
from kio.serial import entity_reader

from lkstream.kafka import kio_codec
from lkstream.kafka.protocol import ApiKey, is_flexible, skip_tagged_fields

TIMEOUT_S = 30.0


def build(cls: Any, values: dict[str, Any]) -> Any:
    """``cls`` from ``values``: lists of dicts become the nested entity tuples; missing fields are zero."""
    hints = typing.get_type_hints(cls)
    converted: dict[str, Any] = {}
    for name, given in values.items():
        hint = hints[name]
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if type(None) in typing.get_args(hint) and args:  # X | None
            hint = args[0]
        value = given
        if isinstance(given, list):
            item = typing.get_args(hint)[0] if typing.get_args(hint) else None
            value = tuple(build(item, v) if isinstance(v, dict) and item is not None else v for v in given)
        elif isinstance(given, (int, float)) and _is_timedelta(hint):
            value = datetime.timedelta(milliseconds=given)
        converted[name] = value
    return kio_codec.make(cls, **converted)


def _is_timedelta(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, datetime.timedelta)


class RawKafka:
    """One connection; :meth:`call` sends one request and returns the decoded response."""

    def __init__(
        self,
        bootstrap: str,
        *,
        tls_ca: str | None = None,
        client_cert: tuple[str, str] | None = None,
        client_id: str = "raw",
    ) -> None:
        host, port = bootstrap.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
        if tls_ca is not None:
            context = ssl.create_default_context(cafile=tls_ca)
            if client_cert is not None:
                context.load_cert_chain(*client_cert)
            sock = context.wrap_socket(sock, server_hostname="localhost")
        self.sock = sock
        self.client_id = client_id.encode()
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawKafka:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, api_key: int, version: int, **values: Any) -> Any:
        self.correlation += 1
        body = kio_codec.encode(build(kio_codec.request_type(api_key, version), values))
        flexible = is_flexible(api_key, version)
        header = struct.pack(">hhih", api_key, version, self.correlation, len(self.client_id)) + self.client_id
        frame = header + (b"\x00" if flexible else b"") + body
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        answer = self._read(struct.unpack(">i", self._read(4))[0])
        (correlation,) = struct.unpack_from(">i", answer)
        assert correlation == self.correlation, (correlation, self.correlation)
        pos = 4
        if flexible and api_key != ApiKey.API_VERSIONS:
            pos = skip_tagged_fields(answer, pos)
        entity, _ = entity_reader(kio_codec.response_type(api_key, version))(answer, pos)
        return entity

    def _read(self, size: int) -> bytes:
        chunks, left = [], size
        while left:
            chunk = self.sock.recv(left)
            if not chunk:
                raise ConnectionError("the listener closed the connection")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    # -- SASL ----------------------------------------------------------------------------------

    def handshake(self, mechanism: str) -> Any:
        return self.call(ApiKey.SASL_HANDSHAKE, 1, mechanism=mechanism)

    def authenticate(self, auth_bytes: bytes) -> Any:
        return self.call(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=auth_bytes)

    def login_plain(self, user: str, password: str) -> Any:
        """PLAIN; returns the SaslAuthenticate response."""
        assert self.handshake("PLAIN").error_code == 0
        return self.authenticate(f"\0{user}\0{password}".encode())

    def login_scram(self, mechanism: str, user: str, password: str) -> Any:
        """SCRAM with scramp's client; returns the last SaslAuthenticate response."""
        assert self.handshake(mechanism).error_code == 0
        client = scramp.ScramClient([mechanism], user, password)
        first = self.authenticate(client.get_client_first().encode())
        if first.error_code:
            return first
        client.set_server_first(first.auth_bytes.decode())
        final = self.authenticate(client.get_client_final().encode())
        if not final.error_code:
            client.set_server_final(final.auth_bytes.decode())  # the server proved it knows the key
        return final


def fields_of(entity: Any) -> dict[str, Any]:
    return {f.name: getattr(entity, f.name) for f in dataclasses.fields(entity)}
