"""`lkstream bench produce|consume` against a real daemon subprocess and on a data directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import lkstream
from tests.integration.conftest import DaemonProcess
from tests.integration.test_cli_daemon import lkstream_cli

pytestmark = pytest.mark.timeout(120)

KEYS = {
    "mode", "target", "messages", "size", "batch", "partitions", "seconds", "msg_per_s", "mb_per_s", "calls",
    "latency_p50_ms", "latency_p99_ms",
}  # fmt: skip


@pytest.mark.parametrize("mode", ["produce", "consume"])
def test_bench_against_a_daemon_prints_json_and_leaves_no_topic(daemon: DaemonProcess, mode: str) -> None:
    done = lkstream_cli(
        "bench", mode, "--bootstrap", daemon.address, "--messages", "3000", "--size", "100", "--batch", "500",
        "--partitions", "2", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert set(result) == KEYS
    assert (result["mode"], result["messages"], result["size"], result["partitions"]) == (mode, 3000, 100, 2)
    # produce: 6 calls of 500; consume: 3 reads of 500 per partition plus one empty read each.
    assert result["calls"] == (6 if mode == "produce" else 8)
    assert result["msg_per_s"] > 0 and result["mb_per_s"] > 0
    assert 0 < result["latency_p50_ms"] <= result["latency_p99_ms"]
    assert result["msg_per_s"] == pytest.approx(3000 / result["seconds"], rel=0.01)
    with lkstream.connect(daemon.address) as broker:
        assert broker.list_topics() == []


def test_bench_on_a_data_dir_prints_a_table(tmp_path: Path) -> None:
    data = tmp_path / "data"
    done = lkstream_cli("bench", "produce", "--data-dir", str(data), "--messages", "2000", "--batch", "100")
    assert done.returncode == 0, done.stderr
    header, row = done.stdout.splitlines()
    assert header.split() == [
        "MODE", "MESSAGES", "SIZE", "BATCH", "PARTITIONS", "SECONDS", "MSG/S", "MB/S", "P50_MS", "P99_MS",
    ]  # fmt: skip
    assert row.split()[:5] == ["produce", "2000", "200", "100", "1"]
    assert len(header) == len(row)  # aligned columns
    assert not (data / "topics").exists() or not any((data / "topics").iterdir())


def test_bench_errors(daemon: DaemonProcess) -> None:
    done = lkstream_cli("bench", "produce", "--bootstrap", "127.0.0.1:1", "--messages", "10")
    assert done.returncode == 1 and "127.0.0.1:1" in done.stderr and "Traceback" not in done.stderr
    done = lkstream_cli("bench", "produce", "--data-dir", str(daemon.data_dir), "--messages", "10")
    assert done.returncode == 1 and "locked by a running daemon" in done.stderr
    done = lkstream_cli("bench", "sideways")
    assert done.returncode == 2
    done = lkstream_cli("bench", "produce", "--messages", "0")
    assert done.returncode == 2
