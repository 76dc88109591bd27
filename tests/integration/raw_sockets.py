"""Raw TCP clients for the limit tests: idle, slow and flooding connections, and how the daemon ended them."""

from __future__ import annotations

import select
import socket
import struct
import time
from collections.abc import Iterable
from pathlib import Path

#: What an HTTP/2 client sends first: the preface and an empty SETTINGS frame (RFC 9113, 3.4).
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def established_connections(address: str) -> int:
    """Established TCP connections whose local end is ``address``'s port (the listening side of each)."""
    port = int(address.rsplit(":", 1)[1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):  # gRPC core may listen on a dual-stack socket
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "01" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 01: ESTABLISHED
                count += 1
    return count


def connect(address: str, timeout: float = 10.0) -> socket.socket:
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _readable(socks: list[socket.socket], timeout_s: float) -> list[socket.socket]:
    """The sockets of ``socks`` with something to read (or closed): poll(2), which has no FD_SETSIZE limit."""
    poller = select.poll()
    by_fd = {sock.fileno(): sock for sock in socks}
    for fd in by_fd:
        poller.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
    return [by_fd[fd] for fd, _ in poller.poll(timeout_s * 1000)]


def ended(sock: socket.socket) -> bool:
    """Whether the peer closed ``sock`` (reads and drops whatever it sent before)."""
    try:
        while _readable([sock], 0):
            if not sock.recv(65536):
                return True
    except OSError:  # ECONNRESET: closed too
        return True
    return False


def wait_ended(sock: socket.socket, deadline_s: float, trickle: bytes = b"", every_s: float = 0.2) -> float | None:
    """Seconds until the daemon closed ``sock`` (None if it was still open after ``deadline_s``).

    With ``trickle``, send one byte of it every ``every_s`` meanwhile: a slow client.
    """
    started = time.monotonic()
    sent = 0
    while time.monotonic() - started < deadline_s:
        if trickle and sent < len(trickle):
            try:
                sock.sendall(trickle[sent : sent + 1])
            except OSError:
                return time.monotonic() - started
            sent += 1
        if _readable([sock], every_s if trickle else 0.05) and ended(sock):
            return time.monotonic() - started
    return None


def wait_all_ended(socks: Iterable[socket.socket], count: int, deadline_s: float) -> int:
    """Wait until at least ``count`` of ``socks`` were closed by the daemon; return how many were."""
    pending = list(socks)
    closed = 0
    deadline = time.monotonic() + deadline_s
    while closed < count and pending and time.monotonic() < deadline:
        for sock in _readable(pending, 0.1):
            if ended(sock):
                pending.remove(sock)
                closed += 1
    return closed


def kafka_api_versions(correlation_id: int = 7) -> bytes:
    """An ApiVersions v0 request frame (the smallest request every Kafka server answers)."""
    client_id = b"limits-test"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


def read_kafka_response(sock: socket.socket, deadline_s: float) -> int | None:
    """The correlation id of the next response frame on ``sock``, or None if none arrived in time."""
    sock.settimeout(deadline_s)
    try:
        header = read_exactly(sock, 8)
    except TimeoutError:
        return None
    size, correlation = struct.unpack(">ii", header)
    read_exactly(sock, size - 4)
    return int(correlation)


def read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data
