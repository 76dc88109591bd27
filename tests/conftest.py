"""Shared fixtures. Every test gets its own data directory under pytest's tmp_path."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

# Before anything starts gRPC in this process. A test worker makes gRPC calls, then may start a
# SparkSession, whose JVM launch forks (subprocess with a preexec_fn): gRPC's fork handlers then
# run in the child and once hung it (grpc/grpc#22624; docs/spark.md, "The driver process and
# fork"). The suite's forks either exec at once (the JVM, daemons, tools) or come from a process
# that never used gRPC (PySpark's worker daemon), so the handlers are not needed: switch them off.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import pytest
from hypothesis import settings

from lkstream import Broker

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable

# Hypothesis fails an example that takes over 200 ms by default. On the shared 2-core machine and
# in CI beside two test workers, a 0.25 ms example once took 441 ms (a scheduling pause) and failed
# the suite. Time limits belong in benchmarks, not in tests: no deadline for any property test.
settings.register_profile("lkstream", deadline=None)
settings.load_profile("lkstream")


# The daemon's default ports. A developer's `make run` or local Kafka holds them while the suite runs,
# so no test may listen there: the suite holds them itself (whichever worker binds first), and a test
# that forgets `--kafka-port 0` fails here exactly as it would on that developer's machine.
DEFAULT_PORTS = (9090, 8080, 9092)


#: The files that take longest (seconds of test time in one run of `make test`: the docs twice
#: 72-210, the Spark example twice 84-117, then 25-60 each), handed to the workers first. xdist's
#: `--dist loadfile` gives out files in collection order (`make test` turns off its reordering by
#: test count, which put these last): started last, one of them kept a worker busy for minutes
#: after the others had finished.
LONGEST_FIRST = (
    "tests/integration/test_docs_examples.py",
    "tests/spark/test_example.py",
    "tests/integration/test_daemon.py",
    "tests/integration/test_cli_topics.py",
    "tests/integration/test_cli_daemon.py",
    "tests/frameworks/test_faust.py",
    "tests/integration/test_cli_consume_habits.py",
    "tests/security/test_unauthenticated_limits.py",
    "tests/integration/test_cli_first_steps.py",
    "tests/security/test_kafka_security.py",
    "tests/integration/test_connection_limits.py",
    "tests/frameworks/test_quixstreams.py",
    "tests/spark/test_sink.py",
    "tests/integration/test_kafka_lane.py",
    "tests/integration/test_cli_produce_copy.py",
    "tests/spark/test_source.py",
    "tests/spark/test_exactly_once.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # stable: the rest keep their order


@pytest.fixture(scope="session", autouse=True)
def default_ports_held() -> Iterator[None]:
    held: list[socket.socket] = []
    for port in DEFAULT_PORTS:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen(1)
        except OSError:  # held already: by another worker, or by what the developer runs
            sock.close()
            continue
        held.append(sock)
    try:
        yield
    finally:
        for sock in held:
            with contextlib.suppress(OSError):
                sock.close()


@pytest.fixture
def data_dir(tmp_path: Path) -> str:
    path = tmp_path / "data"
    path.mkdir()
    return str(path)


@pytest.fixture
def broker(data_dir: str) -> Iterator[Broker]:
    b = Broker(persist_dir=data_dir, fsync_mode="group", partitions=1)
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def subprocess_env() -> dict[str, str]:
    """Environment for child Python processes that import the package from this checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env
