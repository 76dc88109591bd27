"""Shared by bench_admin_isolation.py and soak_abuse.py (not a benchmark itself).

* :class:`Daemon`: ``python -m lkstream.grpc_server`` (of this tree or another one) with every
  listener on free loopback ports and the given configuration, stopped by PID;
  :func:`process_sample` reads its RSS, descriptors and threads.
* :class:`NormalClients`: the well-behaved clients whose service the benchmarks report: a producer
  on a fixed schedule (open model: latency from the *scheduled* time to the acknowledgement, so a
  stall is never hidden), point fetches of past offsets, and a Subscribe consumer that checks every
  acknowledged record arrives exactly once.
* :class:`Churner` / :func:`churn`: create and delete large topics over gRPC and HTTP, alternately,
  in a loop, as a legitimate admin client: connections opened first and kept, retries with backoff.
* :func:`run_in_process`: run a coroutine function in a child process (the GIL of the measuring
  process stays with the normal clients) and collect its result.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import multiprocessing
import os
import queue
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import yaml

from benchmarks._common import REPO, log, percentile
from lkstream.format.codec import decode_batches
from lkstream.wire._proto import messaging_pb2 as pb
from lkstream.wire._proto import messaging_pb2_grpc as pb_grpc
from lkstream.wire.contract import ERROR_CLASS_KEY, ERROR_DETAIL_KEY

NORMAL_TOPIC = "normal"
MiB = 1024 * 1024


class Daemon:
    """The daemon as a subprocess with ``config`` (broker keys, and ``server`` keys under ``server``)."""

    def __init__(self, root: Path, config: dict[str, Any], *, tree: Path = REPO) -> None:
        server = {"grpc_port": 0, "http_port": 0, "kafka_port": 0, **config.pop("server", {})}
        values = {"persist_dir": str(root / "data"), **config, "server": server}
        path = root / "daemon.yml"
        path.write_text(yaml.safe_dump(values))
        self.out = open(root / "daemon.out", "w+b")  # noqa: SIM115 (closed in stop)
        cmd = [sys.executable, "-m", "lkstream.grpc_server", "--config", str(path), "--log-level", "WARNING"]
        # ``tree``: the directory whose ``lkstream/`` runs (``-m`` imports from the working directory first).
        self.proc = subprocess.Popen(cmd, cwd=tree, stdout=self.out, stderr=subprocess.STDOUT)
        self.pid = self.proc.pid
        self.grpc = self.http = self.kafka = ""
        self.data = root / "data"

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.out.seek(0)
                raise SystemExit(f"daemon exited with {self.proc.returncode}: {self.out.read()[-2000:]!r}")
            self.out.seek(0)
            for line in self.out.read().decode(errors="replace").splitlines():
                if line.startswith("lkstream daemon ready:"):
                    fields = dict(part.split("=", 1) for part in line.split()[3:] if "=" in part)
                    self.grpc, self.http, self.kafka = fields["grpc"], fields["http"], fields["kafka"]
                    return
            time.sleep(0.05)
        raise SystemExit(f"daemon not ready within {timeout} s")

    def log_tail(self, chars: int = 3000) -> str:
        self.out.seek(0)
        return self.out.read().decode(errors="replace")[-chars:]

    def stop(self, deadline_s: float = 60.0) -> int | None:
        try:
            if self.proc.poll() is None:
                os.kill(self.pid, signal.SIGTERM)
                try:
                    self.proc.wait(deadline_s)
                except subprocess.TimeoutExpired:
                    log(f"daemon {self.pid} ignored SIGTERM for {deadline_s} s: SIGKILL")
                    os.kill(self.pid, signal.SIGKILL)
                    self.proc.wait(10)
            return self.proc.returncode
        finally:
            self.out.close()


def process_sample(pid: int) -> dict[str, float]:
    """RSS (MB), peak RSS (MB), open descriptors (and how many are sockets) and threads of ``pid``."""
    status = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        status[key] = rest.split()[0] if rest.split() else ""
    fds = os.listdir(f"/proc/{pid}/fd")
    sockets = 0
    for fd in fds:
        with contextlib.suppress(OSError):  # closed meanwhile
            sockets += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
    return {
        "rss_MB": int(status["VmRSS"]) / 1024,
        "hwm_MB": int(status["VmHWM"]) / 1024,
        "fds": len(fds),
        "sockets": sockets,
        "threads": int(status["Threads"]),
    }


def overload_advice(exc: grpc.aio.AioRpcError) -> float | None:
    """Seconds an OverloadedError answer asks to wait, or None for any other failure."""
    trailing = dict(exc.trailing_metadata() or ())
    if trailing.get(ERROR_CLASS_KEY) != "OverloadedError":
        return None
    return float(json.loads(str(trailing[ERROR_DETAIL_KEY]))["retry_after_ms"]) / 1000.0


def latency_summary(values: list[float]) -> dict[str, Any]:
    ordered = sorted(values)
    if not ordered:
        return {"count": 0}
    return {
        "count": len(ordered),
        "p50_ms": round(1e3 * percentile(ordered, 50), 3),
        "p99_ms": round(1e3 * percentile(ordered, 99), 3),
        "p999_ms": round(1e3 * percentile(ordered, 99.9), 3),
        "max_ms": round(1e3 * ordered[-1], 3),
    }


@dataclass
class NormalClients:
    """The well-behaved clients (see the module docstring); ``rate`` produce calls/s of ``batch`` records."""

    address: str
    rate: float = 100.0
    batch: int = 10
    value_bytes: int = 200
    fetch_rate: float = 50.0
    max_in_flight: int = 8
    started: float = field(default_factory=time.perf_counter)
    produce_latency: list[tuple[float, float]] = field(default_factory=list)
    fetch_latency: list[tuple[float, float]] = field(default_factory=list)
    acked: set[int] = field(default_factory=set)
    received: list[int] = field(default_factory=list)
    overload_retries: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def _value(self, seq: int) -> bytes:
        return f"{seq:012d}".encode().ljust(self.value_bytes, b".")

    async def run(self, seconds: float) -> None:
        options = [("grpc.max_send_message_length", 64 * MiB), ("grpc.max_receive_message_length", 64 * MiB)]
        async with grpc.aio.insecure_channel(self.address, options=options) as channel:
            stub = pb_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]
            with contextlib.suppress(grpc.aio.AioRpcError):  # ALREADY_EXISTS: created by the caller
                await stub.Admin(pb.AdminRequest(create_topic=pb.CreateTopic(name=NORMAL_TOPIC, partitions=1)))
            consumer = asyncio.create_task(self._consume(stub))
            fetcher = asyncio.create_task(self._fetch(stub, seconds))
            try:
                await self._produce(stub, seconds)
                await fetcher
                await self._drain_consumer(seconds=30.0)
            finally:
                consumer.cancel()
                fetcher.cancel()
                await asyncio.gather(consumer, fetcher, return_exceptions=True)

    async def _produce(self, stub: Any, seconds: float) -> None:
        interval = 1.0 / self.rate
        in_flight: set[asyncio.Task[None]] = set()
        start = time.perf_counter()
        i = 0
        while (scheduled := start + i * interval) < start + seconds:
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if len(in_flight) >= self.max_in_flight:
                await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            seqs = range(i * self.batch, (i + 1) * self.batch)
            task = asyncio.create_task(self._one_produce(stub, scheduled, seqs))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
            i += 1
        if in_flight:
            await asyncio.gather(*in_flight)

    async def _one_produce(self, stub: Any, scheduled: float, seqs: range) -> None:
        request = pb.ProduceRequest(topic=NORMAL_TOPIC, partition=0, values=[self._value(s) for s in seqs])
        deadline = time.perf_counter() + 60.0
        while True:
            try:
                await stub.Produce(request, timeout=30)
                break
            except grpc.aio.AioRpcError as exc:
                advice = overload_advice(exc)
                if advice is None or time.perf_counter() > deadline:
                    self.errors[exc.code().name] = self.errors.get(exc.code().name, 0) + 1
                    return  # not acknowledged: not expected downstream
                self.overload_retries += 1
                await asyncio.sleep(advice * (1 + random.random() / 2))
        now = time.perf_counter()
        self.produce_latency.append((scheduled - self.started, now - scheduled))
        self.acked.update(seqs)

    async def _fetch(self, stub: Any, seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            await asyncio.sleep(1.0 / self.fetch_rate)
            high = len(self.received)
            if high == 0:
                continue
            offset = random.randrange(high)
            started = time.perf_counter()
            try:
                response = await stub.Fetch(
                    pb.FetchRequest(topic=NORMAL_TOPIC, partition=0, offset=offset, max_bytes=64 * 1024), timeout=30
                )
            except grpc.aio.AioRpcError as exc:
                self.errors[f"fetch {exc.code().name}"] = self.errors.get(f"fetch {exc.code().name}", 0) + 1
                continue
            self.fetch_latency.append((started - self.started, time.perf_counter() - started))
            assert response.records, "a fetch of an acknowledged offset came back empty"

    async def _consume(self, stub: Any) -> None:
        offset = 0
        while True:  # Subscribe ends on daemon-side errors; resume where it stopped
            try:
                async for response in stub.SubscribeBatches(
                    pb.FetchRequest(topic=NORMAL_TOPIC, partition=0, offset=offset)
                ):
                    for record in decode_batches(response.record_batches, NORMAL_TOPIC, 0, offset):
                        self.received.append(int(record.value[:12]))
                        offset = record.offset + 1
            except grpc.aio.AioRpcError as exc:
                self.errors[f"subscribe {exc.code().name}"] = self.errors.get(f"subscribe {exc.code().name}", 0) + 1
                await asyncio.sleep(0.5)

    async def _drain_consumer(self, seconds: float) -> None:
        deadline = time.perf_counter() + seconds
        while len(self.received) < len(self.acked) and time.perf_counter() < deadline:
            await asyncio.sleep(0.1)

    def report(self, since: float = 0.0, until: float = float("inf")) -> dict[str, Any]:
        produce = [lat for t, lat in self.produce_latency if since <= t < until]
        fetch = [lat for t, lat in self.fetch_latency if since <= t < until]
        return {"produce": latency_summary(produce), "fetch": latency_summary(fetch)}

    def completeness(self) -> dict[str, Any]:
        received = set(self.received)
        return {
            "acknowledged_records": len(self.acked),
            "received_records": len(self.received),
            "lost": len(self.acked - received),
            "duplicates": len(self.received) - len(received),
            "overload_retries": self.overload_retries,
            "errors": self.errors,
        }


class _KeptHttp:
    """One HTTP/1.1 keep-alive connection, reopened only when the daemon closes it."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self._conn = http.client.HTTPConnection(host, int(port), timeout=300)

    def request(self, method: str, path: str, body: object | None = None) -> int:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        try:
            self._conn.request(method, path, None if body is None else json.dumps(body), headers)
            response = self._conn.getresponse()
            response.read()
        except (OSError, http.client.HTTPException):
            self._conn.close()  # the next request reconnects (and may be refused while the cap is full)
            raise
        return response.status

    def close(self) -> None:
        self._conn.close()


#: Answers after which a churn call is retried with backoff: the daemon is busy or full, or the
#: connection was cut; a create or delete may have happened before a lost answer (see _churn_call).
_RETRIABLE = frozenset({"RESOURCE_EXHAUSTED", "UNAVAILABLE", "DEADLINE_EXCEEDED", "HTTP 429", "HTTP 503"})


class Churner:
    """A legitimate admin client: creates a topic, deletes it, again, for the whole run.

    It opens its gRPC channel and its HTTP connection once, before any attacker connects
    (:meth:`connect`), and keeps them; it deletes every topic it creates, retrying with
    backoff when the daemon is busy or full, so that undeleted topics never pile up to the
    partition cap. A create retried after a lost answer that finds the topic (ALREADY_EXISTS)
    counts as done, as does a delete that finds it gone (NOT_FOUND).
    """

    def __init__(self, grpc_address: str, http_address: str, partitions: int) -> None:
        self.partitions = partitions
        self.channel = grpc.aio.insecure_channel(grpc_address)
        self.stub = pb_grpc.BrokerStub(self.channel)  # type: ignore[no-untyped-call]
        self.http = _KeptHttp(http_address)
        self.durations: dict[str, list[float]] = {"create": [], "delete": []}
        self.retries: dict[str, int] = {}
        self.failures: dict[str, int] = {}

    async def connect(self, timeout: float = 60.0) -> None:
        await asyncio.wait_for(self.channel.channel_ready(), timeout)
        status = await asyncio.to_thread(self.http.request, "GET", "/healthz")
        if status != 200:
            raise RuntimeError(f"GET /healthz answered {status}")

    async def run(self, seconds: float) -> dict[str, Any]:
        end = time.perf_counter() + seconds
        n = 0
        try:
            while time.perf_counter() < end:
                name, over_grpc = f"churn-{n}", n % 2 == 0
                if await self._call("create", name, over_grpc, deadline=end):
                    # Past the end of the run too: nothing created is left behind.
                    await self._call("delete", name, over_grpc, deadline=time.perf_counter() + 300)
                n += 1
        finally:
            await self.channel.close()
            self.http.close()
        return {
            "topics_created": len(self.durations["create"]),
            "topics_deleted": len(self.durations["delete"]),
            "partitions_per_topic": self.partitions,
            "create": latency_summary(self.durations["create"]),
            "delete": latency_summary(self.durations["delete"]),
            "retries": self.retries,
            "failures": self.failures,
        }

    async def _call(self, action: str, name: str, over_grpc: bool, deadline: float) -> bool:
        """Create or delete ``name``, retrying with backoff until ``deadline``; whether it is done."""
        started, backoff, attempt = time.perf_counter(), 0.2, 0
        while True:
            outcome = await self._once(action, name, over_grpc)
            done_before = attempt > 0 and outcome in ("ALREADY_EXISTS", "HTTP 409", "NOT_FOUND", "HTTP 404")
            if outcome == "OK" or done_before:
                self.durations[action].append(time.perf_counter() - started)
                return True
            if outcome not in _RETRIABLE and not outcome.startswith("connection"):
                self.failures[f"{action}: {outcome}"] = self.failures.get(f"{action}: {outcome}", 0) + 1
                return False
            key = f"{action}: {outcome}"
            self.retries[key] = self.retries.get(key, 0) + 1
            if time.perf_counter() + backoff > deadline:
                key = f"{action}: gave up after {outcome}"
                self.failures[key] = self.failures.get(key, 0) + 1
                return False
            await asyncio.sleep(backoff * (1 + random.random() / 2))
            backoff, attempt = min(2 * backoff, 5.0), attempt + 1

    async def _once(self, action: str, name: str, over_grpc: bool) -> str:
        """One attempt: "OK", a gRPC code name, "HTTP <status>" or "connection <error>"."""
        try:
            if over_grpc:
                request = (
                    pb.AdminRequest(create_topic=pb.CreateTopic(name=name, partitions=self.partitions))
                    if action == "create"
                    else pb.AdminRequest(delete_topic=pb.DeleteTopic(name=name))
                )
                await self.stub.Admin(request, timeout=300)
                return "OK"
            method, path, body = (
                ("POST", "/topics", {"name": name, "partitions": self.partitions})
                if action == "create"
                else ("DELETE", f"/topics/{name}", None)
            )
            status = await asyncio.to_thread(self.http.request, method, path, body)
            return "OK" if status < 300 else f"HTTP {status}"
        except grpc.aio.AioRpcError as exc:
            return str(exc.code().name)
        except (OSError, http.client.HTTPException) as exc:
            return f"connection {type(exc).__name__}"


async def churn(
    grpc_address: str, http_address: str, partitions: int, seconds: float, ready: Callable[[], None] | None = None
) -> dict[str, Any]:
    """Create and delete ``partitions``-partition topics for ``seconds``, alternating gRPC and HTTP
    (see :class:`Churner`); ``ready`` is called once its connections are open."""
    churner = Churner(grpc_address, http_address, partitions)
    await churner.connect()
    if ready is not None:
        ready()
    return await churner.run(seconds)


_READY = "ready"


def _child(
    target: Callable[..., Coroutine[Any, Any, Any]], args: tuple[Any, ...], results: Any, signals_ready: bool
) -> None:
    extra = {"ready": lambda: results.put(_READY)} if signals_ready else {}
    with contextlib.suppress(KeyboardInterrupt):
        results.put(asyncio.run(target(*args, **extra)))


def run_in_process(
    target: Callable[..., Coroutine[Any, Any, Any]], *args: Any, ready_timeout: float | None = None
) -> Callable[[float], Any]:
    """Start ``asyncio.run(target(*args))`` in a child process; return ``join(timeout)`` giving its result.

    With ``ready_timeout``, ``target`` also gets a ``ready`` callback, and this returns only
    once the child has called it (SystemExit if it does not within ``ready_timeout`` seconds).
    """
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    child = context.Process(target=_child, args=(target, args, results, ready_timeout is not None), daemon=True)
    child.start()
    if ready_timeout is not None:
        try:
            first = results.get(timeout=ready_timeout)
        except queue.Empty:
            child.kill()
            raise SystemExit(f"{target.__name__} was not ready within {ready_timeout} s") from None
        if first != _READY:
            raise SystemExit(f"{target.__name__} ended before it was ready: {first!r}")

    def join(timeout: float) -> Any:
        try:
            return results.get(timeout=timeout)
        finally:
            child.join(5)
            if child.is_alive():
                child.kill()

    return join
