"""The remote client against a real daemon that goes away: retries with backoff, bounded connect."""

from __future__ import annotations

import socket
import threading
import time

import pytest

import lkstream
from lkstream import BrokerUnavailableError, Producer

from .conftest import DaemonProcess, RestartDaemon


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _restart_in_background(
    daemon: DaemonProcess, restart: RestartDaemon
) -> tuple[threading.Thread, list[DaemonProcess]]:
    """SIGTERM ``daemon`` (by PID, waiting for it to exit), then restart it on its port from a thread."""
    assert daemon.terminate() == 0
    restarted: list[DaemonProcess] = []
    thread = threading.Thread(target=lambda: restarted.append(restart(daemon)), daemon=True)
    thread.start()
    return thread, restarted


def test_fetch_and_describe_during_a_restart_succeed_after_retries(
    daemon: DaemonProcess, restart_daemon: RestartDaemon
) -> None:
    with lkstream.connect(daemon.address, retries=12, retry_backoff_ms=100, retry_seed=7) as client:
        client.create_topic("r", 1)
        client.produce_many_sync("r", [(None, f"v{i}") for i in range(10)], partition=0)
        thread, restarted = _restart_in_background(daemon, restart_daemon)
        started = time.monotonic()
        records = client.read_from("r", 0, 0)  # issued while the daemon is down
        assert [r.value for r in records] == [f"v{i}".encode() for i in range(10)]
        assert client.describe_topic("r").partitions[0].next_offset == 10
        thread.join(30)
        assert restarted and restarted[0].address == daemon.address
        assert time.monotonic() - started < 30
        # Produce after the restart: the channel reconnects, offsets continue.
        assert client.produce_many_sync("r", [(None, b"after")], partition=0) == [(0, 10)]


async def test_async_describe_during_a_restart_and_producer_over_remote(
    daemon: DaemonProcess, restart_daemon: RestartDaemon
) -> None:
    client = lkstream.connect(daemon.address, retries=12, retry_backoff_ms=100, retry_seed=3)
    try:
        client.create_topic("a", 2)
        producer = Producer(client, linger_ms=20)
        futures = [producer.send("a", f"v{i}", partition=1) for i in range(50)]
        await producer.flush()
        assert [f.result() for f in futures] == [(1, i) for i in range(50)]
        thread, _ = _restart_in_background(daemon, restart_daemon)
        result = await client.fetch_async("a", 1, 0)
        assert result.high_watermark == 50
        thread.join(30)
        await producer.close()
    finally:
        client.close()


def test_connect_to_a_closed_port_fails_in_bounded_time_naming_the_address() -> None:
    address = f"127.0.0.1:{_closed_port()}"
    started = time.monotonic()
    with pytest.raises(BrokerUnavailableError) as info:
        lkstream.connect(address, connect_timeout_s=1.5)
    elapsed = time.monotonic() - started
    assert elapsed < 1.5 + 1.0
    assert address in str(info.value)
    assert info.value.address == address
    assert "attempts" in str(info.value)


def test_retries_zero_fails_at_once() -> None:
    address = f"127.0.0.1:{_closed_port()}"
    started = time.monotonic()
    with pytest.raises(BrokerUnavailableError, match=address):
        lkstream.connect(address, retries=0)
    assert time.monotonic() - started < 1.0
