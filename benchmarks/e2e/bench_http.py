"""The HTTP JSON API (issue 6): one aiohttp client (keep-alive) against the daemon's ``/produce`` and ``/consume``.

Each run starts a fresh daemon subprocess (fsync_mode "group", data under ``<repo>/.bench-tmp/``,
free ports; the same daemon as bench_daemon.py) and stops it by PID. One request at a time on
one keep-alive connection; the client serialises every request body inside the timed loop
(``json.dumps``), as a real client would:

``produce_str``     ``POST /produce``, 1,000 records per request, 200-byte values as JSON strings
                    (printable ASCII), one partition given. msg/s acknowledged. The target.
``produce_base64``  the same values as ``{"base64": ...}`` objects (binary payloads). msg/s.
``consume``         ``POST /consume`` from offset 0 to the end of the produce_str log, 4 MiB
                    per request, values returned as strings. msg/s (reference).

    python -m benchmarks.e2e.bench_http --runs 3
    python -m benchmarks.e2e.bench_http --quick --runs 1
    python -m benchmarks.e2e.bench_http --runs 1 --py-spy produce_str   # profile one phase
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import string
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks._common import (
    MB,
    base_parser,
    bench_dir,
    check_free_space,
    emit,
    log,
    machine_facts,
    rss_bytes,
    summary,
    verdict,
)
from benchmarks.e2e.bench_daemon import DaemonProcess, add_py_spy_arguments, py_spy

BATCH = 1000
SMALL = 200
PHASES = ("produce_str", "produce_base64", "consume")
TARGET_MSG_PER_S = 100_000
TEMPLATES = 8


def http_address(daemon: DaemonProcess) -> str:
    """The ``http=`` address of the daemon's ready line (after ``wait_ready``)."""
    for line in daemon.stdout_path.read_text().splitlines():
        if line.startswith("lkstream daemon ready:"):
            return line.split("http=", 1)[1].split()[0]
    raise SystemExit("daemon printed no ready line")


def make_values(seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits
    return [["".join(rng.choices(alphabet, k=SMALL)) for _ in range(BATCH)] for _ in range(TEMPLATES)]


async def phase_produce(url: str, topic: str, values: list[list[Any]], n_calls: int) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session:

        async def send(records: list[Any]) -> None:
            body = json.dumps({"topic_partitions": [{"topic": topic, "partition": 0, "records": records}]})
            async with session.post(
                url + "/produce", data=body, headers={"Content-Type": "application/json"}
            ) as response:
                payload = await response.read()
                if response.status != 200:
                    raise SystemExit(f"produce failed: {response.status} {payload[:300]!r}")

        await send(values[0])  # creates the topic, opens the connection
        started = time.perf_counter()
        for i in range(n_calls):
            await send(values[i % len(values)])
        seconds = time.perf_counter() - started
    return {"msgs": n_calls * BATCH, "seconds": seconds, "msg_per_s": n_calls * BATCH / seconds}


async def phase_consume(url: str, topic: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session:
        offset = msgs = 0
        started = time.perf_counter()
        while True:
            body = {"partitions": [{"topic": topic, "partition": 0, "fetch_offset": offset}], "max_bytes": 4 << 20}
            async with session.post(url + "/consume", json=body) as response:
                if response.status != 200:
                    raise SystemExit(f"consume failed: {response.status} {(await response.read())[:300]!r}")
                part = (await response.json())["partitions"][0]
            if not part["records"]:
                break
            msgs += len(part["records"])
            offset = part["next_fetch_offset"]
        seconds = time.perf_counter() - started
    return {"msgs": msgs, "seconds": seconds, "msg_per_s": msgs / seconds}


def one_run(root: Path, args: Any, values: list[list[str]], n_calls: int) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    daemon = DaemonProcess(root)
    try:
        daemon.wait_ready()
        url = "http://" + http_address(daemon)
        rss0 = rss_bytes(daemon.pid)
        log(f"daemon pid {daemon.pid} at {url}, RSS {rss0 / MB:.1f} MB")
        binary = [[{"base64": base64.b64encode(v.encode()).decode()} for v in call] for call in values]

        def run(name: str, phase: Callable[[], Coroutine[Any, Any, dict[str, Any]]]) -> None:
            if name not in args.only:
                return
            with py_spy(daemon.pid, name, args):
                out[name] = asyncio.run(phase())
            log(f"{name}: " + ", ".join(f"{k}={v:,.3f}" for k, v in out[name].items()))

        run("produce_str", lambda: phase_produce(url, "bench.http", values, n_calls))
        run("produce_base64", lambda: phase_produce(url, "bench.http64", binary, n_calls))
        run("consume", lambda: phase_consume(url, "bench.http"))
        out["rss"] = {"after_start_MB": rss0 / MB, "at_end_MB": rss_bytes(daemon.pid) / MB}
    finally:
        code = daemon.stop()
        log(f"daemon {daemon.pid} stopped, exit code {code}")
    return out


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--msgs", type=int, help="messages per produce phase (default 300k; quick 30k)")
    parser.add_argument("--only", help="comma-separated phases: " + ",".join(PHASES))
    add_py_spy_arguments(parser, PHASES)
    args = parser.parse_args()
    args.only = set(PHASES if not args.only else args.only.split(","))
    if args.only - set(PHASES):
        parser.error(f"unknown phases {sorted(args.only - set(PHASES))}")
    msgs = args.msgs or (30_000 if args.quick else 300_000)
    n_calls = max(1, msgs // BATCH)
    values = make_values(args.seed)

    raw: dict[str, list[dict[str, Any]]] = {}
    with bench_dir(args.tmp_root, "http") as root:
        check_free_space(root, 2 * msgs * (SMALL + 80))
        facts = machine_facts(root)
        for run in range(args.runs):
            log(f"run {run + 1}/{args.runs}")
            run_root = root / f"run{run}"
            run_root.mkdir()
            for name, result in one_run(run_root, args, values, n_calls).items():
                raw.setdefault(name, []).append(result)

    results: dict[str, Any] = {}
    for name, runs in raw.items():
        keys = [k for k, v in runs[0].items() if isinstance(v, (int, float))]
        results[name] = {k: summary([r[k] for r in runs if k in r]) for k in keys}
    targets = []
    if "produce_str" in results:
        measured = results["produce_str"]["msg_per_s"]
        targets.append(
            {
                "target": "HTTP produce >= 100,000 msg/s (1,000 x 200 B per request, one client)",
                "measured": measured,
                "unit": "msg/s",
                "verdict": verdict(measured["median"], TARGET_MSG_PER_S),
            }
        )
    payload = {
        "settings": {
            "transport": "HTTP/1.1 JSON on loopback, one aiohttp keep-alive connection, one request in flight",
            "fsync_mode": "group",
            "value_bytes": SMALL,
            "batch_records": BATCH,
            "msgs_per_produce_phase": n_calls * BATCH,
            "client_serialises_in_timed_loop": True,
            "py_spy_phase": args.py_spy,
        },
        "targets": targets,
        "results": results,
    }
    emit("bench_http", args, payload, facts)


if __name__ == "__main__":
    main()
