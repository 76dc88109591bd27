"""Fixtures of the Spark tests: one local SparkSession for the whole run, and real daemons.

Every test here is marked ``spark`` and ``slow`` (``pytest -m "not spark"`` skips them all).
The session runs ``local[2]`` with the UI off; Spark's Python workers run this
interpreter (``PYSPARK_PYTHON``) so they import this checkout. Daemons are real
subprocesses on free loopback ports (the helpers of tests/integration/conftest.py).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.conftest import REPO, SERVER_KEYS, DaemonProcess

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ["PYTHONPATH"] = str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")

# No skip when pyspark or Java is missing: `make test` installs both (the `spark` extra and
# scripts/install-system-deps.sh), so their absence is a broken setup and must fail loudly.
try:
    import pyspark  # noqa: F401
except ImportError as exc:  # pragma: no cover - environment check
    raise ImportError(f"tests/spark need the `spark` extra (pip install -e '.[dev,spark]'): {exc}") from exc


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            # ARCHITECTURE/EXAMPLES: tests/spark is also "slow" (a JVM; `make test-fast` skips it).
            item.add_marker(pytest.mark.spark)
            item.add_marker(pytest.mark.slow)


def spark_env() -> dict[str, str]:
    """Environment for a child process (a Spark driver) that imports this checkout."""
    env = dict(os.environ)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return env


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise RuntimeError("Spark needs a Java 17 runtime: run scripts/install-system-deps.sh (make test does)")
    from pyspark.sql import SparkSession

    import lkstream.spark
    import lkstream.spark.jvm

    session = (
        SparkSession.builder.master("local[2]")
        .appName("lkstream-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        # The JVM reader (lkstream.spark.jvm.read_path), compiled on first use and cached.
        .config("spark.jars", lkstream.spark.jvm.jar_path())
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    lkstream.spark.register(session)
    yield session
    session.stop()


def start_daemon_at(base: Path, name: str, **config: Any) -> DaemonProcess:
    """A daemon with its own data directory under ``base`` (ports picked by the kernel)."""
    env = dict(os.environ)
    server = {"grpc_port": 0, "http_port": 0, "kafka_port": 0, **{k: v for k, v in config.items() if k in SERVER_KEYS}}
    values = {"persist_dir": str(base / name), **{k: v for k, v in config.items() if k not in SERVER_KEYS}}
    values["server"] = server
    path = base / f"{name}.yml"
    path.write_text(yaml.safe_dump(values))
    return DaemonProcess(path, base / name, env).start()


@pytest.fixture(scope="session")
def spark_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    """One daemon shared by the Spark tests (each test uses its own topics)."""
    daemon = start_daemon_at(tmp_path_factory.mktemp("spark-daemon"), "data", partitions=2)
    yield daemon
    daemon.terminate()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name unique to the test."""
    return "t." + request.node.name.replace("[", ".").replace("]", "").replace("-", ".")[:150]
