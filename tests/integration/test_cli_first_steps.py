"""A newcomer's everyday moves with the CLI and the daemon (issue 13): one clean line for each mistake.

Every test runs the user's commands: real ``lkstream`` subprocesses, a real daemon on
free loopback ports, real pipes into ``head``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import lkstream
from tests.integration.conftest import REPO, DaemonProcess

pytestmark = pytest.mark.timeout(180)

LKSTREAM = [sys.executable, "-m", "lkstream.cli"]


def env() -> dict[str, str]:
    values = dict(os.environ)
    values["PYTHONPATH"] = str(REPO) + os.pathsep + values.get("PYTHONPATH", "")
    return values


def run(*args: str, stdin: str | bytes | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LKSTREAM, *args],
        input=stdin.decode() if isinstance(stdin, bytes) else stdin,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
        env=env(),
        cwd=cwd,
    )


def shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``command`` in bash with ``lkstream`` meaning this checkout's CLI."""
    prelude = f'lkstream() {{ "{sys.executable}" -m lkstream.cli "$@"; }}\n'
    return subprocess.run(
        ["bash", "-c", prelude + command], capture_output=True, text=True, timeout=90, check=False, env=env(), cwd=cwd
    )


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


# -- pointing at the wrong place --------------------------------------------------------------------


def test_bootstrap_at_the_http_port_fails_at_once_and_the_daemon_logs_one_line(daemon: DaemonProcess) -> None:
    started = time.monotonic()
    done = run("topics", "list", "--bootstrap", daemon.http_address)
    elapsed = time.monotonic() - started
    assert done.returncode == 1
    line = one_error_line(done.stderr)
    assert line.startswith(f"Error: UNAVAILABLE: cannot reach the lkstream daemon at {daemon.http_address}")
    assert "HTTP" in line and "gRPC port" in line and "server.grpc_port" in line
    assert elapsed < 15, "an HTTP port is not retried like a restarting daemon"
    # The daemon notes it in one warning, not a traceback per connection attempt.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any("not an HTTP/1.x request" in line for line in daemon.output):
        time.sleep(0.05)
    log = "".join(daemon.output)
    assert log.count("not an HTTP/1.x request") == 1, log
    assert "Traceback" not in log


def test_no_daemon_at_the_address_is_one_line_in_bounded_time() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"  # closed once the block ends
    started = time.monotonic()
    done = run("topics", "list", "--bootstrap", address)
    assert done.returncode == 1
    assert one_error_line(done.stderr).startswith(f"Error: UNAVAILABLE: cannot reach the lkstream daemon at {address}")
    assert time.monotonic() - started < 30


def test_an_http_client_at_the_grpc_port_leaves_no_traceback_in_the_daemon_log(daemon: DaemonProcess) -> None:
    host, port = daemon.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        conn.settimeout(5)
        try:
            while conn.recv(4096):
                pass
        except (TimeoutError, ConnectionResetError):
            pass
    with lkstream.connect(daemon.address) as client:  # still serving
        assert client.list_topics() == []
    assert "Traceback" not in "".join(daemon.output)


def test_busy_grpc_and_http_ports_each_print_one_line_naming_the_setting(daemon: DaemonProcess, tmp_path: Path) -> None:
    grpc_port = daemon.address.rsplit(":", 1)[1]
    http_port = daemon.http_address.rsplit(":", 1)[1]
    cases = {
        "grpc": (["--grpc-port", grpc_port, "--http-port", "0", "--kafka-port", "0"], "server.grpc_port"),
        "http": (["--grpc-port", "0", "--http-port", http_port, "--kafka-port", "0"], "server.http_port"),
    }
    for name, (flags, setting) in cases.items():
        done = run("serve", "--persist-dir", str(tmp_path / name), *flags, "--log-level", "WARNING")
        assert done.returncode == 1, done.stderr
        line = one_error_line(done.stderr)
        assert "address already in use" in line and setting in line, line


def test_a_data_dir_held_by_a_daemon_prints_one_line_naming_persist_dir(daemon: DaemonProcess) -> None:
    done = run("serve", "--persist-dir", str(daemon.data_dir), "--grpc-port", "0", "--http-port", "0")
    assert done.returncode == 1
    line = one_error_line(done.stderr)
    assert "locked by another broker" in line and "persist_dir" in line


def test_a_yaml_syntax_error_names_the_file_and_the_line(tmp_path: Path) -> None:
    config = tmp_path / "broken.yml"
    config.write_text("persist_dir: ./data\nserver:\n  grpc_port: [9090\n")
    done = run("serve", "--config", str(config))
    assert done.returncode == 2
    line = one_error_line(done.stderr)
    assert f"config file {config}, line 4, column 1: not valid YAML" in line, line
    assert "<unicode string>" not in line


# -- reading what is there --------------------------------------------------------------------------


def test_consume_a_partition_the_topic_lacks_prints_a_coded_error(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as client:
        client.create_topic("four", 4)
    done = run("consume", "four", "--partition", "9", "--bootstrap", daemon.address)
    assert done.returncode == 1
    assert one_error_line(done.stderr) == (
        "Error: INVALID_ARGUMENT: partition 9 does not exist in 'four' (it has 4 partitions)"
    )


def test_dump_into_head_exits_0_and_dump_of_a_text_file_is_refused(daemon: DaemonProcess, tmp_path: Path) -> None:
    with lkstream.connect(daemon.address) as client:
        for n in range(200):
            client.produce_many_sync("d", [(None, f"v{n}".encode())], partition=0)
    segment = daemon.data_dir / "topics" / "d" / "part0" / f"{0:020d}.seg"
    done = shell(f"set -o pipefail; lkstream dump --records {segment} | head -1", tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"Dumping {segment}\n", "")
    done = run("dump", str(REPO / "README.md"))
    assert done.returncode == 2
    assert "is not a segment (.seg) or index (.idx) file" in done.stderr
    assert "position:" not in done.stdout


def test_consume_into_head_exits_0_without_noise(daemon: DaemonProcess, tmp_path: Path) -> None:
    with lkstream.connect(daemon.address) as client:
        client.produce_many_sync("h", [(None, b"x" * 100)] * 5000, partition=0)
    done = shell(f"set -o pipefail; lkstream consume h --bootstrap {daemon.address} | head -2", tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "x" * 100 + "\n" + "x" * 100 + "\n", "")


def test_groups_list_reads_a_data_dir_offline(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as client:
        client.create_topic("g", 2)
        client.produce_many_sync("g", [(None, b"x")], partition=0)  # a commit may not pass the log's end
        client.commit_offset("billing", "g", 0, 1)
        client.commit_offset("billing", "g", 1, 0)
        client.commit_offset("audit", "g", 0, 0)
    done = run("groups", "list", "--data-dir", str(daemon.data_dir))
    assert done.returncode == 0, done.stderr
    assert [line.split() for line in done.stdout.splitlines()] == [
        ["GROUP", "STATE", "TOPICS", "PARTITIONS"],
        ["audit", "offline", "1", "1"],
        ["billing", "offline", "1", "2"],
    ]


# -- one JSON record shape ----------------------------------------------------------------------------


def test_consume_json_piped_into_produce_json_copies_a_topic_byte_for_byte(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    odd = bytes(range(256))  # every byte value, not UTF-8
    records = [
        (0, None, b"plain text", []),
        (0, b"\xff\xfe", b"\x00\x01\x80", [("h", b"\xc3\x28"), ("h", None), ("t", "é".encode())]),
        (1, b"", b"", []),
        (1, b"key", None, [("only-name", None)]),  # a tombstone
        (2, odd, odd[::-1], [("bin", odd)]),
        (2, "ключ".encode(), b'{"p": 1}', []),
    ]
    with lkstream.connect(daemon.address) as client:
        client.create_topic("src", 3)
        client.create_topic("dst", 3)
        for pid, key, value, headers in records:
            client.produce_many_sync("src", [(key, value, headers)], partition=pid)
    done = shell(
        f"set -o pipefail; lkstream consume src --output json --bootstrap {daemon.address} "
        f"| lkstream produce dst --json --bootstrap {daemon.address}",
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"6 records acknowledged by {daemon.address} (topic dst)\n"
    with lkstream.connect(daemon.address) as client:
        for pid in range(3):
            source = [(r.offset, r.key, r.value, list(r.headers)) for r in client.read_from("src", pid, 0)]
            copy = [(r.offset, r.key, r.value, list(r.headers)) for r in client.read_from("dst", pid, 0)]
            assert copy == source, f"partition {pid}"


# -- the examples ---------------------------------------------------------------------------------------


def example(name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO / "examples" / name), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env(),
        cwd=cwd,
    )


def test_the_embedded_examples_run_beside_a_daemon_twice_and_skip_records_that_are_not_ticks(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    for round_ in (1, 2):
        produced = example("producer_example.py", "--count", "2000", cwd=tmp_path)
        assert produced.returncode == 0, produced.stderr
        assert "produced 2000 ticks" in produced.stdout
        assert produced.stdout.count("  partition ") == 4  # the 4 partitions it asks for
        if round_ == 2:  # the quickstart's plain-text lines, produced into the same topic by hand
            done = run(
                "produce",
                "market.ticks",
                "--data-dir",
                "example-data",
                "--key-separator",
                " ",
                stdin="AAPL {}\n",
                cwd=tmp_path,
            )
            assert done.returncode == 0, done.stderr
        consumed = example("consumer_example.py", cwd=tmp_path)
        assert consumed.returncode == 0, consumed.stderr
        expected = "consumed 2000 new records (0 not ticks" if round_ == 1 else "consumed 2001 new records (1 not ticks"
        assert expected in consumed.stdout, consumed.stdout


def test_an_example_on_a_data_dir_a_daemon_holds_prints_one_line(daemon: DaemonProcess, tmp_path: Path) -> None:
    for name in ("producer_example.py", "consumer_example.py"):
        done = example(name, "--persist-dir", str(daemon.data_dir), cwd=tmp_path)
        assert done.returncode == 1
        line = one_error_line(done.stderr)
        assert "is in use by another process" in line and "--persist-dir" in line
