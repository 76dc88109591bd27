"""A real daemon in a subprocess on a free loopback port, with its own data directory.

The daemon is started with ``grpc_port: 0`` and ``http_port: 0`` (the kernel
picks free ports, so parallel runs never collide) and the fixture reads both
addresses from its one "ready" line, waiting with a deadline. It is always stopped: SIGTERM, then
SIGKILL if it has not exited within the deadline.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
READY = re.compile(r"lkstream daemon ready: grpc=(\S+) http=(\S+)")
SERVER_KEYS = (
    frozenset(
        {
            "grpc_host",
            "grpc_port",
            "http_host",
            "http_port",
            "max_request_bytes",
            "shutdown_grace_s",
            "kafka_port",
            "kafka_advertised_host",
            "kafka_zero_copy",
        }
    )
    | frozenset(  # connection limits and timeouts (issue 12, finding 7)
        {
            "grpc_max_connections",
            "http_max_connections",
            "kafka_max_connections",
            "grpc_idle_timeout_s",
            "http_idle_timeout_s",
            "kafka_idle_timeout_s",
            "read_timeout_s",
        }
    )
    | frozenset(  # what a caller may hold before it authenticated (issue 28, findings 2 and 3)
        {
            "max_connections_per_address",
            "max_connections_per_address_overrides",
            "handshake_timeout_s",
            "authentication_timeout_s",
            "unauthenticated_admitted_bytes",
            "admin_host",
            "admin_port",
            "admin_max_connections",
        }
    )
)
KAFKA_READY = re.compile(r"kafka=(\S+)")
ADMIN_READY = re.compile(r"admin=(\S+)")
START_DEADLINE_S = 30.0
STOP_DEADLINE_S = 20.0


@dataclass
class DaemonProcess:
    config_path: Path
    data_dir: Path
    env: dict[str, str]
    process: subprocess.Popen[str] | None = None
    address: str = ""
    http_address: str = ""
    kafka_address: str = ""
    admin_address: str = ""  # "off" unless server.admin_port is set
    #: RLIMIT_NOFILE (soft and hard) of the daemon process; None inherits the test's.
    nofile: int | None = None
    output: list[str] = field(default_factory=list)
    _reader: threading.Thread | None = None

    def start(self) -> DaemonProcess:
        cmd = [sys.executable, "-m", "lkstream.grpc_server", "--config", str(self.config_path)]
        if self.nofile is not None:
            cmd = with_descriptor_limit(self.nofile, cmd)
        self.process = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=self.env,
            cwd=REPO,
        )
        deadline = time.monotonic() + START_DEADLINE_S
        assert self.process.stdout is not None
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.process.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            line = self.process.stdout.readline()
            if not line:  # exited
                break
            self.output.append(line)
            match = READY.search(line)
            if match:
                self.address, self.http_address = match.group(1), match.group(2)
                kafka = KAFKA_READY.search(line)
                self.kafka_address = kafka.group(1) if kafka else ""
                admin = ADMIN_READY.search(line)
                self.admin_address = admin.group(1) if admin else ""
                # Keep reading so a chatty daemon never blocks on a full pipe.
                self._reader = threading.Thread(target=self._read_rest, daemon=True)
                self._reader.start()
                return self
        self.kill()
        raise AssertionError(f"daemon did not become ready within {START_DEADLINE_S}s:\n{''.join(self.output)}")

    def terminate(self, deadline_s: float = STOP_DEADLINE_S) -> int:
        """SIGTERM, wait up to ``deadline_s``, then SIGKILL; return the exit code."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(deadline_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self._drain()
        return code

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def _read_rest(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)

    def _drain(self) -> None:
        if self._reader is not None:
            self._reader.join(5)


_EXEC_LIMITED = (
    "import os, resource, sys; n = int(sys.argv[1]); "
    "resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); os.execv(sys.argv[2], sys.argv[2:])"
)


def with_descriptor_limit(nofile: int, cmd: list[str]) -> list[str]:
    """``cmd`` run with RLIMIT_NOFILE ``nofile``, soft and hard (so the daemon cannot raise it again)."""
    return [sys.executable, "-c", _EXEC_LIMITED, str(nofile), *cmd]


DaemonFactory = Callable[..., DaemonProcess]


@pytest.fixture
def start_daemon(tmp_path: Path) -> Iterator[DaemonFactory]:
    """``start_daemon(**config)`` starts a daemon; every one started is stopped at teardown."""
    started: list[DaemonProcess] = []
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")

    def start(data_dir: Path | None = None, nofile: int | None = None, **config: Any) -> DaemonProcess:
        data = data_dir or tmp_path / "data"
        # Server keys go under `server:`; both ports 0, so the kernel picks free ones.
        server = {
            "grpc_port": 0,
            "http_port": 0,
            "kafka_port": 0,
            **{k: v for k, v in config.items() if k in SERVER_KEYS},
        }
        values = {"persist_dir": str(data), **{k: v for k, v in config.items() if k not in SERVER_KEYS}}
        values["server"] = server
        path = tmp_path / f"config-{len(started)}.yml"
        path.write_text(yaml.safe_dump(values))
        daemon = DaemonProcess(path, data, env, nofile=nofile)
        started.append(daemon)
        return daemon.start()

    yield start
    for daemon in started:
        if daemon.process is not None and daemon.process.poll() is None:
            daemon.terminate()


@pytest.fixture
def daemon(start_daemon: DaemonFactory) -> DaemonProcess:
    return start_daemon()


RestartDaemon = Callable[[DaemonProcess], DaemonProcess]


@pytest.fixture
def restart_daemon(tmp_path: Path) -> Iterator[RestartDaemon]:
    """``restart_daemon(old)`` starts a daemon on ``old``'s gRPC port, data dir and settings (stop ``old`` first)."""
    started: list[DaemonProcess] = []

    def restart(old: DaemonProcess) -> DaemonProcess:
        values = yaml.safe_load(old.config_path.read_text())
        values["server"] = {**values["server"], "grpc_port": int(old.address.rsplit(":", 1)[1]), "http_port": 0}
        path = tmp_path / f"config-restart-{len(started)}.yml"
        path.write_text(yaml.safe_dump(values))
        daemon = DaemonProcess(path, old.data_dir, old.env)
        started.append(daemon)
        return daemon.start()

    yield restart
    for daemon in started:
        if daemon.process is not None and daemon.process.poll() is None:
            daemon.terminate()
