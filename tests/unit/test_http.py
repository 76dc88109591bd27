"""The HTTP endpoints on a real aiohttp server bound to a free loopback port."""

from __future__ import annotations

import asyncio
import socket
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from lkstream import Broker
from lkstream.broker.metrics import BrokerMetrics
from lkstream.server.http.app import DEFAULT_HOST, DEFAULT_PORT, HttpServer, start_http


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


# -- the JSON API (lkstream.server.http.api) on the same server -------------------------------------


async def post(url: str, body: object) -> tuple[int, dict[str, str], dict[str, Any]]:
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as response:
        return response.status, dict(response.headers), await response.json()


@pytest.fixture
async def api_server(broker: Broker) -> AsyncIterator[HttpServer]:
    metrics = BrokerMetrics(broker)
    http = await start_http(broker, metrics, "127.0.0.1", 0, ready=True, max_request_bytes=4096)
    try:
        yield http
    finally:
        await http.stop()
        metrics.close()


async def test_api_answers_503_until_ready(server: HttpServer) -> None:
    status, headers, body = await post(server.url + "/produce", {"topic_partitions": []})
    assert status == 503
    assert headers["Retry-After"] == "1"
    assert body == {"error": {"code": "not_ready", "message": body["error"]["message"]}}
    assert (await get(server.url + "/openapi.json"))[0] == 200  # the document is always served


async def test_api_body_limit_is_413(api_server: HttpServer) -> None:
    assert api_server.max_request_bytes == 4096
    status, _, body = await post(
        api_server.url + "/produce", {"topic_partitions": [{"topic": "t", "records": ["x" * 5000]}]}
    )
    assert status == 413
    assert body["error"] == {
        "code": "request_too_large",
        "message": "request body exceeds the limit of 4096 bytes",
        "limit": 4096,
    }


def test_default_body_limit_follows_the_batch_limit(broker: Broker) -> None:
    http = HttpServer(broker, BrokerMetrics(broker))
    try:
        assert http.max_request_bytes == broker.config.max_batch_bytes + 1024 * 1024
    finally:
        http.metrics.close()


async def test_api_backpressure_is_429_with_retry_after(api_server: HttpServer, broker: Broker) -> None:
    # Another producer's bytes in flight fill the budget: this produce must be refused, not queued.
    broker.inflight.reserve(broker.config.max_inflight_bytes)
    try:
        status, headers, body = await post(
            api_server.url + "/produce", {"topic_partitions": [{"topic": "t", "records": ["x"]}]}
        )
    finally:
        broker.inflight.release(broker.config.max_inflight_bytes)
    assert status == 429
    assert headers["Retry-After"] == "1"
    assert body["error"]["code"] == "backpressure"
    assert body["results"][0]["error"]["code"] == "backpressure"
    status, _, _ = await post(api_server.url + "/produce", {"topic_partitions": [{"topic": "t", "records": ["x"]}]})
    assert status == 200


async def test_set_not_ready_ends_long_polls_and_refuses_new_calls(api_server: HttpServer, broker: Broker) -> None:
    broker.create_topic("t")
    poll = asyncio.ensure_future(
        post(
            api_server.url + "/consume",
            {"partitions": [{"topic": "t", "partition": 0, "fetch_offset": 0}], "max_wait_ms": 60_000},
        )
    )
    await asyncio.sleep(0.3)
    assert not poll.done()
    api_server.set_not_ready()
    status, _, body = await asyncio.wait_for(poll, 5)
    assert status == 200 and body["partitions"][0]["records"] == []
    status, _, body = await post(api_server.url + "/consume", {"partitions": [{"topic": "t", "partition": 0}]})
    assert (status, body["error"]["code"]) == (503, "not_ready")


def test_every_error_class_has_a_4xx_or_5xx_and_a_code() -> None:
    from lkstream import errors
    from lkstream.server.http.api import error_code, http_status

    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.LkstreamError)]
    expected = {
        "LkstreamError": (500, "lkstream"),
        "InvalidArgumentError": (400, "invalid_argument"),
        "RecordTooLargeError": (413, "record_too_large"),
        "UnknownTopicError": (404, "unknown_topic"),
        "TopicExistsError": (409, "topic_exists"),
        "OffsetOutOfRangeError": (416, "offset_out_of_range"),
        "CorruptRecordError": (500, "corrupt_record"),
        "BackpressureError": (429, "backpressure"),
        "OverloadedError": (429, "overloaded"),
        "StorageError": (500, "storage"),
        "DiskFullError": (507, "disk_full"),
        "DataDirLockedError": (409, "data_dir_locked"),
        "BrokerClosedError": (503, "broker_closed"),
        "BrokerUnavailableError": (503, "broker_unavailable"),
        "ProtocolVersionError": (409, "protocol_version"),
        "UnknownAssignorError": (400, "unknown_assignor"),
        "GroupError": (409, "group"),
        "UnknownMemberError": (404, "unknown_member"),
        "FencedInstanceError": (409, "fenced_instance"),
        "StaleGenerationError": (409, "stale_generation"),
        "RebalanceInProgressError": (409, "rebalance_in_progress"),
        "NotPartitionOwnerError": (409, "not_partition_owner"),
        "InconsistentGroupProtocolError": (409, "inconsistent_group_protocol"),
        "GroupNotEmptyError": (409, "group_not_empty"),
        "GroupSubscribedToTopicError": (409, "group_subscribed_to_topic"),
        "UnknownGroupError": (404, "unknown_group"),
        "OffsetRegressionError": (409, "offset_regression"),
        "OutOfOrderSequenceError": (409, "out_of_order_sequence"),
        "ProducerFencedError": (409, "producer_fenced"),
        "AuthenticationError": (401, "authentication"),
        "AuthorizationError": (403, "authorization"),
        "MemberOwnerError": (403, "member_owner"),
        # issue 12: through the gRPC table (RESOURCE_EXHAUSTED, FAILED_PRECONDITION, INVALID_ARGUMENT)
        "TooManyOpenFilesError": (429, "too_many_open_files"),
        "StorageAccessError": (409, "storage_access"),
        # issue 24: topic configs and timestamps, all INVALID_ARGUMENT
        "InvalidConfigError": (400, "invalid_config"),
        "UnsupportedConfigError": (400, "unsupported_config"),
        "InvalidTimestampError": (400, "invalid_timestamp"),
        "PolicyViolationError": (400, "policy_violation"),  # DeleteRecords on a compact-only topic
        # issue 28: limits reached, not bad arguments; throttles say when to come back (429)
        "PartitionLimitError": (409, "partition_limit"),
        "AutoCreateThrottledError": (429, "auto_create_throttled"),
        "ProducerStateLimitError": (429, "producer_state_limit"),
        # issue 24 / 28 (groups): Kafka's INVALID_SESSION_TIMEOUT, GROUP_MAX_SIZE_REACHED, OFFSET_METADATA_TOO_LARGE
        "InvalidSessionTimeoutError": (400, "invalid_session_timeout"),
        "GroupMaxSizeReachedError": (429, "group_max_size_reached"),
        "OffsetMetadataTooLargeError": (400, "offset_metadata_too_large"),
    }
    assert {c.__name__ for c in classes} <= set(expected), "a new error class needs an HTTP status here"
    for cls in classes:
        error = cls.__new__(cls)
        assert (http_status(error), error_code(error)) == expected[cls.__name__]
