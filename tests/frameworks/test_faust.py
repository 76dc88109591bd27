"""faust-streaming (issue 24): an agent counts words into a Table; the worker stops, restarts with its
table in memory only, and rebuilds it from the changelog topic (``cleanup.policy=compact``) exactly.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.frameworks.support import create_topic, produce_words, topic_configs

APP = Path(__file__).parent / "faust_app.py"
DEADLINE_S = 90.0


def _run_worker(python: Path, bootstrap: str, data_dir: Path, expected: int) -> dict[str, int]:
    """Start the worker, wait for its result file, stop it with SIGTERM (as an operator would)."""
    result = data_dir / "result.json"
    result.unlink(missing_ok=True)
    data_dir.mkdir(exist_ok=True)
    worker = subprocess.Popen(
        [str(python), str(APP), bootstrap, "wordcount", str(data_dir), str(expected)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not result.exists() and worker.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert result.exists(), f"the worker counted no {expected} events:\n" + _drain(worker)[-4000:]
        counts: dict[str, int] = json.loads(result.read_text())
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
    return counts


def _drain(worker: subprocess.Popen[str]) -> str:
    if worker.poll() is None:
        worker.kill()
    out, _ = worker.communicate()
    return out


def test_table_counts_survive_a_restart_from_the_changelog(
    framework_python: Callable[[str], Path], bootstrap: str, tmp_path: Path
) -> None:
    python = framework_python("faust")
    create_topic(bootstrap, "fwords")
    produce_words(bootstrap, "fwords", 300)
    assert _run_worker(python, bootstrap, tmp_path / "worker", 300) == {"apple": 100, "fig": 100, "pear": 100}
    configs = topic_configs(bootstrap)
    assert configs["wordcount-word_counts-changelog"].get("cleanup.policy") == "compact", configs

    produce_words(bootstrap, "fwords", 150)
    # The table lives in memory: the new worker knows the first counts only from the changelog.
    assert _run_worker(python, bootstrap, tmp_path / "worker", 150) == {"apple": 150, "fig": 150, "pear": 150}
