"""Listening sockets that serve at most a fixed number of connections at once (issue 12, finding 7).

Sockets and the log's segment files share one descriptor limit (``RLIMIT_NOFILE``).
Storage keeps its files within a budget (:mod:`lkstream.storage.handles`) and leaves
``open_files_reserve`` descriptors to everything else; each listener must therefore
cap its connections, or 1,700 slow HTTP clients take the descriptors a segment roll
needs. The HTTP and Kafka listeners accept through a :class:`CappedListener`; gRPC
has its own cap in gRPC core (``grpc.max_allowed_incoming_connections``).

The cap counts descriptors, not protocol sessions: a connection counts from
``accept()`` until its socket is closed, whatever happens in between (a TLS handshake
that fails, a client that never sends a byte). A connection beyond the cap is
accepted and closed at once (the client sees the connection end, not a hang in the
kernel's backlog), and counted in :attr:`ConnectionCap.refused`; one warning per
minute says so. Leaving it unaccepted instead would keep the listening socket
readable and spin the event loop.

Each peer address may also hold at most a part of the cap (:class:`AddressLimit`,
``server.max_connections_per_address``, Kafka's ``max.connections.per.ip``; issue 28,
finding 3): one client, or one attacker, cannot take every slot. A connection beyond its
address's limit is closed at accept the same way.

Repeated connection-level events (refusals, malformed requests, timeouts) are logged by a
:class:`ThrottledLog`: the first at once, then one summary line per interval, so a flood
cannot fill the log.

Works with asyncio's selector event loop, which accepts through the listening
socket object's :meth:`~socket.socket.accept` and closes connections through their
socket objects. Thread-safe (the counters take a lock).
"""

from __future__ import annotations

import ipaddress
import logging
import resource
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

log = logging.getLogger("lkstream.listeners")

#: The daemon raises its soft descriptor limit to the hard limit, but not beyond this.
DESCRIPTOR_CEILING: Final = 1 << 20
#: At most one "connection refused" warning per listener per this many seconds.
REFUSAL_LOG_INTERVAL_S: Final = 60.0
DEFAULT_BACKLOG: Final = 128


def peer_address(peer: Any) -> str:
    """The IP address of a socket peer (``getpeername()``), IPv4-mapped IPv6 addresses as IPv4."""
    host = str(peer[0]) if isinstance(peer, tuple) and peer else str(peer)
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


@dataclass(frozen=True)
class AddressLimit:
    """How many connections one peer address may hold on one listener (Kafka's ``max.connections.per.ip``).

    ``overrides`` maps an address to its own limit (Kafka's ``max.connections.per.ip.overrides``):
    a proxy or a NAT gateway that carries many clients.
    """

    default: int
    overrides: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.default < 1 or any(value < 1 for value in self.overrides.values()):
            raise ValueError("a per-address connection limit must be positive")

    def of(self, address: str) -> int:
        return self.overrides.get(address, self.default)


class ThrottledLog:
    """Repeated events of one kind as one log line per interval: the first at once, then a count.

    Kinds are a handful of fixed names (never an address or a name a client chose), so the
    bookkeeping is bounded. Thread-safe.
    """

    def __init__(self, logger: logging.Logger, interval_s: float = REFUSAL_LOG_INTERVAL_S) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def event(self, kind: str, level: int, message: str, *args: object) -> None:
        """Log ``message % args`` unless a line of ``kind`` went out within the interval (then count it)."""
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(kind, -self.interval_s) < self.interval_s:
                self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
                return
            self._last[kind] = now
            suppressed = self._suppressed.pop(kind, 0)
        if suppressed:
            message += " (and %d more like it in the last %.0f s)"
            args = (*args, suppressed, self.interval_s)
        self.logger.log(level, message, *args)

    def suppressed(self, kind: str) -> int:
        """Events of ``kind`` not logged since its last line."""
        with self._lock:
            return self._suppressed.get(kind, 0)


class ConnectionCap:
    """The open connections of one listener: at most ``limit``, and at most ``per_address`` from one address."""

    def __init__(self, name: str, limit: int, per_address: AddressLimit | None = None) -> None:
        if limit < 1:
            raise ValueError(f"{name}: a connection cap must be positive, got {limit}")
        self.name = name
        self.limit = limit
        self.per_address = per_address
        self._lock = threading.Lock()
        self._open = 0
        self._by_address: dict[str, int] = {}  # only addresses with open connections: at most ``limit`` keys
        #: Connections closed at once because ``limit`` were open.
        self.refused = 0
        #: Connections closed at once because their address held its limit.
        self.refused_per_address = 0
        self._log = ThrottledLog(log)

    @property
    def open(self) -> int:
        return self._open

    def open_from(self, address: str) -> int:
        """Connections open from ``address``."""
        return self._by_address.get(address, 0)

    def take(self, address: str = "") -> bool:
        """Count one more connection from ``address`` if there is room; False (and count a refusal) if not."""
        with self._lock:
            if self._open >= self.limit:
                self.refused += 1
                over_cap = True
            elif self.per_address is not None and self._by_address.get(address, 0) >= self.per_address.of(address):
                self.refused_per_address += 1
                over_cap = False
            else:
                self._open += 1
                self._by_address[address] = self._by_address.get(address, 0) + 1
                return True
        if over_cap:
            self._log.event(
                "cap",
                logging.WARNING,
                "%s: refused a connection: %d open is the cap (server.%s_max_connections)",
                self.name,
                self.limit,
                self.name,
            )
        else:
            assert self.per_address is not None
            self._log.event(
                "address",
                logging.WARNING,
                "%s: refused a connection from %s: %d open from one address is the limit "
                "(server.max_connections_per_address)",
                self.name,
                address,
                self.per_address.of(address),
            )
        return False

    def give_back(self, address: str = "") -> None:
        with self._lock:
            self._open -= 1
            left = self._by_address.get(address, 0) - 1
            if left > 0:
                self._by_address[address] = left
            else:
                self._by_address.pop(address, None)


class _CountedConnection(socket.socket):
    """An accepted connection that gives its slot back, once, when it is closed or detached."""

    _cap: ConnectionCap | None = None
    _address: str = ""

    def _give_back(self) -> None:
        cap, self._cap = self._cap, None
        if cap is not None:
            cap.give_back(self._address)

    def close(self) -> None:
        self._give_back()
        super().close()

    def detach(self) -> int:
        self._give_back()
        return super().detach()


class CappedListener(socket.socket):
    """A listening TCP socket whose :meth:`accept` keeps at most ``cap.limit`` connections open."""

    cap: ConnectionCap

    def accept(self) -> tuple[socket.socket, Any]:
        while True:
            fd, address = self._accept()  # type: ignore[attr-defined]  # BlockingIOError: nothing left to accept
            peer = peer_address(address)
            if not self.cap.take(peer):
                socket.socket(self.family, self.type, self.proto, fileno=fd).close()
                continue
            connection = _CountedConnection(self.family, self.type, self.proto, fileno=fd)
            connection._cap, connection._address = self.cap, peer
            if socket.getdefaulttimeout() is None and self.gettimeout():
                connection.setblocking(True)  # as socket.accept does (bpo-7995)
            return connection, address


def raise_descriptor_limit(ceiling: int = DESCRIPTOR_CEILING) -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit (at most ``ceiling``); return the soft limit now.

    What Go's runtime does for every server since 1.19: the soft limit (often 1,024) is a
    compatibility default for ``select()``, which nothing here uses; the hard limit is the
    administrator's. The log's file budget grows with it, the sockets' reserve does not.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(ceiling, ceiling if hard == resource.RLIM_INFINITY else hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:  # e.g. macOS caps the soft limit lower than the hard one
            log.info("could not raise the descriptor limit from %d to %d: %s", soft, target, exc)
            return soft
        log.info("raised the descriptor limit (RLIMIT_NOFILE) from %d to %d", soft, target)
        return target
    return soft if soft != resource.RLIM_INFINITY else ceiling


def listen(host: str, port: int, cap: ConnectionCap, *, backlog: int = DEFAULT_BACKLOG) -> CappedListener:
    """A non-blocking :class:`CappedListener` bound to ``host:port`` (``port`` 0: any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: accepted sockets inherit it, and asyncio sets TCP_NODELAY only on sockets
    # whose proto says TCP. Without it a response written in pieces waited for the client's
    # delayed ACK (40 ms per Kafka Fetch answer, issue 25).
    sock = CappedListener(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.cap = cap
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock
