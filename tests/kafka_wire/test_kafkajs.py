"""The KafkaJS leg of the compatibility matrix (``js/matrix.js``; KafkaJS pinned in ``js/package-lock.json``).

The test setup installs KafkaJS with ``npm ci`` from the committed lockfile the first time it runs
(``js/node_modules``, ignored by git). Node and npm come from the system (Debian's ``nodejs`` and
``npm``, scripts/install-system-deps.sh).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from lkstream import Broker

JS_DIR = Path(__file__).parent / "js"
DEADLINE_S = 120.0


@pytest.fixture(scope="session")
def node() -> str:
    """``node``, with KafkaJS installed from the lockfile (``npm ci``) when it is not yet."""
    node, npm = shutil.which("node"), shutil.which("npm")
    # Not a skip: the matrix must fail loudly where its tools are missing.
    assert node is not None and npm is not None, "node/npm are not installed: run scripts/install-system-deps.sh"
    if not (JS_DIR / "node_modules" / "kafkajs" / "package.json").exists():
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"], cwd=JS_DIR, capture_output=True, text=True, timeout=300, check=False
        )
        assert done.returncode == 0, done.stderr[-2000:]
    return node


def test_kafkajs_produces_consumes_resumes_and_administers(
    node: str, kafka_bootstrap: str, kafka_broker: Broker
) -> None:
    done = subprocess.run(
        [node, str(JS_DIR / "matrix.js"), kafka_bootstrap, "jst", "jsg"],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["created"] is True
    assert result["first"] == list(range(40))
    assert result["second"] == list(range(40, 50))  # the restarted member resumed after its commits
    assert sorted(p["offset"] for p in result["byTime"]) == ["0", "0"]
    assert result["deleted"] is True
    assert "jst" not in kafka_broker.list_topics()
