"""Issue 12, finding 9: admin work runs off the event loop, so other clients are served meanwhile.

Before: creating or deleting a 4,000-partition topic ran on the daemon's one event loop for about
2.9 s, and every other client's call waited as long. Here a large topic is created or deleted over
gRPC or HTTP while another client produces and fetches on a small topic: each of its calls must
be answered while the admin call is still running. The test asserts an order of events, not a
duration: it holds on a loaded machine too (docs/benchmarks.md has the latencies).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import lkstream
from tests.integration.conftest import DaemonFactory, DaemonProcess

PARTITIONS = 8000
START_DEADLINE_S = 60.0


def _http(daemon: DaemonProcess, method: str, path: str, body: object | None = None) -> int:
    host, port = daemon.http_address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=300)
    headers = {"Content-Type": "application/json"} if body is not None else {}
    conn.request(method, path, None if body is None else json.dumps(body), headers)
    status = conn.getresponse().status
    conn.close()
    return status


def _grpc_create(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address, timeout=300) as client:
        client.create_topic("big", PARTITIONS)


def _grpc_delete(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address, timeout=300) as client:
        client.delete_topic("big")


def _http_create(daemon: DaemonProcess) -> None:
    assert _http(daemon, "POST", "/topics", {"name": "big", "partitions": PARTITIONS}) == 201


def _http_delete(daemon: DaemonProcess) -> None:
    assert _http(daemon, "DELETE", "/topics/big") == 204


def _creating(data: Path) -> bool:
    """The create has started: its staging directory (or the renamed topic) exists."""
    trash = data / "trash"
    return (data / "topics" / "big").exists() or (trash.exists() and any(trash.glob("new-*")))


def _deleting(data: Path) -> bool:
    """The delete has started, and its files are not all gone: the topic sits in the trash.

    A delete answers at its commit point, the rename into the trash; the broker's trash thread
    removes the files afterwards. That removal is the long part, so it counts as running.
    """
    trash = data / "trash"
    return trash.exists() and any(trash.glob("big-*"))


def _create_running(worker: threading.Thread, data: Path) -> bool:
    return worker.is_alive()


def _delete_running(worker: threading.Thread, data: Path) -> bool:
    return worker.is_alive() or _deleting(data)


Started = Callable[[Path], bool]
Running = Callable[[threading.Thread, Path], bool]
ADMIN: dict[str, tuple[Callable[[DaemonProcess], None], Started, Running, bool]] = {
    # name: (the admin call, "it has started", "it is still at work", whether "big" must exist first)
    "grpc-create": (_grpc_create, _creating, _create_running, False),
    "http-create": (_http_create, _creating, _create_running, False),
    "grpc-delete": (_grpc_delete, _deleting, _delete_running, True),
    "http-delete": (_http_delete, _deleting, _delete_running, True),
}


@pytest.mark.parametrize("admin", sorted(ADMIN))
def test_other_clients_are_served_while_a_large_topic_is_created_or_deleted(
    start_daemon: DaemonFactory, admin: str
) -> None:
    call, started, running, needs_topic = ADMIN[admin]
    daemon = start_daemon(max_partitions=PARTITIONS + 10)
    with lkstream.connect(daemon.address) as client:
        client.create_topic("small", 1)
        if needs_topic:
            client.create_topic("big", PARTITIONS)
        client.produce_many_sync("small", [(None, b"warm-up")])
        failure: list[BaseException] = []

        def run() -> None:
            try:
                call(daemon)
            except BaseException as exc:
                failure.append(exc)

        worker = threading.Thread(target=run)
        worker.start()
        deadline = time.monotonic() + START_DEADLINE_S
        while not started(daemon.data_dir):
            assert worker.is_alive() and time.monotonic() < deadline, f"{admin} did not start: {failure}"
            time.sleep(0.005)
        served_during = 0  # calls answered while the admin work still ran, checked after each answer
        attempts = 0
        while running(worker, daemon.data_dir) and served_during < 3:
            attempts += 1
            client.produce_many_sync("small", [(None, f"during {admin}".encode())])
            assert client.read_from("small", 0, attempts)  # the record just produced
            if running(worker, daemon.data_dir):
                served_during += 1
        worker.join(300)
        assert not failure, failure
        assert served_during >= 1, f"the small topic was served only after the {admin} finished"
