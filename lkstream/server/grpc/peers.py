"""Per-address connection limits for the gRPC listener, whose accept loop belongs to gRPC core.

The HTTP and Kafka listeners count each peer address at accept
(:class:`~lkstream.listeners.ConnectionCap`). gRPC core accepts by itself and offers only a
total cap (``grpc.max_allowed_incoming_connections``): 135 raw TCP sockets from one address held
every slot until the handshake timeout, and took them again at once (issue 28, finding 3). So
:class:`PeerLimiter` watches the listener from outside, once per ``interval_s``:

1. it counts the connections on the gRPC port per peer address, from the kernel's socket
   diagnostics (netlink ``SOCK_DIAG``, as ``ss`` does; ``/proc/net/tcp`` and ``tcp6`` as a
   fallback): local port, peer, state, inode;
2. an address over its limit (``server.max_connections_per_address`` and its overrides) loses its
   newest connections beyond it (long-lived channels are the oldest): each is found among this
   process's descriptors by its inode and shut down, and gRPC core sees the connection end;
3. an address at its limit is refused at the next SYN: a classic BPF socket filter on gRPC's
   listening socket (``SO_ATTACH_FILTER``, allowed to any process on its own sockets) drops
   new connections from the addresses that hold their limit, until they hold fewer. Without it
   an attacker would take the slots freed in step 2 again within milliseconds, before any other
   client. The filter sees only packets addressed to the listening socket (SYNs and handshake
   ACKs); established connections have their own socket.

Linux only (elsewhere, and when neither netlink nor ``/proc`` answers, the limiter logs once and
does nothing).
A descriptor is shut down only after ``fstat`` shows it is still the socket of that inode, so a
connection that closed and whose number was reused between the two reads is never touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ipaddress
import logging
import os
import re
import socket
import struct
import sys
import urllib.parse
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from lkstream.listeners import AddressLimit, ThrottledLog, peer_address

log = logging.getLogger("lkstream.server.grpc")

#: How often the connections are counted (the longest an address may go over its limit).
DEFAULT_INTERVAL_S: Final = 0.5
_TCP_TABLES: Final = ("/proc/net/tcp", "/proc/net/tcp6")
#: Kernel TCP states that hold one of gRPC core's connection slots.
_ESTABLISHED, _CLOSE_WAIT, _LISTEN = "01", "08", "0A"
_SO_ATTACH_FILTER: Final = 26
#: Classic BPF (linux/filter.h, linux/bpf_common.h): loads relative to the network header, jumps, returns.
_SKF_NET_OFF: Final = -0x100000
_LD_W_ABS, _LD_B_ABS, _RSH_K, _JEQ_K, _JA, _RET_K = 0x20, 0x30, 0x74, 0x15, 0x05, 0x06
_ACCEPT, _DROP = 0xFFFFFFFF, 0
#: cBPF programs are at most 4,096 instructions: this many IPv6 addresses (9 each) fit with room to spare.
MAX_BLOCKED: Final = 400


@dataclass(frozen=True, slots=True)
class TcpSocket:
    """One row of the kernel's TCP table."""

    local_port: int
    peer: str
    state: str
    inode: int


def _address(hex_address: str) -> str:
    """``/proc/net/tcp``'s address (32-bit words in host order) as text; IPv4-mapped IPv6 as IPv4."""
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4)) if sys.byteorder == "little" else raw
    return peer_address((str(ipaddress.ip_address(words)),))


def grpc_peer_address(peer: str | None) -> str | None:
    """The IP address in gRPC's ``context.peer()`` (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``); None otherwise."""
    if not peer:
        return None
    kind, _, rest = urllib.parse.unquote(peer).partition(":")  # gRPC escapes the brackets: ipv6:%5B::1%5D:5
    if kind not in ("ipv4", "ipv6"):
        return None  # unix sockets and the like: no address to count
    host = rest.rpartition(":")[0].strip("[]")
    return peer_address((host,)) if host else None


def tcp_sockets(port: int) -> list[TcpSocket]:
    """This network namespace's TCP sockets listening or connected on local port ``port``.

    Asked of the kernel's socket diagnostics (netlink ``SOCK_DIAG``, what ``ss`` uses), which filters
    by state: a shared host's ``/proc/net/tcp`` held 9,000 TIME_WAIT rows of other processes, and
    producing and parsing its text took 36 ms a sweep. ``/proc/net/tcp`` is the fallback.
    """
    try:
        return _diag_sockets(port)
    except OSError:
        return _proc_sockets(port)


#: netlink (linux/netlink.h, linux/sock_diag.h, linux/inet_diag.h): request and reply layouts.
_NETLINK_SOCK_DIAG, _SOCK_DIAG_BY_FAMILY, _NLMSG_ERROR, _NLMSG_DONE = 4, 20, 2, 3
_NLM_F_REQUEST_DUMP: Final = 0x1 | 0x300
_NLMSG: Final = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
_DIAG_REQUEST: Final = struct.Struct("=BBBBI48x")  # family, protocol, extensions, pad, states, socket id
_DIAG_REPLY: Final = struct.Struct("=BBBB2s2s16s16s4x8x16xI")  # family, state, timer, retrans, id, ..., inode
_STATES: Final = {"01": 1, "08": 8, "0A": 10}  # TCP_ESTABLISHED, TCP_CLOSE_WAIT, TCP_LISTEN


def _diag_sockets(port: int) -> list[TcpSocket]:
    wanted = sum(1 << state for state in _STATES.values())
    found: list[TcpSocket] = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_SOCK_DIAG) as diag:
        for family in (socket.AF_INET, socket.AF_INET6):
            body = _DIAG_REQUEST.pack(family, socket.IPPROTO_TCP, 0, 0, wanted)
            diag.send(_NLMSG.pack(_NLMSG.size + len(body), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST_DUMP, 1, 0) + body)
            found += _diag_replies(diag, family, port)
    return found


def _diag_replies(diag: socket.socket, family: int, port: int) -> Iterator[TcpSocket]:
    names = {number: name for name, number in _STATES.items()}
    while True:
        data = diag.recv(65536)
        offset = 0
        while offset + _NLMSG.size <= len(data):
            length, kind, _flags, _seq, _pid = _NLMSG.unpack_from(data, offset)
            if kind == _NLMSG_DONE:
                return
            if kind == _NLMSG_ERROR:
                raise OSError("SOCK_DIAG refused the request")
            if kind == _SOCK_DIAG_BY_FAMILY:
                _f, state, _t, _r, sport, _dport, _src, dst, inode = _DIAG_REPLY.unpack_from(data, offset + _NLMSG.size)
                if int.from_bytes(sport, "big") == port:
                    raw = dst[:4] if family == socket.AF_INET else dst
                    peer = peer_address((str(ipaddress.ip_address(raw)),))
                    yield TcpSocket(port, peer, names.get(state, f"{state:02X}"), inode)
            offset += (length + 3) & ~3  # NLMSG_ALIGN
        if not data:
            return


def _proc_sockets(port: int, tables: Iterable[str] = _TCP_TABLES) -> list[TcpSocket]:
    row = re.compile(
        rf"^\s*\d+: [0-9A-F]+:{port:04X} ([0-9A-F]+):[0-9A-F]{{4}} ([0-9A-F]{{2}}) \S+ \S+ \S+\s+\S+\s+\S+\s+(\d+)",
        re.MULTILINE,
    )
    found = []
    for path in tables:
        try:
            with open(path, encoding="ascii") as table:
                text = table.read()
        except FileNotFoundError:  # no IPv6: no tcp6
            continue
        for peer, state, inode in row.findall(text):
            found.append(TcpSocket(port, _address(peer), state, int(inode)))
    return found


def socket_descriptors(inodes: set[int]) -> dict[int, int]:
    """``{inode: descriptor}`` of this process's sockets among ``inodes``."""
    found: dict[int, int] = {}
    for entry in os.scandir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile
            target = os.readlink(entry.path)
            if target.startswith("socket:["):
                inode = int(target[8:-1])
                if inode in inodes:
                    found[inode] = int(entry.name)
    return found


def _is_socket(fd: int, inode: int) -> bool:
    """Whether descriptor ``fd`` is (still) the socket of ``inode``."""
    try:
        return os.fstat(fd).st_ino == inode
    except OSError:
        return False


def shut_down(fd: int, inode: int) -> bool:
    """Shut the socket of ``inode`` down through descriptor ``fd``, if ``fd`` still is that socket."""
    try:
        copy = os.dup(fd)
    except OSError:
        return False
    try:
        if os.fstat(copy).st_ino != inode:  # closed and its number reused since the table was read
            return False
        with socket.socket(fileno=copy) as sock:
            copy = -1  # the socket object closes it
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        return True
    finally:
        if copy != -1:
            os.close(copy)


def _instruction(code: int, k: int, jump_true: int = 0, jump_false: int = 0) -> bytes:
    return struct.pack("HBBI", code, jump_true, jump_false, k & 0xFFFFFFFF)


def syn_filter(blocked: Iterable[str]) -> list[bytes]:
    """A classic BPF program that drops packets from ``blocked`` addresses and accepts the rest.

    Every jump is short (a jump offset is one byte): each address is a comparison followed by
    its own "drop", which a mismatch skips.
    """
    v4 = [int(ipaddress.IPv4Address(a)) for a in blocked if ":" not in a]
    v6 = [ipaddress.IPv6Address(a).packed for a in blocked if ":" in a]
    v4_block = [_instruction(_LD_W_ABS, _SKF_NET_OFF + 12)]  # source address of an IPv4 header
    for number in v4:
        v4_block += [_instruction(_JEQ_K, number, jump_false=1), _instruction(_RET_K, _DROP)]
    v4_block.append(_instruction(_RET_K, _ACCEPT))
    v6_block: list[bytes] = []
    for packed in v6:
        for index, word in enumerate(struct.unpack(">4I", packed)):  # source address of an IPv6 header
            v6_block.append(_instruction(_LD_W_ABS, _SKF_NET_OFF + 8 + 4 * index))
            # Equal: on to the next word (the drop after the last one); not: the next address's first load.
            v6_block.append(_instruction(_JEQ_K, word, jump_false=7 - 2 * index))
        v6_block.append(_instruction(_RET_K, _DROP))
    v6_block.append(_instruction(_RET_K, _ACCEPT))
    # The IP version is the high nibble of the network header's first byte: 6 jumps over the IPv4 part.
    header = [
        _instruction(_LD_B_ABS, _SKF_NET_OFF),
        _instruction(_RSH_K, 4),
        _instruction(_JEQ_K, 6, jump_false=1),
        _instruction(_JA, len(v4_block)),
    ]
    return header + v4_block + v6_block


def attach_filter(fd: int, program: list[bytes]) -> None:
    """Attach ``program`` to the socket ``fd`` (replacing its filter); ``OSError`` if the kernel refuses it."""
    code = ctypes.create_string_buffer(b"".join(program))
    fprog = struct.pack("@HP", len(program), ctypes.addressof(code))  # struct sock_fprog
    with socket.socket(fileno=os.dup(fd)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, fprog)


class PeerLimiter:
    """Holds each peer address of one gRPC listener to its limit (see the module docstring)."""

    def __init__(self, port: int, limit: AddressLimit, *, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self.port = port
        self.limit = limit
        self.interval_s = interval_s
        self._first_seen: dict[int, int] = {}  # inode -> sweep it was first counted in (newest: highest)
        self._sweeps = 0
        self._blocked: frozenset[str] = frozenset()
        self._listeners: dict[int, int] = {}  # inode -> descriptor of gRPC's listening sockets
        self._task: asyncio.Task[None] | None = None
        self._log = ThrottledLog(log)
        #: Connections shut down because their address held more than its limit.
        self.closed = 0

    @property
    def blocked(self) -> frozenset[str]:
        """Addresses whose new connections the listener drops (they hold their limit)."""
        return self._blocked

    def start(self) -> None:
        if sys.platform != "linux":
            log.info("gRPC per-address connection limits need Linux: not enforced on %s", sys.platform)
            return
        self._task = asyncio.create_task(self._run(), name="lkstream-grpc-peer-limits")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.sweep)
            except OSError as exc:  # neither netlink nor /proc (a sandbox), or a filter the kernel refuses
                log.warning("gRPC per-address connection limits are not enforced: %s", exc)
                return
            except Exception as exc:  # a bug here must not end the enforcement, nor take the daemon down
                self._log.event("sweep", logging.ERROR, "gRPC per-address limits: a sweep failed: %r", exc)
            await asyncio.sleep(self.interval_s)

    def sweep(self) -> None:
        """Count, shut down what is over the limits, and refuse new connections of addresses at theirs.

        The port's connections are counted from the kernel's table alone (cheap); this process's
        descriptors are looked up (one ``readlink`` each) only when an address is over its limit or
        the listening socket is not known yet.
        """
        self._sweeps += 1
        rows = tcp_sockets(self.port)
        listening = {row.inode for row in rows if row.state == _LISTEN}
        held: dict[str, list[int]] = {}
        for row in rows:
            if row.state in (_ESTABLISHED, _CLOSE_WAIT):
                held.setdefault(row.peer, []).append(row.inode)
        current = {inode for inodes in held.values() for inode in inodes}
        self._first_seen = {inode: self._first_seen.get(inode, self._sweeps) for inode in current}
        counts = {peer: len(inodes) for peer, inodes in held.items()}
        over = {peer: n - self.limit.of(peer) for peer, n in counts.items() if n > self.limit.of(peer)}
        if over or not listening <= set(self._listeners):
            descriptors = socket_descriptors(listening | current)
            self._listeners = {inode: descriptors[inode] for inode in listening if inode in descriptors}
            for peer, excess in over.items():
                counts[peer] -= self._shut_down_newest(peer, held[peer], excess, descriptors)
        blocked = frozenset(sorted(p for p, n in counts.items() if n >= self.limit.of(p))[:MAX_BLOCKED])
        if blocked != self._blocked:
            program = syn_filter(blocked)
            for inode, fd in self._listeners.items():
                if _is_socket(fd, inode):
                    attach_filter(fd, program)
            self._blocked = blocked

    def _shut_down_newest(self, peer: str, inodes: list[int], excess: int, descriptors: dict[int, int]) -> int:
        """Shut down ``excess`` of ``peer``'s connections, the newest first; how many were."""
        ours = sorted((inode for inode in inodes if inode in descriptors), key=self._first_seen.__getitem__)
        closed = sum(shut_down(descriptors[inode], inode) for inode in ours[-excess:])
        self.closed += closed
        self._log.event(
            "address",
            logging.WARNING,
            "grpc: closed %d connection(s) from %s: %d open from one address is the limit "
            "(server.max_connections_per_address)",
            closed,
            peer,
            self.limit.of(peer),
        )
        return closed
