"""Stream-processing frameworks built on Kafka clients, each in a virtual environment of its own (issue 24).

quixstreams and faust-streaming pin versions of confluent-kafka and aiokafka that conflict with
LKSTREAM's own, so each runs from its own venv under ``tests/frameworks/.venvs/`` (ignored by
git), made on first use from the pinned ``*-requirements.txt`` beside this file, like the KafkaJS
leg's ``npm ci``, and kept for later runs (a new pin makes a new venv). Only an unreachable
package registry skips these tests, saying so; any other install failure fails them.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from lkstream.testing import kafka_bootstrap, kafka_broker
from tests.integration.conftest import DaemonFactory, start_daemon

HERE = Path(__file__).parent
VENVS = HERE / ".venvs"
INSTALL_TIMEOUT_S = 900
#: What pip prints when the index cannot be reached (the only reason to skip instead of failing).
_UNREACHABLE = (
    "Could not find a version that satisfies",
    "Temporary failure in name resolution",
    "Network is unreachable",
)

__all__ = ["bootstrap", "framework_python", "kafka_bootstrap", "kafka_broker", "start_daemon"]


def _venv_python(name: str) -> Path:
    requirements = HERE / f"{name}-requirements.txt"
    digest = hashlib.sha256(requirements.read_bytes()).hexdigest()[:12]
    venv = VENVS / f"{name}-{digest}"
    python = venv / "bin" / "python"
    if (venv / "installed").exists():
        return python
    VENVS.mkdir(exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, timeout=120)
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r", str(requirements)],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        if any(marker in done.stderr for marker in _UNREACHABLE):
            pytest.skip(f"SKIPPED LOUDLY: cannot install {name} from the package registry: {done.stderr[-500:]}")
        pytest.fail(f"installing {requirements.name} failed:\n{done.stderr[-3000:]}")
    (venv / "installed").write_text(requirements.read_text())
    return python


@pytest.fixture(scope="session")
def framework_python() -> Callable[[str], Path]:
    """``framework_python("quixstreams")``: that framework's interpreter, its venv made on first use."""
    return _venv_python


@pytest.fixture(params=["lkstream.testing", "daemon"])
def bootstrap(request: pytest.FixtureRequest) -> str:
    """A Kafka listener: the in-process one of ``lkstream.testing``, then a real ``lkstream serve`` daemon's."""
    if request.param == "daemon":
        factory: DaemonFactory = request.getfixturevalue("start_daemon")
        return factory(partitions=2).kafka_address
    address: str = request.getfixturevalue("kafka_bootstrap")
    return address
