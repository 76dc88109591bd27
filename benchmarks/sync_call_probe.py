"""A blocking produce through each gRPC transport the client could use: wall time and CPU of both processes.

Issue 14, rows 5 and 8: a blocking ``RemoteBroker`` call (``produce_batch_sync``) hops from the
caller's thread to the client's asyncio loop thread, writes on a ``grpc.aio`` stream and hops back
(two wake-ups, two GIL hand-overs). This probe calls one pre-encoded batch of ``--records`` 200 B
records, serially from the caller's thread, through:

* ``hop``: the blocking path before the fourth round (the async send run on the client's loop
  thread, ``grpc.aio`` ``ProduceStream``, the caller waiting for it);
* ``unary``: the client's synchronous channel, unary ``Produce``, called from the caller's thread
  (gRPC's blocking unary call polls its own completion queue in that thread: no other thread);
* ``sync_stream``: the synchronous channel's ``ProduceStream`` fed by a request iterator (gRPC
  runs the iterator in a thread of its own, and its channel thread delivers the answers);
* ``client``: ``rb.produce_batch_sync`` as it is now (the last mode, through ``remote_sync``).

``--window-records`` adds the Spark sink's pattern: 20 batches of that many records (4,500: about
the sink's 1 MiB), 4 in flight, per "call": ``window_hop`` (an event loop awaiting ``produce_batch``,
as the sink did) and ``window_start`` (``produce_batch_start`` handles, as it does now).
``--fetch-bytes`` adds a fetch of that many bytes from offset 0, through the loop thread
(``fetch_hop``) and through the synchronous stream (``fetch_client``, what ``rb.fetch`` does now).

The modes alternate in every round against one daemon (``bench_daemon.DaemonProcess``); per mode and
round: wall p50 / mean per call, and CPU per call of the daemon and of this process (from
``/proc/PID/task/*/stat``, so the client's threads can be told apart: the caller, the loop thread,
gRPC's).

    .venv/bin/python benchmarks/sync_call_probe.py --rounds 3 --records 1,1000 --fetch-bytes 1000,1048576
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from _common import base_parser, bench_dir, emit, log, machine_facts, percentile, summary
from bench_daemon import SMALL, DaemonProcess

import lkstream
from lkstream.client.remote.calls import fetch_request
from lkstream.client.retry import Retry
from lkstream.format.codec import encode_batch
from lkstream.wire._proto import messaging_pb2 as pb

_TICKS = os.sysconf("SC_CLK_TCK")
SINK_IN_FLIGHT = 4  # lkstream.spark.sink.IN_FLIGHT


def thread_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds per thread name of process ``pid`` (summed over threads of one name)."""
    out: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                raw = f.read()
        except FileNotFoundError:
            continue  # the thread ended
        name = raw[raw.index("(") + 1 : raw.rindex(")")]
        fields = raw.rsplit(")", 1)[1].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / _TICKS
    return out


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0) > 0}


class SyncStream:
    """``ProduceStream`` on the synchronous channel: requests through a queue, answers read in this thread."""

    def __init__(self, rb: Any) -> None:
        self._requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._answers = rb._stub.ProduceStream(self._iterate(), metadata=rb._metadata)

    def _iterate(self) -> Iterator[Any]:
        while (request := self._requests.get()) is not None:
            yield request

    def call(self, request: Any) -> Any:
        self._requests.put(request)
        return next(self._answers)

    def close(self) -> None:
        self._requests.put(None)
        for _ in self._answers:
            pass


def modes(rb: Any, topic: str, batch: bytes, stream: SyncStream) -> dict[str, Callable[[], Any]]:
    wire = pb.ProduceRequest(topic=topic, partition=0, record_batch=batch).SerializeToString()
    return {
        "hop": lambda: _on_loop_thread(rb, rb._send_batches(topic, [(0, batch)])),
        "unary": lambda: rb._call(rb._stub.Produce, wire, retry=Retry.RESEND),
        "sync_stream": lambda: stream.call(wire),
        "client": lambda: rb.produce_batch_sync(topic, 0, batch),
    }


def fetch_modes(rb: Any, topic: str, max_bytes: int) -> dict[str, Callable[[], Any]]:
    request = fetch_request(topic, 0, 0, max_bytes)

    return {
        "fetch_hop": lambda: _on_loop_thread(rb, rb._streamed("FetchStream", [request], Retry.SAFE)),
        "fetch_client": lambda: rb._streamed_sync("FetchStream", [request], Retry.SAFE),
    }


def window_modes(rb: Any, topic: str, batch: bytes, batches: int) -> dict[str, Callable[[], Any]]:
    """The Spark sink's pattern: ``batches`` pre-encoded batches with 4 in flight, before and after."""

    async def through_hop() -> None:  # the sink before: its own event loop, awaiting produce_batch
        pending: set[asyncio.Future[Any]] = set()
        for _ in range(batches):
            pending.add(asyncio.ensure_future(rb.produce_batch(topic, 0, batch)))
            while len(pending) >= SINK_IN_FLIGHT:
                _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        await asyncio.wait(pending)

    def started() -> None:  # the sink now: produce_batch_start handles, answers read in this thread
        window: deque[Any] = deque()
        for _ in range(batches):
            window.append(rb.produce_batch_start(topic, 0, batch))
            while len(window) >= SINK_IN_FLIGHT:
                window.popleft().result()
        while window:
            window.popleft().result()

    return {"window_hop": lambda: asyncio.run(through_hop()), "window_start": started}


def _on_loop_thread(rb: Any, coroutine: Any) -> Any:
    """The blocking path before this change: the coroutine run on the client's loop thread, the caller waiting."""
    return asyncio.run_coroutine_threadsafe(coroutine, rb._sync_loop.loop).result()


def measure(call: Callable[[], Any], daemon_pid: int, calls: int) -> dict[str, float]:
    for _ in range(max(2, min(50, calls // 10))):  # warm: streams open, allocator settled
        call()
    walls = []
    own = os.getpid()
    daemon0, client0, started = thread_cpu_s(daemon_pid), thread_cpu_s(own), time.perf_counter()
    for _ in range(calls):
        before = time.perf_counter()
        call()
        walls.append(time.perf_counter() - before)
    elapsed = time.perf_counter() - started
    daemon, client = _delta(thread_cpu_s(daemon_pid), daemon0), _delta(thread_cpu_s(own), client0)
    walls.sort()
    result = {
        "wall_p50_us": 1e6 * percentile(walls, 50),
        "wall_mean_us": 1e6 * elapsed / calls,
        "daemon_cpu_us_per_call": 1e6 * sum(daemon.values()) / calls,
        "client_cpu_us_per_call": 1e6 * sum(client.values()) / calls,
        "loadavg": os.getloadavg()[0],
    }
    for name, cpu in client.items():
        result[f"client_thread[{name}]_us_per_call"] = 1e6 * cpu / calls
    return result


def _line(res: dict[str, float]) -> str:
    totals = ", ".join(f"{k}={v:,.0f}" for k, v in res.items() if not k.startswith("client_thread"))
    threads = ", ".join(f"{k[14:-15]}={v:,.0f}" for k, v in res.items() if k.startswith("client_thread"))
    return f"{totals} | {threads}"


Results = dict[str, dict[str, list[dict[str, float]]]]


def compare(
    table: dict[str, Callable[[], Any]], daemon_pid: int, calls: int, label: str, *, rounds: int, results: Results
) -> None:
    """Every mode of ``table`` once a round, the order turned every other round."""
    for rnd in range(rounds):
        for name in list(table) if rnd % 2 == 0 else list(reversed(table)):
            res = measure(table[name], daemon_pid, calls)
            results.setdefault(f"{name}_{label}", {}).setdefault("runs", []).append(res)
            log(f"{name} {label} round {rnd + 1}: " + _line(res))


def probe(rb: Any, daemon_pid: int, args: Any, results: Results) -> None:
    for records in [int(s) for s in args.records.split(",") if s]:
        topic = f"probe.{records}"
        rb.create_topic(topic, 1)
        batch = bytes(encode_batch([(None, bytes(SMALL))] * records))
        stream = SyncStream(rb)
        try:
            table = modes(rb, topic, batch, stream)
            calls = args.calls or (2000 if records < 100 else 300)
            compare(table, daemon_pid, calls, f"x{records}", rounds=args.rounds, results=results)
        finally:
            stream.close()
    if args.window_records:
        rb.create_topic("probe.window", 1)
        batch = bytes(encode_batch([(None, bytes(SMALL))] * args.window_records))
        table = window_modes(rb, "probe.window", batch, 20)
        compare(table, daemon_pid, 15, f"20x{args.window_records}", rounds=args.rounds, results=results)
    for max_bytes in [int(b) for b in args.fetch_bytes.split(",") if b]:
        topic = f"probe.fetch.{max_bytes}"
        rb.create_topic(topic, 1)
        for _ in range(max(1, 2 * max_bytes // (1000 * SMALL))):
            rb.produce_many_sync(topic, [(None, bytes(SMALL))] * 1000, partition=0)
        table = fetch_modes(rb, topic, max_bytes)
        compare(
            table,
            daemon_pid,
            3000 if max_bytes < 100_000 else 300,
            f"{max_bytes}B",
            rounds=args.rounds,
            results=results,
        )


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every mode, interleaved (default 3)")
    parser.add_argument("--records", default="1,1000", help="records per call, comma-separated (default 1,1000)")
    parser.add_argument("--fetch-bytes", default="1000,1048576", help="fetch sizes to compare ('' for none)")
    parser.add_argument(
        "--window-records", type=int, default=4500, help="records per batch of the sink's pattern (0: skip)"
    )
    parser.add_argument("--calls", type=int, help="calls per mode and round (default 2,000 / 1,000 records: 300)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.records.split(",") if s]
    results: Results = {}
    with bench_dir(args.tmp_root, "sync-probe") as root:
        facts = machine_facts(root)
        daemon = DaemonProcess(root)
        try:
            rb = lkstream.connect(daemon.wait_ready())
            try:
                probe(rb, daemon.pid, args, results)
            finally:
                rb.close()
        finally:
            daemon.stop()
    payload = {
        "settings": {"records": sizes, "rounds": args.rounds, "value_bytes": SMALL},
        "results": {
            mode: {k: summary([r.get(k, 0.0) for r in entry["runs"]]) for k in entry["runs"][0]}
            for mode, entry in results.items()
        },
        "threads": threading.active_count(),
    }
    emit("sync_call_probe", args, payload, facts)


if __name__ == "__main__":
    main()
