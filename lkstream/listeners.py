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

Works with asyncio's selector event loop, which accepts through the listening
socket object's :meth:`~socket.socket.accept` and closes connections through their
socket objects. Thread-safe (the counters take a lock).
"""

from __future__ import annotations

import logging
import resource
import socket
import threading
import time
from typing import Any, Final

log = logging.getLogger("lkstream.listeners")

#: The daemon raises its soft descriptor limit to the hard limit, but not beyond this.
DESCRIPTOR_CEILING: Final = 1 << 20
#: At most one "connection refused" warning per listener per this many seconds.
REFUSAL_LOG_INTERVAL_S: Final = 60.0
DEFAULT_BACKLOG: Final = 128


class ConnectionCap:
    """The open connections of one listener, at most ``limit``."""

    def __init__(self, name: str, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"{name}: a connection cap must be positive, got {limit}")
        self.name = name
        self.limit = limit
        self._lock = threading.Lock()
        self._open = 0
        #: Connections closed at once because ``limit`` were open.
        self.refused = 0
        self._last_warning = -REFUSAL_LOG_INTERVAL_S
        self._unreported = 0

    @property
    def open(self) -> int:
        return self._open

    def take(self) -> bool:
        """Count one more connection if there is room; False (and count a refusal) if not."""
        with self._lock:
            if self._open < self.limit:
                self._open += 1
                return True
            self.refused += 1
            self._unreported += 1
            now = time.monotonic()
            if now - self._last_warning < REFUSAL_LOG_INTERVAL_S:
                return False
            self._last_warning, unreported, self._unreported = now, self._unreported, 0
        log.warning(
            "%s: refused %d connection(s): %d open is the cap (server.%s_max_connections)",
            self.name,
            unreported,
            self.limit,
            self.name,
        )
        return False

    def give_back(self) -> None:
        with self._lock:
            self._open -= 1


class _CountedConnection(socket.socket):
    """An accepted connection that gives its slot back, once, when it is closed or detached."""

    _cap: ConnectionCap | None = None

    def _give_back(self) -> None:
        cap, self._cap = self._cap, None
        if cap is not None:
            cap.give_back()

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
            if not self.cap.take():
                socket.socket(self.family, self.type, self.proto, fileno=fd).close()
                continue
            connection = _CountedConnection(self.family, self.type, self.proto, fileno=fd)
            connection._cap = self.cap
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
