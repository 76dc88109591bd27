"""The rough edges of a Kafka user's first hour (issue 26, items 5 and 6): ports and listeners.

Real ``lkstream`` subprocesses against a real daemon on free loopback ports.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from tests.integration.conftest import DaemonProcess
from tests.integration.test_cli_first_steps import one_error_line, run

pytestmark = pytest.mark.timeout(180)


@contextmanager
def held_ports(count: int) -> Iterator[list[int]]:
    """``count`` loopback ports held by listening sockets (another program's ports)."""
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket())
            sock.bind(("127.0.0.1", 0))
            sock.listen()
            ports.append(int(sock.getsockname()[1]))
        yield ports


def test_a_busy_kafka_port_names_its_setting(tmp_path: Path) -> None:
    with held_ports(1) as (kafka,):
        done = run(
            "serve", "--persist-dir", str(tmp_path / "d"), "--grpc-port", "0", "--http-port", "0",
            "--kafka-port", str(kafka), "--log-level", "WARNING",
        )  # fmt: skip
    assert done.returncode == 1, done.stderr
    line = one_error_line(done.stderr)
    assert f"cannot listen for Kafka on 127.0.0.1:{kafka} (address already in use)" in line, line
    assert "server.kafka_port" in line and "--kafka-port" in line and "LKSTREAM_SERVER__KAFKA_PORT" in line, line


def test_every_busy_port_is_reported_by_one_start(tmp_path: Path) -> None:
    with held_ports(3) as (grpc, http, kafka):
        done = run(
            "serve", "--persist-dir", str(tmp_path / "d"), "--grpc-port", str(grpc), "--http-port", str(http),
            "--kafka-port", str(kafka), "--log-level", "WARNING",
        )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 3, done.stderr
    for line, (what, port, setting) in zip(
        lines, [("gRPC", grpc, "grpc"), ("HTTP", http, "http"), ("Kafka", kafka, "kafka")], strict=True
    ):
        assert line.startswith(f"lkstream: cannot listen for {what} on 127.0.0.1:{port}"), line
        assert f"server.{setting}_port" in line, line


def test_bootstrap_at_the_kafka_port_fails_at_once_naming_the_grpc_port(daemon: DaemonProcess) -> None:
    started = time.monotonic()
    done = run("topics", "list", "--bootstrap", daemon.kafka_address)
    elapsed = time.monotonic() - started
    assert done.returncode == 1
    line = one_error_line(done.stderr)
    assert line.startswith(f"Error: UNAVAILABLE: cannot reach the lkstream daemon at {daemon.kafka_address}"), line
    assert "this is the Kafka listener" in line and "server.grpc_port" in line and "Kafka client" in line, line
    assert "TLS" not in line, line
    assert elapsed < 4, f"{elapsed:.1f} s: a Kafka port is not retried like a restarting daemon"
    assert "Traceback" not in "".join(daemon.output)
