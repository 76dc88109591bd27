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
from click.testing import CliRunner, Result

import lkstream
from lkstream.cli import cli
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


def invoke(*args: str, stdin: str | None = None) -> Result:
    """The CLI in this process (no terminal, no subprocess start-up cost)."""
    return CliRunner().invoke(cli, list(args), input=stdin)


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


def test_consume_json_prints_bytes_that_are_not_utf8_as_base64_objects(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as broker:
        broker.produce_many_sync("bin", [(b"\xff", b"\x00\xfe", [("h", b"\x80"), ("t", b"text")])])
    done = lkstream_cli("consume", "bin", "--bootstrap", daemon.address, "--output", "json")
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    assert row["key"] == {"base64": base64.b64encode(b"\xff").decode()}
    assert base64.b64decode(row["value"]["base64"]) == b"\x00\xfe"
    assert row["headers"] == [{"key": "h", "value": {"base64": "gA=="}}, {"key": "t", "value": "text"}]


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
    cmd += [
        "--persist-dir",
        str(tmp_path / "data"),
        "--grpc-port",
        "0",
        "--http-port",
        "0",
        "--kafka-port",
        "0",
        "--fsync-mode",
        "sync",
    ]
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


# -- produce --json ----------------------------------------------------------------------------------


def test_produce_json_sends_keys_values_headers_and_partitions(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as broker:
        broker.create_topic("j", 2)
    lines = [
        {"key": "k1", "value": "plain", "headers": {"trace": "t1", "raw": {"base64": "AP8="}}},
        {"key": {"base64": base64.b64encode(b"\xff\x00").decode()}, "value": {"base64": "AAE="}, "partition": 1},
        {"value": "no key", "partition": 0},
        {"key": None, "value": None, "partition": 1},
    ]
    stdin = "".join(json.dumps(line) + "\n" for line in lines)
    done = lkstream_cli("produce", "j", "--bootstrap", daemon.address, "--json", stdin=stdin)
    assert done.returncode == 0, done.stderr
    assert "4 records acknowledged" in done.stdout
    with lkstream.connect(daemon.address) as broker:
        p0 = broker.read_from("j", 0, 0)
        p1 = broker.read_from("j", 1, 0)
    # The keyed first line goes where its key hashes; the explicit partitions keep their order.
    explicit_p1 = [(r.key, r.value, list(r.headers)) for r in p1 if r.key != b"k1"]
    assert explicit_p1 == [(b"\xff\x00", b"\x00\x01", []), (None, None, [])]
    assert len(p0) + len(p1) == 4
    assert (p0[-1].key, p0[-1].value) == (None, b"no key")
    first = [r for r in p0 + p1 if r.key == b"k1"]
    assert len(first) == 1 and first[0].value == b"plain"
    assert list(first[0].headers) == [("trace", b"t1"), ("raw", b"\x00\xff")]


def test_a_bad_json_line_is_named_and_the_lines_before_it_are_kept(daemon: DaemonProcess) -> None:
    # Every kind of bad line is covered in process (tests/unit/test_cli.py); this is the end-to-end path.
    stdin = '{"value": "one"}\n{"value": "two"}\n{"value": "v", "vaule": 1}\n{"value": "after"}\n'
    done = lkstream_cli("produce", "bad.json", "--bootstrap", daemon.address, "--json", stdin=stdin)
    assert done.returncode == 1, done
    assert "line 3: unknown field(s) vaule" in done.stderr, done.stderr
    assert "2 records acknowledged before the error" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    with lkstream.connect(daemon.address) as broker:
        assert [r.value for r in broker.read_from("bad.json", 0, 0)] == [b"one", b"two"]


def test_json_and_key_separator_together_are_a_usage_error() -> None:
    done = lkstream_cli("produce", "t", "--json", "--key-separator", ":", stdin="{}\n")
    assert done.returncode == 2 and "mutually exclusive" in done.stderr


def test_produce_json_to_a_missing_partition_exits_1_with_the_count(daemon: DaemonProcess) -> None:
    stdin = '{"value": "ok"}\n{"value": "nowhere", "partition": 7}\n'
    done = lkstream_cli("produce", "onepart", "--bootstrap", daemon.address, "--json", stdin=stdin)
    assert done.returncode == 1, done
    assert "1 record acknowledged before the error" in done.stderr
    assert "Traceback" not in done.stderr


# -- --data-dir --------------------------------------------------------------------------------------


def test_produce_on_a_data_dir_held_by_a_daemon_fails_naming_it(daemon: DaemonProcess) -> None:
    assert daemon.process is not None
    done = lkstream_cli("produce", "t", "--data-dir", str(daemon.data_dir), stdin="x\n")
    assert done.returncode == 1, done
    assert f"locked by a running daemon (pid {daemon.process.pid})" in done.stderr
    assert "--bootstrap" in done.stderr and "Traceback" not in done.stderr


def test_consume_offline_reads_beside_a_running_daemon(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as broker:
        broker.create_topic("off", 2)
        broker.produce_many_sync("off", [(b"k", b"p0-a"), (b"k", b"p0-b")], partition=0)
        broker.produce_many_sync("off", [(None, b"p1-a")], partition=1)
    data = str(daemon.data_dir)
    done = invoke("consume", "off", "--data-dir", data, "--output", "json")
    assert done.exit_code == 0, done.output
    rows = [json.loads(line) for line in done.output.splitlines()]
    assert [(r["partition"], r["offset"], r["key"], r["value"]) for r in rows] == [
        (0, 0, "k", "p0-a"),
        (0, 1, "k", "p0-b"),
        (1, 0, None, "p1-a"),
    ]
    done = invoke("consume", "off", "--data-dir", data, "--partition", "0", "--from", "latest")
    assert (done.exit_code, done.output) == (0, "")
    done = invoke("consume", "off", "--data-dir", data, "--from", "1", "--max-messages", "1")
    assert (done.exit_code, done.output) == (0, "p0-b\n")
    # The daemon still owns the directory: the offline read took no lock.
    with lkstream.connect(daemon.address) as broker:
        assert broker.produce_many_sync("off", [(None, b"more")], partition=1) == [(1, 1)]
    done = invoke("consume", "nope", "--data-dir", data)
    assert done.exit_code == 1 and "NOT_FOUND" in done.output


def test_data_dir_usage_errors(tmp_path: Path) -> None:
    data = tmp_path / "d"
    done = invoke("produce", "t", "--data-dir", str(data), stdin="x\n")
    assert done.exit_code == 0, done.output
    for extra in (("--group", "g"), ("--follow",), ("--bootstrap", "127.0.0.1:9")):
        done = invoke("consume", "t", "--data-dir", str(data), *extra)
        assert done.exit_code == 2, (extra, done.output)
    done = invoke("consume", "t", "--data-dir", str(tmp_path / "missing"))
    assert done.exit_code == 2


# -- progress bars -----------------------------------------------------------------------------------


def _run_with_tty_stderr(*args: str) -> tuple[int, str, str]:
    """Run the CLI with stderr on a pseudo-terminal and stdout on a pipe; ``(status, stdout, stderr)``."""
    import pty
    import threading

    master, slave = pty.openpty()
    env = dict(os.environ, TERM="xterm", COLUMNS="100")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    process = subprocess.Popen(
        [sys.executable, "-m", "lkstream.cli", *args],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, env=env, cwd=REPO,
    )  # fmt: skip
    os.close(slave)
    chunks: list[bytes] = []

    def read_tty() -> None:  # drain the terminal so the child never blocks on it
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: the child closed its end
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read_tty, daemon=True)
    reader.start()
    assert process.stdout is not None
    stdout = process.stdout.read().decode()
    code = process.wait(60)
    reader.join(10)
    os.close(master)
    return code, stdout, b"".join(chunks).decode(errors="replace")


def test_progress_bars_go_to_a_terminal_stderr_and_never_to_stdout(daemon: DaemonProcess, tmp_path: Path) -> None:
    lines = tmp_path / "many.txt"
    lines.write_text("".join(f"value-{i}\n" for i in range(20_000)))
    code, out, err = _run_with_tty_stderr("produce", "bars", "--bootstrap", daemon.address, "--file", str(lines))
    assert code == 0, err
    assert out == f"20000 records acknowledged by {daemon.address} (topic bars)\n"
    assert "produce bars" in err  # the bar's description, drawn on the terminal

    code, out, err = _run_with_tty_stderr("consume", "bars", "--bootstrap", daemon.address, "--max-messages", "5000")
    assert code == 0, err
    assert out.splitlines() == [f"value-{i}" for i in range(5000)]
    assert "consume bars" in err

    # Without a terminal on stderr there is no bar at all.
    done = lkstream_cli("produce", "bars", "--bootstrap", daemon.address, "--file", str(lines))
    assert (done.returncode, done.stderr) == (0, "")


def test_help_documents_the_exit_codes() -> None:
    done = lkstream_cli("--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "Exit status" in text and "0 success" in text and "2 usage error" in text
    assert "1 failure" in text
