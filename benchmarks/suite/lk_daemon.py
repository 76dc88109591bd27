"""LKSTREAM daemon: ``python -m lkstream.grpc_server`` as a subprocess, driven through ``lkstream.connect``.

The daemon process is :class:`bench_daemon.DaemonProcess` (free ports on 127.0.0.1, data under
the run's temp dir, stopped by PID with SIGTERM then SIGKILL); the driver is the embedded one's,
over the ``RemoteBroker``.
"""

from __future__ import annotations

from pathlib import Path

import lkstream
from benchmarks.e2e.bench_daemon import DaemonProcess
from benchmarks.suite.core import BenchError
from benchmarks.suite.lk_embedded import GROUP_DURABILITY, LkSystem


class LkDaemon(LkSystem):
    name = "lkstream-daemon"
    label = "LKSTREAM daemon (gRPC)"
    kind = "server"
    durability = GROUP_DURABILITY
    client = "lkstream.connect (gRPC) + Producer (linger 5 ms; 1 ms in latency phases) + Consumer"

    def __init__(self) -> None:
        self.daemon: DaemonProcess | None = None

    def start(self, root: Path) -> None:
        self.daemon = DaemonProcess(root)
        try:
            address = self.daemon.wait_ready()
        except SystemExit as exc:  # bench_daemon reports start failures as SystemExit
            self.daemon.stop()
            raise BenchError(str(exc)) from None
        self.target = lkstream.connect(address)

    def stop(self) -> None:
        if self.target is not None:
            self.target.close()
            self.target = None
        if self.daemon is not None:
            self.daemon.stop()
            self.daemon = None

    def server_pid(self) -> int:
        if self.daemon is None:
            raise BenchError("daemon not started")
        return int(self.daemon.pid)
