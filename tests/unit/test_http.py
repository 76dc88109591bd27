"""The HTTP endpoints on a real aiohttp server bound to a free loopback port."""

from __future__ import annotations

import asyncio
import socket
import urllib.error
import urllib.request
from collections.abc import AsyncIterator

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from lkstream import Broker
from lkstream.broker.metrics import BrokerMetrics
from lkstream.server.http import DEFAULT_HOST, DEFAULT_PORT, HttpServer, start_http


@pytest.fixture
async def server(broker: Broker) -> AsyncIterator[HttpServer]:
    metrics = BrokerMetrics(broker)
    http = await start_http(broker, metrics, "127.0.0.1", 0)
    try:
        yield http
    finally:
        await http.stop()
        metrics.close()


async def get(url: str) -> tuple[int, str, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, response.headers.get("Content-Type", ""), await response.text()


def test_defaults_are_loopback_and_8080() -> None:
    assert DEFAULT_HOST == "127.0.0.1"
    assert DEFAULT_PORT == 8080


async def test_binds_loopback_on_a_free_port(server: HttpServer) -> None:
    assert server.host == "127.0.0.1"
    assert server.port > 0
    assert server.url == f"http://127.0.0.1:{server.port}"


async def test_healthz(server: HttpServer) -> None:
    status, _, body = await get(server.url + "/healthz")
    assert (status, body) == (200, "ok\n")


async def test_ready_is_503_until_set_ready(server: HttpServer, broker: Broker) -> None:
    status, _, _ = await get(server.url + "/ready")
    assert status == 503
    server.set_ready()
    status, _, body = await get(server.url + "/ready")
    assert (status, body) == (200, "ready\n")
    server.set_not_ready()
    status, _, _ = await get(server.url + "/ready")
    assert status == 503
    server.set_ready()
    broker.close()  # a closed broker accepts no writes: not ready, yet alive
    assert (await get(server.url + "/ready"))[0] == 503
    assert (await get(server.url + "/healthz"))[0] == 200


async def test_metrics_text_moves_with_records(server: HttpServer, broker: Broker) -> None:
    status, content_type, body = await get(server.url + "/metrics")
    assert status == 200
    assert content_type.startswith("text/plain")
    names = {f.name for f in text_string_to_metric_families(body)}
    assert {"lk_inflight_bytes", "lk_fsync_latency_seconds", "lk_disk_free_bytes"} <= names

    await broker.produce_many("clicks", [(None, b"v")] * 3)
    _, _, body = await get(server.url + "/metrics")
    assert 'lk_produced_total{partition="0",topic="clicks"} 3.0' in body
    assert 'lk_partition_next_offset{partition="0",topic="clicks"} 3.0' in body


async def test_urllib_client_in_a_thread(server: HttpServer) -> None:
    """A plain blocking client (what a probe or curl does) sees the same answers."""

    def fetch(path: str) -> int:
        try:
            with urllib.request.urlopen(server.url + path, timeout=5) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return exc.code

    assert await asyncio.to_thread(fetch, "/healthz") == 200
    assert await asyncio.to_thread(fetch, "/ready") == 503
    assert await asyncio.to_thread(fetch, "/metrics") == 200
    assert await asyncio.to_thread(fetch, "/nope") == 404


async def test_start_ready_and_stop_releases_the_port(broker: Broker) -> None:
    metrics = BrokerMetrics(broker)
    http = await start_http(broker, metrics, port=0, ready=True)
    port = http.port
    assert (await get(http.url + "/ready"))[0] == 200
    await http.stop()
    await http.stop()  # idempotent
    with pytest.raises(aiohttp.ClientConnectionError):
        await get(f"http://127.0.0.1:{port}/healthz")
    # The port is free again: a new server can bind it.
    again = await start_http(broker, metrics, "127.0.0.1", port)
    try:
        assert (await get(again.url + "/healthz"))[0] == 200
    finally:
        await again.stop()
        metrics.close()


async def test_port_in_use_raises(server: HttpServer, broker: Broker) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        busy = holder.getsockname()[1]
        with pytest.raises(OSError):
            await start_http(broker, server.metrics, "127.0.0.1", busy)
