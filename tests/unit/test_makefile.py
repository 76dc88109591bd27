"""The Makefile installs what each target needs, once (issue 13, finding 8), checked with `make -n`.

`make -n` prints the commands a target would run without running them, against a
virtualenv path in tmp_path: a fresh one (nothing installed) and one whose stamps
are up to date.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def dry_run(target: str, venv: Path, *extra: str) -> list[str]:
    make = shutil.which("make")
    assert make is not None, "make is part of the development environment"
    done = subprocess.run(
        [make, "-n", "-C", str(REPO), target, f"VENV={venv}", *extra],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if not line.startswith("make")]


def installs(commands: list[str]) -> list[str]:
    return [c.split("pip install --quiet ", 1)[1] for c in commands if "pip install --quiet -e" in c]


@pytest.mark.parametrize(
    ("target", "wanted"),
    [
        ("run", ["-e ."]),
        ("examples", ["-e ."]),
        ("spark-example", ["-e '.[spark]'"]),
        ("test", ["-e '.[dev,spark]'"]),
        ("check", ["-e '.[dev,spark]'"]),
    ],
)
def test_each_target_installs_only_its_own_extras(target: str, wanted: list[str], tmp_path: Path) -> None:
    assert installs(dry_run(target, tmp_path / "venv")) == wanted


def test_installed_stamps_mean_no_reinstall_and_make_run_just_runs_the_daemon(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    # Later than every build input (the Makefile's BUILD_INPUTS): a working tree's C sources may be newer than
    # pyproject.toml (in a fresh clone they are all the clone's time).
    inputs = [REPO / "pyproject.toml", *REPO.glob("lkstream/format/*.[ch]"), *REPO.glob("lkstream/storage/*.c")]
    later = max(path.stat().st_mtime for path in inputs) + 10
    for stamp in (".installed-run", ".installed-spark", ".installed"):
        (venv / stamp).touch()
        os.utime(venv / stamp, (later, later))
    assert dry_run("run", venv) == [f"{venv}/bin/python -m lkstream.grpc_server --config conf/local.yml"]
    assert dry_run("examples", venv) == [
        f"{venv}/bin/python examples/producer_example.py --persist-dir ./example-data",
        f"{venv}/bin/python examples/consumer_example.py --persist-dir ./example-data",
    ]
    assert dry_run("spark-example", venv, "ARGS=--bootstrap 127.0.0.1:9090") == [
        f"{venv}/bin/python examples/spark_pipeline.py --bootstrap 127.0.0.1:9090"
    ]


def test_a_full_install_also_satisfies_the_smaller_targets(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    commands = dry_run("test", venv)
    touch = next(c for c in commands if c.startswith("touch"))
    assert {Path(p).name for p in touch.split()[1:]} == {".installed", ".installed-spark", ".installed-run"}
