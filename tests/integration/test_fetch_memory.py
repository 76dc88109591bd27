"""Issue 28, finding 4, against the real daemon: Kafka Fetch answers are bounded and their memory comes back.

Before: one Fetch of 8 partitions with every limit at 2^31-1 returned everything asked (792 MB,
RSS 876 MB, kept), one naming the same partition 200 times returned it 200 times (1.62 GB). The
daemon here copies its answers (``kafka_zero_copy: false``, the TLS path), so what it reads is
what it holds: the answer is capped by ``fetch_max_bytes`` (55 MiB by default), duplicates are
answered once, and the memory is handed back once the answers are written.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import lkstream
from lkstream.format.codec import encode_batch
from tests.integration.conftest import DaemonFactory, DaemonProcess
from tests.kafka_wire.raw_fetch import MAX_INT32, fetch_once, fetch_v4

MiB = 1024 * 1024
FETCH_MAX_BYTES = 55 * MiB  # the default
PARTITIONS = 8
BATCHES = 24  # of about 1 MB: 24 MB a partition, 192 MB in all (all of it was one answer before)
# The capped answer is 55 MiB, held once as bytes read (the answer's framing is written around
# them); the old path held all 192 MB, and the 200-fold one 200 MiB.
PEAK_GROWTH_LIMIT_MB = 130
AFTER_GROWTH_LIMIT_MB = 40
SETTLE_DEADLINE_S = 30.0


def _rss_mb(daemon: DaemonProcess) -> int:
    assert daemon.process is not None
    for line in Path(f"/proc/{daemon.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS")


class PeakRss:
    """Samples the daemon's RSS every 5 ms in a thread while the block runs."""

    def __init__(self, daemon: DaemonProcess) -> None:
        self.daemon = daemon
        self.peak = _rss_mb(daemon)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, _rss_mb(self.daemon))

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def test_huge_and_repeated_fetches_are_capped_and_their_memory_is_given_back(start_daemon: DaemonFactory) -> None:
    daemon = start_daemon(kafka_zero_copy=False)
    client = lkstream.connect(daemon.address)
    try:
        client.create_topic("big", PARTITIONS)
        batch = encode_batch([(None, b"x" * 200)] * 4500)
        for pid in range(PARTITIONS):
            for _ in range(BATCHES):
                client.produce_batch_sync("big", pid, bytearray(batch))
    finally:
        client.close()
    time.sleep(1.0)  # the produce burst's memory is trimmed once its admission drained
    before = _rss_mb(daemon)

    with PeakRss(daemon) as rss:
        every = [(pid, 0, MAX_INT32) for pid in range(PARTITIONS)]
        answer = fetch_once(daemon.kafka_address, fetch_v4([("big", every)], max_bytes=MAX_INT32))
        total = sum(len(p.records) for p in answer)
        assert FETCH_MAX_BYTES - 2 * len(batch) < total <= FETCH_MAX_BYTES, total

        repeated = [(0, 0, MiB)] * 200
        answer = fetch_once(daemon.kafka_address, fetch_v4([("big", repeated)], max_bytes=MAX_INT32))
        assert [(p.topic, p.partition) for p in answer] == [("big", 0)]
        assert len(answer[0].records) == len(batch)  # the first batch (just over 1 MiB), once

    growth = rss.peak - before
    print(f"fetch: RSS {before} MB -> peak {rss.peak} MB")
    assert growth < PEAK_GROWTH_LIMIT_MB, f"RSS peaked {growth} MB above {before} MB"
    deadline = time.monotonic() + SETTLE_DEADLINE_S
    while (now := _rss_mb(daemon)) - before >= AFTER_GROWTH_LIMIT_MB:
        assert time.monotonic() < deadline, f"RSS stayed at {now} MB after the fetches (from {before} MB)"
        time.sleep(0.2)
