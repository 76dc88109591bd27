"""Concurrency against a real daemon: many producers, several Subscribe streams, restart and resume.

Randomness (chunk sizes, keys) is seeded; every assertion message names the seed.
Waits are bounded with ``asyncio.wait_for`` deadlines, never sleep-polling.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from collections import defaultdict
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import cast

import lkstream
from lkstream import RemoteBroker
from lkstream.broker.partitioner import partition_for_key
from lkstream.format.codec import Record

from .conftest import REPO, DaemonProcess, RestartDaemon

SEED = 20240603
PARTITIONS = 4
PROCESSES = 4
TASKS = 8
PER_PRODUCER = 300
DEADLINE_S = 15.0
CHILD = Path(__file__).with_name("producer_process.py")

# (key, value, partition, offset) of one acknowledged record
Ack = tuple[str, str, int, int]


def read_all(client: RemoteBroker, topic: str, partition: int) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every stored ``(offset, key, value)`` of ``topic[partition]``, by repeated fetches."""
    out: list[tuple[int, bytes | None, bytes | None]] = []
    offset = 0
    while True:
        records = client.read_from(topic, partition, offset)
        if not records:
            return out
        out.extend((r.offset, r.key, r.value) for r in records)
        offset = records[-1].offset + 1


async def produce_task(client: RemoteBroker, topic: str, name: str, count: int, seed: int) -> list[Ack]:
    rng = random.Random(seed)
    acks: list[Ack] = []
    i = 0
    while i < count:
        size = min(count - i, rng.randint(1, 25))
        records = [(f"{name}-k{rng.randrange(16)}", f"{name}-{j}") for j in range(i, i + size)]
        results = await client.produce_many(topic, records)
        acks.extend((k, v, pid, off) for (k, v), (pid, off) in zip(records, results, strict=True))
        i += size
    return acks


async def produce_process(daemon: DaemonProcess, topic: str, name: str, count: int, seed: int) -> list[Ack]:
    args = [str(CHILD), daemon.address, topic, name, str(count), str(seed)]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=daemon.env, cwd=REPO
    )
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), DEADLINE_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"producer process {name} did not finish within {DEADLINE_S}s (seed {SEED})") from None
    assert proc.returncode == 0, f"producer process {name} failed (seed {SEED}):\n{stderr.decode()}"
    return [(str(k), str(v), int(p), int(o)) for k, v, p, o in json.loads(stdout)["acks"]]


async def test_many_concurrent_producers_get_contiguous_unique_offsets(daemon: DaemonProcess) -> None:
    topic = "many"
    async with lkstream.connect(daemon.address) as client:
        client.create_topic(topic, PARTITIONS)
        jobs = [produce_process(daemon, topic, f"proc{n}", PER_PRODUCER, SEED + n) for n in range(PROCESSES)]
        jobs += [produce_task(client, topic, f"task{n}", PER_PRODUCER, SEED + 100 + n) for n in range(TASKS)]
        per_producer = await asyncio.wait_for(asyncio.gather(*jobs), DEADLINE_S * 2)
        stored = {p: await asyncio.to_thread(read_all, client, topic, p) for p in range(PARTITIONS)}

    where = f"(seed {SEED})"
    acks = [ack for producer in per_producer for ack in producer]
    assert len(acks) == (PROCESSES + TASKS) * PER_PRODUCER, where
    # Offsets per partition: 0..n-1, contiguous, no duplicates; the total matches what was acknowledged.
    for p, records in stored.items():
        offsets = [off for off, _, _ in records]
        assert offsets == list(range(len(offsets))), f"partition {p} offsets not contiguous {where}"
    assert sum(len(r) for r in stored.values()) == len(acks), where
    acked_positions = [(pid, off) for _, _, pid, off in acks]
    assert len(set(acked_positions)) == len(acked_positions), f"two records acknowledged at one offset {where}"
    # Every acknowledged (partition, offset) reads back with its key and value, on the key's partition.
    by_position = {(p, off): (key, value) for p, records in stored.items() for off, key, value in records}
    for key, value, pid, off in acks:
        assert by_position.get((pid, off)) == (key.encode(), value.encode()), f"{value} at {pid}/{off} {where}"
        assert pid == partition_for_key(key.encode(), PARTITIONS), f"{key} routed to {pid} {where}"
    values = [value for records in stored.values() for _, _, value in records]
    assert len(set(values)) == len(values), f"duplicate values stored {where}"
    # Each producer's records of one partition are in its send order.
    for producer in per_producer:
        last: dict[int, int] = {}
        for _, value, pid, off in producer:
            assert off > last.get(pid, -1), f"{value} out of order in partition {pid} {where}"
            last[pid] = off


async def collect(
    client: RemoteBroker, topic: str, partition: int, expected: int, milestone: tuple[int, asyncio.Event]
) -> list[tuple[int, bytes | None]]:
    """The first ``expected`` records of a Subscribe stream from offset 0, as ``(offset, value)``.

    ``milestone`` is ``(count, event)``: the event is set once ``count`` records have arrived.
    """
    got: list[tuple[int, bytes | None]] = []
    # An async generator (typed AsyncIterator): close it so the gRPC stream is cancelled now.
    stream = cast(AsyncGenerator[Record, None], client.subscribe(topic, partition, 0))
    try:
        async for record in stream:
            got.append((record.offset, record.value))
            if len(got) == milestone[0]:
                milestone[1].set()
            if len(got) == expected:
                break
    finally:
        await stream.aclose()
    return got


async def test_subscribe_streams_receive_exactly_the_records_produced_in_order(daemon: DaemonProcess) -> None:
    topic = "live"
    rng = random.Random(SEED)
    rounds = [{p: rng.randint(5, 40) for p in range(PARTITIONS)} for _ in range(2)]
    totals = {p: sum(r[p] for r in rounds) for p in range(PARTITIONS)}
    subscribed = [0, 1, 2, 3, 3]  # three streams on different partitions, two on the same one
    async with lkstream.connect(daemon.address) as client:
        client.create_topic(topic, PARTITIONS)
        caught_up = [asyncio.Event() for _ in subscribed]
        streams = [
            asyncio.create_task(collect(client, topic, p, totals[p], (rounds[0][p], event)))
            for p, event in zip(subscribed, caught_up, strict=True)
        ]
        await asyncio.sleep(0)  # one loop turn: every stream issues its Subscribe call before anything is produced
        expected: dict[int, list[bytes]] = defaultdict(list)

        async def produce_round(number: int) -> None:
            async def one_partition(p: int) -> None:
                values = [f"r{number}-p{p}-{i}" for i in range(rounds[number][p])]
                for start in range(0, len(values), 7):  # several calls per partition, interleaved
                    chunk = values[start : start + 7]
                    await client.produce_many(topic, [(None, v) for v in chunk], partition=p)
                expected[p].extend(v.encode() for v in values)

            await asyncio.gather(*(one_partition(p) for p in range(PARTITIONS)))

        # Round 1 is produced only once every stream has all of round 0, so it arrives as live appends
        # to streams waiting at the tail of the log.
        await asyncio.wait_for(produce_round(0), DEADLINE_S)
        waits = asyncio.gather(*(event.wait() for event in caught_up))
        try:
            await asyncio.wait_for(waits, DEADLINE_S)
        except TimeoutError:
            late = [p for p, event in zip(subscribed, caught_up, strict=True) if not event.is_set()]
            failed = [task.exception() for task in streams if task.done()]
            for task in streams:
                task.cancel()
            raise AssertionError(f"streams on partitions {late} did not get round 0 (seed {SEED}): {failed}") from None
        await asyncio.wait_for(produce_round(1), DEADLINE_S)
        received = await asyncio.wait_for(asyncio.gather(*streams), DEADLINE_S)
        stats = client.describe_topic(topic).partitions

    for p, got in zip(subscribed, received, strict=True):
        where = f"partition {p} (seed {SEED})"
        assert [off for off, _ in got] == list(range(totals[p])), where
        assert [value for _, value in got] == expected[p], where
    assert [s.next_offset for s in stats] == [totals[p] for p in range(PARTITIONS)], f"(seed {SEED})"


def test_restart_resumes_at_the_next_offset_with_everything_acknowledged(
    daemon: DaemonProcess, restart_daemon: RestartDaemon
) -> None:
    topic = "resume"
    rng = random.Random(SEED)
    where = f"(seed {SEED})"
    acked: dict[tuple[int, int], tuple[bytes, bytes]] = {}

    def produce(client: RemoteBroker, phase: str, count: int) -> None:
        records = [(f"k{rng.randrange(32)}", f"{phase}-{i}") for i in range(count)]
        for start in range(0, count, 50):
            chunk = records[start : start + 50]
            for (key, value), position in zip(chunk, client.produce_many_sync(topic, chunk), strict=True):
                acked[position] = (key.encode(), value.encode())

    with lkstream.connect(daemon.address) as client:
        client.create_topic(topic, PARTITIONS)
        produce(client, "before", 400)
        before = [s.next_offset for s in client.describe_topic(topic).partitions]
    assert daemon.process is not None
    assert daemon.terminate() == 0, "".join(daemon.output)
    assert daemon.process.returncode == 0

    restarted = restart_daemon(daemon)
    assert restarted.address == daemon.address
    with lkstream.connect(restarted.address) as client:
        assert [s.next_offset for s in client.describe_topic(topic).partitions] == before, where
        stored = {p: read_all(client, topic, p) for p in range(PARTITIONS)}
        by_position = {(p, off): (key, value) for p, records in stored.items() for off, key, value in records}
        assert by_position == acked, f"stored records differ from the acknowledged ones {where}"

        # Producing continues at each partition's next offset.
        after_start = len(acked)
        produce(client, "after", 200)
        new = sorted(position for position in acked if position not in by_position)
        assert len(acked) - after_start == 200, where
        for p in range(PARTITIONS):
            offsets = [off for pid, off in new if pid == p]
            assert offsets == list(range(before[p], before[p] + len(offsets))), f"partition {p} {where}"
        for p in range(PARTITIONS):
            records = read_all(client, topic, p)
            assert [off for off, _, _ in records] == list(range(len(records))), f"partition {p} {where}"
            assert {(p, off): (k, v) for off, k, v in records} == {
                pos: kv for pos, kv in acked.items() if pos[0] == p
            }, f"partition {p} {where}"
