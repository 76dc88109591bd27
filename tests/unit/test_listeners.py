"""Connection-capped listening sockets (issue 12, finding 7): counted from accept to close, refused beyond the cap."""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from lkstream.listeners import AddressLimit, ConnectionCap, ThrottledLog, listen, peer_address


async def _serve_and_flood(cap: ConnectionCap, clients: int) -> tuple[list[bytes], int, int]:
    """Serve echo-less connections through a CappedListener; return what each client read and the counts."""
    sock = listen("127.0.0.1", 0, cap)

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the client closes
        writer.close()

    server = await asyncio.start_server(hold, sock=sock)
    port = sock.getsockname()[1]
    try:
        pairs = [await asyncio.open_connection("127.0.0.1", port) for _ in range(clients)]
        async with asyncio.timeout(10):
            refused = [await reader.read() for reader, _ in pairs[cap.limit :]]  # closed at accept: EOF
        open_now = cap.open
        for _, writer in pairs[: cap.limit]:
            writer.close()
        async with asyncio.timeout(10):
            while cap.open:
                await asyncio.sleep(0.01)
        for _, writer in pairs[cap.limit :]:
            writer.close()
        return refused, open_now, cap.open
    finally:
        server.close()
        await server.wait_closed()


def test_connections_beyond_the_cap_are_closed_at_accept_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    cap = ConnectionCap("http", 3)
    with caplog.at_level(logging.WARNING, logger="lkstream.listeners"):
        refused, open_then, open_after = asyncio.run(_serve_and_flood(cap, 7))
    assert refused == [b""] * 4
    assert (open_then, open_after, cap.refused) == (3, 0, 4)
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1  # one line per minute, however many were refused
    assert "server.http_max_connections" in warnings[0]


def test_a_cap_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        ConnectionCap("kafka", 0)


def test_listen_binds_a_free_port_and_closes_its_socket_when_the_bind_fails() -> None:
    cap = ConnectionCap("kafka", 1)
    first = listen("127.0.0.1", 0, cap)
    try:
        port = first.getsockname()[1]
        before = len(os.listdir("/proc/self/fd"))
        with pytest.raises(OSError):
            listen("127.0.0.1", port, cap)
        assert len(os.listdir("/proc/self/fd")) == before
    finally:
        first.close()


def test_the_daemon_raises_its_soft_descriptor_limit_to_the_hard_one() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 512:
        pytest.skip(f"this machine's hard descriptor limit ({hard}) leaves nothing to raise")  # a hosts fact
    child = textwrap.dedent(
        """
        import resource
        from lkstream.listeners import raise_descriptor_limit
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        now = raise_descriptor_limit(ceiling=100_000)
        expected = min(100_000, hard) if hard != resource.RLIM_INFINITY else 100_000
        assert now == expected == resource.getrlimit(resource.RLIMIT_NOFILE)[0], (now, expected)
        print("ok", now)
        """
    )
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.startswith("ok"), done.stdout + done.stderr


def test_accepted_connections_send_small_writes_at_once() -> None:
    """TCP_NODELAY on every accepted connection (asyncio sets it only for sockets made with IPPROTO_TCP).

    Without it, the tail of a response written in pieces waited for the client's delayed ACK:
    40 ms per Kafka Fetch answer and a 36 ms median produce-to-consume latency (issue 25).
    """

    async def accept_one() -> int:
        sock = listen("127.0.0.1", 0, ConnectionCap("kafka", 4))
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def note(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted.set_result(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(note, sock=sock)
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
            async with asyncio.timeout(10):
                nodelay = await accepted
            writer.close()
            return nodelay
        finally:
            server.close()
            await server.wait_closed()

    assert asyncio.run(accept_one()) != 0


def test_one_address_holds_at_most_its_limit_and_an_override_raises_it(caplog: pytest.LogCaptureFixture) -> None:
    cap = ConnectionCap("kafka", 10, AddressLimit(2, {"10.0.0.9": 5}))
    with caplog.at_level(logging.WARNING, logger="lkstream.listeners"):
        assert [cap.take("10.0.0.1") for _ in range(3)] == [True, True, False]
        assert [cap.take("10.0.0.9") for _ in range(6)] == [True] * 5 + [False]
    assert (cap.open, cap.open_from("10.0.0.1"), cap.refused_per_address, cap.refused) == (7, 2, 2, 0)
    cap.give_back("10.0.0.1")
    assert cap.take("10.0.0.1")  # a slot of that address came back
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 and "server.max_connections_per_address" in messages[0]  # one line per interval


def test_the_total_cap_applies_before_the_address_limit() -> None:
    cap = ConnectionCap("http", 2, AddressLimit(2))
    assert cap.take("a") and cap.take("b")
    assert not cap.take("c")
    assert (cap.refused, cap.refused_per_address) == (1, 0)


def test_peers_are_keyed_by_ip_with_ipv4_mapped_addresses_as_ipv4() -> None:
    assert peer_address(("::ffff:10.1.2.3", 5, 0, 0)) == "10.1.2.3"
    assert peer_address(("10.1.2.3", 5)) == "10.1.2.3"
    assert peer_address(("::1", 5, 0, 0)) == "::1"


def test_a_throttled_log_writes_one_line_per_interval_and_counts_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    throttled = ThrottledLog(logging.getLogger("lkstream.test"), interval_s=0.2)
    with caplog.at_level(logging.INFO, logger="lkstream.test"):
        for _ in range(50):
            throttled.event("malformed", logging.INFO, "closing a connection: %s", "bad frame")
        throttled.event("idle", logging.INFO, "closing an idle connection")  # another kind: its own line
        assert throttled.suppressed("malformed") == 49
        time.sleep(0.25)
        throttled.event("malformed", logging.INFO, "closing a connection: %s", "bad frame")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "closing a connection: bad frame",
        "closing an idle connection",
        "closing a connection: bad frame (and 49 more like it in the last 0 s)",
    ]
