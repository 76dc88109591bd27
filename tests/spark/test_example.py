"""examples/spark_pipeline.py runs any number of times, with or without --bootstrap (issue 13, finding 2).

A second run used to fail after 45 s with ``CANNOT_READ_DELTA_FILE_NOT_EXISTS``: its
checkpoint lived in a temporary directory while ``./spark-bars/_spark_metadata``
stayed. Here the example runs twice, as ``make spark-example`` does, on its own
daemon (the quickstart's test runs it twice against ``make run``'s daemon).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import REPO
from tests.spark.conftest import spark_env

pytestmark = pytest.mark.timeout(600)


def test_the_spark_example_runs_twice_in_a_row_on_its_own_daemon(tmp_path: Path) -> None:
    bars = []
    for round_ in (1, 2):
        done = subprocess.run(
            [sys.executable, str(REPO / "examples" / "spark_pipeline.py"), "--seconds", "6"],
            capture_output=True,
            text=True,
            timeout=400,
            check=False,
            env=spark_env(),
            cwd=tmp_path,
        )
        assert done.returncode == 0, f"round {round_}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        archived = re.search(r"\[archive\] (\d+) bars in \./spark-bars", done.stdout)
        assert archived is not None and int(archived.group(1)) > 0, done.stdout[-3000:]
        bars.append(int(archived.group(1)))
        assert ("starting over" in done.stdout) is (round_ == 2)
    assert (tmp_path / "spark-bars" / ".lkstream-example").exists()
    assert (tmp_path / "spark-bars.checkpoint" / "archive").is_dir()
    assert (tmp_path / "example-data" / "topics" / "market.ticks").is_dir()


def test_the_spark_example_refuses_an_archive_it_did_not_write(tmp_path: Path) -> None:
    archive = tmp_path / "mine"
    archive.mkdir()
    (archive / "report.txt").write_text("keep me")
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "spark_pipeline.py"), "--archive", str(archive)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=spark_env(),
        cwd=tmp_path,
    )
    assert done.returncode == 1
    assert "was not written by this example" in done.stderr
    assert (archive / "report.txt").read_text() == "keep me"
