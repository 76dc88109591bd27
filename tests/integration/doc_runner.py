"""Run the documentation's code blocks as a user pastes them (issue 13, "keep it from rotting").

**What runs.** Fenced blocks whose language is ``sh``/``bash``/``shell`` or ``python``
in README.md and docs/*.md, in order: docs/quickstart.md first (its daemon block
starts ``make run``), then README.md, then the other docs alphabetically. Every
other fence (``text``, ``console``, none) is output or a listing and is not run.

**Markers** (an HTML comment on the line just above the fence; invisible on GitHub):

- ``<!-- doc-test: skip: why -->``: not run; the reason is required (a production
  host path, a fragment that needs a SparkSession, a Kafka broker...);
- ``<!-- doc-test: daemon -->``: the block starts the daemon (``make run``): it is
  started in the background, the runner waits for its ready line and stops it
  (SIGINT, the Ctrl-C of the quickstart's last step) after the last block.

**Where.** A fresh directory laid out as a checkout: copies of the Makefile,
pyproject.toml, conf/, examples/ and scripts/, and a ``.venv`` whose ``bin`` and ``lib`` are
links to this test run's virtualenv, with its install stamps newer than
pyproject.toml (so ``make run`` starts at once and never reinstalls). Shell blocks
run in ``bash -e -o pipefail`` with that venv's ``bin`` first on PATH, as after
the quickstart's ``. .venv/bin/activate``; Python blocks with its python.

**Ports.** The docs say 9090 (gRPC), 8080 (HTTP) and 9092 (Kafka), which other
test runs on this machine may hold. The runner picks free ports and replaces every
standalone ``9090``/``8080``/``9092`` in the blocks and in the copied
``conf/local.yml``, and exports ``LKSTREAM_BOOTSTRAP`` (the CLI's default
``--bootstrap``) for commands that name no address. Nothing else is rewritten.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

REPO = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!--\s*doc-test:\s*(skip|daemon)\b:?\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^```(\w*)\s*$")
LANGUAGES = {"sh": "shell", "bash": "shell", "shell": "shell", "python": "python"}
DOC_PORTS = ("9090", "8080", "9092")
READY = re.compile(r"lkstream daemon ready: grpc=(\S+) http=(\S+)")
BLOCK_TIMEOUT_S = 420.0
READY_TIMEOUT_S = 120.0

Kind = Literal["run", "skip", "daemon"]


@dataclass(frozen=True)
class Block:
    path: str
    line: int
    language: str  # "shell" or "python"
    code: str
    kind: Kind
    reason: str = ""

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def extract(path: Path) -> list[Block]:
    """The runnable-language blocks of one markdown file, with their markers."""
    lines = path.read_text().split("\n")
    name = str(path.relative_to(REPO))
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise AssertionError(f"{name}:{i + 1}: unclosed code fence")
        language = LANGUAGES.get(fence.group(1))
        if language is not None:
            marker = MARKER.match(lines[i - 1]) if i else None
            kind: Kind = "run" if marker is None else marker.group(1)  # type: ignore[assignment]
            reason = "" if marker is None else marker.group(2)
            if kind == "skip" and not reason:
                raise AssertionError(f"{name}:{i}: a doc-test skip marker must say why")
            blocks.append(Block(name, i + 1, language, "\n".join(lines[i + 1 : end]), kind, reason))
        elif i and MARKER.match(lines[i - 1]):
            raise AssertionError(f"{name}:{i}: a doc-test marker above a block that is never run")
        i = end + 1
    return blocks


def documents() -> list[Path]:
    """docs/quickstart.md, README.md, then every other docs/*.md."""
    first = [REPO / "docs" / "quickstart.md", REPO / "README.md"]
    rest = sorted(p for p in (REPO / "docs").glob("*.md") if p not in first)
    return first + rest


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass
class Workspace:
    """A checkout-like directory where the blocks run, with its own ports."""

    root: Path
    ports: dict[str, str] = field(default_factory=dict)
    daemon: subprocess.Popen[str] | None = None
    daemon_output: list[str] = field(default_factory=list)

    @classmethod
    def create(cls, root: Path) -> Workspace:
        grpc, http, kafka = free_ports(3)
        root.mkdir(parents=True)
        ws = cls(root, {"9090": str(grpc), "8080": str(http), "9092": str(kafka)})
        for name in ("Makefile", "pyproject.toml"):
            shutil.copy(REPO / name, root / name)
        for tree in ("examples", "scripts"):
            shutil.copytree(REPO / tree, root / tree, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copytree(REPO / "conf", root / "conf")
        for conf in (root / "conf").glob("*.yml"):
            conf.write_text(ws.substitute(conf.read_text()))
        ws._link_venv()
        return ws

    def _link_venv(self) -> None:
        real = Path(sys.prefix)
        venv = self.root / ".venv"
        venv.mkdir()
        for name in ("bin", "lib", "lib64", "include"):
            if (real / name).exists():
                (venv / name).symlink_to(real / name)
        shutil.copy(real / "pyvenv.cfg", venv / "pyvenv.cfg")
        # Stamps newer than pyproject.toml: `make run` and friends find everything installed.
        old = time.time() - 60
        os.utime(self.root / "pyproject.toml", (old, old))
        for stamp in (".installed", ".installed-run", ".installed-spark"):
            (venv / stamp).touch()

    def substitute(self, text: str) -> str:
        return re.sub(r"(?<!\d)(9090|8080|9092)(?!\d)", lambda m: self.ports[m.group(1)], text)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        for name in [n for n in env if n.startswith("LKSTREAM_")]:
            del env[name]
        bin_dir = str(self.root / ".venv" / "bin")
        env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
        env["VIRTUAL_ENV"] = str(self.root / ".venv")
        env["LKSTREAM_BOOTSTRAP"] = f"127.0.0.1:{self.ports['9090']}"
        env.pop("PYTHONPATH", None)  # the venv's editable install, as for a user
        env.pop("PYSPARK_PYTHON", None)  # lkstream.spark.register sees to the workers
        return env

    # -- running -------------------------------------------------------------------------------------

    def run(self, block: Block) -> subprocess.CompletedProcess[str]:
        code = self.substitute(block.code)
        if block.language == "python":
            script = self.root / "_doc_block.py"
            script.write_text(code + "\n")
            command = [str(self.root / ".venv" / "bin" / "python"), str(script)]
        else:
            command = ["bash", "-e", "-o", "pipefail", "-c", code]
        return subprocess.run(
            command,
            cwd=self.root,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT_S,
            check=False,
        )

    def start_daemon(self, block: Block) -> str:
        """Start the block (``make run``) in its own process group; return its ready line."""
        assert self.daemon is None, f"{block.where}: a second daemon block"
        self.daemon = subprocess.Popen(
            ["bash", "-c", self.substitute(block.code)],
            cwd=self.root,
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        assert self.daemon.stdout is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.daemon.stdout], [], [], max(0.0, deadline - time.monotonic()))
            line = self.daemon.stdout.readline() if ready else ""
            if not line:
                break
            self.daemon_output.append(line)
            if READY.search(line):
                return line
        self.stop_daemon()
        raise AssertionError(f"{block.where}: the daemon was not ready:\n{''.join(self.daemon_output)}")

    def stop_daemon(self) -> int | None:
        """Ctrl-C (SIGINT to the process group, as a terminal sends it); SIGKILL after a deadline."""
        daemon, self.daemon = self.daemon, None
        if daemon is None:
            return None
        if daemon.poll() is None:
            os.killpg(daemon.pid, signal.SIGINT)
        try:
            rest, _ = daemon.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
            rest, _ = daemon.communicate()
        self.daemon_output.append(rest or "")
        return daemon.returncode
