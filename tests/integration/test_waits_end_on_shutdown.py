"""Reads waiting for data (Subscribe, a long-poll Fetch) end as soon as the daemon stops, not at its grace period."""

from __future__ import annotations

import threading
import time
from typing import Any

import grpc

import lkstream
from lkstream.wire._proto import messaging_pb2 as pb
from lkstream.wire._proto import messaging_pb2_grpc as pb_grpc

from .conftest import DaemonFactory

GRACE_S = 30.0  # far longer than a wait that ends on the stop signal may take


def test_a_waiting_subscribe_and_a_long_poll_fetch_end_at_once_when_the_daemon_stops(
    start_daemon: DaemonFactory,
) -> None:
    daemon = start_daemon(shutdown_grace_s=GRACE_S)
    with lkstream.connect(daemon.address) as broker:
        broker.produce_many_sync("waits", [(None, b"x")])
    outcomes: dict[str, Any] = {}
    with grpc.insecure_channel(daemon.address) as channel:
        stub = pb_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]

        first_batch = threading.Event()

        def subscribe() -> None:
            # From offset 0: the first message says the stream is in the daemon, which then waits at offset 1.
            stream = stub.SubscribeBatches(pb.FetchRequest(topic="waits", partition=0, offset=0))
            try:
                for _ in stream:
                    first_batch.set()
                outcomes["subscribe"] = grpc.StatusCode.OK
            except grpc.RpcError as exc:
                outcomes["subscribe"] = exc.code()
            outcomes["subscribe_ended"] = time.monotonic()

        def long_poll() -> None:
            try:
                response = stub.Fetch(pb.FetchRequest(topic="waits", partition=0, offset=1, max_wait_ms=60_000))
                outcomes["fetch"] = list(response.records)
            except grpc.RpcError as exc:  # reached the daemon only as it stopped
                outcomes["fetch"] = exc.code()
            outcomes["fetch_ended"] = time.monotonic()

        readers = [threading.Thread(target=long_poll), threading.Thread(target=subscribe)]
        for reader in readers:  # the Fetch first, on the same connection: it is in the daemon before the Subscribe
            reader.start()
        assert first_batch.wait(10), "the Subscribe stream never delivered the first batch"
        stopped = time.monotonic()
        assert daemon.terminate() == 0, "".join(daemon.output)
        for reader in readers:
            reader.join(GRACE_S)
    assert outcomes["subscribe"] == grpc.StatusCode.UNAVAILABLE
    assert outcomes["fetch"] in ([], grpc.StatusCode.UNAVAILABLE)
    assert outcomes["subscribe_ended"] - stopped < GRACE_S / 2
    assert outcomes["fetch_ended"] - stopped < GRACE_S / 2


def test_a_subscribe_waiting_on_a_deleted_topic_ends_with_an_error_instead_of_spinning(
    start_daemon: DaemonFactory,
) -> None:
    daemon = start_daemon()
    with lkstream.connect(daemon.address) as broker:
        broker.produce_many_sync("doomed", [(None, b"x")])
        outcome: dict[str, Any] = {}
        first_batch = threading.Event()
        with grpc.insecure_channel(daemon.address) as channel:
            stub = pb_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]

            def subscribe() -> None:
                try:
                    for _ in stub.SubscribeBatches(pb.FetchRequest(topic="doomed", partition=0, offset=0), timeout=30):
                        first_batch.set()
                    outcome["code"] = grpc.StatusCode.OK
                except grpc.RpcError as exc:
                    outcome["code"] = exc.code()

            reader = threading.Thread(target=subscribe)
            reader.start()
            assert first_batch.wait(10), "the Subscribe stream never delivered the first batch"
            broker.delete_topic("doomed")
            reader.join(20)
            assert not reader.is_alive(), "the Subscribe stream outlived its topic"
    assert outcome["code"] in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.NOT_FOUND)
