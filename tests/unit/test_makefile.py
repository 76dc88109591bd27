"""The Makefile installs what each target needs, once (issue 13, finding 8), checked with `make -n`.

`make -n` prints the commands a target would run without running them, against a
virtualenv path in tmp_path: a fresh one (nothing installed) and one whose stamps
are up to date.
"""

from __future__ import annotations

import contextlib
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from tests.integration.doc_runner import Workspace

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


def install_command(target: str, venv: Path) -> str:
    """The one shell line that installs ``target``'s extras into ``venv``, as make runs it."""
    (line,) = [c for c in dry_run(target, venv) if "pip install --quiet -e" in c]
    return line


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
    assert dry_run("run", venv) == [
        f"{venv}/bin/python scripts/foreground.py {venv}/bin/python -m lkstream.grpc_server --config conf/local.yml"
    ]
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


# -- what a newcomer sees ----------------------------------------------------------------------------------


def _checkout_copy(root: Path) -> Path:
    """What `pip install -e .` needs of this working tree, without its build products."""
    root.mkdir()
    for name in ("pyproject.toml", "README.md", "Makefile"):
        shutil.copy(REPO / name, root / name)
    shutil.copytree(
        REPO / "lkstream",
        root / "lkstream",
        ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info"),
    )
    return root


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_install_make_runs_shows_no_warning_boxes(tmp_path: Path) -> None:
    """`make run`'s first install printed setuptools' "experimental" and "Editable installation" boxes (issue 26).

    The install line make runs, on a fresh virtualenv and a copy of this tree (``--no-deps``: the
    dependencies are not what prints them), must print nothing; the same line without the Makefile's
    filter prints both boxes, so the check can fail.
    """
    checkout = _checkout_copy(tmp_path / "checkout")
    venv = checkout / ".venv"
    setup = [c for c in dry_run("run", venv, f"PYTHON={sys.executable}") if "-m venv" in c or "--upgrade pip" in c]
    assert len(setup) == 2, setup
    for command in setup:  # the virtualenv and the pip make puts in it (a recent pip shows the boxes)
        subprocess.run(["sh", "-c", command], cwd=checkout, check=True, capture_output=True, timeout=300)
    line = install_command("run", venv) + " --no-deps"
    quiet = subprocess.run(["sh", "-c", line], cwd=checkout, capture_output=True, text=True, timeout=540, check=False)
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    shown = [row for row in (quiet.stdout + quiet.stderr).splitlines() if row.strip() and "Location '" not in row]
    assert shown == [], "\n".join(shown)
    unfiltered = line.split("' ", 1)[1]  # without the PYTHONWARNINGS='...' prefix
    assert unfiltered.startswith(str(venv)), line
    noisy = subprocess.run(
        ["sh", "-c", unfiltered], cwd=checkout, capture_output=True, text=True, timeout=540, check=False
    )
    assert "Editable installation" in noisy.stderr and "*experimental*" in noisy.stderr, noisy.stderr


def _read_until(fd: int, wanted: bytes, seen: bytearray, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while wanted not in seen:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return False
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the terminal closed: every process on it exited
            return wanted in seen
        if not chunk:
            return wanted in seen
        seen += chunk
    return True


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_ctrl_c_on_make_run_stops_the_daemon_and_make_exits_0(tmp_path: Path) -> None:
    """Ctrl-C typed at a terminal running `make run` (issue 26): a graceful stop and exit 0, no "Interrupt"."""
    workspace = Workspace.create(tmp_path / "checkout")
    make = shutil.which("make")
    assert make is not None
    pid, terminal = pty.fork()
    if pid == 0:  # the child: make, in the foreground of a new terminal, as a user's shell runs it
        os.chdir(workspace.root)
        os.execvpe(make, [make, "run"], workspace.env())
    seen = bytearray()
    try:
        assert _read_until(terminal, b"lkstream daemon ready", seen, 120), seen.decode(errors="replace")
        os.write(terminal, b"\x03")  # Ctrl-C, through the terminal's line discipline
        _read_until(terminal, b"\0never", seen, 60)  # everything until the terminal closes
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(terminal)
    output = seen.decode(errors="replace")
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, (status, output)
    assert "stopped cleanly" in output and "Interrupt" not in output and "Traceback" not in output, output


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_ctrl_z_and_fg_still_work_on_make_run(tmp_path: Path) -> None:
    """Job control under the wrapper: Ctrl-Z stops the job, `fg` resumes it, Ctrl-C then stops it with 0."""
    workspace = Workspace.create(tmp_path / "checkout")
    pid, terminal = pty.fork()
    if pid == 0:
        os.chdir(workspace.root)
        os.execvpe("bash", ["bash", "--norc", "--noprofile", "-i"], {**workspace.env(), "PS1": "$ "})
    seen = bytearray()
    try:
        os.write(terminal, b"make run\n")
        assert _read_until(terminal, b"lkstream daemon ready", seen, 120), seen.decode(errors="replace")
        os.write(terminal, b"\x1a")  # Ctrl-Z
        assert _read_until(terminal, b"Stopped", seen, 30), seen.decode(errors="replace")
        with lkstream_probe(workspace) as reachable:
            assert not reachable(1.0), "a stopped daemon answered"
        os.write(terminal, b"fg\n")
        with lkstream_probe(workspace) as reachable:
            assert reachable(30.0), "the daemon did not resume after fg"
        os.write(terminal, b"\x03")
        assert _read_until(terminal, b"stopped cleanly", seen, 60), seen.decode(errors="replace")
        os.write(terminal, b"echo status=$?\n")
        assert _read_until(terminal, b"status=0", seen, 30), seen.decode(errors="replace")
        os.write(terminal, b"exit\n")
        _read_until(terminal, b"\0never", seen, 30)
        os.waitpid(pid, 0)
    finally:
        os.close(terminal)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert "Interrupt" not in seen.decode(errors="replace")


@contextlib.contextmanager
def lkstream_probe(workspace: Workspace) -> Iterator[Callable[[float], bool]]:
    """``reachable(within_s)``: whether the workspace's daemon answers a TCP connect and a gRPC call in time."""
    # Not the default port: the workspace maps the docs' 9090 to a free port it picked (doc_runner.Workspace).
    port = int(workspace.ports["9090"])

    def reachable(within_s: float) -> bool:
        deadline = time.monotonic() + within_s
        while True:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                try:
                    grpc.channel_ready_future(channel).result(timeout=max(0.1, deadline - time.monotonic()))
                    health = channel.unary_unary("/grpc.health.v1.Health/Check")
                    health(b"", timeout=max(0.1, deadline - time.monotonic()))
                    return True
                except (grpc.FutureTimeoutError, grpc.RpcError):
                    if time.monotonic() >= deadline:
                        return False

    yield reachable
