"""The gRPC listener's per-address limits, enforced from outside gRPC core (issue 28, finding 3)."""

from __future__ import annotations

import socket
import sys

import pytest

from lkstream.server.grpc.peers import attach_filter, shut_down, socket_descriptors, syn_filter, tcp_sockets

# The per-address limit reads the kernel's TCP table through netlink and attaches classic BPF socket
# filters: Linux only (elsewhere the daemon logs that the limit is not enforced: peers.py); CI runs Linux.
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the kernel's TCP table and socket filters are Linux's")


def _connects(source: str, target: tuple[str, int]) -> bool:
    family = socket.AF_INET6 if ":" in source else socket.AF_INET
    with socket.socket(family) as client:
        client.bind((source, 0))
        client.settimeout(0.5)  # a dropped SYN is retried after 1 s: half a second tells
        try:
            client.connect(target)
        except TimeoutError:
            return False
        return True


@pytest.mark.parametrize(("bind", "dual_stack"), [("127.0.0.1", False), ("::", True)])
def test_the_syn_filter_drops_new_connections_of_blocked_addresses_only(bind: str, dual_stack: bool) -> None:
    family = socket.AF_INET6 if dual_stack else socket.AF_INET
    with socket.socket(family) as listener:
        if dual_stack:
            listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        listener.bind((bind, 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        blocked = ["127.0.0.2", "127.0.0.9"] + (["::1"] if dual_stack else [])
        attach_filter(listener.fileno(), syn_filter(blocked))
        assert _connects("127.0.0.1", ("127.0.0.1", port))
        assert _connects("127.0.0.3", ("127.0.0.1", port))
        assert not _connects("127.0.0.2", ("127.0.0.1", port))
        assert not _connects("127.0.0.9", ("127.0.0.1", port))
        if dual_stack:
            assert not _connects("::1", ("::1", port))
        attach_filter(listener.fileno(), syn_filter([]))  # nobody blocked any more
        assert _connects("127.0.0.2", ("127.0.0.1", port))


def test_a_connection_is_found_by_its_inode_and_shut_down_but_not_a_reused_descriptor() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        server, _ = listener.accept()
        with client, server:
            rows = [r for r in tcp_sockets(port) if r.state == "01"]
            assert [r.peer for r in rows] == ["127.0.0.1"]
            inode = rows[0].inode
            assert socket_descriptors({inode}) == {inode: server.fileno()}
            assert not shut_down(server.fileno(), inode + 1)  # another socket now: left alone
            assert shut_down(server.fileno(), inode)
            client.settimeout(5)
            assert client.recv(10) == b""  # the peer sees the end


def test_the_proc_table_fallback_finds_what_socket_diagnostics_find() -> None:
    from lkstream.server.grpc.peers import _diag_sockets, _proc_sockets

    with socket.socket(socket.AF_INET6) as listener:
        listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        listener.bind(("::", 0))
        listener.listen(4)
        port = listener.getsockname()[1]
        clients = [socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.3", 0)) for _ in range(3)]
        accepted = [listener.accept()[0] for _ in clients]
        try:

            def held(rows: list) -> list:  # type: ignore[type-arg]
                return sorted((r.peer, r.state, r.inode) for r in rows if r.state in ("01", "0A"))

            diag = held(_diag_sockets(port))
            assert diag == held(_proc_sockets(port))
            assert [peer for peer, state, _ in diag if state == "01"] == ["127.0.0.3"] * 3  # IPv4-mapped as IPv4
        finally:
            for sock in clients + accepted:
                sock.close()
