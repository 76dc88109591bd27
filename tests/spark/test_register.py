"""``lkstream.spark.register`` makes Spark's Python workers able to run the source (issue 13, finding 3).

The user's situation, for real: a driver script whose ``python3`` on PATH is another
virtualenv, one without lkstream or crc32c. Spark starts its workers with that
``python3`` unless told otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lkstream import Broker
from tests.integration.conftest import REPO
from tests.spark.conftest import spark_env

pytestmark = pytest.mark.timeout(300)

DRIVER = textwrap.dedent(
    """
    import os, sys
    from pyspark.sql import SparkSession
    import lkstream.spark
    from lkstream.errors import InvalidArgumentError

    data_dir, mode = sys.argv[1], sys.argv[2]
    spark = (SparkSession.builder.master("local[1]").appName("register-check")
             .config("spark.ui.enabled", "false").config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        lkstream.spark.register(spark)
    except InvalidArgumentError as exc:
        print("REFUSED:", exc)
        sys.exit(3)
    rows = spark.read.format("lkstream").option("path", data_dir).option("subscribe", "t").load().count()
    print("ROWS:", rows)
    spark.stop()
    """
)


@pytest.fixture
def bare_python(tmp_path: Path) -> Path:
    """A virtualenv without lkstream's dependencies; its bin/ is what PATH finds first as python3."""
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python3 = venv / "bin" / "python3"
    done = subprocess.run([str(python3), "-c", "import crc32c"], capture_output=True, check=False)
    assert done.returncode != 0, "the bare interpreter must lack crc32c"
    return python3


def _driver(tmp_path: Path, bare: Path, data_dir: str, mode: str, **env: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    values = spark_env()
    for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        values.pop(name, None)
    values["PATH"] = str(bare.parent) + os.pathsep + values.get("PATH", "")
    values["PYTHONPATH"] = str(REPO)
    values.update(env)
    return subprocess.run(
        [sys.executable, str(script), data_dir, mode],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env=values,
    )


def _data_dir(tmp_path: Path) -> str:
    path = str(tmp_path / "data")
    with Broker(persist_dir=path) as broker:
        broker.create_topic("t", 2)
        for pid in range(2):
            broker.produce_many_sync("t", [(None, f"v{n}".encode()) for n in range(5)], partition=pid)
    return path


def test_workers_of_a_local_session_get_this_interpreter_when_nothing_was_set(
    tmp_path: Path, bare_python: Path
) -> None:
    done = _driver(tmp_path, bare_python, _data_dir(tmp_path), "unset")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "ROWS: 10" in done.stdout


def test_a_worker_interpreter_without_lkstream_is_refused_at_register_naming_what_to_set(
    tmp_path: Path, bare_python: Path
) -> None:
    done = _driver(tmp_path, bare_python, _data_dir(tmp_path), "set", PYSPARK_PYTHON=str(bare_python))
    assert done.returncode == 3, done.stdout + done.stderr[-3000:]
    refused = done.stdout
    assert f"Spark's Python workers run '{bare_python}', which cannot import lkstream" in refused
    assert "crc32c" in refused and "set PYSPARK_PYTHON" in refused and sys.executable in refused
