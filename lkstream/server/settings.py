"""Settings of the daemon's network surfaces (kept apart from :class:`BrokerConfig`).

``ServerSettings`` holds what only the daemon needs: listen addresses,
request size limits and access control (TLS files, authentication, the users and
ACL files, super users; docs/security.md). It validates the ``server:`` section that
:func:`lkstream.config.load_config` merges from the YAML file,
``LKSTREAM_SERVER__*`` environment variables and ``server.<key>`` overrides
(command-line flags); :func:`load_settings` is the daemon's one way to read its
configuration. Errors name the key and the source its value came from.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from lkstream.config import SERVER_SECTION, BrokerConfig, LoadedConfig, load_config
from lkstream.errors import InvalidArgumentError
from lkstream.listeners import AddressLimit
from lkstream.security.access import Access
from lkstream.security.loopback import is_loopback_host
from lkstream.security.tls import ServerTls
from lkstream.storage.handles import derive_capacity, descriptor_limit

#: Room for the protobuf framing around a maximal record batch.
REQUEST_HEADROOM_BYTES = 1024 * 1024
#: Descriptors the daemon needs besides the log's files and its connections: listening sockets,
#: the event loops' epoll and eventfds, gRPC core's pipes, LOCK, the offsets journal, checkpoint and
#: metadata writes in progress (about 20 when idle; room to spare).
DAEMON_DESCRIPTORS = 64


class ServerSettings(BaseModel):
    """Listen addresses and limits of the gRPC and HTTP servers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    grpc_host: str = Field("127.0.0.1", description="gRPC listen address (loopback unless configured).")
    grpc_port: int = Field(9090, ge=0, le=65535, description="gRPC port; 0 picks a free port.")
    http_host: str = Field("127.0.0.1", description="HTTP (metrics, health) listen address.")
    http_port: int = Field(8080, ge=0, le=65535, description="HTTP port; 0 picks a free port.")
    max_request_bytes: int | None = Field(
        None,
        ge=1024,
        description="Largest gRPC message accepted or sent; default: the broker's max_batch_bytes plus 1 MiB.",
    )
    shutdown_grace_s: float = Field(5.0, ge=0, le=600, description="Time in-flight RPCs get on shutdown.")
    kafka_host: str = Field("127.0.0.1", description="Kafka-protocol listen address (loopback unless configured).")
    kafka_port: int = Field(9092, ge=-1, le=65535, description="Kafka-protocol port; 0 picks a free port, -1 disables.")
    kafka_advertised_host: str | None = Field(
        None, description="Host that Metadata and FindCoordinator tell Kafka clients; default kafka_host."
    )

    # -- access control (lkstream.security; docs/security.md) --------------------------------------
    tls_cert_file: str | None = Field(None, description="PEM certificate chain: serve TLS on every listener.")
    tls_key_file: str | None = Field(None, description="PEM private key of tls_cert_file.")
    tls_client_ca_file: str | None = Field(
        None, description="PEM CA bundle: require client certificates that chain to it (mutual TLS)."
    )
    auth: bool = Field(False, description="Require authentication on every listener; ACLs then default to deny.")
    users_file: str | None = Field(
        None, description="Users and credentials; default {persist_dir}/security/users.json."
    )
    acl_file: str | None = Field(None, description="ACL entries; default {persist_dir}/security/acls.json.")
    super_users: list[str] = Field(
        default_factory=list, description="Users allowed everything (comma-separated in env)."
    )
    security_reload_interval_ms: int = Field(
        1000, ge=0, le=600_000, description="How often the users and ACL files are checked for changes."
    )
    http_allowed_hosts: list[str] = Field(
        default_factory=list, description="Host header values the HTTP API accepts besides loopback names."
    )
    http_allowed_origins: list[str] = Field(
        default_factory=list, description="Browser Origins allowed to call the HTTP API (none by default)."
    )

    @field_validator("super_users", "http_allowed_hosts", "http_allowed_origins", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        # LKSTREAM_SERVER__SUPER_USERS=alice,bob arrives as one string.
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @model_validator(mode="after")
    def _tls_files_together(self) -> ServerSettings:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file must be set together")
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            raise ValueError("tls_client_ca_file needs tls_cert_file and tls_key_file (client certificates need TLS)")
        return self

    @property
    def tls(self) -> ServerTls | None:
        """The listeners' TLS files, or None for plaintext."""
        if self.tls_cert_file is None or self.tls_key_file is None:
            return None
        return ServerTls(self.tls_cert_file, self.tls_key_file, self.tls_client_ca_file)

    def security_files(self, broker: BrokerConfig) -> tuple[str, str]:
        """``(users_file, acl_file)``: as set, or under ``{persist_dir}/security/``."""
        base = os.path.join(broker.persist_dir, "security")
        return self.users_file or os.path.join(base, "users.json"), self.acl_file or os.path.join(base, "acls.json")

    def access(self, broker: BrokerConfig) -> Access:
        """The daemon's one :class:`Access`: disabled, or from the users and ACL files when ``auth`` is on."""
        if not self.auth:
            return Access.disabled()
        users_file, acl_file = self.security_files(broker)
        return Access.from_files(
            users_file, acl_file, self.super_users, check_interval_s=self.security_reload_interval_ms / 1000.0
        )

    def listeners(self) -> list[tuple[str, str]]:
        """``(host setting, host)`` of every enabled listener."""
        hosts = [("grpc_host", self.grpc_host), ("http_host", self.http_host)]
        if self.kafka_port != -1:
            hosts.append(("kafka_host", self.kafka_host))
        if self.admin_enabled:
            hosts.append(("admin_host", self.admin_host))
        return hosts

    def check_exposure(self) -> None:
        """Refuse a non-loopback listener unless TLS and authentication are both on (one error line)."""
        exposed = [f"{SERVER_SECTION}.{key}={host}" for key, host in self.listeners() if not is_loopback_host(host)]
        missing = [
            name
            for name, on in (
                (f"{SERVER_SECTION}.tls_cert_file and {SERVER_SECTION}.tls_key_file", self.tls is not None),
                (f"{SERVER_SECTION}.auth: true", self.auth),
            )
            if not on
        ]
        if exposed and missing:
            raise InvalidArgumentError(
                f"refusing to listen beyond this host ({', '.join(exposed)}) without TLS and authentication: "
                f"set {' and '.join(missing)}, or bind 127.0.0.1"
            )

    http_default_topic: str = Field(
        "events",
        pattern=r"^[A-Za-z0-9._-]{1,249}$",
        description="The topic of the HTTP event-log routes POST /produce/{partition} and GET /fetch/{partition}.",
    )
    http_default_topic_partitions: int = Field(
        100, ge=1, le=10_000, description="Partitions of http_default_topic when first used creates it."
    )

    # -- connection limits and timeouts (issue 12, finding 7; docs/operations.md "Limits") ----------
    grpc_max_connections: int = Field(
        128, ge=1, le=100_000, description="gRPC connections served at once; more are closed at accept."
    )
    http_max_connections: int = Field(
        128, ge=1, le=100_000, description="HTTP connections served at once; more are closed at accept."
    )
    kafka_max_connections: int = Field(
        128, ge=1, le=100_000, description="Kafka-protocol connections served at once; more are closed at accept."
    )
    grpc_idle_timeout_s: float = Field(
        300.0, gt=0, le=86_400, description="Close a gRPC connection with no call in progress for this long."
    )
    http_idle_timeout_s: float = Field(
        60.0,
        gt=0,
        le=86_400,
        description="Close an HTTP connection that has not sent a complete request header this long after it "
        "opened or after its last response (idle keep-alive and slow headers alike).",
    )
    kafka_idle_timeout_s: float = Field(
        600.0, gt=0, le=86_400, description="Close a Kafka connection that sends no request for this long."
    )
    kafka_zero_copy: bool = Field(
        True,
        description="Send stored record batches of Kafka Fetch answers with sendfile(2) on plaintext "
        "connections (TLS always copies); false reads them into memory, CRC-checked, and writes them.",
    )
    read_timeout_s: float = Field(
        30.0,
        gt=0,
        le=3_600,
        description="Time a client has to send a request it started: an HTTP body, a Kafka request after its "
        "size, the TLS and HTTP/2 handshake of a gRPC connection; slower connections are closed.",
    )

    # -- what a caller may hold before it authenticated (issue 28, findings 2 and 3; docs/hardening.md) --
    max_connections_per_address: int = Field(
        64,
        ge=1,
        le=100_000,
        description="Connections one peer address may hold on each listener (Kafka's max.connections.per.ip); "
        "more are closed at accept.",
    )
    max_connections_per_address_overrides: dict[str, int] = Field(
        default_factory=dict,
        description="Per-address limits that replace max_connections_per_address for these addresses (a proxy, a "
        "NAT gateway); in env: 10.0.0.5:500,10.0.0.6:200.",
    )
    handshake_timeout_s: float = Field(
        10.0,
        gt=0,
        le=3_600,
        description="Time a new connection has to finish its TLS handshake (every listener) and gRPC's HTTP/2 "
        "handshake; slower ones are closed.",
    )
    authentication_timeout_s: float = Field(
        10.0,
        gt=0,
        le=3_600,
        description="With auth on, time a Kafka connection has to complete SASL after it connected; no request "
        "before that (ApiVersions included) extends it.",
    )
    unauthenticated_admitted_bytes: int = Field(
        1024 * 1024,
        ge=64 * 1024,
        description="Request bytes held at once by Kafka connections that have not authenticated yet: their own "
        "budget, apart from max_admitted_bytes.",
    )
    admin_host: str = Field(
        "127.0.0.1", description="Listen address of the admin listener (/healthz, /ready, /metrics only)."
    )
    admin_port: int = Field(
        -1,
        ge=-1,
        le=65535,
        description="Port of the admin listener, where a flood of the API ports cannot starve probes and scrapes "
        "(Redpanda's 9644); 0 picks a free port, -1 (default) serves them on http_port only.",
    )
    admin_max_connections: int = Field(
        16, ge=1, le=10_000, description="Admin listener connections at once (probes and scrapes)."
    )

    @field_validator("max_connections_per_address_overrides", mode="before")
    @classmethod
    def _address_pairs(cls, value: Any) -> Any:
        # LKSTREAM_SERVER__MAX_CONNECTIONS_PER_ADDRESS_OVERRIDES=10.0.0.5:500,10.0.0.6:200 arrives as one string.
        if isinstance(value, str):
            pairs = [item.strip().rpartition(":") for item in value.split(",") if item.strip()]
            return {address: count for address, _, count in pairs}
        return value

    @field_validator("max_connections_per_address_overrides")
    @classmethod
    def _positive_overrides(cls, value: dict[str, int]) -> dict[str, int]:
        bad = {address: count for address, count in value.items() if count < 1 or not address}
        if bad:
            raise ValueError(f"each override needs an address and a positive limit, got {bad}")
        return value

    def address_limit(self) -> AddressLimit:
        """The per-address connection limit every API listener applies."""
        return AddressLimit(self.max_connections_per_address, dict(self.max_connections_per_address_overrides))

    def admin_address_limit(self) -> AddressLimit:
        """The admin listener's: a quarter of its cap (4 by default), so that at least four addresses are
        needed to fill it; a probe or a scraper holds one or two connections."""
        per_address = max(1, min(self.max_connections_per_address, self.admin_max_connections // 4))
        return AddressLimit(per_address, dict(self.max_connections_per_address_overrides))

    @property
    def admin_enabled(self) -> bool:
        return self.admin_port != -1

    def connection_caps(self) -> dict[str, int]:
        """``{setting: cap}`` of every enabled listener's connection cap."""
        caps = {"grpc_max_connections": self.grpc_max_connections, "http_max_connections": self.http_max_connections}
        if self.kafka_port != -1:
            caps["kafka_max_connections"] = self.kafka_max_connections
        if self.admin_enabled:
            caps["admin_max_connections"] = self.admin_max_connections
        return caps

    def check_descriptors(self, broker: BrokerConfig, soft_limit: int | None = None) -> None:
        """Refuse connection caps that could take descriptors the log's files need (one error line).

        The log keeps up to ``max_open_files`` (derived from ``RLIMIT_NOFILE`` minus
        ``open_files_reserve`` when 0) files open; the listeners' caps plus
        :data:`DAEMON_DESCRIPTORS` must fit in what is left.
        """
        limit = descriptor_limit() if soft_limit is None else soft_limit
        files = derive_capacity(broker.max_open_files, broker.open_files_reserve, limit)
        caps = self.connection_caps()
        needed = sum(caps.values()) + DAEMON_DESCRIPTORS
        if needed <= limit - files:
            return
        named = " + ".join(f"{SERVER_SECTION}.{key} ({value})" for key, value in caps.items())
        raise InvalidArgumentError(
            f"invalid configuration: {named} plus {DAEMON_DESCRIPTORS} descriptors for the daemon itself need "
            f"{needed} descriptors, but only {max(0, limit - files)} are left beside the log's {files} open files "
            f"(RLIMIT_NOFILE {limit}): lower the caps, raise open_files_reserve (or lower max_open_files), or raise "
            "the descriptor limit (ulimit -n, systemd LimitNOFILE)"
        )

    def message_limit(self, broker: BrokerConfig) -> int:
        """The gRPC message size limit, derived from the broker's batch limit unless set."""
        if self.max_request_bytes is not None:
            return self.max_request_bytes
        return broker.max_batch_bytes + REQUEST_HEADROOM_BYTES


def server_settings(loaded: LoadedConfig, *, check_exposure: bool = True) -> ServerSettings:
    """Validate ``loaded.server``; raise :class:`InvalidArgumentError` naming each bad key and its source.

    Also refuses a non-loopback listener without TLS and authentication (:meth:`ServerSettings.check_exposure`),
    unless ``check_exposure`` is False (tools that only read the file locations).
    """
    try:
        settings = ServerSettings.model_validate(loaded.server)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            key = f"{SERVER_SECTION}.{'.'.join(str(p) for p in err['loc'])}"
            where = loaded.sources.get(key, "default")
            if not err["loc"]:  # a check across keys: its message names them
                problems.append(f"{SERVER_SECTION}: {err['msg'].removeprefix('Value error, ')}")
            elif err["type"] == "extra_forbidden":
                known = ", ".join(ServerSettings.model_fields)
                problems.append(f"unknown key {key!r} (from {where}); known {SERVER_SECTION} keys are {known}")
            else:
                problems.append(f"{key}: {err['msg']} (got {err['input']!r}, from {where})")
        raise InvalidArgumentError(f"invalid configuration: {'; '.join(problems)}") from None
    if check_exposure:
        settings.check_exposure()
    return settings


def load_settings(
    path: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[ServerSettings, BrokerConfig]:
    """The daemon's configuration: :func:`lkstream.config.load_config`, then :class:`ServerSettings`.

    ``overrides`` maps broker keys or ``server.<key>`` to values (None: not given).
    """
    loaded = load_config(path, env=env, overrides=overrides)
    return server_settings(loaded), loaded.broker
