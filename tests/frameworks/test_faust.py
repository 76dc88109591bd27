"""faust-streaming (issue 24): an agent counts words into a Table; the worker stops, restarts with its
table in memory only, and rebuilds it from the changelog topic (``cleanup.policy=compact``) exactly.

The words are produced once the worker says it is ready, not before it starts: records of the input
topic that faust fetches while a table is still recovering can be dropped by faust itself with their
offsets committed (faust-streaming/faust#596, #221: its recovery races its prefetch). Seen here once
in a few loaded suite runs: the restarted worker committed the new words' offsets and counted none.
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
#: What faust logs (at INFO) once its tables are recovered and its agents read.
READY = "[^Worker]: Ready"


def _run_worker(
    python: Path, bootstrap: str, data_dir: Path, expected: int, feed: Callable[[], None]
) -> dict[str, int]:
    """Start the worker, ``feed()`` its input once it is ready, wait for its result file, stop it with
    SIGTERM (as an operator would).

    Its output goes to a file, not a pipe nobody reads while it runs (a full pipe would stop it),
    and a failure shows the file's end: faust logs at INFO, so where it waited is in there.
    """
    result = data_dir / "result.json"
    result.unlink(missing_ok=True)
    data_dir.mkdir(exist_ok=True)
    log_path = data_dir / f"worker-{expected}.log"
    with log_path.open("w") as log:
        worker = subprocess.Popen(
            [str(python), str(APP), bootstrap, "wordcount", str(data_dir), str(expected)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + DEADLINE_S
        while READY not in log_path.read_text() and worker.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        feed()
        while not result.exists() and worker.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert result.exists(), f"the worker counted no {expected} events:\n" + log_path.read_text()[-20000:]
        counts: dict[str, int] = json.loads(result.read_text())
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
                print(f"the worker did not stop within 30 s of SIGTERM: killed ({log_path})")
    return counts


def test_table_counts_survive_a_restart_from_the_changelog(
    framework_python: Callable[[str], Path], bootstrap: str, tmp_path: Path
) -> None:
    python = framework_python("faust")
    create_topic(bootstrap, "fwords")
    first = _run_worker(python, bootstrap, tmp_path / "worker", 300, lambda: produce_words(bootstrap, "fwords", 300))
    assert first == {"apple": 100, "fig": 100, "pear": 100}
    configs = topic_configs(bootstrap)
    assert configs["wordcount-word_counts-changelog"].get("cleanup.policy") == "compact", configs

    # The table lives in memory: the new worker knows the first counts only from the changelog.
    again = _run_worker(python, bootstrap, tmp_path / "worker", 150, lambda: produce_words(bootstrap, "fwords", 150))
    assert again == {"apple": 150, "fig": 150, "pear": 150}
