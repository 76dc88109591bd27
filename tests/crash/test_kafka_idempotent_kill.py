"""An idempotent acks=all Kafka producer survives repeated SIGKILLs of the daemon (fsync_mode: sync).

Every acknowledged record is in the log exactly once, in the order produced,
and no record appears twice even though librdkafka retried batches whose
acknowledgement the kill cut off (the log answers them as duplicates).
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer

from lkstream import Broker

REPO = Path(__file__).resolve().parents[2]
READY = re.compile(r"lkstream daemon ready: .* kafka=(\S+)")
TOTAL = 6000
KILLS = 3


def start(config: Path) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        [sys.executable, "-m", "lkstream.grpc_server", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert process.stdout is not None
    deadline = time.monotonic() + 30
    lines = []
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        match = READY.search(line)
        if match:
            threading.Thread(target=lambda: [None for _ in process.stdout or ()], daemon=True).start()
            return process, match.group(1)
    process.kill()
    raise AssertionError("daemon did not start:\n" + "".join(lines))


@pytest.mark.slow
def test_idempotent_producer_loses_and_duplicates_nothing_across_sigkills(tmp_path: Path) -> None:  # noqa: PLR0915 (one scenario, read top to bottom)
    seed = int(os.environ.get("LKSTREAM_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    data = tmp_path / "data"
    config = tmp_path / "config.yml"
    settings = {
        "persist_dir": str(data),
        "fsync_mode": "sync",
        "partitions": 1,
        "server": {"grpc_port": 0, "http_port": 0, "kafka_port": 0},
    }
    config.write_text(yaml.safe_dump(settings))
    process, bootstrap = start(config)
    # Restarts reuse the port the kernel picked, so the producer's bootstrap address stays valid.
    settings["server"]["kafka_port"] = int(bootstrap.rsplit(":", 1)[1])
    config.write_text(yaml.safe_dump(settings))
    acked: list[int] = []
    errors: list[str] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "message.timeout.ms": 120_000,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 200,
        }
    )

    def delivered(err: object, msg: object) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked.append(int(msg.value()))  # type: ignore[attr-defined]

    def produce_all() -> None:
        for i in range(TOTAL):
            while True:
                try:
                    producer.produce("crash", value=str(i).encode(), on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
            while i - len(acked) > 300:  # stay close to the acknowledgements: the kills land mid-stream
                producer.poll(0.01)
        producer.flush(120)

    writer = threading.Thread(target=produce_all)
    writer.start()
    killed_mid_stream = 0
    try:
        for kill in range(KILLS):
            target = (kill + 1) * TOTAL // (KILLS + 2) + rng.randrange(200)
            deadline = time.monotonic() + 60
            while len(acked) < target and time.monotonic() < deadline and writer.is_alive():
                time.sleep(0.01)
            killed_mid_stream += writer.is_alive()
            process.send_signal(signal.SIGKILL)
            process.wait()
            process, _ = start(config)
        writer.join(150)
        assert not writer.is_alive(), f"producer did not finish (seed {seed})"
    finally:
        process.terminate()
        process.wait(30)
    assert killed_mid_stream >= 2, f"the stream ended before the kills (seed {seed})"
    assert not errors, f"delivery errors {errors[:5]} (seed {seed})"
    assert sorted(acked) == list(range(TOTAL)), f"seed {seed}"
    with Broker(persist_dir=str(data)) as broker:
        values = [int(r.value) for r in broker.read_from("crash", 0, 0, max_bytes=1 << 30)]
    assert len(values) == len(set(values)), f"duplicates in the log (seed {seed})"
    assert values == sorted(values), f"order broken (seed {seed})"
    assert set(acked) <= set(values), f"acknowledged records lost (seed {seed})"
