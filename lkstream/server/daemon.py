"""The daemon process: a :class:`Daemon` (gRPC server + HTTP endpoints) over one open broker.

:func:`run_daemon` is the one function behind ``python -m lkstream.grpc_server`` and
``lkstream serve``: it loads the configuration, installs the SIGTERM/SIGINT handlers,
prints the ready line and serves until signalled. The RPC handlers live in
:mod:`lkstream.server.grpc.server`.

Metrics and HTTP: :class:`Daemon` creates one :class:`BrokerMetrics` over the
open broker and serves ``/metrics``, ``/healthz``, ``/ready`` and the JSON API (docs/http.md)
(:mod:`lkstream.server.http.app`) before gRPC starts; ``/ready`` turns 200 once gRPC
accepts calls.

Access control (docs/security.md): the daemon's one :class:`~lkstream.security.access.Access`
is built from the ``server.`` settings before anything starts (a bad TLS or security file
is exit 2). With ``auth`` on, gRPC gets the access interceptor
(:mod:`lkstream.server.grpc.access`), HTTP the per-route authorizer
(:mod:`lkstream.server.http.access`; its cross-origin checks apply with auth off too)
and the Kafka listener SASL and the same authorizer. With TLS files, every listener is
TLS (the Kafka listener SSL, or SASL_SSL), from one
:class:`~lkstream.security.certificates.ServerCertificates`: it is checked every
``security_reload_interval_ms`` and on SIGHUP, and a changed certificate serves new
connections without a restart (SIGHUP also re-reads the users and ACL files at once).

Shutdown (SIGTERM/SIGINT): ``/ready`` turns 503 and health goes NOT_SERVING,
Subscribe streams end with UNAVAILABLE, the gRPC server stops accepting calls and
the Kafka listener stops reading requests, and both give what they already
read ``shutdown_grace_s`` to be answered, then ``Broker.close()`` fsyncs and
releases the data directory lock; HTTP stops last. Every produce acknowledged
before that is on disk.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Mapping
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from lkstream.broker.admission import AdmissionBudget
from lkstream.broker.broker import Broker
from lkstream.broker.metrics import BrokerMetrics
from lkstream.config import BrokerConfig
from lkstream.errors import InvalidArgumentError, LkstreamError
from lkstream.kafka import KafkaServer, ListenerSettings
from lkstream.listeners import raise_descriptor_limit
from lkstream.security.access import Access
from lkstream.security.certificates import ServerCertificates
from lkstream.security.credentials import SCRAM_MECHANISMS
from lkstream.security.sasl import MECHANISMS, OAUTHBEARER
from lkstream.server.collector import freeze_start_up_heap
from lkstream.server.grpc.access import AccessInterceptor, AuthenticationInterceptor, server_credentials
from lkstream.server.grpc.cluster_rpcs import DaemonFacts
from lkstream.server.grpc.limits import AdmissionInterceptor, server_options
from lkstream.server.grpc.peers import PeerLimiter
from lkstream.server.grpc.server import SERVICE_NAME, BrokerService, LaneOffer, __version__
from lkstream.server.http.access import GuardedHttpServer, HttpAccess
from lkstream.server.http.admin import AdminServer
from lkstream.server.http.app import HttpServer
from lkstream.server.memory import HeapTrimmer, keep_heap_for_requests
from lkstream.server.settings import REQUEST_HEADROOM_BYTES, ServerSettings, load_settings
from lkstream.wire._proto import messaging_pb2_grpc as pb_grpc
from lkstream.wire.contract import PROTOCOL_VERSION

log = logging.getLogger("lkstream.server")

#: The certificate files are looked at no more often than this, whatever security_reload_interval_ms says.
MIN_CERTIFICATE_CHECK_S = 0.1


class Daemon:
    """A gRPC server and the HTTP endpoints over an open broker; :meth:`stop` shuts them all down.

    Order (see :mod:`lkstream.server.http.app`): metrics over the recovered broker, HTTP
    (``/ready`` 503), gRPC, then ``/ready`` 200. :meth:`stop` reverses it, HTTP last.
    """

    def __init__(self, settings: ServerSettings, broker: Broker, access: Access | None = None) -> None:
        self.settings = settings
        self.broker = broker
        self.metrics = BrokerMetrics(broker)
        self.http: HttpServer | None = None
        #: Authentication and authorization for every listener (docs/security.md).
        self.access = access if access is not None else settings.access(broker.config)
        #: The listeners' certificate and key, followed on disk (None: plaintext).
        self.certificates = ServerCertificates(settings.tls) if settings.tls is not None else None
        self._watcher: asyncio.Task[None] | None = None
        limit = settings.message_limit(broker.config)
        # Admission reads and decodes each request within the budget (docs/operations.md); with auth, only
        # after the token was checked.
        admission = AdmissionInterceptor(
            broker.admission,
            self.metrics,
            read_timeout_s=settings.read_timeout_s,
            idle_timeout_s=settings.grpc_idle_timeout_s,
            message_limit=limit,
        )
        interceptors: list[grpc.aio.ServerInterceptor] = [admission]
        if self.access.enabled:
            # The token before any request byte is admitted; the ACLs after the request is decoded.
            interceptors.insert(0, AuthenticationInterceptor(self.access, self.metrics))
            interceptors.append(AccessInterceptor(self.access, broker, self.metrics))
        self.server = grpc.aio.server(interceptors=interceptors, options=server_options(settings, limit))
        self.service = BrokerService(broker, self.metrics, max_fetch_bytes=limit - 64 * 1024, access=self.access)
        pb_grpc.add_BrokerServicer_to_server(self.service, self.server)  # type: ignore[no-untyped-call]
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
            self.server,
        )
        address = f"{settings.grpc_host}:{settings.grpc_port}"
        # Every listener's port asked first, all at once: gRPC core would log its own multi-line error
        # before failing, and a user with two ports taken should learn of both from one start.
        busy = busy_ports(settings)
        if busy:
            raise InvalidArgumentError("\n".join(busy))
        try:
            if self.certificates is None:
                self.port = self.server.add_insecure_port(address)
            else:
                self.port = self.server.add_secure_port(address, server_credentials(self.certificates))
        except RuntimeError:  # grpcio >= 1.60 raises where older releases returned 0
            self.port = 0
        if self.port == 0:
            raise InvalidArgumentError(cannot_listen("gRPC", address, "in use or not a local address", "grpc"))
        self.address = f"{settings.grpc_host}:{self.port}"
        self.kafka: KafkaServer | None = None
        self.admin: AdminServer | None = None  # probes and metrics on their own port (server.admin_port)
        #: gRPC core accepts by itself: per-address limits are enforced from outside it.
        self.peer_limiter = PeerLimiter(self.port, settings.address_limit())
        self.trimmer: HeapTrimmer | None = None  # hands memory back after request bursts (started with the loop)
        if settings.kafka_port >= 0:
            self.kafka = KafkaServer(broker, self._kafka_settings())

    def _kafka_settings(self) -> ListenerSettings:
        """The Kafka listener: TLS with the certificates, SASL and the ACLs with authentication."""
        settings = self.settings
        # PLAIN sends the password itself: offered only over TLS. OAUTHBEARER sends a token as a
        # gRPC call's metadata does, which clients send in plaintext only to loopback, and a
        # listener without TLS binds loopback only (check_exposure).
        mechanisms = MECHANISMS if self.certificates is not None else (OAUTHBEARER, *SCRAM_MECHANISMS)
        return ListenerSettings(
            host=settings.kafka_host,
            port=settings.kafka_port,
            advertised_host=settings.kafka_advertised_host,
            max_frame_bytes=settings.message_limit(self.broker.config),
            max_connections=settings.kafka_max_connections,
            max_connections_per_address=settings.address_limit(),
            idle_timeout_s=settings.kafka_idle_timeout_s,
            read_timeout_s=settings.read_timeout_s,
            authentication_timeout_s=settings.authentication_timeout_s,
            handshake_timeout_s=settings.handshake_timeout_s,
            unauthenticated_admission=AdmissionBudget(settings.unauthenticated_admitted_bytes),
            authorizer=self.access.authorizer,
            sasl=self.access.sasl(mechanisms) if self.access.enabled else None,
            ssl_context=None if self.certificates is None else self.certificates.ssl_context(),
            acl_version=self.access.acl_version,
            observe_produce=self.metrics.observe_produce,
            observe_fetch=self.metrics.observe_fetch,
            zero_copy=settings.kafka_zero_copy,
        )

    @property
    def kafka_address(self) -> str:
        """``host:port`` Kafka clients bootstrap from (the advertised host, the bound port), or ``off``."""
        return self.kafka.bootstrap if self.kafka is not None else "off"

    @property
    def http_address(self) -> str:
        """``host:port`` of the HTTP endpoints (the bound port when ``http_port`` is 0)."""
        assert self.http is not None, "the daemon is not started"
        return self.http.url.split("://", 1)[1]

    async def start(self) -> None:
        host, port = self.settings.http_host, self.settings.http_port
        limit = self.settings.message_limit(self.broker.config)
        try:
            options: dict[str, Any] = {
                "max_request_bytes": limit,
                "default_topic": self.settings.http_default_topic,
                "default_topic_partitions": self.settings.http_default_topic_partitions,
                "max_connections": self.settings.http_max_connections,
                "idle_timeout_s": self.settings.http_idle_timeout_s,
                "read_timeout_s": self.settings.read_timeout_s,
                "per_address": self.settings.address_limit(),
                "handshake_timeout_s": self.settings.handshake_timeout_s,
            }
            self.http = GuardedHttpServer(self.broker, self.metrics, self._http_guard(), **options)
            # Client certificates are asked for, not required: probes of the open routes present none.
            context = (
                None if self.certificates is None else self.certificates.ssl_context(client_certificate_optional=True)
            )
            await self.http.start(host, port, ssl_context=context)
        except OSError as exc:
            reason = (exc.strerror or str(exc)).lower()
            raise InvalidArgumentError(cannot_listen("HTTP", f"{host}:{port}", reason, "http")) from None
        if self.settings.admin_enabled:
            await self._start_admin(context)
        # The Kafka listener before gRPC: a client's first Handshake must find its address (the Kafka lane).
        if self.kafka is not None:
            try:
                await self.kafka.start()
            except OSError as exc:
                where = f"{self.settings.kafka_host}:{self.settings.kafka_port}"
                reason = (exc.strerror or str(exc)).lower()
                raise InvalidArgumentError(cannot_listen("Kafka", where, reason, "kafka")) from None
            self.service.kafka_lane = self._lane_offer(self.kafka)
        self.service.facts = DaemonFacts(
            version=__version__,
            grpc=self.address,
            http=self.http_address,
            kafka="" if self.kafka is None else self.kafka.bootstrap,
            tls=self.certificates is not None,
            auth=self.access.enabled,
        )
        await self.server.start()
        self.peer_limiter.start()
        self.trimmer = HeapTrimmer(self.broker.admission, asyncio.get_running_loop())
        keep_heap_for_requests()
        for service in ("", SERVICE_NAME):
            await self.health.set(service, health_pb2.HealthCheckResponse.SERVING)
        if self.certificates is not None:
            self._watcher = asyncio.create_task(self._watch_certificates())
        self.http.set_ready()

    async def _start_admin(self, context: Any) -> None:
        """The admin listener (/healthz, /ready, /metrics), with the HTTP port's TLS context."""
        assert self.http is not None
        settings = self.settings
        self.admin = AdminServer(
            self.http,
            max_connections=settings.admin_max_connections,
            per_address=settings.admin_address_limit(),
            handshake_timeout_s=settings.handshake_timeout_s,
        )
        try:
            await self.admin.start(settings.admin_host, settings.admin_port, ssl_context=context)
        except OSError as exc:
            reason = (exc.strerror or str(exc)).lower()
            where = f"{settings.admin_host}:{settings.admin_port}"
            raise InvalidArgumentError(
                f"cannot listen for the admin listener on {where} ({reason}): set server.admin_port "
                "(LKSTREAM_SERVER__ADMIN_PORT; 0 picks any free port, -1 turns it off) or server.admin_host"
            ) from None

    @property
    def admin_address(self) -> str:
        """``host:port`` of the admin listener, or ``off``."""
        return self.admin.address if self.admin is not None else "off"

    def _lane_offer(self, kafka: KafkaServer) -> LaneOffer:
        """Where LKSTREAM's own client may reach the Kafka listener, and how (docs/adr/0005-kafka-lane.md).

        With TLS, the advertised address: the one Kafka clients dial and the certificate names.
        Without TLS the listener binds loopback only (check_exposure), so the bound address is one
        every client of this daemon reaches, whatever host Kafka clients are told.
        """
        if (
            self.settings.message_limit(self.broker.config)
            < self.broker.config.max_batch_bytes + REQUEST_HEADROOM_BYTES
        ):
            # The lane packs requests up to max_batch_bytes (Handshake's): past the listener's frame
            # limit it would be closed on every large call.
            return LaneOffer()
        tls = kafka.settings.ssl_context is not None
        host = self.settings.kafka_host
        bound = f"[{host}]:{kafka.port}" if ":" in host else f"{host}:{kafka.port}"
        return LaneOffer(kafka.bootstrap if tls else bound, tls=tls, sasl=kafka.settings.sasl is not None)

    def _http_guard(self) -> HttpAccess:
        # Cross-origin checks for everyone (a web page must not drive a local daemon, auth or not),
        # authentication with auth on; each route's ACL check is added by GuardedHttpServer.
        tls = self.settings.tls
        return HttpAccess(
            self.access,
            self.metrics,
            bound_host=self.settings.http_host,
            allowed_hosts=self.settings.http_allowed_hosts,
            allowed_origins=self.settings.http_allowed_origins,
            require_client_certificate=tls is not None and tls.client_ca_file is not None,
        )

    def reload(self) -> None:
        """Look at the certificate files and the users and ACL files now (SIGHUP)."""
        log.info("SIGHUP: checking the TLS certificate and the security files")
        if self.certificates is not None:
            self.certificates.check()
        self.access.reload()

    async def _watch_certificates(self) -> None:
        # On the event loop: the asyncio listeners' contexts must not change under a handshake.
        assert self.certificates is not None
        interval = max(self.settings.security_reload_interval_ms / 1000.0, MIN_CERTIFICATE_CHECK_S)
        while True:
            await asyncio.sleep(interval)
            self.certificates.check()

    async def stop(self) -> None:
        """Turn not-ready, stop accepting, let in-flight calls finish within the grace period,
        close the broker, then stop HTTP."""
        try:
            if self.http is not None:
                self.http.set_not_ready()
            await self.health.enter_graceful_shutdown()
            self.service.stopping.set()
            if self._watcher is not None:
                self._watcher.cancel()
            # Both surfaces answer what they already read within one grace period, side by side.
            grace = self.settings.shutdown_grace_s
            await self.peer_limiter.stop()
            await asyncio.gather(self.server.stop(grace), *(() if self.kafka is None else (self.kafka.stop(grace),)))
        finally:
            try:
                self.broker.close()
            finally:
                if self.trimmer is not None:
                    self.trimmer.close()
                self.metrics.close()
                if self.admin is not None:
                    await self.admin.stop()
                if self.http is not None:
                    await self.http.stop()


def port_in_use(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be bound right now (``"address already in use"``), or None if it can.

    A probe bind without ``SO_REUSEPORT``, closed at once; port 0 always binds.
    """
    if port == 0:
        return None
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host.strip("[]"), port))
    except socket.gaierror as exc:
        return f"cannot resolve the host: {exc.strerror or exc}"
    except OSError as exc:
        return (exc.strerror or str(exc)).lower()
    return None


def busy_ports(settings: ServerSettings) -> list[str]:
    """One :func:`cannot_listen` line per listener whose port cannot be bound now (gRPC, HTTP, Kafka)."""
    listeners = [
        ("gRPC", settings.grpc_host, settings.grpc_port, "grpc"),
        ("HTTP", settings.http_host, settings.http_port, "http"),
    ]
    if settings.kafka_port >= 0:
        listeners.append(("Kafka", settings.kafka_host, settings.kafka_port, "kafka"))
    lines = []
    for what, host, port, setting in listeners:
        reason = port_in_use(host, port)
        if reason is not None:
            lines.append(cannot_listen(what, f"{host}:{port}", reason, setting))
    return lines


def cannot_listen(what: str, address: str, reason: str, setting: str) -> str:
    """One line naming the address, why, and the setting that moves the listener elsewhere."""
    if "in use" in reason:
        hint = (
            f"another process (a running daemon?) holds it: stop it or pick a free port with "
            f"server.{setting}_port (--{setting}-port, LKSTREAM_SERVER__{setting.upper()}_PORT; 0 picks any free port)"
        )
    else:
        env = f"LKSTREAM_SERVER__{setting.upper()}_HOST"
        hint = f"set server.{setting}_host (--{setting}-host, {env}) to a local address"
    return f"cannot listen for {what} on {address} ({reason}): {hint}"


async def serve(
    settings: ServerSettings,
    config: BrokerConfig,
    *,
    ready: Callable[[Daemon], None] | None = None,
    stop: asyncio.Event | None = None,
    access: Access | None = None,
) -> None:
    """Run the daemon until SIGTERM/SIGINT (or ``stop`` is set), then shut down gracefully."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    broker = Broker(config=config)
    try:
        daemon = Daemon(settings, broker, access)
    except BaseException:
        broker.close()
        raise
    loop.add_signal_handler(signal.SIGHUP, daemon.reload)
    try:
        await daemon.start()
        freeze_start_up_heap()  # before the ready line: clients' calls never wait for a walk of it
        if ready is not None:
            ready(daemon)  # first: scripts and tests wait for the ready line as the first output
        _log_security(settings, config)
        await stop.wait()
        log.info("shutting down: %s s grace for in-flight requests", settings.shutdown_grace_s)
    finally:
        await daemon.stop()


def print_ready(daemon: Daemon) -> None:
    """The one line scripts and tests wait for."""
    print(
        f"lkstream daemon ready: grpc={daemon.address} http={daemon.http_address} kafka={daemon.kafka_address} "
        f"data={daemon.broker.persist_dir} protocol={PROTOCOL_VERSION} version={__version__} "
        f"admin={daemon.admin_address}",
        flush=True,
    )


def run(settings: ServerSettings, config: BrokerConfig, access: Access | None = None) -> int:
    """Serve until signalled; return the process exit code."""
    try:
        asyncio.run(serve(settings, config, ready=print_ready, access=access))
    except LkstreamError as exc:
        for line in str(exc).splitlines():  # several busy ports: one line each
            print(f"lkstream: {line}", file=sys.stderr)
        return 1
    log.info("stopped cleanly")
    return 0


def run_daemon(
    config_path: str | os.PathLike[str] | None,
    overrides: Mapping[str, Any] | None = None,
    *,
    log_level: str = "INFO",
) -> int:
    """Load the configuration (file < ``LKSTREAM_*`` < ``overrides``), then serve until signalled.

    The one function behind ``python -m lkstream.grpc_server`` and ``lkstream serve``.
    Exit code: 0 after a clean shutdown, 1 when the broker or a listener fails, 2 for
    a bad configuration.
    """
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings, config = load_settings(config_path, overrides)
        # TLS files and the security files are configuration too: a bad one is exit 2, before anything starts.
        if settings.tls is not None:
            settings.tls.check()
        access = settings.access(config)
        # Connections must not take the descriptors the log's files need (docs/operations.md, "Limits").
        raise_descriptor_limit()
        settings.check_descriptors(config)
    except InvalidArgumentError as exc:
        print(f"lkstream: {exc}", file=sys.stderr)
        return 2
    return run(settings, config, access)


def _log_security(settings: ServerSettings, config: BrokerConfig) -> None:
    tls = settings.tls
    users, acls = settings.security_files(config)
    kafka = ""
    if settings.kafka_port != -1 and settings.auth:
        kafka = f"; Kafka SASL {', '.join(MECHANISMS if tls is not None else SCRAM_MECHANISMS)}"
    log.info(
        "TLS %s; authentication %s%s",
        "off" if tls is None else "on" + (", client certificates required" if tls.client_ca_file else ""),
        f"on (users {users}, ACLs {acls})" if settings.auth else "off: every caller may do anything",
        kafka,
    )
