"""Soak under abuse (issue 12, "How it is checked"): 10 minutes of hostile traffic beside normal clients.

Starts the daemon (fsync ``group``, default limits: 128 connections per listener, 64 MiB admission
budget, 60 s HTTP idle, 30 s read timeout), runs the normal clients of ``_hostile.py`` (a producer of
200 calls/s x 10 records on a fixed schedule, point fetches, a Subscribe consumer checking that
every acknowledged record arrives exactly once) for a quiet warm-up, then for ``--minutes`` while
two other processes attack:

* slow clients: 160 HTTP connections sending their headers one byte a second, 16 HTTP produces
  whose 1 MiB bodies arrive at 1 KiB/s (they hold admission budget), 160 idle HTTP/2 connections
  on the gRPC port, 160 Kafka connections that idle or stop in the middle of a request; each
  reconnects when the daemon closes it;
* oversize requests: 200 MiB HTTP bodies, 20 MiB gRPC messages, 300 MiB Kafka frames;
* malformed requests: invalid JSON, bytes that are not HTTP, gRPC messages that are not protobuf,
  record batches that are not record batches, Kafka frames with garbage headers;
* bursts: 24 concurrent 4 MiB produces every 10 s (the admission budget refuses some);
* topic churn (the second process): 1,000-partition topics created and deleted over gRPC and HTTP by
  a legitimate admin client (``_hostile.Churner``) that connects before the attackers, keeps its
  connections, deletes whatever it creates and retries with backoff when refused.

Every ``--sample-s`` it records the daemon's RSS, descriptors and threads, and the admission
budget from ``/metrics``. Reports the normal clients' p99 per minute, those samples, what each
attack met, and whether RSS stayed flat (over the last two thirds: growth < 10% and slope < 1
MB/min), sockets never exceeded the connection caps (plus the listeners' own), and nothing was lost.

    python -m benchmarks.soak.soak_abuse                 # 10 minutes
    python -m benchmarks.soak.soak_abuse --quick         # 1 minute smoke run
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import struct
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

import grpc

from benchmarks._common import base_parser, bench_dir, check_free_space, emit, log, machine_facts
from benchmarks.soak._hostile import (
    NORMAL_TOPIC,
    Daemon,
    MiB,
    NormalClients,
    churn,
    overload_advice,
    process_sample,
    run_in_process,
)
from benchmarks.soak.soak_daemon import slope_mb_per_min
from lkstream.wire._proto import messaging_pb2 as pb
from lkstream.wire._proto import messaging_pb2_grpc as pb_grpc

WARMUP_S = 30.0
SLOW_CONNECTIONS = 160  # per listener: above the 128 cap
SLOW_BODIES = 16
BURST = 24
BURST_EVERY_S = 10.0
CHURN_PARTITIONS = 1000
CAPS = 3 * 128
#: Sockets the daemon holds besides its connections: three listeners, gRPC core's internal pairs.
SOCKET_SLACK = 32
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"


class Tally:
    """Outcome counters per attack: ``tally.add("slow-headers", "closed by daemon")``."""

    def __init__(self) -> None:
        self.counts: dict[str, dict[str, int]] = {}

    def add(self, attack: str, outcome: str) -> None:
        kind = self.counts.setdefault(attack, {})
        kind[outcome] = kind.get(outcome, 0) + 1


def _split(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host, int(port)


@dataclass(frozen=True)
class SlowClient:
    """Connects, sends ``first``, then ``chunk`` bytes of ``trickle`` every ``every_s`` (or idles)."""

    attack: str
    address: str
    first: bytes = b""
    trickle: bytes = b""
    chunk: int = 1
    every_s: float = 5.0


async def _slow_connection(tally: Tally, client: SlowClient, end: float) -> None:
    """Run ``client`` until ``end``, reconnecting whenever the daemon cuts it off."""
    attack, address, trickle, chunk, every_s = (
        client.attack,
        client.address,
        client.trickle,
        client.chunk,
        client.every_s,
    )
    while time.monotonic() < end:
        opened = time.monotonic()
        try:
            reader, writer = await asyncio.open_connection(*_split(address))
        except OSError:
            tally.add(attack, "connect failed")
            await asyncio.sleep(1.0)
            continue
        try:
            writer.write(client.first)
            sent = 0
            while time.monotonic() < end and (not trickle or sent < len(trickle)):
                writer.write(trickle[sent : sent + chunk])
                sent += chunk
                await writer.drain()
                with contextlib.suppress(TimeoutError):
                    if not await asyncio.wait_for(reader.read(65536), every_s):
                        raise ConnectionResetError
        except (ConnectionError, OSError):
            lived = time.monotonic() - opened
            tally.add(attack, "refused at accept" if lived < 1.0 else "cut off by the daemon")
            await asyncio.sleep(0.5 if lived < 1.0 else 0.05)
        finally:
            writer.close()


async def _raw_exchange(address: str, data: bytes, timeout: float = 10.0) -> bytes:
    """Send ``data``, return what the daemon answers before closing (or within ``timeout``)."""
    reader, writer = await asyncio.open_connection(*_split(address))
    try:
        writer.write(data)
        await writer.drain()
        answer = b""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while chunk := await reader.read(65536):
                    answer += chunk
                    if answer.startswith(b"HTTP/1.1") and b"\r\n\r\n" in answer:
                        break
        return answer
    except (ConnectionError, OSError):
        return b""
    finally:
        writer.close()


def _status(answer: bytes) -> str:
    return answer[:12].decode(errors="replace") if answer.startswith(b"HTTP/") else "closed without an answer"


async def _oversize_and_malformed(
    tally: Tally, daemon: dict[str, str], channel: grpc.aio.Channel, stub: Any, end: float
) -> None:
    http, kafka = daemon["http"], daemon["kafka"]
    huge_head = (
        b"POST /produce HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        b"Content-Length: 209715200\r\n\r\n"
    )
    bad_json = (
        b"POST /produce HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        b"Content-Length: 9\r\n\r\n{not json"
    )
    garbage = os.urandom(512)
    raw_produce = channel.unary_unary("/lkstream.Broker/Produce")  # bytes in, bytes out: not protobuf
    n = 0
    while time.monotonic() < end:
        n += 1
        tally.add("oversize http body", _status(await _raw_exchange(http, huge_head)))
        tally.add("malformed http json", _status(await _raw_exchange(http, bad_json)))
        tally.add("not http", _status(await _raw_exchange(http, garbage)))
        for attack, call in (
            ("oversize grpc message", stub.Produce(pb.ProduceRequest(topic="junk", values=[b"x" * (20 * MiB)]))),
            ("malformed grpc message", raw_produce(os.urandom(256))),
            ("garbage record batch", stub.Produce(pb.ProduceRequest(topic="junk", record_batch=os.urandom(300)))),
        ):
            try:
                await call
                tally.add(attack, "OK")
            except grpc.aio.AioRpcError as exc:
                tally.add(attack, exc.code().name)
        frame = struct.pack(">i", 300 * MiB) + b"x" * 16
        tally.add("oversize kafka frame", "answered" if await _raw_exchange(kafka, frame, 5) else "closed")
        header = struct.pack(">i", 64) + os.urandom(64)
        tally.add("malformed kafka frame", "answered" if await _raw_exchange(kafka, header, 5) else "closed")
        await asyncio.sleep(0.5)


async def _bursts(tally: Tally, stub: Any, end: float) -> None:
    values = [os.urandom(MiB - 64) for _ in range(4)]
    while time.monotonic() < end:

        async def one() -> None:
            try:
                await stub.Produce(pb.ProduceRequest(topic="flood", partition=0, values=values), timeout=60)
                tally.add("4 MiB produce bursts", "OK")
            except grpc.aio.AioRpcError as exc:
                tally.add("4 MiB produce bursts", "overloaded" if overload_advice(exc) else exc.code().name)

        await asyncio.gather(*(one() for _ in range(BURST)))
        await asyncio.sleep(BURST_EVERY_S)


async def attack(daemon: dict[str, str], seconds: float) -> dict[str, dict[str, int]]:
    """Every attack but the churn, concurrently, for ``seconds``; what each one met."""
    tally = Tally()
    end = time.monotonic() + seconds
    slow_head = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"a" * 4000
    body_head = (
        b"POST /produce HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {MiB}\r\n\r\n".encode()
    )
    kafka_half = struct.pack(">i", 1000) + b"\x00\x12\x00\x00"
    clients = []
    for i in range(SLOW_CONNECTIONS):
        clients.append(SlowClient("slow http headers", daemon["http"], trickle=slow_head, every_s=1.0))
        clients.append(SlowClient("idle grpc connections", daemon["grpc"], first=HTTP2_PREFACE))
        clients.append(SlowClient("stalled kafka connections", daemon["kafka"], first=kafka_half if i % 2 else b""))
    body = b"b" * MiB
    for _ in range(SLOW_BODIES):
        clients.append(SlowClient("slow http bodies (1 KiB/s)", daemon["http"], body_head, body, 1024, 1.0))
    tasks = [_slow_connection(tally, client, end) for client in clients]
    options = [("grpc.max_send_message_length", 64 * MiB)]
    async with grpc.aio.insecure_channel(daemon["grpc"], options=options) as channel:
        stub = pb_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]
        tasks.append(_oversize_and_malformed(tally, daemon, channel, stub, end))
        tasks.append(_bursts(tally, stub, end))
        await asyncio.gather(*tasks, return_exceptions=True)
    return tally.counts


def _metrics(http: str) -> dict[str, float]:
    wanted = ("lk_admitted_bytes", "lk_admission_refused_total")
    values: dict[str, float] = {}
    with urllib.request.urlopen(f"http://{http}/metrics", timeout=30) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(wanted):
                name = line.split("{")[0].split()[0]
                values[name] = values.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return values


async def _sample(daemon: Daemon, started: float, every_s: float, samples: list[dict[str, float]]) -> None:
    while True:
        sample = {"t_s": round(time.perf_counter() - started, 1), **process_sample(daemon.pid)}
        try:
            sample.update(await asyncio.to_thread(_metrics, daemon.http))
        except OSError as exc:  # /metrics refused (its connection slots are taken): say so, keep sampling
            sample["metrics_error"] = str(exc)[:80]  # type: ignore[assignment]
        samples.append(sample)
        admitted = sample.get("lk_admitted_bytes", -1) / MiB
        log(
            f"t={sample['t_s']:6.0f}s rss={sample['rss_MB']:6.1f} MB fds={sample['fds']:4.0f} "
            f"sockets={sample['sockets']:4.0f} threads={sample['threads']:3.0f} admitted={admitted:5.1f} MiB"
        )
        await asyncio.sleep(every_s)


async def soak(daemon: Daemon, seconds: float, sample_s: float) -> dict[str, Any]:
    clients = NormalClients(daemon.grpc, rate=200.0)
    samples: list[dict[str, float]] = []
    sampler = asyncio.create_task(_sample(daemon, clients.started, sample_s, samples))
    normal = asyncio.create_task(clients.run(WARMUP_S + seconds))
    # The churn is a legitimate admin client: it connects during the warm-up, before any attacker,
    # and keeps its connections (attackers then hold the rest of the connection caps).
    churning = await asyncio.to_thread(
        run_in_process, churn, daemon.grpc, daemon.http, CHURN_PARTITIONS, seconds, ready_timeout=60.0
    )
    await asyncio.sleep(max(0.0, WARMUP_S - (time.perf_counter() - clients.started)))
    log(f"warm-up done; attacking for {seconds / 60:.1f} min")
    addresses = {"grpc": daemon.grpc, "http": daemon.http, "kafka": daemon.kafka}
    attacks = run_in_process(attack, addresses, seconds)
    await normal
    attacked = await asyncio.to_thread(attacks, seconds + 300)
    churned = await asyncio.to_thread(churning, seconds + 300)
    sampler.cancel()
    await asyncio.gather(sampler, return_exceptions=True)
    samples.append({"t_s": round(time.perf_counter() - clients.started, 1), **process_sample(daemon.pid)})
    minutes = [
        {"minute": m, **clients.report(WARMUP_S + 60 * m, WARMUP_S + 60 * (m + 1))} for m in range(int(seconds // 60))
    ]
    return {
        "warmup": clients.report(0, WARMUP_S),
        "under_attack": clients.report(WARMUP_S, WARMUP_S + seconds),
        "per_minute": minutes,
        "completeness": clients.completeness(),
        "attacks": attacked,
        "churn": churned,
        "samples": samples,
    }


def flatness(samples: list[dict[str, Any]]) -> dict[str, Any]:
    attacked = [s for s in samples if s["t_s"] >= WARMUP_S]
    end = attacked[-1]["t_s"]
    tail = [s for s in attacked if s["t_s"] >= WARMUP_S + (end - WARMUP_S) / 3]
    growth = (tail[-1]["rss_MB"] - tail[0]["rss_MB"]) / tail[0]["rss_MB"] if tail else 0.0
    slope = slope_mb_per_min([(s["t_s"], s["rss_MB"]) for s in tail])
    sockets_max = max(s["sockets"] for s in attacked)
    return {
        "rss_first_MB": attacked[0]["rss_MB"],
        "rss_peak_MB": max(s["rss_MB"] for s in attacked),
        "rss_last_MB": attacked[-1]["rss_MB"],
        "tail_growth_fraction": round(growth, 4),
        "tail_slope_MB_per_min": round(slope, 3),
        "fds_max": max(s["fds"] for s in attacked),
        "sockets_max": sockets_max,
        "sockets_bound": CAPS + SOCKET_SLACK,
        "threads_max": max(s["threads"] for s in attacked),
        "rss_flat": growth < 0.10 and slope < 1.0,
        "sockets_bounded": sockets_max <= CAPS + SOCKET_SLACK,
    }


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, help="length of the attack (default 10; quick 1)")
    parser.add_argument("--sample-s", type=float, default=5.0, help="seconds between samples (default 5)")
    args = parser.parse_args()
    minutes = args.minutes or (1.0 if args.quick else 10.0)
    random.seed(args.seed)
    with bench_dir(args.tmp_root, "soak-abuse") as root:
        check_free_space(root, 4 * 1024**3)
        facts = machine_facts(root)
        config = {"fsync_mode": "group", "segment_max_bytes": 16 * MiB, "retention_check_interval_ms": 10_000}
        daemon = Daemon(root, config)
        try:
            daemon.wait_ready()
            import lkstream

            with lkstream.connect(daemon.grpc) as admin:
                admin.create_topic(NORMAL_TOPIC, 1)
                admin.create_topic("flood", 1, retention_bytes=32 * MiB)
            result = asyncio.run(soak(daemon, 60 * minutes, args.sample_s))
        finally:
            code = daemon.stop()
            log(f"daemon stopped, exit code {code}")
            if code not in (0, None):
                log(daemon.log_tail())
    flat = flatness(result["samples"])
    done = result["completeness"]
    log(
        f"p99 produce {result['warmup']['produce'].get('p99_ms')} -> {result['under_attack']['produce'].get('p99_ms')} "
        f"ms, fetch {result['warmup']['fetch'].get('p99_ms')} -> {result['under_attack']['fetch'].get('p99_ms')} ms; "
        f"RSS {flat['rss_first_MB']:.0f} -> {flat['rss_peak_MB']:.0f} -> {flat['rss_last_MB']:.0f} MB, "
        f"fds max {flat['fds_max']}; lost {done['lost']}, duplicates {done['duplicates']}"
    )
    payload = {
        "settings": {"minutes": minutes, "warmup_s": WARMUP_S, "normal_produce_calls_per_s": 200, "records": 10},
        "targets": [
            {
                "target": "daemon RSS flat under attack (tail growth < 10%, slope < 1 MB/min)",
                "measured": {k: flat[k] for k in ("tail_growth_fraction", "tail_slope_MB_per_min")},
                "verdict": "pass" if flat["rss_flat"] else "MISS",
            },
            {
                "target": f"sockets never above the connection caps ({CAPS}) + {SOCKET_SLACK}",
                "measured": {"sockets_max": flat["sockets_max"], "fds_max": flat["fds_max"]},
                "verdict": "pass" if flat["sockets_bounded"] else "MISS",
            },
            {
                "target": "every acknowledged record of the normal producer consumed exactly once",
                "measured": done,
                "verdict": "pass" if done["lost"] == 0 and done["duplicates"] == 0 else "MISS",
            },
        ],
        "flatness": flat,
        "results": result,
    }
    emit("soak_abuse", args, payload, facts)


if __name__ == "__main__":
    main()
