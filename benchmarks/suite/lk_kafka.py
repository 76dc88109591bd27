"""LKSTREAM through its Kafka listener: the daemon (``python -m lkstream.grpc_server``, fsync_mode group)
driven by exactly the confluent-kafka code and settings that drive Tansu (``peer_tansu``).

The daemon process is :class:`bench_daemon.DaemonProcess` (free ports on 127.0.0.1, ``kafka_port: 0``,
data under the run's temp dir, stopped by PID); the bootstrap address comes from its ready line.
"""

from __future__ import annotations

import time
from pathlib import Path

from benchmarks.e2e.bench_daemon import DaemonProcess
from benchmarks.suite.core import BenchError
from benchmarks.suite.lk_embedded import GROUP_DURABILITY
from benchmarks.suite.peer_tansu import Tansu

READY_TIMEOUT_S = 30.0


class LkKafka(Tansu):
    name = "lkstream-kafka"
    label = "LKSTREAM (Kafka API)"
    kind = "server"
    durability = GROUP_DURABILITY

    def __init__(self) -> None:
        super().__init__()
        self.daemon: DaemonProcess | None = None

    def version(self) -> str:
        import lkstream

        return f"lkstream {lkstream.__version__}"

    def start(self, root: Path) -> None:
        self.daemon = DaemonProcess(root)
        try:
            self.daemon.wait_ready(READY_TIMEOUT_S)
        except SystemExit as exc:  # bench_daemon reports start failures as SystemExit
            self.daemon.stop()
            raise BenchError(str(exc)) from None
        self.bootstrap = self._kafka_address(self.daemon)

    @staticmethod
    def _kafka_address(daemon: DaemonProcess) -> str:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            for line in daemon.stdout_path.read_text().splitlines():
                if line.startswith("lkstream daemon ready:") and "kafka=" in line:
                    return str(line.split("kafka=", 1)[1].split()[0])
            time.sleep(0.02)
        raise BenchError("the daemon's ready line names no Kafka listener")

    def stop(self) -> None:
        if self.daemon is not None:
            self.daemon.stop()
            self.daemon = None

    def server_pid(self) -> int:
        if self.daemon is None:
            raise BenchError("daemon not started")
        return int(self.daemon.pid)
