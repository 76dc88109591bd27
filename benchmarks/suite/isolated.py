"""Run an in-process system (LKSTREAM embedded) in a process of its own, so its figures are its own.

The embedded broker lives in the process that drives it. Measured in the runner's process, its
peak RSS and CPU also held every peer's client library (grpc, confluent-kafka, nats-py, redis-py),
and whatever the phases of the systems measured before it left in that process's heap: the
runner's 444 MB of issue 14 was mostly not LKSTREAM's. :class:`Isolated` starts a fresh
interpreter (``multiprocessing`` "spawn"), builds the wrapped system there, and forwards every
call of the :class:`~benchmarks.suite.base.System` interface to it over a pipe; the child is
the "server" process the runner samples (RSS, CPU). The child imports only LKSTREAM and this
suite's own modules: what an application embedding LKSTREAM would hold.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import traceback
from pathlib import Path
from typing import Any

from benchmarks.suite.base import AckRun, Consumed, Produced, System
from benchmarks.suite.core import BenchError, Schedule

# A phase may take this long at most (the longest, consume, has its own 30 s timeout).
CALL_TIMEOUT_S = 600.0


def _serve(factory: str, conn: multiprocessing.connection.Connection) -> None:
    """The child: build ``module:Class`` and run the calls the parent sends until it says stop."""
    module_name, class_name = factory.split(":")
    module = __import__(module_name, fromlist=[class_name])
    system: System = getattr(module, class_name)()
    while True:
        method, args = conn.recv()
        try:
            result = getattr(system, method)(*args)
        except BaseException as exc:  # the parent re-raises it; the child keeps serving (stop still runs)
            conn.send(("error", f"{type(exc).__name__}: {exc}\n{''.join(traceback.format_exception(exc)[-3:])}"))
        else:
            conn.send(("ok", result))
        if method == "stop":
            return


class Isolated(System):
    """Runs the system made by ``factory`` (``"module:Class"``) in a child process; see the module docstring."""

    def __init__(self, factory: str, template: System) -> None:
        self.factory = factory
        self.name, self.label, self.kind = template.name, template.label, template.kind
        self.durability = template.durability
        self.client = template.client + "; in a process of its own (the runner only sends it commands)"
        self._version = template.version()
        self._proc: Any = None
        self._conn: multiprocessing.connection.Connection | None = None

    def version(self) -> str:
        return self._version

    def _call(self, method: str, *args: Any) -> Any:
        if self._conn is None:
            raise BenchError(f"{self.name}: not started")
        self._conn.send((method, args))
        if not self._conn.poll(CALL_TIMEOUT_S):
            raise BenchError(f"{self.name}: {method} did not answer within {CALL_TIMEOUT_S:.0f} s")
        status, value = self._conn.recv()
        if status == "error":
            raise BenchError(f"{self.name} (child): {value}")
        return value

    def start(self, root: Path) -> None:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(self.factory, child), name=f"bench-{self.name}", daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent
        self._call("start", root)

    def stop(self) -> None:
        if self._proc is None:
            return
        try:
            if self._conn is not None and self._proc.is_alive():
                self._call("stop")
        finally:
            self._proc.join(30)
            if self._proc.is_alive():
                self._proc.kill()  # our own child, by its process object
                self._proc.join(5)
            if self._conn is not None:
                self._conn.close()
            self._proc, self._conn = None, None

    def server_pid(self) -> int:
        if self._proc is None or self._proc.pid is None:
            raise BenchError(f"{self.name}: not started")
        pid: int = self._proc.pid
        return pid

    def produce(self, topic: str, partitions: int, values: list[bytes], max_msgs: int, max_seconds: float) -> Produced:
        result: Produced = self._call("produce", topic, partitions, values, max_msgs, max_seconds)
        return result

    def produce_many(
        self, topic: str, partitions: int, values: list[bytes], max_msgs: int, max_seconds: float
    ) -> Produced | None:
        result: Produced | None = self._call("produce_many", topic, partitions, values, max_msgs, max_seconds)
        return result

    def produce_keyed(
        self, topic: str, partitions: int, records: list[tuple[str, bytes]], max_msgs: int, max_seconds: float
    ) -> Produced | None:
        result: Produced | None = self._call("produce_keyed", topic, partitions, records, max_msgs, max_seconds)
        return result

    def consume(self, topic: str, partitions: int, expected: int, timeout: float) -> Consumed:
        result: Consumed = self._call("consume", topic, partitions, expected, timeout)
        return result

    def ack_latency(self, topic: str, schedule: Schedule, value_size: int) -> AckRun:
        result: AckRun = self._call("ack_latency", topic, schedule, value_size)
        return result

    def ack_latency_unbatched(self, topic: str, schedule: Schedule, value_size: int) -> AckRun | None:
        result: AckRun | None = self._call("ack_latency_unbatched", topic, schedule, value_size)
        return result

    def ack_latency_one_call(self, topic: str, schedule: Schedule, value_size: int) -> AckRun | None:
        result: AckRun | None = self._call("ack_latency_one_call", topic, schedule, value_size)
        return result

    def e2e(self, topic: str, schedule: Schedule, value_size: int) -> AckRun:
        result: AckRun = self._call("e2e", topic, schedule, value_size)
        return result
