"""`lkstream serve`, `lkstream produce` and `lkstream consume` against a real daemon subprocess."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import lkstream
from tests.integration.conftest import READY, REPO, DaemonProcess

pytestmark = pytest.mark.timeout(120)


def lkstream_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "lkstream.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
        cwd=REPO,
    )


def test_produce_three_lines_then_consume_them_back_as_json(daemon: DaemonProcess) -> None:
    done = lkstream_cli("produce", "market.ticks", "--bootstrap", daemon.address, stdin="AAPL 1\nMSFT 2\nTSLA 3\n")
    assert done.returncode == 0, done.stderr
    assert "3 records acknowledged" in done.stdout

    done = lkstream_cli(
        "consume", "market.ticks", "--bootstrap", daemon.address, "--from", "earliest", "--output", "json"
    )
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["topic"], r["partition"], r["offset"], r["key"], r["value"]) for r in rows] == [
        ("market.ticks", 0, 0, None, "AAPL 1"),
        ("market.ticks", 0, 1, None, "MSFT 2"),
        ("market.ticks", 0, 2, None, "TSLA 3"),
    ]
    assert all(r["timestamp"] > 1_600_000_000_000 for r in rows)


def test_produce_from_a_file_with_keys_and_consume_raw_from_an_offset(daemon: DaemonProcess, tmp_path: Path) -> None:
    lines = tmp_path / "ticks.txt"
    lines.write_text("".join(f"K{i % 3}:v{i}\n" for i in range(2500)))
    done = lkstream_cli("produce", "keyed", "--bootstrap", daemon.address, "--key-separator", ":", "--file", str(lines))
    assert done.returncode == 0, done.stderr
    assert "2500 records acknowledged" in done.stdout
    with lkstream.connect(daemon.address) as broker:
        records = broker.read_from("keyed", 0, 0, max_msgs=2)
        assert [(r.key, r.value) for r in records] == [(b"K0", b"v0"), (b"K1", b"v1")]

    done = lkstream_cli("consume", "keyed", "--bootstrap", daemon.address, "--from", "2498")
    assert (done.returncode, done.stdout) == (0, "v2498\nv2499\n"), done.stderr
    done = lkstream_cli("consume", "keyed", "--bootstrap", daemon.address, "--max-messages", "3", "--partition", "0")
    assert (done.returncode, done.stdout) == (0, "v0\nv1\nv2\n"), done.stderr


def test_consume_json_marks_binary_values_as_base64(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as broker:
        broker.produce_many_sync("bin", [(b"\xff", b"\x00\xfe")])
    done = lkstream_cli("consume", "bin", "--bootstrap", daemon.address, "--output", "json")
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    assert row["key_encoding"] == row["value_encoding"] == "base64"
    assert base64.b64decode(row["value"]) == b"\x00\xfe"


def test_consume_follow_stops_after_max_messages(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as broker:
        broker.produce_many_sync("live", [(None, b"one"), (None, b"two")])
    done = lkstream_cli("consume", "live", "--bootstrap", daemon.address, "--follow", "--max-messages", "2")
    assert (done.returncode, done.stdout) == (0, "one\ntwo\n"), done.stderr


def test_errors_from_the_daemon_exit_1_with_the_message_and_usage_errors_exit_2(daemon: DaemonProcess) -> None:
    done = lkstream_cli("consume", "nope", "--bootstrap", daemon.address)
    assert done.returncode == 1
    assert "nope" in done.stderr and "Traceback" not in done.stderr
    done = lkstream_cli("produce", "bad/name", "--bootstrap", daemon.address, stdin="x\n")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    done = lkstream_cli("consume", "t", "--bootstrap", daemon.address, "--from", "yesterday")
    assert done.returncode == 2
    assert "yesterday" in done.stderr


def test_an_unreachable_bootstrap_exits_1_naming_the_address() -> None:
    for args in (("produce", "t"), ("consume", "t")):
        done = lkstream_cli(*args, "--bootstrap", "127.0.0.1:1", stdin="x\n")
        assert done.returncode == 1, done
        assert "127.0.0.1:1" in done.stderr
        assert "Traceback" not in done.stderr


def test_lkstream_serve_runs_the_same_daemon_and_exits_0_on_sigterm(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "lkstream.cli", "serve", "--config", str(REPO / "conf" / "local.yml")]
    cmd += ["--persist-dir", str(tmp_path / "data"), "--grpc-port", "0", "--http-port", "0", "--fsync-mode", "sync"]
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        match = READY.search(line)
        assert match, line
        assert str(tmp_path / "data") in line
        with lkstream.connect(match.group(1)) as broker:
            assert broker.produce_many_sync("t", [(None, b"x")]) == [(0, 0)]
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_bad_config_flag_value_is_a_usage_error(tmp_path: Path) -> None:
    done = lkstream_cli("serve", "--persist-dir", str(tmp_path), "--grpc-port", "70000")
    assert done.returncode == 2
    done = lkstream_cli("serve", "--config", str(tmp_path / "missing.yml"))
    assert done.returncode == 2
    assert "missing.yml" in done.stderr
